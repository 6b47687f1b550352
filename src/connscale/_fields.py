"""The parameters several commands share, each declared once.

Every function here returns a config field (:func:`connscale._params.param`)
with the one default, constraint and command-line flag (and its help) of a
parameter that the commands and the API share: ``device``, ``dtype``,
``memory_limit``, ``verbose`` (with ``-q``), ``precision``, the threshold
options, ``--out``, ``--wait``, ``--overwrite``, the seed, a command's
INPUT with ``--mask``, ``--atlas`` and ``--atlas-name``, and ``--cluster``
with the SLURM jobs' options (``connscale cohort`` and ``connscale bids``). A command's config
declares its field with the function; what differs between commands (the
documentation of what the parameter does there, the help of a threshold, the
argument group, the BIDS-App's levels) is an argument.

Like :mod:`connscale._choices`, it imports nothing heavy: the parsers are
built from these fields without importing what computes.
"""

from __future__ import annotations

import dataclasses
from numbers import Integral, Real

from connscale._choices import DTYPES, PRECISIONS
from connscale._params import Flag, param
from connscale._validation import Interval, StrOptions
from connscale.engines.slurm import SlurmJobs

__all__ = [
    "COMPUTATION",
    "MASK_OR_ATLAS",
    "absolute",
    "atlas",
    "atlas_name",
    "cluster",
    "cores_per_job",
    "device",
    "dtype",
    "gpus_per_job",
    "input_file",
    "mask",
    "mem_per_job",
    "memory_limit",
    "out",
    "overwrite",
    "precision",
    "queue",
    "seed",
    "step",
    "t_r",
    "taper",
    "taper_sigma",
    "threshold",
    "verbose",
    "wait",
    "walltime",
    "window",
]

#: The argument group of the compute options (``--device`` ... ``-q``).
COMPUTATION = "computation"
#: The mutually exclusive ``--mask`` / ``--atlas`` of a command's INPUT.
MASK_OR_ATLAS = "mask or atlas"

_NATURAL = Interval(Integral, 0, None, closed="left")
_CORRELATION = Interval(Real, -1, 1, closed="both")
_COUNT = Interval(Integral, 1, None, closed="left")
#: The SLURM jobs' defaults (a SLURM option left None takes its default).
_JOBS = SlurmJobs()

DEVICE_HELP = "'auto' (CUDA when present), 'cpu', 'cuda' or 'cuda:N'."
MEMORY_HELP = "Most memory to use, e.g. '8GB' (default: 80%% of free)."
PRECISION_HELP = (
    "Arithmetic of thresholded correlations on CUDA: 'exact' decides with TF32 "
    "tensor cores and recomputes the pairs close to the threshold (the fp32 result, "
    "faster), 'fp32' fp32 products, 'tf32' TF32 products (fastest, approximate near "
    "the threshold). The CPU computes in fp32."
)
WAIT_HELP = (
    "When another connscale run is writing the same output, wait for it to finish "
    "instead of stopping with an error naming its pid."
)
#: Help of every command's --seed. The CLI seeds 0 by default so that a
#: command line, and the output set it publishes, is reproducible; the API's
#: ``random_state`` defaults to None, as scikit-learn's.
SEED_HELP = (
    "Seed of the random steps (the API's random_state); default 0, so the "
    "same command gives the same output."
)


def device(
    doc: str = "'auto': CUDA when present, else the CPU; recorded in the log.",
    *,
    group: str | None = COMPUTATION,
    levels: tuple[str, ...] = (),
    fingerprint: bool = False,
):
    """``device``, ``--device``: where to compute."""
    return param(
        "auto",
        fingerprint=fingerprint,
        constraints=["device"],
        doc=doc,
        flag=Flag(("--device",), group=group, type="device", levels=levels, help=DEVICE_HELP),
    )


def dtype(*, group: str | None = COMPUTATION, levels: tuple[str, ...] = ()):
    """``dtype``, ``--dtype``: the working precision."""
    return param(
        "float32",
        constraints=[StrOptions(DTYPES)],
        doc="Working precision.",
        flag=Flag(("--dtype",), group=group, choices=DTYPES, levels=levels,
                  help="Working precision."),
    )  # fmt: skip


def memory_limit(
    doc: str = "Most memory the run may use, in bytes or as a string such as ``'8GB'``;\n"
    "None: up to 80% of what is free.",
    *,
    group: str | None = COMPUTATION,
    levels: tuple[str, ...] = (),
):
    """``memory_limit``, ``--memory-limit``: the most memory to use."""
    return param(
        None,
        fingerprint=False,
        constraints=["memory", None],
        doc=doc,
        flag=Flag(("--memory-limit",), group=group, type="memory", metavar="SIZE",
                  levels=levels, help=MEMORY_HELP),
    )  # fmt: skip


def verbose(
    doc: str = "0: silent; 1: progress and a summary; 2: also debug logs and tracebacks.",
    *,
    group: str | None = COMPUTATION,
    levels: tuple[str, ...] = (),
    quiet_help: str = "No progress bars or messages.",
):
    """``verbose``: ``-v``/``--verbose`` counts up, ``-q``/``--quiet`` sets 0."""
    return param(
        1,
        fingerprint=False,
        constraints=[_NATURAL, "boolean"],
        doc=doc,
        flag=(
            Flag(("-v", "--verbose"), group=group, action="count", levels=levels,
                 help="More output (-vv: debug log and tracebacks)."),
            Flag(("-q", "--quiet"), group=group, action="store_const", const=0,
                 dest="verbose", default=None, levels=levels,
                 help=quiet_help),
        ),
    )  # fmt: skip


def precision(
    doc: str = "Arithmetic of thresholded correlations on CUDA (see\n"
    ":func:`connscale.correlation`).",
    *,
    flag_help: str = PRECISION_HELP,
    group: str | None = None,
    levels: tuple[str, ...] = (),
):
    """``precision`` and its ``--precision``."""
    flag = Flag(("--precision",), group=group, choices=PRECISIONS, levels=levels, help=flag_help)
    return param("exact", constraints=[StrOptions(PRECISIONS)], doc=doc, flag=flag)


def threshold(
    doc: str,
    *,
    flag_help: str,
    default: float | None = None,
    group: str | None = None,
):
    """``threshold``, ``--threshold``: a correlation in [-1, 1]."""
    return param(
        default,
        constraints=[_CORRELATION] if default is not None else [_CORRELATION, None],
        doc=doc,
        flag=Flag(("--threshold",), group=group, type="correlation", help=flag_help),
    )


def absolute(
    doc: str = "With a threshold, keep ``abs(r) >= threshold`` (strong negative\n"
    "correlations too).",
    *,
    flag_help: str = "With --threshold, keep |r| >= THRESHOLD.",
    group: str | None = None,
):
    """``absolute``, ``--absolute``: threshold ``|r|`` instead of ``r``."""
    return param(
        False,
        constraints=["boolean"],
        doc=doc,
        flag=Flag(("--absolute",), group=group, action="store_true", help=flag_help),
    )


def seed(
    doc: str = "Seed of the random steps (the API's ``random_state``).",
    *,
    group: str | None = None,
    flag_help: str = SEED_HELP,
):
    """``seed``, ``--seed``: the random steps' seed (the API's ``random_state``)."""
    return param(
        0,
        constraints=[_NATURAL],
        doc=doc,
        flag=Flag(("--seed",), group=group, type="natural", help=flag_help),
    )


def out(doc: str = "Output folder (new, or an existing folder).", *, group: str | None = None):
    """``out``, ``--out`` (required): the output folder."""
    return param(
        constraints=["path"],
        doc=doc,
        flag=Flag(("--out",), group=group, type="output_folder", required=True,
                  help="Output folder."),
    )  # fmt: skip


def wait(
    doc: str = "When another run is writing the same output, wait for it to finish\n"
    "instead of failing with :class:`~connscale.io.OutputLockedError` naming its pid.",
    *,
    group: str | None = None,
    levels: tuple[str, ...] = (),
):
    """``wait``, ``--wait``: wait for the run holding the output's lock."""
    return param(
        False,
        fingerprint=False,
        constraints=["boolean"],
        doc=doc,
        flag=Flag(("--wait",), group=group, action="store_true", levels=levels, help=WAIT_HELP),
    )


def overwrite(
    doc: str = "Replace a result published with other parameters (without it such a\n"
    "run fails, naming the parameters that differ).",
    *,
    flag_help: str = "Replace a result already in the output folder that was made with "
    "other parameters (never done without this flag).",
    group: str | None = None,
    levels: tuple[str, ...] = (),
):
    """``overwrite``, ``--overwrite``: replace outputs made with other parameters."""
    return param(
        False,
        fingerprint=False,
        constraints=["boolean"],
        doc=doc,
        flag=Flag(
            ("--overwrite",), group=group, action="store_true", levels=levels, help=flag_help
        ),
    )


def input_file(
    doc: str = "A 4-D fMRI NIfTI (``.nii``/``.nii.gz``) or ROI time series\n"
    "(``.tsv``/``.csv``/``.npy``, one column per region).",
    *,
    flag_help: str = "4-D fMRI NIfTI (.nii/.nii.gz) or ROI time series "
    "(.tsv/.csv/.npy, one column per region).",
):
    """``input``, the positional INPUT: a scan or a table of series."""
    return param(
        constraints=["path"],
        doc=doc,
        flag=Flag(("input",), type="input_file", metavar="INPUT", help=flag_help),
    )


def mask(*, group: str | None = MASK_OR_ATLAS):
    """``mask``, ``--mask``: voxel series of a NIfTI INPUT."""
    return param(
        None,
        constraints=["path", None],
        doc="Brain mask NIfTI on the fMRI grid (voxel-level series); None: computed\n"
        "from the image.",
        flag=Flag(("--mask",), group=group, type="input_file",
                  help="Brain mask NIfTI on the fMRI grid (voxel-level series). "
                  "Default for NIfTI input: computed from the image."),
    )  # fmt: skip


def atlas(*, group: str | None = MASK_OR_ATLAS):
    """``atlas``, ``--atlas``: region-mean series of a NIfTI INPUT."""
    return param(
        None,
        constraints=["path", None],
        doc="Labels NIfTI (0 = background): region-mean series.",
        flag=Flag(("--atlas",), group=group, type="input_file",
                  help="Labels NIfTI (0 = background): region-mean series."),
    )  # fmt: skip


def atlas_name(
    doc: str = "The outputs' ``seg-`` label; None: the atlas file's ``atlas-`` entity,\n"
    "or the letters and digits of its stem (a ``_timeseries`` input: its own\n"
    "``seg-``).",
    *,
    group: str | None = None,
    levels: tuple[str, ...] = (),
):
    """``atlas_name``, ``--atlas-name``: the ``seg-`` entity of the outputs."""
    return param(
        None,
        constraints=[str, None],
        doc=doc,
        flag=Flag(("--atlas-name",), group=group, type="bids_label", metavar="NAME",
                  levels=levels,
                  help="The atlas's name in output file names (seg-NAME; letters and "
                  "digits). Default: the atlas file's atlas- entity, or the "
                  "letters and digits of its stem; for a _timeseries input, its "
                  "own seg- entity."),
    )  # fmt: skip


#: The window shapes of the commands that slide windows (``--taper``).
TAPERS = ("rectangular", "gaussian")


def window(*, required: bool = True, group: str | None = None):
    """``window``, ``--window``: a window length in time points (``22``) or seconds (``44s``)."""
    return param(
        dataclasses.MISSING if required else None,
        constraints=[str, Integral] if required else [str, Integral, None],
        doc="Window length in time points (``'22'``) or seconds (``'44s'``, with the\n"
        "repetition time); for the Gaussian taper, the rectangle's width.",
        flag=Flag(("--window",), group=group, type="window", required=required, metavar="W",
                  help="Window length in time points (22) or seconds (44s; needs the "
                  "TR). For --taper gaussian, the rectangle's width."),
    )  # fmt: skip


def step(*, group: str | None = None):
    """``step``, ``--step``: between window starts, in time points or seconds."""
    return param(
        "1",
        constraints=[str, Integral],
        doc="Between window starts, in time points (``'1'``) or seconds (``'2s'``).",
        flag=Flag(("--step",), group=group, type="step", metavar="S",
                  help="Between window starts, in time points (1) or seconds (2s)."),
    )  # fmt: skip


def t_r(*, group: str | None = None):
    """``t_r``, ``--t-r``: the repetition time in seconds."""
    return param(
        None,
        constraints=[Interval(Real, 0, None, closed="neither"), None],
        doc="Repetition time in seconds; None: from the NIfTI header.",
        flag=Flag(("--t-r",), group=group, type="positive", metavar="SECONDS",
                  help="Repetition time (default: from the NIfTI header)."),
    )  # fmt: skip


def taper(*, group: str | None = None):
    """``taper``, ``--taper``: the window's shape."""
    return param(
        "rectangular",
        constraints=[StrOptions(set(TAPERS))],
        doc="Window shape: ``'rectangular'``, or Allen et al. (2014)'s rectangle\n"
        "convolved with a Gaussian (weighted Pearson).",
        flag=Flag(("--taper",), group=group, choices=TAPERS,
                  help="Window shape: rectangular, or Allen et al. (2014)'s rectangle "
                  "convolved with a Gaussian (weighted Pearson)."),
    )  # fmt: skip


def taper_sigma(*, group: str | None = None):
    """``taper_sigma``, ``--taper-sigma``: the Gaussian taper's sigma."""
    return param(
        3.0,
        constraints=[Interval(Real, 0, None, closed="neither")],
        doc="Sigma of the Gaussian taper, in time points.",
        flag=Flag(("--taper-sigma",), group=group, type="positive", metavar="TRS",
                  help="Sigma of the Gaussian taper, in time points."),
    )  # fmt: skip


# The Dask engine's cluster and the SLURM jobs' options (``--cluster slurm``).
# ``tasks`` names the command's tasks in the help: "scans", "runs".


def cluster(*, tasks: str, group: str | None = None, levels: tuple[str, ...] = ()):
    """``cluster``, ``--cluster``: a Dask scheduler, SLURM jobs or a Spark master."""
    return param(
        None,
        fingerprint=False,
        doc_type="str or None",
        doc="Dask scheduler address, ``'slurm'`` (Dask workers in SLURM jobs, at\n"
        f"most ``n_jobs`` jobs at once, as many as the {tasks} left need; see\n"
        ":mod:`connscale.engines.slurm`) or Spark master URL (see\n"
        ":func:`connscale.engines.get_engine`).",
        flag=Flag(("--cluster",), group=group, metavar="ADDR", levels=levels,
                  help="Dask scheduler address (default: a LocalCluster), 'slurm' "
                  "(workers in SLURM jobs, needs dask-jobqueue) or Spark master URL "
                  "(default: local[N])."),
    )  # fmt: skip


def queue(*, group: str | None = None, levels: tuple[str, ...] = ()):
    """``queue``, ``--queue``: the SLURM jobs' partition."""
    return param(
        None,
        fingerprint=False,
        constraints=[str, None],
        doc="``cluster='slurm'``: the jobs' partition (``sbatch -p``); None: the\n"
        "cluster's default one.",
        flag=Flag(("--queue",), group=group, metavar="PARTITION", levels=levels,
                  help="--cluster slurm: the jobs' partition (default: the cluster's default)."),
    )  # fmt: skip


def walltime(*, tasks: str, group: str | None = None, levels: tuple[str, ...] = ()):
    """``walltime``, ``--walltime``: each SLURM job's time limit."""
    return param(
        None,
        fingerprint=False,
        constraints=[str, None],
        doc="``cluster='slurm'``: each job's time limit, as ``sbatch -t`` takes it\n"
        f"(``'HH:MM:SS'``, ``'D-HH:MM:SS'``...); None: ``{_JOBS.walltime!r}``. A job that\n"
        f"reaches it is resubmitted while {tasks} are left.",
        flag=Flag(("--walltime",), group=group, metavar="TIME", levels=levels,
                  help="--cluster slurm: each job's time limit, e.g. 02:00:00 (default: "
                  f"{_JOBS.walltime}); a job ended by SLURM is resubmitted while {tasks} are "
                  "left."),
    )  # fmt: skip


def cores_per_job(*, group: str | None = None, levels: tuple[str, ...] = ()):
    """``cores_per_job``, ``--cores-per-job``: cores of each SLURM job."""
    return param(
        None,
        fingerprint=False,
        constraints=[_COUNT, None],
        doc="``cluster='slurm'``: cores of each job, each running a worker process;\n"
        f"None: {_JOBS.cores}.",
        flag=Flag(("--cores-per-job",), group=group, type="count", metavar="N", levels=levels,
                  help="--cluster slurm: cores of each job, one worker process each "
                  f"(default: {_JOBS.cores})."),
    )  # fmt: skip


def mem_per_job(*, group: str | None = None, levels: tuple[str, ...] = ()):
    """``mem_per_job``, ``--mem-per-job``: memory of each SLURM job."""
    return param(
        None,
        fingerprint=False,
        constraints=["memory", None],
        doc="``cluster='slurm'``: memory of each job, shared by its workers; None:\n"
        f"``{_JOBS.memory!r}``.",
        flag=Flag(("--mem-per-job",), group=group, type="memory", metavar="SIZE",
                  levels=levels,
                  help="--cluster slurm: memory of each job, e.g. 16GB "
                  f"(default: {_JOBS.memory})."),
    )  # fmt: skip


def gpus_per_job(*, group: str | None = None, levels: tuple[str, ...] = ()):
    """``gpus_per_job``, ``--gpus-per-job``: GPUs of each SLURM job."""
    return param(
        None,
        fingerprint=False,
        constraints=[_NATURAL, None],
        doc="``cluster='slurm'``: GPUs of each job (``--gres=gpu:N``); a job with\n"
        f"GPUs runs one worker process (give ``device='cuda'``); None: {_JOBS.gpus}.",
        flag=Flag(("--gpus-per-job",), group=group, type="natural", metavar="N", levels=levels,
                  help="--cluster slurm: GPUs of each job; one worker per job then "
                  f"(with --device cuda) (default: {_JOBS.gpus})."),
    )  # fmt: skip
