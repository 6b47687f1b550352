"""Dask distributed engine: a LocalCluster or an existing scheduler.

* ``map``: ``client.map(func, items)`` then ``client.gather`` (input order).
* ``load_blocks``: one ``loader(i)`` task per block; the futures stay on the
  workers that computed them, so blocks never pass through the driver (a
  lost block is recomputed from its loader by Dask).
* ``map_blocks``/``sum_blocks``: ``args`` are scattered (broadcast) once per
  call, one task ``func(block, *args)`` per block runs where the block
  lives; the arguments' future is released after the call. ``sum_blocks``
  adds the per-block futures pairwise on the workers, (0+1), (2+3), ...,
  level by level: the order of :func:`connscale.engines.base.tree_sum`, so
  the sum is bitwise the serial engine's.
* Every task is submitted with ``retries=retries`` and ``pure=False``
  (tasks may have side effects, e.g. write a subject's output).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

from connscale._validation import check_int
from connscale.engines.base import BlockSet, Engine


def _import_distributed():
    try:
        import distributed
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(
            "The 'dask' engine needs dask.distributed: pip install connscale[dask]"
        ) from exc
    return distributed


def _call_block(block, func: Callable, args: tuple):
    return func(block, *args)


class DaskEngine(Engine):
    """Run tasks on a Dask distributed cluster.

    Parameters
    ----------
    cluster : str, distributed.Client or None, default=None
        Scheduler address (``'tcp://host:8786'``) or an existing client.
        None starts a ``LocalCluster`` of ``n_jobs`` single-threaded worker
        processes, closed again by :meth:`close`.
    n_jobs : int or None, default=None
        Workers of the LocalCluster (None: every core); ignored with
        ``cluster``.
    retries : int, default=1
        Dask re-runs a failed task this many times before raising its error.
    """

    name = "dask"

    def __init__(self, cluster=None, *, n_jobs: int | None = None, retries: int = 1) -> None:
        distributed = _import_distributed()
        self._distributed = distributed
        from connscale.engines.local import _resolve_n_jobs

        self.retries = check_int(retries, "retries", minimum=0)
        self._cluster = None
        self._own_client = True
        if cluster is None:
            self.n_jobs = _resolve_n_jobs(n_jobs)
            self._cluster = distributed.LocalCluster(
                n_workers=self.n_jobs, threads_per_worker=1, processes=True,
                dashboard_address=":0", silence_logs=40,  # any free port: no clash on 8787
            )
            self.client = distributed.Client(self._cluster)
        elif isinstance(cluster, distributed.Client):
            self.client = cluster
            self._own_client = False
            self.n_jobs = len(cluster.scheduler_info()["workers"])
        elif isinstance(cluster, str):
            self.client = distributed.Client(cluster)
            self.n_jobs = len(self.client.scheduler_info()["workers"])
        else:
            raise ValueError(
                "'cluster' must be None (start a LocalCluster), a scheduler address "
                f"such as 'tcp://host:8786' or a distributed.Client; got {cluster!r}."
            )

    def map(self, func: Callable, items: Sequence) -> list:
        items = list(items)
        if not items:
            return []
        futures = self.client.map(func, items, pure=False, retries=self.retries)
        try:
            return self.client.gather(futures)
        finally:
            for future in futures:
                future.release()

    def load_blocks(self, loader: Callable[[int], Any], n_blocks: int) -> BlockSet:
        n_blocks = check_int(n_blocks, "n_blocks", minimum=1)
        futures = self.client.map(loader, range(n_blocks), pure=False, retries=self.retries)
        self._distributed.wait(futures)
        errors = [f for f in futures if f.status == "error"]
        if errors:
            try:
                errors[0].result()
            finally:
                self.release(BlockSet(n_blocks, futures))
        return BlockSet(n_blocks, futures)

    def _submit_blocks(self, blocks: BlockSet, func: Callable, args: tuple) -> tuple[list, Any]:
        if not blocks.handle:
            raise ValueError("These blocks were released.")
        [args_future] = self.client.scatter([args], broadcast=True, hash=False)
        futures = [
            self.client.submit(_call_block, block, func, args_future,
                               pure=False, retries=self.retries)
            for block in blocks.handle
        ]
        return futures, args_future

    def map_blocks(self, blocks: BlockSet, func: Callable, *args) -> list:
        futures, args_future = self._submit_blocks(blocks, func, args)
        try:
            return self.client.gather(futures)
        finally:
            for future in futures:
                future.release()
            args_future.release()

    def sum_blocks(self, blocks: BlockSet, func: Callable, *args):
        futures, args_future = self._submit_blocks(blocks, func, args)
        level = futures
        made = list(futures)
        try:
            while len(level) > 1:
                paired = [
                    self.client.submit(operator.add, level[i], level[i + 1],
                                       pure=False, retries=self.retries)
                    for i in range(0, len(level) - 1, 2)
                ]
                if len(level) % 2:
                    paired.append(level[-1])
                made.extend(paired)
                level = paired
            return level[0].result()
        finally:
            for future in {future.key: future for future in made}.values():
                future.release()
            args_future.release()

    def release(self, blocks: BlockSet) -> None:
        for future in blocks.handle or []:
            future.release()
        blocks.handle = []

    def close(self) -> None:
        if getattr(self, "client", None) is None:
            return
        if self._own_client:
            self.client.close()
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None
        self.client = None

    def __repr__(self) -> str:
        return f"DaskEngine(n_workers={self.n_jobs}, retries={self.retries})"
