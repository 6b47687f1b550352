"""Process-pool engine: this machine's cores, no extra dependency.

Design
------
* ``map`` runs one task per item on a shared
  :class:`concurrent.futures.ProcessPoolExecutor`. Workers start from a
  ``forkserver`` that has imported connscale (numpy, torch) once, so a new
  or replacement worker is a fork of a clean, single-threaded process: fast,
  and CUDA or threads of the parent never leak into it (``spawn`` where
  forkserver is not available, or on request).
* Block work uses ``n_jobs`` long-lived *single-worker* executors, one per
  block partition. ``load_blocks`` asks partition ``p`` to call
  ``loader(i)`` for its blocks (``i % n_partitions == p``) and keep them in
  a module-level store inside that process; ``map_blocks``/``sum_blocks``
  send only ``func`` and ``args`` (pickled once per partition) and get back
  one result per block. The driver never holds the blocks.
* ``sum_blocks`` gathers the per-block values and adds them with
  :func:`connscale.engines.base.tree_sum` in block order, so the result is
  bitwise the serial engine's.
* ``map`` runs on ``n_jobs`` *single-worker* executors too, one task at a
  time each (the next item goes to the first executor that is free). A
  worker that dies (``os._exit``, a signal, a segfault, the out-of-memory
  killer) breaks only its own executor, so its death is charged to the one
  task it was running: that executor is replaced, the task is tried again
  and the others never notice. (A shared ``ProcessPoolExecutor`` fails
  every pending task when one worker dies, with no way to tell which task
  killed it.)
* Every task is tried at most ``1 + retries`` times, whether it raised or
  its worker died. A partition worker that dies is replaced and its blocks
  rebuilt from the loader before its task is tried again.
"""

from __future__ import annotations

import itertools
import multiprocessing
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from connscale._validation import check_int, check_option, resolve_n_jobs
from connscale.engines.base import (
    BlockSet,
    Engine,
    TaskFailure,
    check_errors,
    one_line,
    tree_sum,
)

# Blocks held by this (worker) process: {token: {block index: block}}.
_STORE: dict[int, dict[int, Any]] = {}
_TOKENS = itertools.count()


def _store_blocks(token: int, loader: Callable, indices: list[int]) -> int:
    _STORE[token] = {i: loader(i) for i in indices}
    return len(indices)


def _apply_blocks(token: int, func: Callable, args: tuple) -> list[tuple[int, Any]]:
    blocks = _STORE[token]
    return [(i, func(blocks[i], *args)) for i in sorted(blocks)]


def _drop_blocks(token: int) -> None:
    _STORE.pop(token, None)


class LocalEngine(Engine):
    """Run tasks in worker processes on this machine.

    Parameters
    ----------
    n_jobs : int or None, default=None
        Number of worker processes; None or -1 uses every core.
    retries : int, default=1
        How many times a failed task is run again (it raised, or its worker
        process died) before it counts as failed: ``1 + retries`` attempts.
    context : {'forkserver', 'spawn'} or None, default=None
        How worker processes start; None picks 'forkserver' where the
        platform has it, else 'spawn' (never ``fork``: unsafe with CUDA and
        threads).

    Attributes
    ----------
    n_jobs : int
        Number of worker processes (every core resolved to a number).
    retries : int
        How many times a failed task is run again.
    context : str
        How worker processes start: 'forkserver' or 'spawn'.

    Examples
    --------
    >>> import math
    >>> from connscale.engines import LocalEngine
    >>> with LocalEngine(n_jobs=2) as engine:
    ...     engine.map(math.sqrt, [4.0, 9.0, 16.0])
    [2.0, 3.0, 4.0]
    """

    name = "local"

    def __init__(
        self, n_jobs: int | None = None, *, retries: int = 1, context: str | None = None
    ) -> None:
        self.n_jobs = resolve_n_jobs(n_jobs)
        self.retries = check_int(retries, "retries", minimum=0)
        if context is None:
            available = multiprocessing.get_all_start_methods()
            context = "forkserver" if "forkserver" in available else "spawn"
        self.context = check_option(context, "context", {"spawn", "forkserver"})
        self._mp = multiprocessing.get_context(self.context)
        if self.context == "forkserver":
            # Imported once in the server, inherited by every worker it forks
            # (torch named: import connscale alone does not import it).
            self._mp.set_forkserver_preload(["__main__", "torch", "connscale.engines.local"])
        self._slots: list[ProcessPoolExecutor | None] = [None] * self.n_jobs
        self._partitions: list[ProcessPoolExecutor | None] = [None] * self.n_jobs
        self._loaders: dict[int, tuple[Callable, int]] = {}

    # ---- one task per item ---------------------------------------------
    def _slot(self, s: int) -> ProcessPoolExecutor:
        if self._slots[s] is None:
            self._slots[s] = ProcessPoolExecutor(1, mp_context=self._mp)
        return self._slots[s]

    def _replace_slot(self, s: int) -> None:
        self._slots[s].shutdown(wait=False, cancel_futures=True)
        self._slots[s] = None

    def map(
        self,
        func: Callable,
        items: Sequence,
        *,
        errors: str = "raise",
        on_result: Callable[[int, Any], None] | None = None,
    ) -> list:
        """Run ``func(item)`` for every item on the worker processes.

        Each task is tried at most ``1 + retries`` times, whether it raised
        or its worker died; a dead worker is replaced. With
        ``errors='raise'`` the first task (in input order) that failed every
        attempt raises its last error (``BrokenProcessPool`` for a worker
        that died) once the running tasks are done; with ``errors='return'``
        it is a :class:`~connscale.engines.base.TaskFailure` in the results.

        Parameters
        ----------
        func : callable
            A picklable (module-level) function of one item.
        items : sequence
            One task per item.
        errors : {'raise', 'return'}, default='raise'
            Raise the first failure, or return a
            :class:`~connscale.engines.base.TaskFailure` in its place.
        on_result : callable or None, default=None
            Called in this process as ``on_result(index, result)`` as each
            task's result is final (in the order the tasks finish).

        Returns
        -------
        list
            The results (or :class:`~connscale.engines.base.TaskFailure`) in
            input order.

        Examples
        --------
        >>> import math
        >>> from connscale.engines import LocalEngine
        >>> engine = LocalEngine(n_jobs=2)  # doctest: +SKIP
        >>> engine.map(math.sqrt, [4.0, 9.0, 16.0])
        [2.0, 3.0, 4.0]
        >>> results = engine.map(math.sqrt, [4.0, -1.0], errors="return")
        >>> results[1]  # tried 1 + retries times
        TaskFailure(reason='ValueError: math domain error', attempts=2, worker_lost=False)
        >>> finished = []
        >>> engine.map(abs, [-1, -2], on_result=lambda i, r: finished.append(i))
        [1, 2]
        >>> sorted(finished)
        [0, 1]
        """
        errors = check_errors(errors)
        items = list(items)
        results: list = [None] * len(items)
        failed: dict[int, BaseException] = {}
        attempts = [0] * len(items)
        queue = deque(range(len(items)))
        free = list(range(self.n_jobs))
        running: dict = {}
        while queue or running:
            while queue and free and not (failed and errors == "raise"):
                s, i = free.pop(0), queue.popleft()
                attempts[i] += 1
                running[self._slot(s).submit(func, items[i])] = (s, i)
            if not running:
                break
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                s, i = running.pop(future)
                free.append(s)
                try:
                    results[i] = future.result()
                    if on_result is not None:
                        on_result(i, results[i])
                    continue
                except BrokenProcessPool as exc:
                    self._replace_slot(s)
                    error: BaseException = exc
                except Exception as exc:  # noqa: BLE001 - retried, then reported
                    error = exc
                if attempts[i] <= self.retries:
                    queue.appendleft(i)
                else:
                    failed[i] = error
        if errors == "raise" and failed:
            raise failed[min(failed)]
        for i, error in failed.items():
            if isinstance(error, BrokenProcessPool):
                reason = (
                    f"the worker process died while running the task, on each of "
                    f"{attempts[i]} attempts (BrokenProcessPool)"
                )
            else:
                reason = one_line(f"{type(error).__name__}: {error}")
            results[i] = TaskFailure(reason, attempts[i], isinstance(error, BrokenProcessPool))
            if on_result is not None:
                on_result(i, results[i])
        return results

    # ---- blocks kept in long-lived partition workers ---------------------
    def _partition(self, p: int) -> ProcessPoolExecutor:
        if self._partitions[p] is None:
            self._partitions[p] = ProcessPoolExecutor(1, mp_context=self._mp)
        return self._partitions[p]

    def _n_partitions(self, n_blocks: int) -> int:
        return min(self.n_jobs, n_blocks)

    def _reload(self, token: int, p: int) -> None:
        """Replace partition ``p``'s dead worker and rebuild its blocks there."""
        old = self._partitions[p]
        if old is not None:
            old.shutdown(wait=False, cancel_futures=True)
        self._partitions[p] = None
        for other, (loader, n_blocks) in self._loaders.items():
            n_part = self._n_partitions(n_blocks)
            if p < n_part:
                indices = list(range(p, n_blocks, n_part))
                self._partition(p).submit(_store_blocks, other, loader, indices).result()

    def _run_partitions(self, token: int, n_blocks: int, fn: Callable, *fn_args) -> list:
        n_part = self._n_partitions(n_blocks)
        budget = [self.retries] * n_part
        outputs: list = [None] * n_part
        todo = list(range(n_part))
        while todo:
            futures = {p: self._partition(p).submit(fn, token, *fn_args) for p in todo}
            todo = []
            for p, future in futures.items():
                try:
                    outputs[p] = future.result()
                except BrokenProcessPool:
                    if budget[p] == 0:
                        raise
                    budget[p] -= 1
                    self._reload(token, p)
                    todo.append(p)
                except Exception:
                    if budget[p] == 0:
                        raise
                    budget[p] -= 1
                    todo.append(p)
        return outputs

    def load_blocks(self, loader: Callable[[int], Any], n_blocks: int) -> BlockSet:
        """Have the partition workers call ``loader(i)`` for ``i < n_blocks`` and keep the blocks.

        Block ``i`` lives in partition ``i % n_partitions`` (one long-lived worker process
        each). A partition whose loading failed is loaded again, at most ``retries`` times;
        a dead worker is replaced first.

        Parameters
        ----------
        loader : callable
            A picklable function: ``loader(i)`` builds block ``i``.
        n_blocks : int
            The number of blocks.

        Returns
        -------
        BlockSet
            The handle on the blocks, for :meth:`map_blocks`, :meth:`sum_blocks`
            and :meth:`release`.

        Examples
        --------
        >>> from connscale.engines import LocalEngine
        >>> engine = LocalEngine(n_jobs=2)  # doctest: +SKIP
        >>> blocks = engine.load_blocks(float, 4)  # block i is float(i)
        >>> blocks.n_blocks
        4
        >>> engine.release(blocks)
        """
        n_blocks = check_int(n_blocks, "n_blocks", minimum=1)
        token = next(_TOKENS)
        n_part = self._n_partitions(n_blocks)
        budget = [self.retries] * n_part
        todo = list(range(n_part))
        while todo:
            futures = {
                p: self._partition(p).submit(
                    _store_blocks, token, loader, list(range(p, n_blocks, n_part))
                )
                for p in todo
            }
            todo = []
            for p, future in futures.items():
                try:
                    future.result()
                except Exception as exc:
                    if budget[p] == 0:
                        raise
                    budget[p] -= 1
                    if isinstance(exc, BrokenProcessPool):
                        self._reload(token, p)
                    todo.append(p)
        self._loaders[token] = (loader, n_blocks)
        return BlockSet(n_blocks, token)

    def _block_results(self, blocks: BlockSet, func: Callable, args: tuple) -> list:
        if blocks.handle not in self._loaders:
            raise ValueError("These blocks were released or belong to another engine.")
        outputs = self._run_partitions(blocks.handle, blocks.n_blocks, _apply_blocks, func, args)
        ordered: list = [None] * blocks.n_blocks
        for part in outputs:
            for i, value in part:
                ordered[i] = value
        return ordered

    def map_blocks(self, blocks: BlockSet, func: Callable, *args) -> list:
        """Return ``[func(block, *args) for block in blocks]``, in block order.

        Each partition worker applies ``func`` to its own blocks; a partition that failed
        is run again, at most ``retries`` times (when its worker died, the worker is
        replaced and its blocks loaded again first).

        Parameters
        ----------
        blocks : BlockSet
            From :meth:`load_blocks`.
        func : callable
            A picklable function ``func(block, *args)``.
        *args
            Sent to each partition worker once for the call.

        Returns
        -------
        list
            One result per block, in block order.

        Examples
        --------
        >>> from connscale.engines import LocalEngine
        >>> engine = LocalEngine(n_jobs=2)  # doctest: +SKIP
        >>> blocks = engine.load_blocks(float, 4)  # block i is float(i)
        >>> engine.map_blocks(blocks, pow, 2)
        [0.0, 1.0, 4.0, 9.0]
        >>> engine.release(blocks)
        """
        return self._block_results(blocks, func, args)

    def sum_blocks(self, blocks: BlockSet, func: Callable, *args) -> Any:
        """Return ``sum(func(block, *args) for block in blocks)``, by tree reduction.

        The values are computed as in :meth:`map_blocks` and summed here by
        :func:`~connscale.engines.base.tree_sum`.

        Parameters
        ----------
        blocks : BlockSet
            From :meth:`load_blocks`.
        func : callable
            A picklable function ``func(block, *args)``.
        *args
            Sent to each partition worker once for the call.

        Returns
        -------
        object
            The sum of the blocks' results, bitwise the serial engine's.

        Examples
        --------
        >>> from connscale.engines import LocalEngine
        >>> engine = LocalEngine(n_jobs=2)  # doctest: +SKIP
        >>> blocks = engine.load_blocks(float, 4)  # block i is float(i)
        >>> engine.sum_blocks(blocks, pow, 2)
        14.0
        >>> engine.release(blocks)
        """
        return tree_sum(self._block_results(blocks, func, args))

    def release(self, blocks: BlockSet) -> None:
        """Drop the blocks from the partition workers (nothing when already released).

        Parameters
        ----------
        blocks : BlockSet
            From :meth:`load_blocks`.

        Examples
        --------
        >>> from connscale.engines import LocalEngine
        >>> engine = LocalEngine(n_jobs=2)  # doctest: +SKIP
        >>> blocks = engine.load_blocks(float, 4)
        >>> engine.release(blocks)
        >>> engine.map_blocks(blocks, pow, 2)
        Traceback (most recent call last):
        ...
        ValueError: These blocks were released or belong to another engine.
        """
        token = blocks.handle
        if self._loaders.pop(token, None) is None:
            return
        for executor in self._partitions:
            if executor is not None:
                try:
                    executor.submit(_drop_blocks, token).result()
                except BrokenProcessPool:
                    pass

    def close(self) -> None:
        """Shut down the task and partition worker processes, waiting for them.

        The blocks the workers held are gone; a later call starts new workers.

        Examples
        --------
        >>> from connscale.engines import LocalEngine
        >>> engine = LocalEngine(n_jobs=2)
        >>> engine.map(abs, [-1, -2])
        [1, 2]
        >>> engine.close()  # or use the engine as a context manager
        """
        for s, executor in enumerate(self._slots):
            if executor is not None:
                executor.shutdown(wait=True, cancel_futures=True)
                self._slots[s] = None
        for p, executor in enumerate(self._partitions):
            if executor is not None:
                executor.shutdown(wait=True, cancel_futures=True)
                self._partitions[p] = None
        self._loaders.clear()

    def __repr__(self) -> str:
        return (
            f"LocalEngine(n_jobs={self.n_jobs}, retries={self.retries}, context={self.context!r})"
        )
