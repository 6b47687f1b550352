"""Apache Spark engine (pyspark): ``local[N]`` or any master URL.

* ``map``: one Spark job per item (``sc.parallelize([item], 1).map(func)``),
  submitted from ``n_jobs`` driver threads so that Spark runs them side by
  side; results in input order. One job per item, not one job for all:
  a job fails as a whole, so a task that fails every attempt (a worker that
  dies each time) would lose the results of every other item.
* ``load_blocks``: ``sc.parallelize(range(n_blocks), n_blocks).map(loader)``,
  cached and materialised with ``count()``: each executor builds and keeps
  its own blocks (partition i holds block i); a lost partition is rebuilt
  from the loader by Spark.
* ``map_blocks``: ``args`` go out once as a broadcast variable,
  ``rdd.map(lambda b: func(b, *bc.value)).collect()``, then
  ``bc.unpersist()``.
* ``sum_blocks``: a pairwise tree on the executors - per-block values keyed
  by block index, then rounds of ``(i // 2) -> reduceByKey(add)`` until a
  few values are left, which the driver adds in the same pairwise order.
  This is exactly :func:`connscale.engines.base.tree_sum` (pairs are added
  as a + b or b + a, which floating point gives bitwise alike), so the sum
  equals the serial engine's bit for bit. ``RDD.treeReduce`` is not used:
  its grouping depends on the partition count and its shuffles add values
  in arrival order.
* Failed tasks are retried: ``spark.task.maxFailures = retries + 1``; a
  ``local[N]`` master becomes ``local[N, retries + 1]`` (plain ``local[N]``
  never retries). Spark counts an attempt whether the task raised or its
  Python worker died, so a task is tried ``1 + retries`` times either way.
"""

from __future__ import annotations

import math
import operator
import os
import re
import sys
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from types import ModuleType
from typing import TYPE_CHECKING, Any

from connscale._validation import check_int, resolve_n_jobs
from connscale.engines.base import (
    BlockSet,
    Engine,
    TaskFailure,
    check_errors,
    one_line,
    tree_sum,
)

# Rounds of pairwise adds run on the executors until at most this many
# values are left; the driver adds those.
_DRIVER_SUM_SIZE = 4


if TYPE_CHECKING:
    import pyspark
    import pyspark.sql


def _import_pyspark() -> ModuleType:
    try:
        import pyspark
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(
            "The 'spark' engine needs pyspark (and Java 17+): pip install connscale[spark]"
        ) from exc
    return pyspark


# What Spark reports when a task's Python worker process died.
_WORKER_DIED = "Python worker exited unexpectedly"


def _failure(error: BaseException, retries: int) -> TaskFailure:
    """Return a one-line :class:`TaskFailure` from a failed job's error."""
    text = str(error)
    match = re.search(r"failed (\d+) times", text)
    attempts = int(match.group(1)) if match else retries + 1
    if _WORKER_DIED in text:
        return TaskFailure(
            f"the worker process died while running the task, on each of "
            f"{attempts} attempts ({_WORKER_DIED})",
            attempts,
            True,
        )
    # A Python exception: its last 'SomeError: message' line of the traceback.
    lines = re.findall(r"^(\w[\w.]*(?:Error|Exception|Exit|Interrupt)\b.*)$", text, re.MULTILINE)
    reason = lines[-1] if lines else f"{type(error).__name__}: {one_line(text)}"
    return TaskFailure(one_line(reason.split(" SQLSTATE:")[0]), attempts, False)


def _local_master(master: str, retries: int) -> str:
    """``local``/``local[N]``/``local[*]`` -> ``local[N, retries + 1]``."""
    if retries == 0:
        return master
    if master == "local":
        return f"local[1,{retries + 1}]"
    match = re.fullmatch(r"local\[\s*(\*|\d+)\s*\]", master)
    if match:
        return f"local[{match.group(1)},{retries + 1}]"
    return master


class SparkEngine(Engine):
    """Run tasks on Apache Spark.

    Parameters
    ----------
    cluster : str, pyspark.SparkContext, pyspark.sql.SparkSession or None, default=None
        Master URL (``'local[*]'``, ``'local[2]'``, ``'spark://host:7077'``)
        or a running context/session (used as is, not stopped by
        :meth:`close`). None means ``local[n_jobs]`` (``local[*]`` when
        ``n_jobs`` is None).
    n_jobs : int or None, default=None
        Cores of the default local master.
    retries : int, default=1
        Spark re-runs a failed task this many times (``spark.task.maxFailures``).
    driver_memory : str, default='1g'
        ``spark.driver.memory`` of a context started here.

    Attributes
    ----------
    sc : pyspark.SparkContext
        The context the tasks run on (None once closed).
    master : str
        Its master URL, with the retries of a local master
        (``'local[2,2]'``).
    retries : int
        How many times a failed task is run again.

    Examples
    --------
    A ``local[2]`` master, stopped on leaving the block (Spark's JVM takes
    seconds to start; a process has one SparkContext, which an engine
    started while it runs uses and leaves running):

    >>> import math
    >>> from connscale.engines import SparkEngine
    >>> with SparkEngine(n_jobs=2) as engine:
    ...     engine.map(math.sqrt, [4.0, 9.0])
    [2.0, 3.0]
    """

    name = "spark"

    def __init__(
        self,
        cluster: str | pyspark.SparkContext | pyspark.sql.SparkSession | None = None,
        *,
        n_jobs: int | None = None,
        retries: int = 1,
        driver_memory: str = "1g",
    ) -> None:
        pyspark = _import_pyspark()
        self.retries = check_int(retries, "retries", minimum=0)
        self._own = False
        if isinstance(cluster, pyspark.SparkContext):
            self.sc = cluster
        elif cluster is not None and type(cluster).__name__ == "SparkSession":
            self.sc = cluster.sparkContext
        elif cluster is None or isinstance(cluster, str):
            if cluster is None:
                if n_jobs is None:
                    cluster = "local[*]"
                else:
                    cluster = f"local[{resolve_n_jobs(n_jobs)}]"
            self.sc = self._start(pyspark, cluster, driver_memory)
        else:
            raise ValueError(
                "'cluster' must be None, a Spark master URL such as 'local[*]' or "
                f"'spark://host:7077', or a SparkContext; got {cluster!r}."
            )
        self.master = self.sc.master

    @property
    def n_jobs(self) -> int:
        """Task slots Spark runs at once (``defaultParallelism``).

        Examples
        --------
        >>> from connscale.engines import SparkEngine
        >>> engine = SparkEngine(n_jobs=2)  # doctest: +SKIP
        >>> engine.n_jobs
        2
        """
        return int(self.sc.defaultParallelism)

    def _start(self, pyspark: ModuleType, master: str, driver_memory: str) -> pyspark.SparkContext:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        active = pyspark.SparkContext._active_spark_context
        if active is not None:
            # One context per process: reuse it (and leave it running).
            return active
        conf = (
            pyspark.SparkConf()
            .setMaster(_local_master(master, self.retries))
            .setAppName("connscale")
            .set("spark.task.maxFailures", str(self.retries + 1))
            .set("spark.driver.memory", driver_memory)
            .set("spark.ui.enabled", "false")
            .set("spark.ui.showConsoleProgress", "false")
            .set("spark.python.worker.reuse", "true")
        )
        if master.startswith("local"):
            # Forked Python workers inherit connscale and torch from the daemon.
            conf.set("spark.python.use.daemon", "true")
            conf.set("spark.python.daemon.module", "connscale.engines._spark_daemon")
        # pyspark warns, at its first jobs, about pandas versions it has not
        # been tested with; connscale does not use pyspark's pandas API.
        warnings.filterwarnings(
            "ignore", message=".*PySpark does not yet fully support pandas", category=FutureWarning
        )
        sc = pyspark.SparkContext(conf=conf)
        sc.setLogLevel("ERROR")
        self._own = True
        return sc

    def _run_one(self, func: Callable, item: Any) -> Any:
        return self.sc.parallelize([item], 1).map(func).collect()[0]

    def map(
        self,
        func: Callable,
        items: Sequence,
        *,
        errors: str = "raise",
        on_result: Callable[[int, Any], None] | None = None,
    ) -> list:
        """Run ``func(item)`` for every item, one Spark job each; results in order.

        A task that failed every attempt raises its job's error with
        ``errors='raise'`` (after the other jobs are done), or is a
        :class:`~connscale.engines.base.TaskFailure` with
        ``errors='return'``.

        Parameters
        ----------
        func : callable
            A picklable function of one item.
        items : sequence
            One task per item.
        errors : {'raise', 'return'}, default='raise'
            Raise the first failure, or return a
            :class:`~connscale.engines.base.TaskFailure` in its place.
        on_result : callable or None, default=None
            Called in this process as ``on_result(index, result)`` as each
            task's result is final (in the order the jobs finish).

        Returns
        -------
        list
            The results (or :class:`~connscale.engines.base.TaskFailure`) in
            input order.

        Examples
        --------
        >>> import math
        >>> from connscale.engines import SparkEngine
        >>> engine = SparkEngine(n_jobs=2)  # doctest: +SKIP
        >>> finished = []
        >>> engine.map(math.sqrt, [4.0, 9.0], on_result=lambda i, r: finished.append(i))
        [2.0, 3.0]
        >>> sorted(finished)
        [0, 1]
        >>> results = engine.map(math.sqrt, [4.0, -1.0], errors="return")
        >>> results[1].reason, results[1].worker_lost
        ('ValueError: math domain error', False)
        """
        errors = check_errors(errors)
        items = list(items)
        if not items:
            return []
        with ThreadPoolExecutor(max(1, min(len(items), self.n_jobs))) as pool:
            futures = [pool.submit(self._run_one, func, item) for item in items]
            position = {future: i for i, future in enumerate(futures)}
            for future in as_completed(futures):
                if on_result is not None and future.exception() is None:
                    on_result(position[future], future.result())
        results: list = []
        for future in futures:
            error = future.exception()
            if error is None:
                results.append(future.result())
            elif errors == "raise":
                raise error
            else:
                results.append(_failure(error, self.retries))
                if on_result is not None:
                    on_result(len(results) - 1, results[-1])
        return results

    def load_blocks(self, loader: Callable[[int], Any], n_blocks: int) -> BlockSet:
        """Have the executors call ``loader(i)`` for ``i < n_blocks`` and keep the blocks.

        The blocks are a cached RDD of ``n_blocks`` partitions (one block each), loaded
        now rather than on first use.

        Parameters
        ----------
        loader : callable
            A picklable function: ``loader(i)`` builds block ``i``.
        n_blocks : int
            The number of blocks.

        Returns
        -------
        BlockSet
            The handle on the blocks (their RDD), for :meth:`map_blocks`,
            :meth:`sum_blocks` and :meth:`release`.

        Examples
        --------
        >>> from connscale.engines import SparkEngine
        >>> engine = SparkEngine(n_jobs=2)  # doctest: +SKIP
        >>> blocks = engine.load_blocks(float, 4)  # block i is float(i)
        >>> blocks.n_blocks
        4
        >>> engine.release(blocks)
        """
        n_blocks = check_int(n_blocks, "n_blocks", minimum=1)
        rdd = self.sc.parallelize(range(n_blocks), n_blocks).map(loader).cache()
        rdd.count()
        return BlockSet(n_blocks, rdd)

    def _check(self, blocks: BlockSet) -> pyspark.RDD:
        if blocks.handle is None:
            raise ValueError("These blocks were released.")
        return blocks.handle

    def map_blocks(self, blocks: BlockSet, func: Callable, *args) -> list:
        """Return ``[func(block, *args) for block in blocks]``, in block order.

        ``args`` are broadcast once and unpersisted after the call.

        Parameters
        ----------
        blocks : BlockSet
            From :meth:`load_blocks`.
        func : callable
            A picklable function ``func(block, *args)``.
        *args
            Sent to the executors once for the call.

        Returns
        -------
        list
            One result per block, in block order.

        Examples
        --------
        >>> from connscale.engines import SparkEngine
        >>> engine = SparkEngine(n_jobs=2)  # doctest: +SKIP
        >>> blocks = engine.load_blocks(float, 4)  # block i is float(i)
        >>> engine.map_blocks(blocks, pow, 2)
        [0.0, 1.0, 4.0, 9.0]
        >>> engine.release(blocks)
        """
        rdd = self._check(blocks)
        bc = self.sc.broadcast(args)
        try:
            return rdd.map(lambda block: func(block, *bc.value)).collect()
        finally:
            bc.unpersist()

    def sum_blocks(self, blocks: BlockSet, func: Callable, *args) -> Any:
        """Return ``sum(func(block, *args) for block in blocks)``, by tree reduction.

        Values are added in pairs on the executors (``reduceByKey``) until a few are left,
        then summed on the driver by :func:`~connscale.engines.base.tree_sum`.

        Parameters
        ----------
        blocks : BlockSet
            From :meth:`load_blocks`.
        func : callable
            A picklable function ``func(block, *args)``.
        *args
            Sent to the executors once for the call.

        Returns
        -------
        object
            The sum of the blocks' results, bitwise the serial engine's.

        Examples
        --------
        >>> from connscale.engines import SparkEngine
        >>> engine = SparkEngine(n_jobs=2)  # doctest: +SKIP
        >>> blocks = engine.load_blocks(float, 4)  # block i is float(i)
        >>> engine.sum_blocks(blocks, pow, 2)
        14.0
        >>> engine.release(blocks)
        """
        rdd = self._check(blocks)
        bc = self.sc.broadcast(args)
        try:
            # Partition i holds block i: key each value by its block index.
            keyed = rdd.mapPartitionsWithIndex(
                lambda index, part: [(index, func(block, *bc.value)) for block in part]
            )
            n_values = blocks.n_blocks
            while n_values > _DRIVER_SUM_SIZE:
                n_values = math.ceil(n_values / 2)
                keyed = keyed.map(lambda kv: (kv[0] // 2, kv[1])).reduceByKey(
                    operator.add, numPartitions=n_values
                )
            values = [value for _, value in sorted(keyed.collect(), key=operator.itemgetter(0))]
            return tree_sum(values)
        finally:
            bc.unpersist()

    def release(self, blocks: BlockSet) -> None:
        """Unpersist the blocks' RDD (nothing when already released).

        Parameters
        ----------
        blocks : BlockSet
            From :meth:`load_blocks`.

        Examples
        --------
        >>> from connscale.engines import SparkEngine
        >>> engine = SparkEngine(n_jobs=2)  # doctest: +SKIP
        >>> blocks = engine.load_blocks(float, 4)
        >>> engine.release(blocks)
        >>> engine.map_blocks(blocks, pow, 2)
        Traceback (most recent call last):
        ...
        ValueError: These blocks were released.
        """
        if blocks.handle is not None:
            blocks.handle.unpersist()
            blocks.handle = None

    def close(self) -> None:
        """Stop the SparkContext started here (a context the caller passed keeps running).

        Examples
        --------
        >>> from connscale.engines import SparkEngine
        >>> engine = SparkEngine(n_jobs=2)  # doctest: +SKIP
        >>> borrowed = SparkEngine(engine.sc)  # on the caller's context
        >>> borrowed.close()
        >>> engine.map(abs, [-1])  # still running
        [1]
        >>> engine.close()  # doctest: +SKIP
        """
        if self._own and self.sc is not None:
            self.sc.stop()
        self.sc = None

    def __repr__(self) -> str:
        return f"SparkEngine(master={self.master!r}, retries={self.retries})"
