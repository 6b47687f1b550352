import numpy as np
import pytest

from connscale import (
    from_nilearn_vec,
    matrix_to_vec,
    n_pairs,
    to_nilearn_vec,
    triu_index,
    triu_pairs,
    vec_to_matrix,
)
from connscale.fc.triu import triu_row_offsets


@pytest.mark.parametrize("n", [2, 3, 4, 5, 17, 128, 1001])
def test_index_helpers_round_trip_for_all_k(n):
    k = np.arange(n_pairs(n))
    i, j = triu_pairs(k, n)
    rows, cols = np.triu_indices(n, 1)
    np.testing.assert_array_equal(i, rows)
    np.testing.assert_array_equal(j, cols)
    np.testing.assert_array_equal(triu_index(i, j, n), k)


def test_paper_formula_and_scalars():
    n = 6
    for i in range(n):
        for j in range(i + 1, n):
            k = i * n - i * (i + 1) // 2 + j - i - 1
            assert triu_index(i, j, n) == k
            assert triu_pairs(k, n) == (i, j)


def test_large_n_is_exact():
    n = 3_000_000
    k = np.array([0, 1, n - 2, n - 1, n_pairs(n) // 2, n_pairs(n) - 1], dtype=np.int64)
    i, j = triu_pairs(k, n)
    np.testing.assert_array_equal(triu_index(i, j, n), k)
    assert (i < j).all()


def test_row_offsets():
    n = 9
    offsets = triu_row_offsets(n)
    for i in range(n - 1):
        assert offsets[i] == triu_index(i, i + 1, n)
    assert offsets[-1] == n_pairs(n)


@pytest.mark.parametrize("i, j", [(2, 1), (1, 1), (-1, 2), (0, 5)])
def test_invalid_pairs_raise(i, j):
    with pytest.raises(ValueError, match="0 <= i < j < n"):
        triu_index(i, j, 5)


def test_invalid_positions_raise():
    with pytest.raises(ValueError, match="0 <= k"):
        triu_pairs(10, 5)


def test_vec_matrix_round_trip(rng):
    n = 7
    a = rng.standard_normal((n, n))
    sym = (a + a.T) / 2
    np.fill_diagonal(sym, 1)
    np.testing.assert_allclose(vec_to_matrix(matrix_to_vec(sym)), sym)
    with pytest.raises(ValueError, match="n\\(n-1\\)/2"):
        vec_to_matrix(np.zeros(5), 4)


@pytest.mark.parametrize("n", [2, 4, 9, 30])
def test_nilearn_order_matches_sym_matrix_to_vec(n, rng):
    pytest.importorskip("nilearn")
    from nilearn.connectome import sym_matrix_to_vec

    a = rng.standard_normal((n, n))
    sym = a + a.T
    ours = matrix_to_vec(sym)
    theirs = sym_matrix_to_vec(sym, discard_diagonal=True)
    np.testing.assert_array_equal(to_nilearn_vec(ours), theirs)
    np.testing.assert_array_equal(from_nilearn_vec(theirs), ours)
    # batched (subjects, pairs)
    stacked = np.stack([ours, 2 * ours])
    np.testing.assert_array_equal(from_nilearn_vec(to_nilearn_vec(stacked)), stacked)


def test_nilearn_order_differs_for_n4():
    # (0,1),(0,2),(0,3),(1,2),... vs nilearn's (0,1),(0,2),(1,2),(0,3),...
    ours = np.arange(6)
    assert list(to_nilearn_vec(ours)) == [0, 1, 3, 2, 4, 5]


def test_bad_vector_length():
    with pytest.raises(ValueError, match="not the strict triangle"):
        to_nilearn_vec(np.zeros(5))
