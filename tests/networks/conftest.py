import numpy as np
import pytest
import torch

from connscale.datasets import simulate_networks

DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA not available"),
    ),
]

N_TIMEPOINTS, N_VOXELS, N_NETWORKS = 80, 1500, 4
SIZE = 60  # voxels per planted network (4%)


@pytest.fixture(scope="session")
def planted():
    """(S, time courses, maps) with 4 planted networks."""
    return simulate_networks(
        N_TIMEPOINTS, N_VOXELS, N_NETWORKS, sparsity=SIZE / N_VOXELS, noise=0.5, random_state=0
    )


@pytest.fixture
def rng():
    return np.random.default_rng(42)
