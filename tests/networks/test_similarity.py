import numpy as np
import pytest
import scipy.sparse as sp
from numpy.testing import assert_allclose

from connscale.networks import match_networks, spatial_similarity


def test_spatial_similarity_by_hand():
    p1 = np.array([1.0, 0.5, 0, 0, -2])
    p2 = np.array([0, 3.0, 1, 0, 1])
    # P1 = {0, 1, 4}, P2 = {1, 2, 4}: |P1 ∩ P2| / |P2| = 2 / 3
    assert spatial_similarity(p1, p2) == pytest.approx(2 / 3)
    assert spatial_similarity(p2, p1) == pytest.approx(2 / 3)
    assert spatial_similarity(p1, p1) == 1.0
    assert spatial_similarity(p1, np.zeros(5)) == 0.0
    # Asymmetric: |P2| is the denominator.
    assert spatial_similarity([1, 1, 1, 1], [1, 0, 0, 0]) == 1.0
    assert spatial_similarity([1, 0, 0, 0], [1, 1, 1, 1]) == 0.25


def test_spatial_similarity_matrix_dense_and_sparse(rng):
    a = rng.standard_normal((4, 50)) * (rng.random((4, 50)) < 0.2)
    b = rng.standard_normal((3, 50)) * (rng.random((3, 50)) < 0.3)
    expected = np.array([[np.sum((x != 0) & (y != 0)) / np.sum(y != 0) for y in b] for x in a])
    assert_allclose(spatial_similarity(a, b), expected)
    assert_allclose(spatial_similarity(sp.csr_matrix(a), sp.csr_matrix(b)), expected)
    # Explicit zeros stored in a sparse matrix do not count.
    s = sp.csr_matrix(a)
    s.data[:] = 0
    assert_allclose(spatial_similarity(s, b), 0)


def test_match_networks_recovers_permutation(rng):
    maps = (rng.random((5, 200)) < 0.1) * rng.uniform(1, 2, (5, 200))
    perm = np.array([3, 0, 4, 1, 2])
    noisy = maps[perm].copy()
    noisy[:, :5] = 1.0  # a few extra voxels
    m_idx, t_idx, sim = match_networks(noisy, maps)
    np.testing.assert_array_equal(m_idx, np.arange(5))
    np.testing.assert_array_equal(t_idx, perm)
    assert sim.min() == 1.0
    # More maps than templates: each template gets its own map.
    m_idx, t_idx, sim = match_networks(np.vstack([np.zeros((2, 200)), maps]), maps)
    np.testing.assert_array_equal(t_idx, np.arange(5))
    np.testing.assert_array_equal(m_idx, np.arange(2, 7))


def test_similarity_bad_inputs():
    with pytest.raises(ValueError, match="same number of voxels"):
        spatial_similarity(np.ones(4), np.ones(5))
    with pytest.raises(ValueError, match="must be a map"):
        spatial_similarity(np.ones((2, 2, 2)), np.ones(2))
