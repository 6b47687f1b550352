"""Reader processes inside Dask workers: each worker reads its own tasks' inputs ahead.

A :class:`WorkerReaders` plugin, registered by
:class:`~connscale.engines.dask_engine.DaskEngine` (``readers=``), gives
each worker a :class:`~connscale.engines.readers.ReaderPool` of its own
(``readers`` processes when several, else a thread), started at the
worker's first task and shut down when the plugin is removed or the worker
closes; a worker that dies and is restarted by its nanny starts a new one.
Each task of the engine's ``map`` runs through :func:`read_then_run`: the
:attr:`~connscale.engines.batch.Task.prepare` of its
:class:`~connscale.engines.batch.TaskCall` goes to the pool as the worker
starts the task, the thread waits for the read holding nothing, then
computes under the worker's lock, so one task computes at a time (one per
GPU) while the reads of the worker's other threads go on. With
``readers + 1`` threads per worker, at most ``readers + 1`` tasks' inputs
are in that worker's memory, as on
:class:`~connscale.engines.batch.ReadAheadEngine`.

What a reader process returns reaches its worker through shared memory, by
name (:mod:`connscale.engines.shared`), in a folder of the worker's own
under ``folder`` (the caller removes ``folder`` when its cluster closes,
whatever became of the workers): a decoded run never travels through
Dask. A reader that dies is charged its read alone (the
:class:`~connscale.engines.readers.ReaderPool` rule): the read is tried
again on a new reader, then its task fails with
:class:`~connscale.engines.readers.ReaderLost`, and the other tasks
complete.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import wait
from dataclasses import replace
from typing import Any

from distributed import WorkerPlugin, get_worker

from connscale.engines.batch import Later, TaskCall
from connscale.engines.readers import ReaderPool

__all__ = ["READERS_PLUGIN", "WorkerReaders", "read_then_run", "worker_processes"]

#: The plugin's name on every worker.
READERS_PLUGIN = "connscale-readers"


class WorkerReaders(WorkerPlugin):
    """The readers of one Dask worker, and its lock of one computing task.

    Parameters
    ----------
    readers : int
        Reads at once in the worker.
    processes : bool
        Reader processes (forked from a fork server the worker starts: the
        worker must be allowed children, ``distributed.worker.daemon``
        False) instead of threads.
    preload : tuple of str
        Modules the reader processes import before their first read.
    folder : str or None
        Where each worker makes the folder its readers' arrays go through
        (:func:`connscale.engines.shared.handoff_folder`); None: pickled
        through the readers' pipes.
    retries : int, default=1
        A read whose reader died is tried ``1 + retries`` times.
    """

    name = READERS_PLUGIN

    def __init__(
        self,
        readers: int,
        *,
        processes: bool,
        preload: tuple[str, ...] = (),
        folder: str | None = None,
        retries: int = 1,
    ) -> None:
        self.readers = readers
        self.processes = processes
        self.preload = tuple(preload)
        self.folder = folder
        self.retries = retries
        self._pool: ReaderPool | None = None
        self._own_folder: str | None = None
        self._start_lock = threading.Lock()
        self._compute_lock = threading.Lock()

    def __getstate__(self) -> dict:
        """Return the settings alone: the pool and the locks belong to the worker."""
        return {
            "readers": self.readers,
            "processes": self.processes,
            "preload": self.preload,
            "folder": self.folder,
            "retries": self.retries,
        }

    def __setstate__(self, state: dict) -> None:
        self.__init__(state.pop("readers"), **state)

    def pool(self) -> ReaderPool:
        """Return the worker's reader pool, started by the first task that asks."""
        with self._start_lock:
            if self._pool is None:
                if self.processes and self.folder is not None:
                    self._own_folder = tempfile.mkdtemp(prefix="worker-", dir=self.folder)
                self._pool = ReaderPool(
                    self.readers,
                    processes=self.processes,
                    retries=self.retries,
                    folder=self._own_folder,
                    preload=self.preload,
                )
            return self._pool

    def run(self, func: Callable, item: Any) -> Any:
        """Read ``item``'s task in a reader, then run ``func`` on it alone in this worker.

        A :class:`~connscale.engines.batch.Later` it returns (its outputs wait
        for work in a process beside: a report drawn by this worker's readers)
        is finished after the worker's lock is released: the worker's next
        task computes meanwhile.
        """
        if isinstance(item, TaskCall) and item.task.prepare is not None:
            read = self.pool().submit(item.task.prepare, item.task.payload)
            wait([read])  # its error, if any, is the task's (raised by ``func``)
            item = replace(item, prepared=read)
        with self._compute_lock:
            result = func(item)
        return result.finish() if isinstance(result, Later) else result

    def teardown(self, worker) -> None:
        """Stop the readers and remove the worker's folder."""
        with self._start_lock:
            if self._pool is not None:
                self._pool.shutdown()
                self._pool = None
            if self._own_folder is not None:
                shutil.rmtree(self._own_folder, ignore_errors=True)
                self._own_folder = None


def read_then_run(func: Callable, item: Any) -> Any:
    """Run ``func(item)`` on this worker after its read (:meth:`WorkerReaders.run`).

    Raises
    ------
    RuntimeError
        This worker has no :class:`WorkerReaders` plugin.
    """
    plugin = get_worker().plugins.get(READERS_PLUGIN)
    if plugin is None:
        raise RuntimeError(
            f"This Dask worker has no {READERS_PLUGIN!r} plugin: DaskEngine(readers=...) "
            "registers it on every worker."
        )
    return plugin.run(func, item)


def worker_processes() -> ReaderPool | None:
    """Return the reader processes of the Dask worker this runs in (None: none).

    None outside a Dask worker, in a worker without a :class:`WorkerReaders`
    plugin, or whose reader is a thread. A task may hand them work of its
    own besides its read (its report's figures:
    :mod:`connscale.bidsapp.beside`).
    """
    try:
        worker = get_worker()
    except ValueError:  # not in a worker
        return None
    plugin = worker.plugins.get(READERS_PLUGIN)
    if plugin is None or not plugin.processes:
        return None
    return plugin.pool()
