"""The cohort runner's parameters, each declared once (:mod:`connscale._params`).

:class:`CohortConfig` is what :func:`connscale.cohort.run_cohort` takes:
each field holds its default, its constraints, its documentation and its
``connscale cohort`` flag, from which the entry's signature, checks and
docstring and the command's options are derived. :class:`CohortJobParams`
declares the jobs' parameters (``run_cohort``'s ``params``): their defaults
(:func:`job_defaults`, with :data:`JOB_PARAMS`: which job takes which),
their documentation and their flags. Their values are checked against the
constraints of the functions the job calls
(:func:`connscale.cohort.check_job_params`). The fields of the options
other commands share too (``--device``, ``--threshold``, ``--wait``...) are
made by :mod:`connscale._fields`.
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral

from connscale import _fields
from connscale._choices import COHORT_JOBS
from connscale._params import Flag, declared, param, parameters_doc
from connscale._validation import Interval, StrOptions
from connscale.engines import ENGINES, Engine

__all__ = [
    "COMPUTATION",
    "EXECUTION",
    "JOB_OPTIONS",
    "JOB_PARAMS",
    "OPTIONS_LAST",
    "CohortConfig",
    "CohortJobParams",
    "job_defaults",
]

#: The ``connscale cohort`` argument groups of the declared flags, besides
#: the parser's own (None: the positional INPUT, ``--job`` and ``--out``).
JOB_OPTIONS = "job options"
EXECUTION = "execution"
COMPUTATION = "computation"
#: The parser's own options added after the groups (``--wait`` ends the usage line).
OPTIONS_LAST = "options, last"

_NATURAL = Interval(Integral, 0, None, closed="left")
_COUNT = Interval(Integral, 1, None, closed="left")


@dataclass(frozen=True)
class CohortJobParams:
    """The parameters of the cohort's jobs (``run_cohort``'s ``params``), declared once.

    Their values are checked against the constraints of the functions the
    job calls (:func:`connscale.cohort.check_job_params`), not against the
    fields': those the commands share (``threshold``, ``absolute``,
    ``atlas_name``, ``device``, ``dtype``, ``memory_limit``) come from
    :mod:`connscale._fields` with theirs, the job's own fields declare none.
    """

    window_length: int | None = param(
        None,
        doc_type="int or None",
        doc="pairs, dfc (required): window length in time points.",
        flag=Flag(("--window",), group=JOB_OPTIONS, type="window_length", dest="window",
                  help="pairs, dfc: window length in time points (required)."),
    )  # fmt: skip
    step: int = param(
        1,
        doc_type="int",
        doc="pairs, dfc: window step.",
        flag=Flag(("--step",), group=JOB_OPTIONS, type="count",
                  help="pairs, dfc: window step."),
    )  # fmt: skip
    threshold: float | None = _fields.threshold(
        "pairs: the summary feature 'fraction of windows with r > threshold'\n"
        "(pairs' default: 0.5); dfc: keep r >= threshold (``kind='sparse'``).",
        flag_help="pairs: summary feature 'fraction of windows with r > THRESHOLD' "
        "(default 0.5); dfc: keep r >= THRESHOLD (--kind sparse).",
        group=JOB_OPTIONS,
    )
    kind: str = param(
        "triu",
        doc_type="{'triu', 'dense', 'sparse', 'lowrank', 'factor'}",
        doc="fc: 'triu' or 'dense'; dfc: 'triu', 'sparse', 'lowrank' or 'factor'.",
        flag=Flag(("--kind",), group=JOB_OPTIONS,
                  choices=("triu", "dense", "sparse", "lowrank", "factor"),
                  help="fc: 'triu' or 'dense'; dfc: 'triu', 'sparse', 'lowrank' or 'factor'."),
    )  # fmt: skip
    absolute: bool = _fields.absolute(
        "dfc, ``kind='sparse'``: keep ``abs(r) >= threshold``.",
        flag_help="dfc --kind sparse: keep |r| >= THRESHOLD.",
        group=JOB_OPTIONS,
    )
    rank: int | None = param(
        None,
        doc_type="int or None",
        doc="dfc, ``kind='lowrank'`` (required) or ``'factor'``: the rank.",
        flag=Flag(("--rank",), group=JOB_OPTIONS, type="count",
                  help="dfc --kind lowrank (required) or factor: the rank."),
    )  # fmt: skip
    random_state: int | None = param(
        0,
        doc_type="int or None",
        doc="dfc, ``kind='lowrank'``: the random seed.",
        flag=Flag(("--seed",), group=JOB_OPTIONS, type="natural", dest="seed",
                  help="dfc --kind lowrank: random seed."),
    )  # fmt: skip
    atlas: str | None = param(
        None,
        doc_type="str, path or None",
        doc="Labels NIfTI for NIfTI inputs (region-mean series).",
        flag=Flag(("--atlas",), group=JOB_OPTIONS, type="input_file",
                  help="Labels NIfTI for NIfTI inputs (region-mean series)."),
    )  # fmt: skip
    mask: str | None = param(
        None,
        doc_type="str, path or None",
        doc="Brain mask NIfTI for NIfTI inputs (voxel series).",
        flag=Flag(("--mask",), group=JOB_OPTIONS, type="input_file",
                  help="Brain mask NIfTI for NIfTI inputs (voxel series)."),
    )  # fmt: skip
    atlas_name: str | None = _fields.atlas_name(
        "The outputs' ``seg-`` label; default from the atlas file's name.", group=JOB_OPTIONS
    )
    device: str = _fields.device(
        "'auto': 'cuda' with ``engine='serial'`` on a machine with a GPU,\n"
        "else 'cpu', since many workers share the machine; recorded in the report.",
        group=COMPUTATION,
    )
    dtype: str = _fields.dtype(group=COMPUTATION)
    memory_limit: str | int | None = _fields.memory_limit(
        "Of each task, covering the loaded scan, i.e. per worker: a worker\n"
        "runs one scan at a time.",
        group=COMPUTATION,
    )


_COMMON = ("device", "dtype", "atlas", "atlas_name", "mask", "memory_limit")
#: The parameters each job takes.
JOB_PARAMS = {
    "pairs": ("window_length", "step", "threshold", *_COMMON),
    "dfc": ("window_length", "step", "kind", "threshold", "absolute", "rank", "random_state",
            *_COMMON),
    "fc": ("kind", *_COMMON),
}  # fmt: skip
#: A job's own default, where it is not the field's.
_JOB_DEFAULTS = {"pairs": {"threshold": 0.5}}


def job_defaults(job: str) -> dict:
    """Return the parameters ``job`` takes, with their defaults (in :data:`JOB_PARAMS`'s order)."""
    fields = declared(CohortJobParams)
    own = _JOB_DEFAULTS.get(job, {})
    return {name: own.get(name, fields[name][0].default) for name in JOB_PARAMS[job]}


@dataclass(frozen=True)
class CohortConfig:
    """Every option of :func:`connscale.cohort.run_cohort`."""

    inputs: object = param(
        positional=True,
        doc_type="str, path or list of them",
        doc="Files, folders, glob patterns or a BIDS derivatives tree (see\n"
        ":func:`find_inputs`).",
        flag=Flag(("inputs",), nargs="+", metavar="INPUT",
                  help="Input files, folders, BIDS derivatives roots or quoted glob patterns."),
    )  # fmt: skip
    job: str = param(
        positional=True,
        constraints=[StrOptions(set(COHORT_JOBS))],
        doc="``'pairs'``: region-pair DFC courses + summary features\n"
        "(``window_length`` required; ``step``, ``threshold``). ``'fc'``:\n"
        "static correlation (``kind`` 'triu' or 'dense'). ``'dfc'``: dynamic\n"
        "correlation of all pairs (``window_length`` required; ``step``,\n"
        "``kind`` 'triu'/'sparse'/'lowrank'/'factor', ``threshold``,\n"
        "``absolute``, ``rank``, ``random_state``).",
        flag=Flag(("--job",), choices=COHORT_JOBS, required=True, help="Per-scan job."),
    )  # fmt: skip
    out_dir: object = param(
        positional=True,
        doc_type="str or path",
        doc="Output root, a BIDS derivatives folder: ``sub-<id>/[ses-<id>/]func/\n"
        "<entities>[_seg-<atlas>]_meas-PearsonCorrelation_<relmat|pairs|dfc>.h5``\n"
        "per scan (:func:`output_path`), ``dataset_description.json``,\n"
        "``cohort_report.json`` and ``cohort_errors.tsv``.",
        flag=Flag(("--out",), type="output_folder", required=True, dest="out",
                  help="Output folder."),
    )  # fmt: skip
    params: dict | None = param(
        None,
        constraints=[dict, None],
        doc="The job's parameters (:class:`~connscale.cohort_config.CohortJobParams`;\n"
        "each job takes those of :data:`~connscale.cohort_config.JOB_PARAMS`):\n\n"
        + parameters_doc(CohortJobParams),
    )
    engine: str | Engine = param(
        "local",
        constraints=[StrOptions(ENGINES), Engine],
        doc_type="{'serial', 'local', 'dask', 'spark'} or Engine",
        doc="Where tasks run. An Engine instance is used as is and left open.",
        flag=Flag(("--backend",), group=EXECUTION, choices=tuple(ENGINES), dest="backend",
                  help="serial (this process), local (process pool), dask or spark."),
    )  # fmt: skip
    cluster: str | None = _fields.cluster(tasks="scans", group=EXECUTION)
    n_jobs: int | None = param(
        None,
        constraints=["n_jobs", None],
        doc="Worker processes / cores (None or -1: all; -2: all but one, ...);\n"
        "with ``cluster='slurm'``, SLURM jobs at once (None: one per scan left).",
        flag=Flag(("--n-jobs",), group=EXECUTION, type="n_jobs",
                  help="Worker processes / cores (default: all; -1: all, -2: all but one, "
                  "...); with --cluster slurm, most jobs at once (default: one per scan left)."),
    )  # fmt: skip
    retries: int = param(
        1,
        constraints=[_NATURAL],
        doc="A scan whose worker process dies while running it (killed,\n"
        "segfault, out of memory) is tried ``1 + retries`` times, then\n"
        "recorded as failed (``WorkerLost: ...``) and the others go on. An\n"
        "exception raised by the job itself (a bad input, an invalid\n"
        "parameter) is recorded at once and not retried: it is\n"
        "deterministic, so a retry would redo the work to fail the same way.",
        flag=Flag(("--retries",), group=EXECUTION, type="natural",
                  help="A scan whose worker process dies is tried 1 + RETRIES "
                  "times, then reported as failed (errors raised by the job "
                  "are reported at once)."),
    )  # fmt: skip
    dashboard_address: str | None = param(
        None,
        doc_type="str or None",
        doc="``engine='dask'`` without ``cluster``: where the LocalCluster's\n"
        "dashboard listens (e.g. ``'127.0.0.1:8787'``); None starts none.",
        flag=Flag(("--dashboard",), group=EXECUTION, metavar="ADDR", dest="dashboard",
                  help="dask without --cluster: start the LocalCluster's dashboard "
                  "at ADDR, e.g. 127.0.0.1:8787 (default: no dashboard)."),
    )  # fmt: skip
    queue: str | None = _fields.queue(group=EXECUTION)
    walltime: str | None = _fields.walltime(tasks="scans", group=EXECUTION)
    cores_per_job: int | None = _fields.cores_per_job(group=EXECUTION)
    mem_per_job: str | int | None = _fields.mem_per_job(group=EXECUTION)
    gpus_per_job: int | None = _fields.gpus_per_job(group=EXECUTION)
    threads_per_task: int = param(
        1,
        constraints=[_COUNT],
        doc="torch threads inside each task (also makes results independent of\nthe engine).",
    )
    batch_size: int | None = param(
        None,
        constraints=[_COUNT, None],
        doc="Tasks handed to the engine at a time (progress and the report are\n"
        "updated after each batch); None: 4 per worker.",
    )
    overwrite: bool = _fields.overwrite(
        "Redo scans whose output already exists (replacing files that\n"
        "connscale did not write, which are otherwise reported as errors).",
        flag_help="Redo scans whose output already exists, replacing files connscale "
        "did not write.",
        group=EXECUTION,
    )
    wait: bool = _fields.wait(
        "When another run is writing into ``out_dir``, wait for it to finish\n"
        "instead of raising :class:`~connscale.io.OutputLockedError`.",
        group=OPTIONS_LAST,
    )
    verbose: int = _fields.verbose(
        "0 silent; 1 a progress bar over scans; 2 also each scan's outcome.",
        group=COMPUTATION,
    )
