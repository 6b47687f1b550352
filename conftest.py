"""Collect the Examples of the package's docstrings as doctests (``make test`` runs them).

Only ``src/connscale`` is collected this way: ``--doctest-modules`` would also import every
module under ``tests/``, whose interpreted-Triton helpers set the interpreter's environment
at import. This file sits at the repository's root so that it does not ship in the wheel.

The Examples of the worker engines (``connscale.engines.local``, ``dask_engine``,
``spark_engine``) run on a started engine of their module, named ``engine`` in their
namespace: each is started once per session (per xdist worker), when the first doctest of
its module runs, and closed at the session's end.
"""

import os
from pathlib import Path

import pytest
from _pytest.doctest import DoctestItem, DoctestModule

_PACKAGE = Path(__file__).resolve().parent / "src" / "connscale"
# The worker engines' modules and the session fixture giving their doctests an engine.
_ENGINE_DOCTESTS = {
    "local.py": "_local_doctest_engine",
    "dask_engine.py": "_dask_doctest_engine",
    "spark_engine.py": "_spark_doctest_engine",
}
_CLUSTER_DOCTESTS = {"dask_engine.py", "spark_engine.py"}


def pytest_collect_file(file_path: Path, parent):
    """Return a doctest collector for a module of the package."""
    # __main__.py runs the command line at import (pytest's --doctest-modules skips it too);
    # with --doctest-modules on, pytest collects these files itself.
    if (
        file_path.suffix == ".py"
        and _PACKAGE in file_path.parents
        and file_path.name != "__main__.py"
        and not parent.config.option.doctestmodules
    ):
        return DoctestModule.from_parent(parent, path=file_path)
    return None


def _engine_module(item) -> str | None:
    """Return the file name of the worker-engine module whose doctest ``item`` is, or None."""
    if isinstance(item, DoctestItem) and item.path.parent == _PACKAGE / "engines":
        if item.path.name in _ENGINE_DOCTESTS:
            return item.path.name
    return None


def pytest_collection_modifyitems(config, items):
    """Mark the Dask and Spark engines' doctests as the tests starting a cluster are."""
    for item in items:
        if _engine_module(item) in _CLUSTER_DOCTESTS:
            item.add_marker(pytest.mark.cluster)


@pytest.fixture(autouse=True)
def _doctest_engine(request, doctest_namespace):
    """Name a started engine ``engine`` in the namespace of a worker engine's doctests."""
    module = _engine_module(request.node)
    if module is None:
        yield
        return
    doctest_namespace["engine"] = request.getfixturevalue(_ENGINE_DOCTESTS[module])
    yield
    del doctest_namespace["engine"]


def _workers_import_this_checkout() -> None:
    """Have Spark's Python workers import this checkout's connscale (as this process does)."""
    # Pool and Dask workers start with this process's sys.path; Spark's, started by the
    # JVM, with its PYTHONPATH.
    source = str(_PACKAGE.parent)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if source not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([source, *paths])


@pytest.fixture(scope="session")
def _local_doctest_engine():
    from connscale.engines import LocalEngine

    with LocalEngine(n_jobs=2) as engine:
        yield engine


@pytest.fixture(scope="session")
def _dask_doctest_engine():
    pytest.importorskip("distributed")
    from connscale.engines import DaskEngine

    with DaskEngine(n_jobs=2) as engine:
        yield engine


@pytest.fixture(scope="session")
def _spark_doctest_engine():
    # The settings of tests/conftest.py's spark_engine: a process has one SparkContext,
    # which the engine started second reuses, so both ask for the same (retries included).
    pytest.importorskip("pyspark")
    _workers_import_this_checkout()
    from connscale.engines import SparkEngine

    with SparkEngine("local[2]", retries=2) as engine:
        yield engine
