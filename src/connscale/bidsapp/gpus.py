"""Every GPU of a node at once: one Dask worker per GPU, each seeing only its own.

``--gpus all|N`` of the participant level becomes a plan (:func:`plan_gpu_workers`):
one worker environment per GPU, ``CUDA_VISIBLE_DEVICES`` set to that GPU's
index (or UUID) as the node lists it, so that inside the worker the GPU is
``cuda:0`` and no two workers share one. :func:`gpu_cluster` starts those
workers as Dask ``Nanny`` processes of one ``SpecCluster`` (the same
mechanism ``dask-cuda``'s ``LocalCUDACluster`` uses, without the extra
dependency: the runs need nothing but the environment variable).

The host's cores are shared out among the workers (:func:`plan_readers`):
each worker computes in its own process and reads its runs in
``(cores - workers) // workers`` reader processes of its own (at least one,
a thread, as on the serial path), started inside the worker
(:mod:`connscale.engines.dask_readers`). A worker has a thread per reader
plus one, computes one run at a time on its GPU while its readers decode the
next ones, and receives each decoded run from its reader through shared
memory by name (``/dev/shm``, a folder per call removed when the cluster
closes): the runs' arrays never travel through Dask. A reader that dies is
charged its read alone: the run is read again on a new reader, then recorded
as failed (``ReaderLost``), and the other runs complete.

On a node without GPU the plan is empty: the participant level says so and
runs on the CPU with worker processes, as without ``--gpus``.
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = [
    "ReaderPlan",
    "available_gpus",
    "gpu_cluster",
    "gpu_engine",
    "gpu_plan",
    "host_cores",
    "parse_gpus",
    "plan_gpu_workers",
    "plan_readers",
    "worker_device",
    "worker_spec",
]

logger = logging.getLogger("connscale")

#: Threads of a GPU worker by default (:func:`gpu_engine` gives its reader plan's, readers + 1).
THREADS_PER_GPU_WORKER = 2


@dataclass(frozen=True)
class ReaderPlan:
    """How the host's cores are shared out among the GPU workers.

    Attributes
    ----------
    workers : int
        GPU workers, one computing process each.
    cores : int
        The host's cores (:func:`host_cores`).
    readers : int
        Readers of each worker: processes when several, else a thread (the
        serial path's rule).
    """

    workers: int
    cores: int
    readers: int

    @property
    def processes(self) -> bool:
        """Return whether the readers are processes."""
        return self.readers > 1

    @property
    def threads(self) -> int:
        """Dask threads of each worker: a run per reader, and the one computing."""
        return self.readers + 1

    def record(self) -> dict:
        """Return the plan as the participant report records it (``gpu_readers``)."""
        return {
            "gpu_workers": self.workers,
            "cores": self.cores,
            "readers_per_worker": self.readers,
            "readers_are": "processes" if self.processes else "a thread",
            "runs_in_flight_per_worker": self.threads,
        }


def host_cores() -> int:
    """Return the cores this process may run on (its CPU affinity where the system has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def plan_readers(
    workers: int, *, readers: int | None = None, cores: int | None = None
) -> ReaderPlan:
    """Share the host's cores out as readers among ``workers`` GPU workers.

    Parameters
    ----------
    workers : int
        GPU workers; each computes in one process, on one core.
    readers : int or None, default=None
        Readers of each worker (``n_jobs``); None: the cores the computing
        processes leave, shared out evenly, ``(cores - workers) // workers``,
        at least one.
    cores : int or None, default=None
        The host's cores (None: :func:`host_cores`).

    Returns
    -------
    ReaderPlan
    """
    cores = host_cores() if cores is None else int(cores)
    if readers is None:
        readers = max((cores - workers) // workers, 1)
    return ReaderPlan(int(workers), cores, int(readers))


def worker_device(device: str) -> str:
    """Return the device of the GPU workers' runs.

    'cuda' (each worker sees its one GPU as ``cuda:0``), or 'cpu' when asked:
    the same workers and readers, computing on the CPU (a stand-in where no
    GPU is at hand).
    """
    return "cpu" if str(device).lower() == "cpu" else "cuda"


def parse_gpus(value) -> str | int | None:
    """``--gpus``: None, ``'all'`` or a positive count."""
    if value is None or value == "all":
        return value
    try:
        count = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"--gpus must be 'all' or a positive count; got {value!r}.") from None
    if count < 1 or str(count) != str(value).strip():
        raise ValueError(f"--gpus must be 'all' or a positive count; got {value!r}.")
    return count


def available_gpus(environ=None) -> list[str]:
    """Return the GPUs this process may use, as ``CUDA_VISIBLE_DEVICES`` names them.

    With ``CUDA_VISIBLE_DEVICES`` set, its entries (indices or UUIDs; an
    empty value hides every GPU); otherwise ``0 .. n-1`` for the devices
    torch sees.
    """
    environ = os.environ if environ is None else environ
    listed = environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        entries = [e.strip() for e in listed.split(",") if e.strip()]
        # CUDA stops at the first invalid entry ('-1' hides every GPU).
        kept = []
        for entry in entries:
            if entry.startswith("-"):
                break
            kept.append(entry)
        count = _cuda_count()
        return kept[:count]
    return [str(i) for i in range(_cuda_count())]


def _cuda_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def plan_gpu_workers(gpus, available: list[str]) -> list[dict[str, str]]:
    """One worker environment per GPU used.

    Parameters
    ----------
    gpus : 'all' or int
        Every available GPU, or the first ``gpus`` of them.
    available : list of str
        The node's GPUs (:func:`available_gpus`).

    Returns
    -------
    list of dict
        ``[{"CUDA_VISIBLE_DEVICES": "<gpu>"}, ...]``; empty when the node has
        no GPU.

    Raises
    ------
    ValueError
        More GPUs asked for than the node has.
    """
    gpus = parse_gpus(gpus)
    if gpus is None:
        raise ValueError("plan_gpu_workers needs gpus='all' or a count.")
    if not available:
        return []
    if gpus != "all" and gpus > len(available):
        raise ValueError(
            f"--gpus {gpus} asks for more GPUs than this node has "
            f"({len(available)}: {', '.join(available)})."
        )
    chosen = available if gpus == "all" else available[:gpus]
    return [{"CUDA_VISIBLE_DEVICES": gpu} for gpu in chosen]


def worker_spec(
    environments: list[dict[str, str]], *, threads: int = THREADS_PER_GPU_WORKER
) -> dict:
    """Return the ``SpecCluster`` worker specification: one ``Nanny`` per environment."""
    from distributed import Nanny

    from connscale.engines.dask_engine import LOCAL_SCHEDULER

    return {
        f"gpu-{env['CUDA_VISIBLE_DEVICES']}": {
            "cls": Nanny,
            "options": {
                "nthreads": threads,
                "env": dict(env),
                "memory_limit": 0,
                "host": LOCAL_SCHEDULER["host"],
                "silence_logs": logging.ERROR,
            },
        }
        for env in environments
    }


@contextmanager
def gpu_cluster(environments: list[dict[str, str]], *, threads: int = THREADS_PER_GPU_WORKER):
    """Yield a Dask client of one worker process per GPU, closed on exit.

    The workers may start processes of their own (their readers):
    ``distributed.worker.daemon`` is False while the cluster runs, for the
    workers its nannies start or restart; their environment is Dask's without
    ``MALLOC_TRIM_THRESHOLD_`` (:func:`~connscale.engines.dask_engine.nanny_environ`).

    Yields
    ------
    distributed.Client
        Pass it to :func:`connscale.engines.get_engine` as ``cluster``.
    """
    import dask
    from distributed import Client, Scheduler, SpecCluster

    from connscale.engines.dask_engine import LOCAL_SCHEDULER, http_routes_copy, nanny_environ

    scheduler = {"cls": Scheduler, "options": dict(LOCAL_SCHEDULER)}
    settings = {"distributed.worker.daemon": False, **http_routes_copy(), **nanny_environ()}
    with dask.config.set(settings):
        cluster = SpecCluster(
            workers=worker_spec(environments, threads=threads),
            scheduler=scheduler,
            silence_logs=logging.ERROR,
        )
        client = Client(cluster)
        try:
            logger.info(
                "bids: one Dask worker per GPU (%s)",
                ", ".join(e["CUDA_VISIBLE_DEVICES"] for e in environments),
            )
            yield client
        finally:
            client.close()
            cluster.close()


@contextmanager
def gpu_engine(
    environments: list[dict[str, str]],
    *,
    threads: int | None = None,
    readers: ReaderPlan | None = None,
    preload: tuple[str, ...] = (),
):
    """Yield the Dask engine of :func:`gpu_cluster`'s workers, both closed on exit.

    Parameters
    ----------
    environments : list of dict
        One worker per environment (:func:`plan_gpu_workers`).
    threads : int or None, default=None
        Threads (runs in flight) of each worker; None: ``readers.threads``.
    readers : ReaderPlan or None, default=None
        Each worker's readers (None: :func:`plan_readers` for this host);
        their arrays go through a folder in shared memory, removed on exit.
    preload : tuple of str
        Modules the reader processes import before their first read.
    """
    from connscale.engines.dask_engine import DaskEngine
    from connscale.engines.dask_readers import WorkerReaders
    from connscale.engines.shared import handoff_folder

    readers = plan_readers(len(environments)) if readers is None else readers
    threads = readers.threads if threads is None else threads
    with (
        handoff_folder(readers.processes) as folder,
        gpu_cluster(environments, threads=threads) as client,
    ):
        plugin = WorkerReaders(
            readers.readers, processes=readers.processes, preload=preload, folder=folder
        )
        with DaskEngine(client, readers=plugin) as engine:
            yield engine


def gpu_plan(gpus, backend: str, notes: list[str]) -> list[dict]:
    """Worker environments for ``--gpus`` (empty: no GPU, a note says so)."""
    if gpus is None:
        return []
    gpus = parse_gpus(gpus)
    if backend == "spark":
        raise ValueError(
            "--gpus starts one Dask worker per GPU; it cannot pin GPUs to Spark "
            "executors (leave out --backend spark)."
        )
    environments = plan_gpu_workers(gpus, available_gpus())
    if not environments:
        note = (
            f"--gpus {gpus}: no GPU on this node (torch sees no CUDA device); running "
            f"on the CPU with the {backend} backend instead."
        )
        notes.append(note)
        logger.warning(note)
    return environments
