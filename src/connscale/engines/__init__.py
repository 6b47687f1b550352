"""Execution engines: one small interface over a process pool, Dask and Spark.

Two kinds of work run through it: one task per item (the batch runner of
:mod:`connscale.engines.batch`: one scan or run per task, for the cohort and
the BIDS-App) and map/reduce over blocks that workers load and keep (r1DL:
voxel blocks of S). See :class:`connscale.engines.base.Engine`.

Every engine returns the same results in the same order, and
``sum_blocks`` adds per-block values in the fixed pairwise order of
:func:`connscale.engines.base.tree_sum`, so sums are bitwise identical
whatever the engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from connscale._validation import check_option
from connscale.engines.base import BlockSet, Engine, SerialEngine, TaskFailure, tree_sum
from connscale.engines.batch import (
    BatchLogs,
    BatchOptions,
    BatchResult,
    Task,
    TaskBudget,
    run_batch,
)
from connscale.engines.local import LocalEngine
from connscale.engines.slurm import SlurmJobs

if TYPE_CHECKING:
    import distributed
    import pyspark
    import pyspark.sql

ENGINES = ("serial", "local", "dask", "spark")


def get_engine(
    name: str = "serial",
    *,
    cluster: str
    | SlurmJobs
    | distributed.Client
    | pyspark.SparkContext
    | pyspark.sql.SparkSession
    | None = None,
    n_jobs: int | None = None,
    retries: int = 1,
    dashboard_address: str | None = None,
) -> Engine:
    """Start an execution engine by name.

    Parameters
    ----------
    name : {'serial', 'local', 'dask', 'spark'}, default='serial'
        ``'serial'`` runs everything in this process, in order; ``'local'``
        a pool of ``n_jobs`` worker processes; ``'dask'`` a Dask
        distributed cluster; ``'spark'`` Apache Spark.
    cluster : str, SlurmJobs or None, default=None
        Dask scheduler address (None: a LocalCluster of ``n_jobs`` worker
        processes; ``'slurm'`` or a :class:`~connscale.engines.slurm.SlurmJobs`:
        workers in SLURM jobs, through ``dask-jobqueue``) or Spark master
        URL (None: ``local[n_jobs]``, or ``local[*]``). Not used by 'serial'
        and 'local'.
    n_jobs : int or None, default=None
        Worker processes (local, Dask LocalCluster) or cores (Spark local);
        None uses every core.
    retries : int, default=1
        Times a failed task is run again, whether it raised or its worker
        process died: every engine tries a task ``1 + retries`` times (not
        used by 'serial'; an external Dask scheduler counts dead workers
        with its own ``allowed-failures``).
    dashboard_address : str or None, default=None
        'dask' LocalCluster only: where its dashboard listens, e.g.
        ``'127.0.0.1:8787'``; None starts no dashboard.

    Returns
    -------
    Engine
        Use it as a context manager, or call ``close()`` when done.

    Raises
    ------
    ImportError
        'dask' or 'spark' without the optional extra installed, or a SLURM
        cluster without ``dask-jobqueue``.

    Examples
    --------
    >>> from connscale.engines import get_engine
    >>> with get_engine("serial") as engine:
    ...     engine.map(abs, [-2, 3, -5])
    [2, 3, 5]
    """
    check_option(name, "engine", set(ENGINES))
    if dashboard_address is not None and (name != "dask" or cluster is not None):
        raise ValueError(
            f"'dashboard_address' is only used by the 'dask' engine's LocalCluster; got "
            f"dashboard_address={dashboard_address!r} with engine {name!r}"
            + (f" and cluster={cluster!r}." if cluster is not None else ".")
        )
    if cluster is not None and name in ("serial", "local"):
        raise ValueError(
            f"'cluster' is only used by the 'dask' and 'spark' engines; got "
            f"cluster={cluster!r} with engine {name!r}."
        )
    if (cluster == "slurm" or isinstance(cluster, SlurmJobs)) and name != "dask":
        raise ValueError(f"A SLURM cluster is used by the 'dask' engine only; got engine {name!r}.")
    if name == "serial":
        return SerialEngine()
    if name == "local":
        return LocalEngine(n_jobs, retries=retries)
    if name == "dask":
        from connscale.engines.dask_engine import DaskEngine

        return DaskEngine(
            cluster, n_jobs=n_jobs, retries=retries, dashboard_address=dashboard_address
        )
    from connscale.engines.spark_engine import SparkEngine

    return SparkEngine(cluster, n_jobs=n_jobs, retries=retries)


def __getattr__(name: str) -> type[Engine]:
    # DaskEngine/SparkEngine import their optional dependency only when used.
    if name == "DaskEngine":
        from connscale.engines.dask_engine import DaskEngine

        return DaskEngine
    if name == "SparkEngine":
        from connscale.engines.spark_engine import SparkEngine

        return SparkEngine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ENGINES",
    "BatchLogs",
    "BatchOptions",
    "BatchResult",
    "BlockSet",
    "DaskEngine",
    "Engine",
    "LocalEngine",
    "SerialEngine",
    "SlurmJobs",
    "SparkEngine",
    "Task",
    "TaskBudget",
    "TaskFailure",
    "get_engine",
    "run_batch",
    "tree_sum",
]
