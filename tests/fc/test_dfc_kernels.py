"""The building blocks of dynamic FC: tile thresholding and low-rank forms."""

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from numpy.testing import assert_allclose, assert_array_equal

from connscale.fc.lowrank import (
    randomized_qb,
    svd_qb,
    top_right_vectors,
    truncated_factor,
)
from connscale.fc.sparse import (
    compact_tile,
    csr_from_parts,
    dense_thresholded,
    keep_mask,
)

rng = np.random.default_rng(0)


def _normalized(n, w, batch=2):
    x = rng.standard_normal((batch, n, w))
    x -= x.mean(axis=2, keepdims=True)
    x /= np.linalg.norm(x, axis=2, keepdims=True)
    return torch.from_numpy(x)


@pytest.mark.parametrize("absolute", [False, True])
@pytest.mark.parametrize("r0, r1", [(0, 9), (3, 7), (8, 9)])
def test_tile_compaction_matches_thresholded_rows(absolute, r0, r1):
    threshold = 0.2
    matrix = np.corrcoef(rng.standard_normal((9, 30)))
    tile = torch.from_numpy(matrix[r0:r1, r0:])
    keep = keep_mask(tile[None], threshold, absolute=absolute)[0]  # batched call
    values, columns, counts = compact_tile(tile, keep, r0)
    assert columns.dtype == torch.int32
    expected = np.triu(dense_thresholded(matrix, threshold, absolute=absolute), 1)[r0:r1]
    rows = np.repeat(np.arange(r1 - r0), counts.numpy())
    got = np.zeros_like(expected)
    got[rows, columns.numpy()] = values.numpy()
    assert_allclose(got, expected)


def test_csr_from_parts_full_matrix():
    matrix = np.triu(rng.standard_normal((5, 5)), 1)
    rows, cols = np.nonzero(matrix)
    csr = csr_from_parts(
        matrix[rows, cols], cols.astype(np.int32), np.bincount(rows, minlength=5), 5
    )
    assert_array_equal(csr.toarray(), matrix)
    assert isinstance(csr, sp.csr_array)  # one result type: static and DFC windows


def test_truncated_factor_is_the_optimal_rank_l_approximation():
    u = _normalized(30, 10)
    for rank in (1, 4, 9):
        factor = truncated_factor(u, rank).numpy()
        for b in range(2):
            p, s, _ = np.linalg.svd(u[b].numpy(), full_matrices=False)
            optimal = (p[:, :rank] * s[:rank] ** 2) @ p[:, :rank].T
            assert_allclose(factor[b] @ factor[b].T, optimal, atol=1e-12)
    assert truncated_factor(u, None) is not None
    assert_array_equal(truncated_factor(u, 12).numpy(), u.numpy())


def test_top_right_vectors_are_orthonormal():
    v = top_right_vectors(_normalized(20, 8), 5).numpy()
    assert_allclose(np.swapaxes(v, 1, 2) @ v, np.broadcast_to(np.eye(5), (2, 5, 5)), atol=1e-12)


def test_svd_qb_equals_truncated_factor_product():
    u = _normalized(25, 8)
    q, b = svd_qb(u, 3)
    factor = truncated_factor(u, 3)
    assert_allclose((q @ b).numpy(), (factor @ factor.transpose(1, 2)).numpy(), atol=1e-12)
    q, b = svd_qb(u, 12)  # beyond w: zero padding, exact
    assert q.shape == (2, 25, 12) and b.shape == (2, 12, 25)
    assert_allclose((q @ b).numpy(), (u @ u.transpose(1, 2)).numpy(), atol=1e-12)


def test_randomized_qb_power_iterations_reduce_error():
    u = _normalized(60, 30)
    s = u @ u.transpose(1, 2)
    omega = torch.from_numpy(rng.standard_normal((2, 60, 6)))
    errors = []
    for power in (0, 2):
        q, b = randomized_qb(u, omega, power_iterations=power)
        assert_allclose(
            (q.transpose(1, 2) @ q).numpy(), np.broadcast_to(np.eye(6), (2, 6, 6)), atol=1e-12
        )
        errors.append(float((q @ b - s).abs().mean()))
    assert errors[1] < errors[0]
