"""Every GPU of a node at once: one Dask worker per GPU, each seeing only its own.

``--gpus all|N`` of the participant level becomes a plan (:func:`plan_gpu_workers`):
one worker environment per GPU, ``CUDA_VISIBLE_DEVICES`` set to that GPU's
index (or UUID) as the node lists it, so that inside the worker the GPU is
``cuda:0`` and no two workers share one. :func:`gpu_cluster` starts those
workers as Dask ``Nanny`` processes of one ``SpecCluster`` (the same
mechanism ``dask-cuda``'s ``LocalCUDACluster`` uses, without the extra
dependency: the runs need nothing but the environment variable), each with
two threads so one run's decode overlaps the other's compute on the GPU.

On a node without GPU the plan is empty: the participant level says so and
runs on the CPU with worker processes, as without ``--gpus``.
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager

__all__ = [
    "available_gpus",
    "gpu_cluster",
    "gpu_engine",
    "gpu_plan",
    "parse_gpus",
    "plan_gpu_workers",
    "worker_spec",
]

logger = logging.getLogger("connscale")

#: Threads per GPU worker: one run decoding while another computes.
THREADS_PER_GPU_WORKER = 2


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

    return {
        f"gpu-{env['CUDA_VISIBLE_DEVICES']}": {
            "cls": Nanny,
            "options": {
                "nthreads": threads,
                "env": dict(env),
                "memory_limit": 0,
                "silence_logs": logging.ERROR,
            },
        }
        for env in environments
    }


@contextmanager
def gpu_cluster(environments: list[dict[str, str]], *, threads: int = THREADS_PER_GPU_WORKER):
    """Yield a Dask client of one worker process per GPU, closed on exit.

    Yields
    ------
    distributed.Client
        Pass it to :func:`connscale.engines.get_engine` as ``cluster``.
    """
    from distributed import Client, Scheduler, SpecCluster

    scheduler = {"cls": Scheduler, "options": {"dashboard_address": ":0"}}
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
def gpu_engine(environments: list[dict[str, str]], *, threads: int = THREADS_PER_GPU_WORKER):
    """Yield the Dask engine of :func:`gpu_cluster`'s workers, both closed on exit."""
    from connscale.engines import get_engine

    with (
        gpu_cluster(environments, threads=threads) as client,
        get_engine("dask", cluster=client) as engine,
    ):
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
