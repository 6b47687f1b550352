"""Work beside the process that computes: reports drawn and tables written by helper processes.

A run's report costs seconds of matplotlib in the process that feeds the
GPU (the connectome with its region names, the carpet plots, the atlas over
the mean image: ~3 s a run on an H100 host, ten times the run's compute;
``benchmarks/RESULTS.md`` §24), and its region set's tables (the connectome
and the series as text) ~70 ms of Python formatting, half of that
process's own work with 400 regions (§27). On the serial
backend with reader processes the participant level hands that work to
helper processes of its own (:func:`helpers`): the computing process gives
each a call of small arrays and goes on to the next run; the run's set is
published once its files are written (:class:`~connscale.engines.batch.Later`).
In a Dask GPU worker (``--gpus``) the worker's reader processes draw the
reports between their reads (:func:`draw`). Elsewhere the work is done in
this process.
"""

from __future__ import annotations

import pickle
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager

__all__ = ["DRAWER_MODULES", "draw", "helpers", "write"]

#: What a helper process that draws imports in its first task (matplotlib on its
#: non-interactive backend first: a helper process shows nothing).
DRAWER_MODULES = ("connscale.bidsapp.report", "nilearn.plotting")

_active = None  # the call's helper processes (a ReaderPool), while :func:`helpers` holds them


@contextmanager
def helpers(count: int, *, drawing: bool) -> Iterator[None]:
    """Hand this process's reports and tables to ``count`` processes while the block runs.

    They are forked from this process at once, before it uses a GPU (as
    PyTorch's ``DataLoader`` workers, they never use its CUDA context); with
    ``drawing`` each imports matplotlib and nilearn's plotting in its first
    task, beside this process's work (a fork server importing them first
    would hold up the call's start by seconds). A helper process that dies
    is replaced and its work done again once
    (:class:`~connscale.engines.readers.ReaderPool`); the block waits for the
    work under way as it ends.
    """
    global _active  # noqa: PLW0603 - one pool per call, in the process computing its runs
    from connscale.engines.readers import ReaderPool

    pool = ReaderPool(count, processes=True, fork_here=True, role="helper")
    for _ in range(count if drawing else 0):  # one each: the least busy helper takes the next
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


def draw(call: Callable[[], object]) -> Future:
    """Return a future of ``call()`` (a report): drawn by a helper, a GPU worker's reader, here."""
    return _hand_off(call, _active if _active is not None else _worker_processes())


def write(call: Callable[[], object]) -> Future:
    """Return a future of ``call()`` (a table written): by the helper processes, or here.

    A Dask GPU worker writes its tables itself: its readers' queues hold
    reads, which a table would wait behind.
    """
    return _hand_off(call, _active)


def _hand_off(call: Callable[[], object], pool) -> Future:
    """Return a future of ``call()`` run by ``pool``; without a pool, run here.

    ``call`` is pickled at once: what a helper gets is the data as handed,
    whatever this process does with its arrays after. Without a pool the
    future is done when this returns (its exception set, if ``call`` raised).
    """
    if pool is not None:
        return pool.submit(_run_pickled, pickle.dumps(call, protocol=pickle.HIGHEST_PROTOCOL))
    future: Future = Future()
    try:
        future.set_result(call())
    except Exception as exc:  # noqa: BLE001 - the future's, as a helper's would be
        future.set_exception(exc)
    return future


def _run_pickled(pickled: bytes):
    """Unpickle a call handed over and run it (in a helper process)."""
    return pickle.loads(pickled)()  # noqa: S301 - pickled by this package's own process
