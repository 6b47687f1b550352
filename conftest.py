"""Collect the Examples of the package's docstrings as doctests (``make test`` runs them).

Only ``src/connscale`` is collected this way: ``--doctest-modules`` would also import every
module under ``tests/``, whose interpreted-Triton helpers set the interpreter's environment
at import. This file sits at the repository's root so that it does not ship in the wheel.

The Examples of a worker engine's module (``connscale.engines.local``, ``dask_engine``,
``spark_engine``) run on one engine of that kind, started for them and named ``engine``
in their namespace. Each of these modules is collected as one item, so that its doctests
run in one pytest-xdist worker and start one engine (worker processes, a Dask cluster, a
Spark JVM: seconds each), closed when they are done.
"""

import doctest
import os
from contextlib import contextmanager
from pathlib import Path

import pytest
from _pytest.doctest import DoctestItem, DoctestModule, MultipleDoctestFailures

_PACKAGE = Path(__file__).resolve().parent / "src" / "connscale"
_ENGINES = _PACKAGE / "engines"


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
        if file_path.parent == _ENGINES and file_path.name in _ENGINE_DOCTESTS:
            return _EngineDoctestModule.from_parent(parent, path=file_path)
        return DoctestModule.from_parent(parent, path=file_path)
    return None


class _EngineDoctests(DoctestItem):
    """Every doctest of a worker engine's module, run in turn as one item."""

    tests: list[doctest.DocTest]

    def setup(self) -> None:
        self._request._fillfixtures()
        namespace = dict(getfixture=self._request.getfixturevalue)
        namespace.update(self._request.getfixturevalue("doctest_namespace"))
        for test in self.tests:
            test.globs.update(namespace)

    def runtest(self) -> None:
        failures: list[doctest.DocTestFailure] = []
        for test in self.tests:
            if not all(example.options.get(doctest.SKIP) for example in test.examples):
                self.runner.run(test, out=failures)
        if failures:
            raise MultipleDoctestFailures(failures)


class _EngineDoctestModule(DoctestModule):
    """Collect the doctests of a worker engine's module as one item."""

    def collect(self):
        items = list(super().collect())
        if items:
            name = f"connscale.engines.{self.path.stem}"
            item = _EngineDoctests.from_parent(
                self, name=name, runner=items[0].runner, dtest=items[0].dtest
            )
            item.tests = [each.dtest for each in items]
            if self.path.name in _CLUSTER_DOCTESTS:
                item.add_marker(pytest.mark.cluster)
            yield item


@contextmanager
def _local_engine():
    from connscale.engines import LocalEngine

    with LocalEngine(n_jobs=2) as engine:
        yield engine


@contextmanager
def _dask_engine():
    pytest.importorskip("distributed")
    from connscale.engines import DaskEngine

    with DaskEngine(n_jobs=2) as engine:
        yield engine


# A JVM for a few small jobs: the quick JIT compiler only and one garbage-collector
# thread (about a third less CPU to start Spark and run them).
_SMALL_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


@contextmanager
def _spark_engine():
    # tests/conftest.py's spark_engine settings: a process has one SparkContext, which an
    # engine started while it runs uses (its retries included).
    pytest.importorskip("pyspark")
    from connscale.engines import SparkEngine

    # Read by the JVM when it starts (the first context of the process): its options, and
    # the path of its Python workers, which then import this checkout's connscale as this
    # process does (pool and Dask workers start with this process's sys.path).
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JAVA_TOOL_OPTIONS", _SMALL_JVM, prepend=" ")
        patch.setenv("PYTHONPATH", str(_PACKAGE.parent), prepend=os.pathsep)
        engine = SparkEngine("local[2]", retries=2)
    with engine:
        yield engine


# The worker engines' modules and the engine their doctests run on.
_ENGINE_DOCTESTS = {
    "local.py": _local_engine,
    "dask_engine.py": _dask_engine,
    "spark_engine.py": _spark_engine,
}
_CLUSTER_DOCTESTS = {"dask_engine.py", "spark_engine.py"}


@pytest.fixture(autouse=True)
def _doctest_engine(request, doctest_namespace):
    """Name a started engine ``engine`` in the namespace of a worker engine's doctests."""
    # One item per module, as collected here; one per docstring with --doctest-modules.
    node = request.node
    if not (
        isinstance(node, DoctestItem)
        and node.path.parent == _ENGINES
        and node.path.name in _ENGINE_DOCTESTS
    ):
        yield
        return
    with _ENGINE_DOCTESTS[node.path.name]() as engine:
        doctest_namespace["engine"] = engine
        try:
            yield
        finally:
            del doctest_namespace["engine"]
