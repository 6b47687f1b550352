"""SLURM jobs as Dask workers, through ``dask-jobqueue``'s ``SLURMCluster``.

:class:`SlurmJobs` holds what each job asks SLURM for (partition, walltime,
cores, memory, GPUs) and how many jobs may run at once;
:func:`start_slurm_cluster` starts the cluster (its scheduler in this
process, no job yet), :func:`check_job_script` has SLURM check the jobs'
options before any is submitted, and :class:`JobKeeper` keeps the cluster
at the jobs the tasks left need (:meth:`SlurmJobs.jobs_for`): the Dask
engine scales it before each ``map`` and the keeper resubmits a job that
SLURM ended (killed, walltime reached) while tasks are left, so that a
cohort does not wait on jobs that are gone. The workers run this process's Python
(``sys.executable``) with its environment (``sbatch`` exports it, so
``PYTHONPATH`` reaches them).
"""

from __future__ import annotations

import logging
import math
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from connscale._validation import check_int

logger = logging.getLogger(__name__)

_LOCAL_HOST = "127.0.0.1"
#: Seconds between two checks of the jobs (:class:`JobKeeper`).
KEEP_INTERVAL = 5.0


@dataclass(frozen=True)
class SlurmJobs:
    """What each SLURM job asks for, and how many may run at once.

    Attributes
    ----------
    queue : str or None, default=None
        The partition (``sbatch -p``); None: the cluster's default one.
    walltime : str, default='01:00:00'
        Each job's time limit (``sbatch -t``). A job that reaches it is
        ended by SLURM; its tasks are retried on the other workers and the
        job is resubmitted while tasks are left.
    cores : int, default=1
        Cores of each job (``--cpus-per-task``); the job runs one
        single-threaded worker process per core.
    memory : str, default='4GB'
        Memory of each job (``--mem``), shared by its workers (Dask
        restarts a worker that exceeds its part).
    gpus : int, default=0
        GPUs of each job (``--gres=gpu:N``); with GPUs the job runs one
        worker process, which computes on them.
    max_jobs : int or None, default=None
        Jobs at once at most; None: one per task left (each job's workers
        counted).
    log_directory : str or None, default=None
        Where the jobs' output and error files go; None: the directory
        ``sbatch`` is called from.

    Examples
    --------
    >>> from connscale.engines import SlurmJobs
    >>> jobs = SlurmJobs(queue="gpu", cores=4, max_jobs=10)
    >>> jobs.workers_per_job, jobs.jobs_for(100)
    (4, 10)
    """

    queue: str | None = None
    walltime: str = "01:00:00"
    cores: int = 1
    memory: str = "4GB"
    gpus: int = 0
    max_jobs: int | None = None
    log_directory: str | None = None

    def __post_init__(self) -> None:
        check_int(self.cores, "cores", minimum=1)
        check_int(self.gpus, "gpus", minimum=0)
        if self.max_jobs is not None:
            check_int(self.max_jobs, "max_jobs", minimum=1)

    @property
    def workers_per_job(self) -> int:
        """Worker processes of each job: one per core, or one with GPUs."""
        return 1 if self.gpus else self.cores

    def jobs_for(self, n_tasks: int) -> int:
        """Return the jobs that ``n_tasks`` tasks need, at most ``max_jobs``.

        Parameters
        ----------
        n_tasks : int
            The tasks left.

        Returns
        -------
        int

        Examples
        --------
        >>> from connscale.engines import SlurmJobs
        >>> SlurmJobs(cores=4).jobs_for(10), SlurmJobs(gpus=1).jobs_for(10)
        (3, 10)
        """
        jobs = math.ceil(n_tasks / self.workers_per_job)
        return jobs if self.max_jobs is None else min(jobs, self.max_jobs)


#: The options of the SLURM jobs, as the commands' configs name them.
JOB_OPTIONS = ("queue", "walltime", "cores_per_job", "mem_per_job", "gpus_per_job")


def slurm_jobs(
    config: Any, *, engine: str, log_directory: Path, tasks: str = "scan"
) -> SlurmJobs | None:
    """Return the SLURM jobs that ``config.cluster == 'slurm'`` asks for, None without SLURM.

    ``config`` holds ``cluster``, ``n_jobs`` (the most jobs at once) and the
    :data:`JOB_OPTIONS`; ``engine`` names its engine's field (``'engine'``,
    ``'backend'``) and ``tasks`` its tasks in the messages. Raise a one-line
    ValueError for a job option without SLURM, SLURM without Dask, or a bad
    ``n_jobs``, and ``dask-jobqueue``'s ImportError, before any write.
    """
    given = {name: getattr(config, name) for name in JOB_OPTIONS}
    if config.cluster != "slurm":
        named = [name for name, value in given.items() if value is not None]
        if named:
            raise ValueError(
                f"{', '.join(repr(n) for n in named)} apply to cluster='slurm' only; "
                f"got cluster={config.cluster!r}."
            )
        return None
    if getattr(config, engine) != "dask":
        raise ValueError(
            f"cluster='slurm' needs {engine}='dask'; got {engine}={getattr(config, engine)!r}."
        )
    if config.n_jobs is not None and config.n_jobs < 1:
        raise ValueError(
            "With cluster='slurm', 'n_jobs' is the most SLURM jobs at once "
            f"(>= 1, or None: one per {tasks} left); got {config.n_jobs}."
        )
    import_jobqueue()  # its one-line ImportError before any write
    names = {"cores_per_job": "cores", "mem_per_job": "memory", "gpus_per_job": "gpus"}
    chosen = {names.get(k, k): v for k, v in given.items() if v is not None}
    if "memory" in chosen:
        chosen["memory"] = str(chosen["memory"])
    return SlurmJobs(**chosen, max_jobs=config.n_jobs, log_directory=str(log_directory))


def import_jobqueue() -> ModuleType:
    """Return ``dask_jobqueue``, or raise a one-line ImportError saying how to install it."""
    try:
        import dask_jobqueue
    except ImportError as exc:
        raise ImportError(
            "--cluster slurm needs dask-jobqueue: pip install dask-jobqueue "
            "(or pip install connscale[slurm])"
        ) from exc
    return dask_jobqueue


def start_slurm_cluster(jobs: SlurmJobs) -> Any:
    """Start a ``SLURMCluster`` whose jobs ask for ``jobs`` (none submitted yet).

    Its scheduler runs in this process and reads Dask's configuration when
    it starts (set ``allowed-failures`` around this call). Options that
    :class:`SlurmJobs` does not hold (network interface, account, extra
    directives) come from Dask's ``jobqueue.slurm`` configuration.
    """
    import dask

    dask_jobqueue = import_jobqueue()
    # The scheduler's dashboard on this host only, on a free port, unless configured.
    scheduler = {
        "dashboard_address": f"{_LOCAL_HOST}:0",
        **dask.config.get("jobqueue.slurm.scheduler-options", {}),
    }
    directives = [f"--gres=gpu:{jobs.gpus}"] if jobs.gpus else []
    options = {"queue": jobs.queue, "log_directory": jobs.log_directory}
    return dask_jobqueue.SLURMCluster(
        cores=jobs.workers_per_job,
        processes=jobs.workers_per_job,
        memory=jobs.memory,
        walltime=jobs.walltime,
        job_cpu=jobs.cores,
        job_extra_directives=directives,
        job_name="connscale",
        python=sys.executable,
        silence_logs=logging.ERROR,
        scheduler_options=scheduler,
        **{name: value for name, value in options.items() if value is not None},
    )


def check_job_script(cluster: Any) -> None:
    """Have SLURM check the cluster's job script without submitting it (``sbatch --test-only``).

    Raises
    ------
    ValueError
        SLURM refuses the job (an unknown partition, a malformed walltime,
        more memory or GPUs than a node has), with sbatch's words.
    OSError
        No ``sbatch`` here.
    """
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "connscale-job.sh"
        script.write_text(cluster.job_script())
        try:
            done = subprocess.run(
                ["sbatch", "--test-only", str(script)], capture_output=True, text=True, timeout=60
            )
        except FileNotFoundError:
            raise OSError(
                "--cluster slurm submits jobs with sbatch, which is not found here"
            ) from None
    if done.returncode:
        errors = [line for line in done.stderr.splitlines() if line.strip()]
        raise ValueError(f"SLURM refuses the jobs: {'; '.join(errors) or 'sbatch failed'}")


def _active_jobs() -> set[str]:
    """Return the ids of this user's SLURM jobs pending or running (``squeue``)."""
    done = subprocess.run(
        ["squeue", "--me", "-h", "-t", "PD,CF,R", "-o", "%i"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode:
        raise OSError(f"squeue: {done.stderr.strip()}")
    return set(done.stdout.split())


class JobKeeper:
    """Keep a ``SLURMCluster`` at a number of jobs, resubmitting the jobs SLURM ended.

    Every :data:`KEEP_INTERVAL` seconds, on the cluster's event loop: a job
    that ``squeue`` no longer lists as pending or running (cancelled,
    walltime, node failure) is forgotten and, when its workers had joined,
    submitted again; one whose workers never joined (they could not start:
    see its log) is not, and the jobs asked for are one fewer.
    """

    def __init__(self, cluster: Any) -> None:
        from tornado.ioloop import PeriodicCallback

        from connscale.engines._joined import Joined

        self.cluster = cluster
        self.target = 0
        self._joined = Joined()
        cluster.loop.add_callback(cluster.scheduler.add_plugin, self._joined)
        self._callback = PeriodicCallback(self._check, KEEP_INTERVAL * 1000)
        cluster.loop.add_callback(self._callback.start)

    def scale(self, jobs: int) -> None:
        """Ask for ``jobs`` jobs (more are submitted, idle ones cancelled)."""
        self.target = jobs
        # On the cluster's loop, where the checks run: one thread changes its jobs.
        self.cluster.loop.add_callback(self.cluster.scale, jobs=jobs)

    def _joined_job(self, name: str) -> bool:
        return any(w == name or w.startswith(f"{name}-") for w in self._joined.names)

    async def _check(self) -> None:
        import asyncio

        submitted = {n: j for n, j in self.cluster.workers.items() if j.job_id is not None}
        if not submitted:
            return
        active = await asyncio.get_running_loop().run_in_executor(None, _active_jobs)
        for name, job in submitted.items():
            if job.job_id in active or self.cluster.workers.get(name) is not job:
                continue
            del self.cluster.workers[name]
            if self._joined_job(name):
                logger.warning("SLURM job %s ended; submitting another", job.job_id)
            else:
                logger.error("SLURM job %s ended before its workers started", job.job_id)
                self.cluster.worker_spec.pop(name, None)
                self.target = max(self.target - 1, 0)
        if self.target:
            self.cluster.scale(jobs=self.target)

    def stop(self) -> None:
        """Stop checking."""
        self.cluster.loop.add_callback(self._callback.stop)


__all__ = [
    "JOB_OPTIONS",
    "JobKeeper",
    "SlurmJobs",
    "check_job_script",
    "import_jobqueue",
    "slurm_jobs",
    "start_slurm_cluster",
]
