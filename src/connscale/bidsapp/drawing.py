"""Run reports drawn beside the process that computes: a pool of drawing processes.

A run's report costs seconds of matplotlib in the process that feeds the
GPU (the connectome with its region names, the carpet plots, the atlas over
the mean image: ~3 s a run on an H100 host, ten times the run's compute;
``benchmarks/RESULTS.md`` §24). On the serial backend the participant
level draws them in drawing processes of their own instead
(:func:`drawers`): the computing process hands each a
:class:`~connscale.bidsapp.report.RunReport` (small arrays) and goes on to
the next run; the run's set is published once its page is written
(:class:`~connscale.engines.batch.Later`). In a Dask GPU worker
(``--gpus``) the worker's reader processes draw them between their reads,
the worker computing its next run meanwhile. Elsewhere :func:`draw` draws
in this process.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager

__all__ = ["DRAWER_MODULES", "draw", "drawers"]

#: What a drawing process imports in its first task (matplotlib on its non-interactive
#: backend first: a drawing process shows nothing).
DRAWER_MODULES = ("connscale.bidsapp.report", "nilearn.plotting")

_active = None  # the call's drawing processes (a ReaderPool), while :func:`drawers` holds them


@contextmanager
def drawers(count: int) -> Iterator[None]:
    """Draw the reports of this process's runs in ``count`` processes while the block runs.

    They are forked from this process at once, before it uses a GPU (as
    PyTorch's ``DataLoader`` workers, they never use its CUDA context), and
    import matplotlib and nilearn's plotting in their first task, beside
    this process's work (a fork server importing them first would hold up
    the call's start by seconds). A drawing process that dies is replaced and
    its report drawn again once (:class:`~connscale.engines.readers.ReaderPool`);
    the block waits for the reports under way as it ends.
    """
    global _active  # noqa: PLW0603 - one pool per call, in the process computing its runs
    from connscale.engines.readers import ReaderPool

    pool = ReaderPool(count, processes=True, fork_here=True, role="drawing")
    for _ in range(count):  # one each: the least busy drawer takes the next
        pool.submit(_import_all, DRAWER_MODULES)
    _active = pool
    try:
        yield
    finally:
        _active = None
        pool.shutdown()


def _worker_processes():
    """Return the reader processes of the Dask GPU worker this runs in, if any.

    A GPU worker's readers draw its runs' reports between their reads
    (:func:`connscale.engines.dask_readers.worker_processes`).
    """
    if "distributed" not in sys.modules:  # not in a Dask worker
        return None
    from connscale.engines.dask_readers import worker_processes

    return worker_processes()


def _import_all(modules: tuple[str, ...]) -> None:
    """Import ``modules``, pyplot on matplotlib's non-interactive backend first."""
    import importlib

    from connscale.bidsapp.report import _plt

    _plt()
    for name in modules:
        importlib.import_module(name)


def draw(function: Callable, job) -> Future:
    """Return a future of ``function(job)``: drawn by the drawing processes, or here.

    Without drawing processes the future is done when this returns (its
    exception set, if ``function`` raised).
    """
    pool = _active if _active is not None else _worker_processes()
    if pool is not None:
        return pool.submit(function, job)
    future: Future = Future()
    try:
        future.set_result(function(job))
    except Exception as exc:  # noqa: BLE001 - the future's, as a drawing process's would be
        future.set_exception(exc)
    return future
