"""The readers of :class:`~connscale.engines.batch.ReadAheadEngine`: threads or processes.

Threads share the computing process's interpreter: a reader's Python work
(headers, confounds, the cleaning operator) and any C code that holds the
GIL wait for one another and for the process feeding the GPU. Processes do
not: each reader is a process of its own (a ``ProcessPoolExecutor`` of one
worker, so that a reader that dies breaks only its own run), and the large
arrays it returns come back through shared memory
(:mod:`connscale.engines.shared`), not through the pipe.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from connscale.engines.shared import share_into

__all__ = ["ReaderLost", "ReaderPool", "forks_here", "start_fork_server", "start_reader"]


class ReaderLost(RuntimeError):
    """A reader process died (killed, out of memory, a crash) on every try of a run."""


class ReaderPool:
    """``readers`` threads, or ``readers`` processes each with its own pool of one.

    Parameters
    ----------
    readers : int
        How many reads run at once.
    processes : bool
        Processes instead of threads: forked from the fork server (with
        ``forkserver`` where available, else ``spawn``), or from this process
        with ``fork_here`` when it may (:func:`forks_here`).
    retries : int
        A read whose process died is tried ``1 + retries`` times (on a new
        process), then fails with :class:`ReaderLost`.
    folder : str or None
        Where the reader processes put the arrays they return
        (:func:`connscale.engines.shared.handoff_folder`); None: pickled.
    preload : tuple of str
        Modules to import before the first read: once, in the fork server
        the readers are forked from (with ``forkserver``, if this process
        starts it), and in each reader as it starts. The readers start at
        once, so that their imports overlap this process's own work.
    fork_here : bool, default=False
        Fork the readers from this process when it has imported every
        ``preload`` module already, on Linux (:func:`forks_here`): they start
        at once, with nothing to import (the fork server's imports take
        seconds). As PyTorch's ``DataLoader`` workers, they never use the
        CUDA context or the threads of the process they are forked from.
    role : str, default='reader'
        What the processes are, in :class:`ReaderLost`'s message ('helper':
        :mod:`connscale.bidsapp.beside`).
    """

    def __init__(
        self,
        readers: int,
        *,
        processes: bool,
        retries: int = 1,
        folder: str | None = None,
        preload: tuple[str, ...] = (),
        fork_here: bool = False,
        role: str = "reader",
    ) -> None:
        self.role = role
        self._lock = threading.Lock()  # the slots, replaced from the futures' callbacks
        self._submitting = threading.Lock()  # a reader picked and its read queued, at once
        self._queued: dict[Executor, list[Future]] = {}  # each pool's reads, oldest first
        self._died_on: dict[Executor, Future] = {}  # the read a dead pool was running
        self.processes = processes
        self.retries = retries
        self.folder = folder
        self._context = None
        if processes:
            self._context = multiprocessing.get_context(_start_method(preload, fork_here))
            if self._context.get_start_method() == "forkserver":
                start_fork_server(preload)
            self.preload = preload
            self._slots: list[Executor | None] = [None] * readers
            with self._lock:
                for index in range(readers):
                    self._slot(index)
        else:
            self._slots = [ThreadPoolExecutor(readers, thread_name_prefix="connscale-read")]
        self._next = 0

    def _slot(self, index: int) -> Executor:
        """Return slot ``index``'s pool, started if it has none (the lock held)."""
        if self._slots[index] is None:
            self._slots[index] = ProcessPoolExecutor(
                1,
                mp_context=self._context,
                initializer=start_reader,
                initargs=(self.folder, self.preload, os.getpid()),
            )
            self._slots[index].submit(int)  # start the process now, not at its first read
        return self._slots[index]

    def _queue(self, index: int, function: Callable, argument) -> tuple[Executor, Future]:
        """Queue ``function(argument)`` on slot ``index`` (the lock held); return the pool.

        A pool whose process died is broken at once, before its reads'
        callbacks replace it: a read sent to it then goes to a new process.
        """
        while True:
            pool = self._slot(index)
            try:
                return pool, pool.submit(function, argument)
            except BrokenProcessPool:
                self._slots[index] = None
                pool.shutdown(wait=False)

    def submit(self, function: Callable, argument) -> Future:
        """Start ``function(argument)`` on the least busy reader; return a future of its result.

        The reader with the fewest reads queued takes it (the next in turn
        among those): a read never waits behind another while a reader idles.
        A reader process that dies is replaced and the read tried again, up
        to ``retries`` times; then the future raises :class:`ReaderLost`.
        """
        if not self.processes:
            return self._slots[0].submit(function, argument)
        outcome: Future = Future()
        with self._submitting:  # threads submitting at once pick different readers
            self._start(self._least_busy(), function, argument, outcome, 1)
        return outcome

    def _least_busy(self) -> int:
        """Return the slot with the fewest reads queued, the next in turn among equals."""
        count = len(self._slots)
        with self._lock:
            turn = [(self._next + step) % count for step in range(count)]
            index = min(turn, key=lambda i: len(self._queued.get(self._slots[i], ())))
        self._next = (index + 1) % count
        return index

    def _start(self, index, function, argument, outcome: Future, attempt: int) -> None:
        with self._lock:
            pool, future = self._queue(index, function, argument)
            self._queued.setdefault(pool, []).append(future)

        def done(finished: Future) -> None:
            lost = finished.cancelled() or isinstance(finished.exception(), BrokenProcessPool)
            with self._lock:
                queued = self._queued[pool]
                # The reader ran its oldest read when it died: that read is charged
                # with a try; those queued behind it are sent again for free.
                if lost:
                    self._died_on.setdefault(pool, queued[0])
                charged = lost and self._died_on[pool] is finished
                queued.remove(finished)
                if not queued:
                    self._queued.pop(pool)
                    self._died_on.pop(pool, None)
            if not lost:
                _settle(outcome, finished)
            elif not charged or attempt <= self.retries:
                self._replace(index, pool)
                self._start(index, function, argument, outcome, attempt + int(charged))
            else:
                outcome.set_exception(
                    ReaderLost(
                        f"the {self.role} process died on it ({attempt} tries): killed, "
                        "out of memory or crashed"
                    )
                )

        future.add_done_callback(done)

    def _replace(self, index: int, broken: Executor) -> None:
        """Drop ``broken`` from slot ``index`` unless it was already replaced."""
        with self._lock:
            if self._slots[index] is not broken:
                return
            self._slots[index] = None
        broken.shutdown(wait=False)

    def shutdown(self) -> None:
        """Stop the readers (the reads under way finish first)."""
        for pool in self._slots:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)


def forks_here(preload: tuple[str, ...]) -> bool:
    """Return whether readers may be forked from this process: Linux, ``preload`` imported.

    Where a module is not imported yet, the fork server (started when the
    call began, its imports beside the call's own work) starts them sooner
    than this process importing it first.
    """
    import sys

    return sys.platform.startswith("linux") and all(name in sys.modules for name in preload)


def _start_method(preload: tuple[str, ...], fork_here: bool) -> str:
    """Return how reader processes start: fork, the fork server, else spawn."""
    if fork_here and forks_here(preload):
        return "fork"
    return "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


def start_fork_server(preload: tuple[str, ...]) -> None:
    """Start the fork server of reader processes now, importing ``preload`` once.

    Its imports then overlap what this process does before the first read
    (the BIDS layout's index); each reader is forked from it with them done.
    Nothing to do where ``forkserver`` is not available (readers are spawned)
    or when the server already runs.
    """
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return
    from multiprocessing import forkserver

    context = multiprocessing.get_context("forkserver")
    if preload:
        context.set_forkserver_preload(list(preload))
    forkserver.ensure_running()


def start_reader(folder: str | None, preload: tuple[str, ...], owner: int | None = None) -> None:
    """Initialise a reader process: where its arrays go, its imports, its owner, one thread.

    A reader is one core's work: its BLAS and OpenMP pools run on one thread
    (a pool per reader of one thread per core, whose idle threads busy-wait in
    OpenBLAS, would take the cores of the other readers' decode).

    A reader forked from the fork server is not the child of the process
    that owns its pool (``owner``), so it would outlive that process if it
    were killed (a GPU worker, the participant call), blocked on its queue
    for ever: a watcher thread ends it once the owner is gone.
    """
    import importlib

    from threadpoolctl import threadpool_limits

    share_into(folder)
    for name in preload:
        importlib.import_module(name)
    threadpool_limits(1)  # the libraries loaded by now: numpy's and scipy's BLAS
    if owner is not None:
        threading.Thread(target=_exit_without, args=(owner,), daemon=True).start()


def _exit_without(owner: int, every: float = 1.0) -> None:
    """End this process once process ``owner`` no longer exists."""
    while True:
        time.sleep(every)
        try:
            os.kill(owner, 0)
        except ProcessLookupError:
            os._exit(1)
        except PermissionError:  # it exists (as another user): keep waiting
            continue


def _settle(outcome: Future, finished: Future) -> None:
    error = finished.exception()
    if error is None:
        outcome.set_result(finished.result())
    else:
        outcome.set_exception(error)
