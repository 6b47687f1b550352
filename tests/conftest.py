"""Shared fixtures (nilearn style): the device/dtype grid and the engines.

Engines are started once per test session (cluster start-up dominates).
"""

import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

torch.set_num_threads(2)

# Worker processes of the engines import the tests' task modules
# (engine_funcs, r1dl_funcs) and connscale by name.
_TESTS = Path(__file__).resolve().parent
_WORKER_PATHS = [str(_TESTS / "engines"), str(_TESTS / "networks"), str(_TESTS.parent / "src")]
for _path in _WORKER_PATHS:
    if _path not in sys.path:
        sys.path.insert(0, _path)
os.environ["PYTHONPATH"] = os.pathsep.join(
    _WORKER_PATHS + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
)

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
DTYPES = ["float32", "float64"]
# Tolerances that fit each working precision against float64 references.
ATOL = {"float32": 2e-6, "float64": 1e-12}


def assert_thresholded_close(a, b, threshold, *, atol):
    """Two thresholded results (dense, or scipy.sparse) computed along different
    paths agree to ``atol``; an entry kept by one only lies within ``atol`` of
    the threshold (rounding may put it on either side)."""
    a = np.asarray(a.toarray() if hasattr(a, "toarray") else a, dtype=np.float64)
    b = np.asarray(b.toarray() if hasattr(b, "toarray") else b, dtype=np.float64)
    one_only = (a != 0) != (b != 0)
    kept = np.abs(a + b)[one_only]  # the other one is 0
    assert np.all(np.abs(kept - abs(threshold)) <= atol), kept
    np.testing.assert_allclose(a[~one_only], b[~one_only], atol=atol, rtol=0)


# Task retries of the shared engines (the lost-worker tests need two).
RETRIES = 2


def pytest_configure(config):
    # pyspark's pandas-version notice (connscale does not use pyspark's pandas API).
    config.addinivalue_line(
        "filterwarnings", "ignore:.*PySpark does not yet fully support pandas:FutureWarning"
    )


@pytest.fixture
def rng():
    return np.random.default_rng(42)


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


@pytest.fixture(params=DTYPES)
def dtype(request):
    return request.param


@pytest.fixture(scope="session")
def local_engine():
    from connscale.engines import LocalEngine

    with LocalEngine(2, retries=RETRIES) as engine:
        yield engine


@pytest.fixture(scope="session")
def dask_engine():
    pytest.importorskip("distributed")
    from connscale.engines import get_engine

    with get_engine("dask", n_jobs=2, retries=RETRIES) as engine:
        yield engine


@pytest.fixture(scope="session")
def spark_engine():
    pytest.importorskip("pyspark")
    from connscale.engines import get_engine

    with get_engine("spark", cluster="local[2]", retries=RETRIES) as engine:
        yield engine
