import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from connscale.datasets import simulate_networks

# Cluster workers import r1dl_funcs (and connscale) by name.
_HERE = str(Path(__file__).resolve().parent)
_SRC = str(Path(__file__).resolve().parents[2] / "src")
for _path in (_HERE, _SRC):
    if _path not in sys.path:
        sys.path.insert(0, _path)
os.environ["PYTHONPATH"] = os.pathsep.join(
    [_HERE, _SRC] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
)

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="CUDA not available"))]

N_TIMEPOINTS, N_VOXELS, N_NETWORKS = 80, 1500, 4
SIZE = 60  # voxels per planted network (4%)


@pytest.fixture(scope="session")
def planted():
    """(S, time courses, maps) with 4 planted networks."""
    return simulate_networks(N_TIMEPOINTS, N_VOXELS, N_NETWORKS, sparsity=SIZE / N_VOXELS,
                             noise=0.5, random_state=0)


@pytest.fixture
def rng():
    return np.random.default_rng(42)
