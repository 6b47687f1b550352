"""Engines started once per test session (cluster start-up dominates)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# Worker processes must import engine_funcs (and connscale) by name.
_HERE = str(Path(__file__).resolve().parent)
_SRC = str(Path(__file__).resolve().parents[2] / "src")
for _path in (_HERE, _SRC):
    if _path not in sys.path:
        sys.path.insert(0, _path)
os.environ["PYTHONPATH"] = os.pathsep.join(
    [_HERE, _SRC] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
)


@pytest.fixture(scope="session")
def local_engine():
    from connscale.engines import LocalEngine

    with LocalEngine(2, retries=1) as engine:
        yield engine


@pytest.fixture(scope="session")
def dask_engine():
    pytest.importorskip("distributed")
    from connscale.engines import get_engine

    with get_engine("dask", n_jobs=2, retries=1) as engine:
        yield engine


@pytest.fixture(scope="session")
def spark_engine():
    pytest.importorskip("pyspark")
    from connscale.engines import get_engine

    with get_engine("spark", cluster="local[2]", retries=1) as engine:
        yield engine


def pytest_configure(config):
    # pyspark's pandas-version notice (connscale does not use pyspark's pandas API).
    config.addinivalue_line(
        "filterwarnings", "ignore:.*PySpark does not yet fully support pandas:FutureWarning")
