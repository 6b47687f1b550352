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
* A task that raises is retried up to ``retries`` times. A worker process
  that dies is replaced: a partition worker's blocks are rebuilt from the
  loader and its task retried within its budget; a dead ``map`` worker
  breaks the whole pool, so the pool is restarted and the unfinished tasks
  resubmitted, at most ``retries * len(items)`` times.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from connscale._validation import check_int, check_option
from connscale.engines.base import BlockSet, Engine, tree_sum

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


def _resolve_n_jobs(n_jobs: int | None) -> int:
    cpus = os.cpu_count() or 1
    if n_jobs is None:
        return cpus
    n_jobs = check_int(n_jobs, "n_jobs")
    if n_jobs == 0 or n_jobs < -cpus:
        raise ValueError(
            f"'n_jobs' must be a positive number of processes, or -1 for all "
            f"{cpus} cores (-2 for all but one, ...); got {n_jobs}."
        )
    return n_jobs if n_jobs > 0 else cpus + 1 + n_jobs


class LocalEngine(Engine):
    """Run tasks in worker processes on this machine.

    Parameters
    ----------
    n_jobs : int or None, default=None
        Number of worker processes; None or -1 uses every core.
    retries : int, default=1
        How many times a failed task is run again before its error is raised.
    context : {'forkserver', 'spawn'} or None, default=None
        How worker processes start; None picks 'forkserver' where the
        platform has it, else 'spawn' (never ``fork``: unsafe with CUDA and
        threads).
    """

    name = "local"

    def __init__(self, n_jobs: int | None = None, *, retries: int = 1,
                 context: str | None = None) -> None:
        self.n_jobs = _resolve_n_jobs(n_jobs)
        self.retries = check_int(retries, "retries", minimum=0)
        if context is None:
            available = multiprocessing.get_all_start_methods()
            context = "forkserver" if "forkserver" in available else "spawn"
        self.context = check_option(context, "context", {"spawn", "forkserver"})
        self._mp = multiprocessing.get_context(self.context)
        if self.context == "forkserver":
            # Imported once in the server, inherited by every worker it forks.
            self._mp.set_forkserver_preload(["__main__", "connscale.engines.local"])
        self._pool: ProcessPoolExecutor | None = None
        self._partitions: list[ProcessPoolExecutor | None] = [None] * self.n_jobs
        self._loaders: dict[int, tuple[Callable, int]] = {}

    # ---- one task per item ---------------------------------------------
    def _get_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.n_jobs, mp_context=self._mp)
        return self._pool

    def map(self, func: Callable, items: Sequence) -> list:
        items = list(items)
        results: list = [None] * len(items)
        pending = {i: self.retries for i in range(len(items))}
        # A dying worker breaks the whole pool and fails every unfinished
        # task, so crashes are charged to a shared budget (as many as the
        # tasks could have had between them), not to each task.
        rebuilds = self.retries * len(items)
        while pending:
            pool = self._get_pool()
            futures = {i: pool.submit(func, items[i]) for i in pending}
            broken = None
            for i, future in futures.items():
                try:
                    results[i] = future.result()
                    del pending[i]
                except BrokenProcessPool as exc:
                    broken = exc
                except Exception:
                    if pending[i] == 0:
                        raise
                    pending[i] -= 1
            if broken is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool = None
                if rebuilds == 0:
                    raise broken
                rebuilds -= 1
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
        n_blocks = check_int(n_blocks, "n_blocks", minimum=1)
        token = next(_TOKENS)
        n_part = self._n_partitions(n_blocks)
        budget = [self.retries] * n_part
        todo = list(range(n_part))
        while todo:
            futures = {
                p: self._partition(p).submit(
                    _store_blocks, token, loader, list(range(p, n_blocks, n_part)))
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
        return self._block_results(blocks, func, args)

    def sum_blocks(self, blocks: BlockSet, func: Callable, *args):
        return tree_sum(self._block_results(blocks, func, args))

    def release(self, blocks: BlockSet) -> None:
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
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        for p, executor in enumerate(self._partitions):
            if executor is not None:
                executor.shutdown(wait=True, cancel_futures=True)
                self._partitions[p] = None
        self._loaders.clear()

    def __repr__(self) -> str:
        return f"LocalEngine(n_jobs={self.n_jobs}, retries={self.retries}, context={self.context!r})"
