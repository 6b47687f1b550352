"""Fixtures of the LiFE tests: small random models and a small phantom."""

import numpy as np
import pytest
import torch

from connscale.datasets.phantom import simulate_life_phantom
from connscale.life.streamlines import StreamlineArray


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # Sparse products on tiny models: threads only add contention.
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def random_problem(seed, *, shape=(6, 5, 4), n_dirs=12, n_streamlines=30, two_shells=True):
    """A small random scan and random-walk streamlines (voxel = mm, identity affine)."""
    rng = np.random.default_rng(seed)
    n = n_dirs + 1
    bvals = np.r_[0.0, np.where(np.arange(n_dirs) % 2 & two_shells, 2000.0, 1000.0)]
    bvecs = rng.normal(size=(n, 3))
    bvecs /= np.linalg.norm(bvecs, axis=1, keepdims=True)
    data = rng.uniform(100, 200, size=shape + (n,))
    sl = [
        np.cumsum(rng.normal(size=(rng.integers(1, 9), 3)), 0) + rng.uniform(0, 5, 3)
        for _ in range(n_streamlines)
    ]
    return data, bvals, bvecs, StreamlineArray.from_list(sl)


@pytest.fixture(scope="module")
def phantom():
    return simulate_life_phantom(n_true=150, n_false=150, shape=(14, 14, 14), random_state=0)
