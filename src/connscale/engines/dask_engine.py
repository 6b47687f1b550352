"""Dask distributed engine: a LocalCluster or an existing scheduler.

* ``map``: one task per item (a ``dask.bag`` of one-item partitions,
  computed with ``retries=retries``); results are fetched as tasks finish
  and returned in input order. Bag partitions are data-producing tasks,
  which the scheduler queues and hands out only to a worker with a free
  thread (``worker-saturation``), so each single-threaded worker of the
  LocalCluster holds just the task it runs: when a worker dies, Dask
  charges the death (``allowed-failures``) to that task alone, not to
  tasks that were waiting behind it.
* ``load_blocks``: one ``loader(i)`` task per block; the futures stay on the
  workers that computed them, so blocks never pass through the driver (a
  lost block is recomputed from its loader by Dask).
* ``map_blocks``/``sum_blocks``: ``args`` go out as one task that returns
  them (``_args``), on which every block task ``func(block, *args)``
  depends: each worker fetches them once, and a worker that dies takes no
  data with it that Dask cannot rebuild (scattered data cannot be; a task
  is recomputed from its arguments, which the scheduler keeps). The
  futures are released after the call. ``sum_blocks`` adds the per-block
  futures pairwise on the workers, (0+1), (2+3), ..., level by level: the
  order of :func:`connscale.engines.base.tree_sum`, so the sum is bitwise
  the serial engine's.
* Every task is submitted with ``retries=retries`` and ``pure=False``
  (tasks may have side effects, e.g. write a subject's output). On the
  LocalCluster started here a task whose worker dies is tried again until
  it has been tried ``1 + retries`` times (``allowed-failures = retries``),
  the rule of the other engines. An external scheduler applies its own
  ``distributed.scheduler.allowed-failures`` (default 3).
* ``cluster='slurm'`` (or a :class:`~connscale.engines.slurm.SlurmJobs`)
  starts a ``dask-jobqueue`` SLURMCluster whose scheduler runs here, with
  the LocalCluster's ``allowed-failures`` and ``worker-saturation``:
  ``map`` and ``load_blocks`` first scale it to the jobs their tasks need
  (:meth:`~connscale.engines.slurm.SlurmJobs.jobs_for`), and a job that
  SLURM ends is resubmitted (:class:`~connscale.engines.slurm.JobKeeper`).
* The LocalCluster listens on 127.0.0.1 only (scheduler, workers,
  nannies) and starts no dashboard unless ``dashboard_address`` is given.
* ``readers`` (a :class:`~connscale.engines.dask_readers.WorkerReaders`,
  on a cluster of this host whose workers may have children, as
  :func:`connscale.bidsapp.gpus.gpu_cluster` starts them): each worker reads
  its tasks' inputs (:attr:`~connscale.engines.batch.Task.prepare`) in
  reader processes of its own and computes one task at a time; the arrays
  read reach the worker through shared memory, not through Dask.
"""

from __future__ import annotations

import functools
import operator
import uuid
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from connscale._validation import check_int, resolve_n_jobs
from connscale.engines.base import (
    BlockSet,
    Engine,
    TaskFailure,
    check_errors,
    one_line,
)
from connscale.engines.slurm import JobKeeper, SlurmJobs, check_job_script, start_slurm_cluster

# Every listener of a LocalCluster started here.
_LOCAL_HOST = "127.0.0.1"
#: Where a scheduler started here listens, and its HTTP server (``/health``).
LOCAL_SCHEDULER = {"host": _LOCAL_HOST, "dashboard_address": f"{_LOCAL_HOST}:0"}


def http_routes_copy() -> dict:
    """Return Dask settings giving a scheduler about to start its own list of HTTP routes.

    A scheduler with a dashboard but without bokeh appends its "missing
    bokeh" page to the list Dask's configuration holds (distributed's
    ``Scheduler.start_http_server``), which every later scheduler of this
    process would then serve: set these while a scheduler starts.
    """
    import dask

    return {
        "distributed.scheduler.http.routes": list(
            dask.config.get("distributed.scheduler.http.routes")
        )
    }


#: What Dask's nannies would set in a worker's environment (and in this process's:
#: a nanny updates ``os.environ`` before it spawns) that the runs must not have.
#: ``MALLOC_TRIM_THRESHOLD_`` (Dask's default 65,536) turns off glibc's dynamic mmap
#: threshold, so every block over 128 kB (a volume, a run's array) is a fresh
#: ``mmap`` whose pages fault in one by one: 400 volume-sized arrays take 48× the
#: page faults, 0.2–0.8 → 1.5–1.9 s on the 2-core machine; a GPU worker's reader
#: processes inherit it (RESULTS §32).
NANNY_ENVIRON_DROPPED = ("MALLOC_TRIM_THRESHOLD_",)


def nanny_environ() -> dict:
    """Return Dask settings giving the nannies started here their environment for the runs.

    Dask's ``distributed.nanny.pre-spawn-environ`` without
    :data:`NANNY_ENVIRON_DROPPED` (its one-thread BLAS settings are kept: the
    workers' cores are their readers'); set while a local cluster starts. A
    variable the caller's own environment sets is inherited as before.
    """
    import dask

    environ = dask.config.get("distributed.nanny.pre-spawn-environ", default={}) or {}
    kept = {k: v for k, v in environ.items() if k not in NANNY_ENVIRON_DROPPED}
    return {"distributed.nanny.pre-spawn-environ": kept}


_NEVER = "3650 days"


if TYPE_CHECKING:
    import distributed

    from connscale.engines.dask_readers import WorkerReaders


def _import_distributed() -> ModuleType:
    try:
        import distributed
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(
            "The 'dask' engine needs dask.distributed: pip install connscale[dask]"
        ) from exc
    return distributed


def _call_block(block: Any, func: Callable, args: tuple) -> Any:
    return func(block, *args)


def _args(args: tuple) -> tuple:
    return args


def _run_partition(part: list, func: Callable) -> list:
    return [func(item) for item in part]


class DaskEngine(Engine):
    """Run tasks on a Dask distributed cluster.

    Parameters
    ----------
    cluster : str, SlurmJobs, distributed.Client or None, default=None
        Scheduler address (``'tcp://host:8786'``) or an existing client.
        None starts a ``LocalCluster`` of ``n_jobs`` single-threaded worker
        processes, ``'slurm'`` (the default jobs) or a
        :class:`~connscale.engines.slurm.SlurmJobs` a SLURMCluster, closed
        again by :meth:`close`.
    n_jobs : int or None, default=None
        Workers of the LocalCluster (None: every core); ignored with
        ``cluster`` (with SLURM, :attr:`n_jobs` is the workers of
        ``max_jobs`` jobs, None when unbounded).
    retries : int, default=1
        A task that raised is run again this many times; on a cluster started
        here (LocalCluster, SLURM), so is a task whose worker died
        (``allowed-failures``).
    dashboard_address : str or None, default=None
        Address of the LocalCluster's dashboard, e.g. ``'127.0.0.1:8787'``
        (it listens where told); None starts none. Ignored with ``cluster``.
    readers : WorkerReaders or None, default=None
        Registered on every worker (those that join later too) and removed
        by :meth:`close`: ``map`` then reads each task's inputs in the
        worker's readers and computes one task at a time per worker
        (:mod:`connscale.engines.dask_readers`).

    Attributes
    ----------
    client : distributed.Client
        The client of the cluster (None once closed).
    n_jobs : int or None
        Number of workers (with SLURM, of ``max_jobs`` jobs; None when unbounded).
    retries : int
        How many times a failed task is run again.

    Examples
    --------
    A LocalCluster of two single-threaded worker processes (it takes a few
    seconds to start), closed on leaving the block:

    >>> import math
    >>> from connscale.engines import DaskEngine
    >>> with DaskEngine(n_jobs=2) as engine:  # doctest: +SKIP
    ...     engine.map(math.sqrt, [4.0, 9.0, 16.0])
    [2.0, 3.0, 4.0]

    The examples of the methods use such an ``engine``:

    >>> engine
    DaskEngine(n_workers=2, retries=1)
    >>> engine.map(math.sqrt, [4.0, 9.0, 16.0])
    [2.0, 3.0, 4.0]
    """

    name = "dask"

    def __init__(
        self,
        cluster: str | SlurmJobs | distributed.Client | None = None,
        *,
        n_jobs: int | None = None,
        retries: int = 1,
        dashboard_address: str | None = None,
        readers: WorkerReaders | None = None,
    ) -> None:
        distributed = _import_distributed()
        self._distributed = distributed
        self.retries = check_int(retries, "retries", minimum=0)
        self.client = None
        self._cluster = None
        self._config = None
        self._own_client = True
        self._keeper = None
        self._readers = None
        if cluster is None:
            self._start_local(n_jobs, dashboard_address)
        elif cluster == "slurm" or isinstance(cluster, SlurmJobs):
            self._start_slurm(SlurmJobs() if cluster == "slurm" else cluster)
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
                "such as 'tcp://host:8786', 'slurm' or a SlurmJobs (start a SLURMCluster) "
                f"or a distributed.Client; got {cluster!r}."
            )
        if readers is not None:
            self._register_readers(readers)

    def _register_readers(self, readers: WorkerReaders) -> None:
        """Register the readers plugin on the workers (closing the engine if that fails)."""
        try:
            self.client.register_plugin(readers)
        except BaseException:
            self.close()
            raise
        self._readers = readers

    def _start_local(self, n_jobs: int | None, dashboard_address: str | None) -> None:
        """Start a LocalCluster of ``n_jobs`` single-threaded workers and its client."""
        import dask

        self.n_jobs = resolve_n_jobs(n_jobs)
        # While this engine runs: a worker that dies is restarted by its
        # nanny, and the LocalCluster must not close that nanny for good
        # when, ``lost-worker-timeout`` after an earlier death, it finds
        # the worker down again (restarting after a later death): the
        # cluster would be left without workers and every task waiting.
        self._config = dask.config.set({"distributed.deploy.lost-worker-timeout": _NEVER})
        try:
            # The scheduler runs in this process and reads these when it starts,
            # the nannies theirs.
            with dask.config.set({**self._scheduler_settings(), **nanny_environ()}):
                self._cluster = self._distributed.LocalCluster(
                    n_workers=self.n_jobs,
                    threads_per_worker=1,
                    processes=True,
                    host=_LOCAL_HOST,
                    dashboard_address=dashboard_address,
                    worker_dashboard_address=None,
                    silence_logs=40,
                    # Without a dashboard the scheduler still serves
                    # /health and /metrics: on a free localhost port.
                    scheduler_kwargs=None
                    if dashboard_address
                    else {"dashboard_address": f"{_LOCAL_HOST}:0"},
                )
            self.client = self._distributed.Client(self._cluster)
        except BaseException:
            self.close()
            raise

    def _start_slurm(self, jobs: SlurmJobs) -> None:
        """Start a SLURMCluster of no job yet (``map`` scales it) and its client."""
        import dask

        self.slurm = jobs
        # Workers when every job runs (None: as many as the tasks need).
        self.n_jobs = None if jobs.max_jobs is None else jobs.max_jobs * jobs.workers_per_job
        # The JobKeeper replaces a job that ended; the cluster must not also
        # close, ``lost-worker-timeout`` after the first job's end, the job
        # submitted in its place under the same name before it has started.
        self._config = dask.config.set({"distributed.deploy.lost-worker-timeout": _NEVER})
        try:
            with dask.config.set(self._scheduler_settings()):
                self._cluster = start_slurm_cluster(jobs)
            check_job_script(self._cluster)  # a bad option fails here, not in the jobs
            self._keeper = JobKeeper(self._cluster)
            self.client = self._distributed.Client(self._cluster)
        except BaseException:
            self.close()
            raise

    def _scheduler_settings(self) -> dict:
        """Return the Dask settings the scheduler started here reads (set while it starts)."""
        return {
            "distributed.scheduler.allowed-failures": self.retries,
            "distributed.scheduler.worker-saturation": 1.0,
            **http_routes_copy(),
        }

    def map(
        self,
        func: Callable,
        items: Sequence,
        *,
        errors: str = "raise",
        on_result: Callable[[int, Any], None] | None = None,
    ) -> list:
        """Run ``func(item)`` for every item on the workers, in input order.

        A task that failed every attempt (``KilledWorker`` when its workers
        died) raises with ``errors='raise'``, after the others are done, or
        is a :class:`~connscale.engines.base.TaskFailure` with
        ``errors='return'``.

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
        >>> from connscale.engines import DaskEngine
        >>> engine = DaskEngine(n_jobs=2)  # doctest: +SKIP
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
        import dask.bag

        errors = check_errors(errors)
        items = list(items)
        if not items:
            return []
        if self._keeper is not None:  # SLURM: the jobs these tasks need
            self._keeper.scale(self.slurm.jobs_for(len(items)))
        if self._readers is not None:
            from connscale.engines.dask_readers import read_then_run

            func = functools.partial(read_then_run, func)
        bag = dask.bag.from_sequence(items, partition_size=1).map_partitions(
            _run_partition, func, token=f"connscale-map-{uuid.uuid4().hex}"
        )
        futures = self.client.compute(bag.to_delayed(), retries=self.retries)
        position = {future.key: i for i, future in enumerate(futures)}
        results: list = [None] * len(items)
        failed: dict[int, BaseException] = {}
        try:
            # Fetched as they finish: a result left on a worker that dies
            # later would be recomputed (its side effects done twice).
            for future in self._distributed.as_completed(futures):
                i = position[future.key]
                if future.status == "error":
                    failed[i] = future.exception()
                else:
                    results[i] = future.result()[0]
                    if on_result is not None:
                        on_result(i, results[i])
                future.release()
        finally:
            for future in futures:
                future.release()
        if errors == "raise" and failed:
            raise failed[min(failed)]
        for i, error in failed.items():
            if isinstance(error, self._distributed.KilledWorker):
                attempts = getattr(error, "allowed_failures", self.retries) + 1
                reason = (
                    f"the worker process died while running the task, on each of "
                    f"{attempts} attempts (KilledWorker)"
                )
                results[i] = TaskFailure(reason, attempts, True)
            else:
                results[i] = TaskFailure(
                    one_line(f"{type(error).__name__}: {error}"), self.retries + 1, False
                )
            if on_result is not None:
                on_result(i, results[i])
        return results

    def load_blocks(self, loader: Callable[[int], Any], n_blocks: int) -> BlockSet:
        """Have the workers call ``loader(i)`` for ``i < n_blocks`` and keep the blocks.

        Each block is a future held on the worker that loaded it; a load that raised is
        tried again ``retries`` times. When one still fails, the blocks are released and
        its error is raised.

        Parameters
        ----------
        loader : callable
            A picklable function: ``loader(i)`` builds block ``i``.
        n_blocks : int
            The number of blocks.

        Returns
        -------
        BlockSet
            The handle on the blocks (their futures), for :meth:`map_blocks`,
            :meth:`sum_blocks` and :meth:`release`.

        Examples
        --------
        >>> from connscale.engines import DaskEngine
        >>> engine = DaskEngine(n_jobs=2)  # doctest: +SKIP
        >>> blocks = engine.load_blocks(float, 4)  # block i is float(i)
        >>> blocks.n_blocks
        4
        >>> engine.release(blocks)
        """
        n_blocks = check_int(n_blocks, "n_blocks", minimum=1)
        if self._keeper is not None:
            self._keeper.scale(self.slurm.jobs_for(n_blocks))
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
        args_future = self.client.submit(_args, args, pure=False, retries=self.retries)
        futures = [
            self.client.submit(
                _call_block, block, func, args_future, pure=False, retries=self.retries
            )
            for block in blocks.handle
        ]
        return futures, args_future

    def map_blocks(self, blocks: BlockSet, func: Callable, *args) -> list:
        """Return ``[func(block, *args) for block in blocks]``, in block order.

        ``args`` go to the workers once, as one future, released with the results' futures.

        Parameters
        ----------
        blocks : BlockSet
            From :meth:`load_blocks`.
        func : callable
            A picklable function ``func(block, *args)``.
        *args
            Sent to the workers once for the call.

        Returns
        -------
        list
            One result per block, in block order.

        Examples
        --------
        >>> from connscale.engines import DaskEngine
        >>> engine = DaskEngine(n_jobs=2)  # doctest: +SKIP
        >>> blocks = engine.load_blocks(float, 4)  # block i is float(i)
        >>> engine.map_blocks(blocks, pow, 2)
        [0.0, 1.0, 4.0, 9.0]
        >>> engine.release(blocks)
        """
        futures, args_future = self._submit_blocks(blocks, func, args)
        try:
            return self.client.gather(futures)
        finally:
            for future in futures:
                future.release()
            args_future.release()

    def sum_blocks(self, blocks: BlockSet, func: Callable, *args) -> Any:
        """Return ``sum(func(block, *args) for block in blocks)``, by tree reduction on the workers.

        Values are added in pairs on the cluster until one is left; the intermediate
        futures and ``args`` are released after it.

        Parameters
        ----------
        blocks : BlockSet
            From :meth:`load_blocks`.
        func : callable
            A picklable function ``func(block, *args)``.
        *args
            Sent to the workers once for the call.

        Returns
        -------
        object
            The sum of the blocks' results, bitwise the serial engine's.

        Examples
        --------
        >>> from connscale.engines import DaskEngine
        >>> engine = DaskEngine(n_jobs=2)  # doctest: +SKIP
        >>> blocks = engine.load_blocks(float, 4)  # block i is float(i)
        >>> engine.sum_blocks(blocks, pow, 2)
        14.0
        >>> engine.release(blocks)
        """
        futures, args_future = self._submit_blocks(blocks, func, args)
        level = futures
        made = list(futures)
        try:
            while len(level) > 1:
                paired = [
                    self.client.submit(
                        operator.add, level[i], level[i + 1], pure=False, retries=self.retries
                    )
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
        """Release the blocks' futures (nothing when already released).

        Parameters
        ----------
        blocks : BlockSet
            From :meth:`load_blocks`.

        Examples
        --------
        >>> from connscale.engines import DaskEngine
        >>> engine = DaskEngine(n_jobs=2)  # doctest: +SKIP
        >>> blocks = engine.load_blocks(float, 4)
        >>> engine.release(blocks)
        >>> engine.map_blocks(blocks, pow, 2)
        Traceback (most recent call last):
        ...
        ValueError: These blocks were released.
        """
        for future in blocks.handle or []:
            future.release()
        blocks.handle = []

    def close(self) -> None:
        """Close the client and the LocalCluster started here; restore Dask's settings.

        A ``distributed.Client`` the caller passed is left open; the readers
        plugin registered here is removed from its workers.

        Examples
        --------
        >>> from connscale.engines import DaskEngine
        >>> engine = DaskEngine(n_jobs=2)  # doctest: +SKIP
        >>> borrowed = DaskEngine(engine.client)  # on the caller's client
        >>> borrowed.close()
        >>> engine.client.status  # left open
        'running'
        >>> engine.close()  # doctest: +SKIP
        """
        readers, self._readers = self._readers, None
        try:
            if readers is not None and getattr(self, "client", None) is not None:
                self.client.unregister_worker_plugin(readers.name)
        finally:
            self._close_cluster()

    def _close_cluster(self) -> None:
        """Close the client and the cluster started here; restore Dask's settings."""
        if self._own_client and getattr(self, "client", None) is not None:
            self.client.close()
        if self._keeper is not None:
            self._keeper.stop()
            self._keeper = None
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None
        if self._config is not None:
            self._config.__exit__(None, None, None)  # the user's setting again
            self._config = None
        self.client = None

    def __repr__(self) -> str:
        if self._keeper is not None:
            return f"DaskEngine(slurm={self.slurm!r}, retries={self.retries})"
        if self._readers is not None:
            kind = "processes" if self._readers.processes else "threads"
            return (
                f"DaskEngine(n_workers={self.n_jobs}, retries={self.retries}, "
                f"readers={self._readers.readers} {kind} per worker)"
            )
        return f"DaskEngine(n_workers={self.n_jobs}, retries={self.retries})"
