"""Shared fixtures (nilearn style) and the device/dtype grid."""

import numpy as np
import pytest
import torch

torch.set_num_threads(2)

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
DTYPES = ["float32", "float64"]
# Tolerances that fit each working precision against float64 references.
ATOL = {"float32": 2e-6, "float64": 1e-12}


@pytest.fixture
def rng():
    return np.random.default_rng(42)


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


@pytest.fixture(params=DTYPES)
def dtype(request):
    return request.param
