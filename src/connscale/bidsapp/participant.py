"""Participant level: each fMRIPrep run denoised and turned into BIDS connectivity derivatives.

One task per run, on any :mod:`connscale.engines` engine. The atlas is
checked once and each run's space against its own before any task
(:mod:`connscale.bidsapp.atlas`). A task loads the run's BOLD and its own
brain mask, takes the atlas onto the BOLD grid (nearest neighbour, as
``NiftiLabelsMasker(resampling_target='data')``, recorded in the sidecars),
builds the run's cleaning operator from its confounds
(:mod:`connscale.denoise`), extracts and cleans the region series on the
device, computes their Pearson correlation, and publishes, under the run's
folder ``sub-<s>/[ses-<t>/]func/``, the files of its set through
:class:`connscale.io.publish.OutputSet` (a lock, a staging folder, a
manifest)::

    <source>_seg-<atlas>_meas-PearsonCorrelation_desc-<strategy>_relmat.tsv / .json
    <source>_seg-<atlas>_desc-<strategy>_timeseries.tsv / .json
    <source>_seg-<atlas>_desc-<strategy>_report.html  (see connscale.bidsapp.report)
    <source>_seg-<atlas>_meas-PearsonCorrelation_desc-<strategy>_dfc.h5 / .json    ('dfc')
    <source>_seg-<atlas>_meas-PearsonCorrelation_desc-<strategy>_pairs.h5 / .json  ('pairs')

and, with the measure ``voxelfc``, the voxel-level set of the run (it does
not depend on the atlas, so a second atlas reuses it)::

    <source>_meas-PearsonCorrelation_desc-<strategy>_relmat.h5 / .json

and, with the measures ``maps`` and ``networks``, voxel maps (degree,
eigenvector centrality, global correlation) and r1DL networks of the
cleaned voxel series, each its own set (:mod:`connscale.bidsapp.voxel_measures`)::

    <source>_meas-r<θ>_stat-degree_desc-<strategy>_boldmap.nii.gz / .json (also ecm, gcor)
    <source>_stat-r1dl_desc-<strategy>_components.nii.gz, _mixing.tsv / .json

``dfc`` is :func:`connscale.dynamic_correlation` of the cleaned region series
(the HDF5 store of :mod:`connscale.fc.dynamic_result`), ``pairs`` is
:func:`connscale.fc.pairwise_dfc` with :func:`connscale.fc.pair_summary`
(the layout ``connscale cohort`` writes), ``voxelfc`` is
:func:`connscale.correlation` of the cleaned voxel series streamed into the
``relmat`` store of :mod:`connscale.io.hdf5` (strictly-upper triangle), with
the run's brain mask (``/mask``), the affine (``/affine``) and each voxel's
indices and scanner coordinates (``/voxels/ijk``, ``/voxels/xyz``; row ``v``
of the series is voxel ``ijk[v]``, in the C order of ``numpy.nonzero(mask)``)
so every value maps back to its pair of voxels. Every window-based store
records its window onsets in the kept series, in source volumes and in
seconds.

The runs go through the batch runner (:mod:`connscale.engines.batch`), as
the cohort's scans do. A run whose sets are already published with the same
inputs and parameters is skipped (:mod:`connscale.bidsapp.run_sets`); a
failing run is recorded (``logs/participant_report.json``,
``logs/participant_errors.tsv``: the logs of every batch) and the others
complete, a run that kills its worker on every attempt included
(``WorkerLost``). ``memory_limit`` covers a whole run: its measures get what
the run's data (read and cleaned) leave of it, and a run whose data alone
exceed it is recorded as a ``MemoryLimitError``. ``device='auto'`` is
resolved once per call: CUDA when torch sees a GPU and one run per GPU
computes at a time (the serial backend or ``gpus``), else the CPU; the
report records it.

What the data cannot support is decided before computing and recorded, never
published as a number:

- A run whose residual degrees of freedom (:func:`connscale.denoise.residual_dof`:
  kept volumes minus the mean, the trend, the confounds and the filter's
  attenuation) fall below ``min_dof`` is not cleaned: its record has status
  ``refused`` with the numbers, and a row in the errors table. So is a run
  whose BOLD is constant over time everywhere (in every region or voxel read).
- A region or voxel constant over time, or with no variance left after
  cleaning, has NaN correlations; the run gives one
  :class:`~connscale.fc.normalize.ConstantSeriesWarning` (and one entry of its
  record's ``warnings``), and the sidecars name the regions
  (``ConstantRegions``) or count the voxels (``NumberOfConstantVoxels``).
- A measure that fails (a window longer than the kept volumes, a full disk...)
  is recorded with its reason (the record's ``failed_measures``, one row per
  measure in the errors table, ``failed_measures`` in the manifest of its set)
  and the run's other measures are published: the run's status is
  ``partial``. A re-run tries the failed measures again.
"""

from __future__ import annotations

import functools
import logging
import warnings
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from numbers import Integral, Real
from pathlib import Path

from connscale._choices import MEASURES, REGION_MEASURES
from connscale._validation import (
    MIN_WINDOW_LENGTH,
    Interval,
    SequenceOf,
    StrOptions,
    resolve_n_jobs,
    validate_params,
)
from connscale.bidsapp.atlas import (
    check_atlas,
    read_atlas_labels,
    refuse_other_spaces,
)
from connscale.bidsapp.cleaning import DecodedRun, RunRefused, decode_run
from connscale.bidsapp.config import WINDOWED, ParticipantConfig
from connscale.bidsapp.gpus import gpu_plan as _gpu_plan
from connscale.bidsapp.layout import BoldRun, find_runs
from connscale.bidsapp.outputs import DATASET_LINK, failure_reason
from connscale.bidsapp.region_measures import write_region
from connscale.bidsapp.run_sets import is_published, needs_decode, output_sets, set_measures
from connscale.denoise import STRATEGIES
from connscale.engines import ENGINES
from connscale.engines.batch import (
    STATUSES,
    BatchLogs,
    BatchOptions,
    Progress,
    ReadAheadEngine,
    Task,
    TaskBudget,
    batch_device,
    count_statuses,
    logs_folder,
    map_tasks,
    run_batch,
)
from connscale.io.bids import dataset_relative

__all__ = [
    "MEASURES",
    "STATUSES",
    "ParticipantConfig",
    "ParticipantReport",
    "read_atlas_labels",
    "run_participant",
    "write_dataset_description",
]

logger = logging.getLogger("connscale")


@dataclass
class ParticipantReport:
    """What :func:`run_participant` did: one record per run, in run order.

    Each record's ``status`` is one of :data:`STATUSES`: ``ok``, ``skipped``
    (already published), ``partial`` (``failed_measures`` names the measures
    that failed and why; the others are published), ``refused`` (the data
    cannot support the run: ``error`` says why, ``dof`` holds the numbers) or
    ``error``.
    """

    records: list[dict]
    report_path: Path
    errors_path: Path
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def counts(self) -> dict:
        """Runs per status: ``ok``, ``skipped`` and ``error`` always, ``partial`` and
        ``refused`` when there are any."""
        return count_statuses(self.records)

    @property
    def n_failed(self) -> int:
        """Runs not fully published: failed, refused or partial."""
        return sum(v for k, v in self.counts.items() if k not in ("ok", "skipped"))


def write_dataset_description(output: Path, derivatives: Path) -> Path:
    """``dataset_description.json`` of the output, with ``GeneratedBy`` and the input's link.

    Raises
    ------
    FileExistsError
        The output folder is another tool's dataset.
    """
    from connscale.io.bids import write_dataset_description as write_description

    return write_description(
        output,
        name="connscale connectivity derivatives",
        links={DATASET_LINK: dataset_relative(derivatives, output)},
        exclusive=True,
    )


def run_one(task: tuple, prepared: Future | None = None) -> dict:
    """Process one run (``task`` is ``(config, run)``): its record's fields.

    ``prepared`` is a future of :func:`prefetch` started ahead (the serial
    engine's read-ahead); its error is the run's error. A run the data cannot
    support comes back ``refused``; any other failure raises (the batch
    runner records it).
    """
    config, run = task
    try:
        if run.problem:
            raise ValueError(run.problem)
        decoded = None if prepared is None else prepared.result()
        return _process(config, run, decoded)
    except RunRefused as exc:
        logger.warning("%s refused: %s", run.name, exc)
        return {"status": "refused", "error": str(exc), **exc.details}


def prefetch(task: tuple) -> DecodedRun | None:
    """Read a run ahead of its task (:func:`decode_run`); None when its sets are all
    published (nothing to read)."""
    config, run = task
    return decode_run(config, run) if needs_decode(config, run) else None


def _run_task(config: ParticipantConfig, run: BoldRun) -> Task:
    """The batch runner's task of one run."""
    fields = {"session": run.entities.get("ses"), "outputs": []}
    return Task(
        run.name, run.entities.get("sub"), str(run.bold), run_one, (config, run), fields, prefetch
    )


def _published(task: Task) -> bool:
    """Whether every set of the run is published with its fingerprint (the batch
    runner's "is it done?" hook)."""
    config, run = task.payload
    return not run.problem and not needs_decode(config, run)


def _held_bytes(config: ParticipantConfig, decoded: DecodedRun) -> int:
    """Bytes a run holds through its task: what was read, and its widest cleaned series."""
    import numpy as np

    arrays = (decoded.data, decoded.region_means, decoded.mask, decoded.atlas)
    read = sum(a.nbytes for a in arrays if a is not None)
    widths = [] if decoded.region_means is None else [decoded.region_means.shape[1]]
    if decoded.data is not None and any(m not in REGION_MEASURES for m in config.measures):
        widths.append(decoded.data.shape[1])
    kept = decoded.context["operator"].volumes.size
    return read + kept * max(widths, default=0) * np.dtype(config.dtype).itemsize


def _process(config: ParticipantConfig, run: BoldRun, decoded: DecodedRun | None = None) -> dict:
    from contextlib import ExitStack

    from connscale.fc.normalize import ConstantSeriesWarning
    from connscale.io.publish import OutputSet

    timings = {"decode": 0.0, "clean": 0.0, "compute": 0.0, "write": 0.0}
    with ExitStack() as stack:
        todo, done = {}, 0
        for kind, (folder, prefix, fingerprint) in output_sets(config, run).items():
            out = stack.enter_context(
                OutputSet(
                    folder,
                    prefix,
                    command="bids participant",
                    fingerprint=fingerprint,
                    overwrite=config.overwrite,
                )
            )
            if is_published(out):
                done += 1
            else:
                todo[kind] = out
        if not todo:
            return {"status": "skipped", "outputs": []}
        if decoded is None:
            decoded = decode_run(config, run)
        # memory_limit covers the whole task: the measures get what the run's data leave.
        budget = TaskBudget(config.memory_limit)
        budget.hold(_held_bytes(config, decoded), f"The data of {run.name} (read and cleaned)")
        config = replace(config, memory_limit=budget.left)
        timings["decode"] = decoded.seconds
        timings["clean"] = decoded.clean_seconds
        context = {**decoded.context, "warnings": []}
        record = {
            "status": "ok",
            "outputs": [],
            "mean_fd": context["mean_fd"],
            "n_volumes": int(decoded.img.shape[3]),
            "n_kept": int(context["operator"].volumes.size),
            "n_voxels": int(decoded.mask.sum()),
            "dof": context["dof"],
        }
        failed = {}
        with warnings.catch_warnings():
            # The run's constant series are reported once, below, not per measure.
            warnings.simplefilter("ignore", ConstantSeriesWarning)
            for kind, out in todo.items():
                try:
                    written, set_failed = _write_set(
                        kind, config, run, decoded, out, context, timings
                    )
                except Exception as exc:  # noqa: BLE001 - recorded per measure
                    failed.update(dict.fromkeys(set_measures(config, kind), failure_reason(exc)))
                    continue
                failed.update(set_failed)
                if kind == "region":
                    record["n_regions"] = int(decoded.regions.size)
                record["outputs"] += [str(out.out_dir / n) for n in written]
    if failed:
        record["failed_measures"] = failed
        record["status"] = "partial" if record["outputs"] or done else "error"
        if record["status"] == "error":
            record["error"] = "; ".join(f"{m}: {reason}" for m, reason in failed.items())
    messages = list(dict.fromkeys(context["warnings"]))
    if messages:
        record["warnings"] = messages
        warnings.warn(" ".join(messages), ConstantSeriesWarning, stacklevel=2)
        logger.warning("%s: %s", run.name, " ".join(messages))
    record["timings"] = {k: round(v, 6) for k, v in timings.items()}
    return record


def _write_set(kind, config, run, decoded, out, context, timings) -> tuple[list[str], dict]:
    """Compute and publish one set of the run: the names written and the measures
    that failed (``{measure: reason}``; a set that fails as a whole raises)."""
    if kind == "region":
        return write_region(config, run, decoded, out, context, timings)
    from connscale.bidsapp import voxel_measures

    write = getattr(voxel_measures, f"write_{kind}")
    return write(config, run, decoded, out, context, timings), {}


def output_lock(output: Path, *, wait: bool = False):
    """The lock of the BIDS-App on its output folder (``<output>/.bids.lock``).

    The participant level holds it from its first write to its logs, the
    group level while it reads the runs' outputs and writes its own: a
    second run on the same output stops at once naming the first's pid, or
    waits for it (``wait``), instead of counting the first's runs, locked,
    as failures and replacing its logs.
    """
    from connscale.io.lock import OutputLock

    return OutputLock(
        Path(output) / "bids", wait=wait, label=f"The BIDS-App output folder {output}"
    )


def run_serial(
    config: ParticipantConfig, runs: list[BoldRun], *, readers: int = 1, verbose: int = 0
) -> list[dict]:
    """The runs in order in this process, reading the next ones while this one computes.

    ``readers`` background threads read runs (:func:`prefetch`: the BOLD,
    decompressed with the GIL released, and the confounds) at most
    ``readers`` runs ahead of the one being computed
    (:class:`~connscale.engines.batch.ReadAheadEngine`), so at most
    ``readers + 1`` runs are in memory; a run whose outputs are all published
    is not read at all. ``verbose``: a progress bar over the runs.
    """
    progress = Progress("bids participant", "runs", "run", len(runs), 0, verbose)
    try:
        tasks = [_run_task(config, run) for run in runs]
        return map_tasks(ReadAheadEngine(readers), tasks, threads=config.threads, progress=progress)
    finally:
        progress.close()


def _open_engine(environments: list[dict], backend: str, n_jobs: int | None):
    """The engine of the runs: a Dask worker per GPU, the serial engine reading
    ahead (``n_jobs`` readers), or ``backend``."""
    from connscale.engines import get_engine

    if environments:
        from connscale.bidsapp.gpus import THREADS_PER_GPU_WORKER, gpu_engine

        threads = THREADS_PER_GPU_WORKER if n_jobs is None else n_jobs
        return gpu_engine(environments, threads=threads)
    if backend == "serial":
        return ReadAheadEngine(1 if n_jobs is None else n_jobs)
    return get_engine(backend, n_jobs=n_jobs)


_POSITIVE = [Interval(Real, 0, None, closed="neither"), None]


@validate_params(
    {
        "derivatives": ["path"],
        "output": ["path"],
        "atlas": ["path"],
        "atlas_name": [str],
        "atlas_labels": ["path", None],
        "atlas_space": [str, None],
        "strategy": [StrOptions(STRATEGIES)],
        "strategy_params": [dict, None],
        "measures": [SequenceOf(StrOptions(MEASURES))],
        "window_length": [Interval(Integral, MIN_WINDOW_LENGTH, None, closed="left"), None],
        "step": [Interval(Integral, 1, None, closed="left")],
        "pairs_threshold": [Interval(Real, -1, 1, closed="both")],
        "degree_thresholds": [SequenceOf(Interval(Real, -1, 1, closed="both"))],
        "precision": [StrOptions({"exact", "fp32", "tf32"})],
        "n_atoms": [Interval(Integral, 1, None, closed="left")],
        "network_sparsity": [
            Interval(Integral, 1, None, closed="left"),
            Interval(Real, 0, 1, closed="right"),
        ],
        "t_r": _POSITIVE,
        "min_dof": [Interval(Real, 0, None, closed="left")],
        "detrend": ["boolean"],
        "low_pass": _POSITIVE,
        "high_pass": _POSITIVE,
        "backend": [StrOptions(ENGINES)],
        "n_jobs": ["n_jobs", None],
        "device": ["device"],
        "dtype": [StrOptions({"float32", "float64"})],
        "threads_per_task": [Interval(Integral, 1, None, closed="left")],
        "memory_limit": ["memory", None],
        "work_dir": ["path", None],
        "reports": ["boolean"],
        "overwrite": ["boolean"],
        "wait": ["boolean"],
        "verbose": [Interval(Integral, 0, None, closed="left"), "boolean"],
    }
)
def run_participant(
    derivatives,
    output,
    *,
    atlas,
    atlas_name: str,
    atlas_labels=None,
    atlas_space: str | None = None,
    strategy: str = "simple",
    strategy_params: dict | None = None,
    measures=("fc", "timeseries"),
    window_length: int | None = None,
    step: int = 1,
    pairs_threshold: float = 0.5,
    degree_thresholds=(0.25,),
    precision: str = "exact",
    n_atoms: int = 10,
    network_sparsity=0.07,
    participant_label=None,
    session_label=None,
    task=None,
    run=None,
    space=None,
    t_r: float | None = None,
    min_dof: float = 10,
    detrend: bool = True,
    standardize: str | None = "zscore_sample",
    low_pass: float | None = None,
    high_pass: float | None = None,
    backend: str = "local",
    n_jobs: int | None = None,
    device: str = "cpu",
    dtype: str = "float32",
    threads_per_task: int = 1,
    memory_limit=None,
    gpus=None,
    work_dir=None,
    reports: bool = True,
    overwrite: bool = False,
    wait: bool = False,
    verbose: int = 1,
) -> ParticipantReport:
    """Denoised atlas connectivity of every matching fMRIPrep run, as BIDS derivatives.

    Parameters
    ----------
    derivatives : path
        fMRIPrep's output folder.
    output : path
        The connscale derivatives folder (``dataset_description.json`` at
        its root, ``sub-*/[ses-*/]func/`` per run, ``logs/``).
    atlas : path
        3-D integer labels image (0 = background), resampled to each run's
        grid by nearest neighbour when needed (recorded in the sidecars'
        ``AtlasResampling`` and the run's report). Checked once before any
        run (:func:`connscale.bidsapp.atlas.check_atlas`).
    atlas_name : str
        The ``seg-`` entity of the outputs (letters and digits).
    atlas_labels : path or None
        Region names (BIDS ``dseg.tsv``: ``index``, ``name``), used as
        headers; without it the headers are ``label-<value>``.
    atlas_space : str or None
        The atlas's space (``MNI152NLin2009cAsym``, ``T1w``...; ``native``
        for runs without a ``space-`` entity); None: the ``space-`` or
        ``tpl-`` entity of its file name, and without one the call is
        refused. A run in another space is refused (recorded, naming both
        spaces); the others go on.
    strategy : {'simple', 'scrubbing', 'compcor', 'ica_aroma', 'none'}
        The denoising strategy (the ``desc-`` entity).
    strategy_params : dict or None
        Extra parameters of ``load_confounds_strategy``.
    measures : list or tuple of {'fc', 'timeseries', 'dfc', 'pairs', 'voxelfc', \
'maps', 'networks'}
        Atlas level: ``fc`` (``_relmat.tsv``), ``timeseries``, ``dfc``
        (sliding-window correlation of all region pairs, ``_dfc.h5``) and
        ``pairs`` (each pair's windowed course and summaries, ``_pairs.h5``);
        voxel level: ``voxelfc`` (every pair of in-mask voxels,
        ``_relmat.h5`` with the mask and the voxel coordinates), ``maps``
        (degree, eigenvector centrality and global correlation maps,
        ``_boldmap.nii.gz``) and ``networks`` (r1DL spatial maps and time
        courses, ``_components.nii.gz`` and ``_mixing.tsv``); see
        :mod:`connscale.bidsapp.voxel_measures`.
    window_length, step : int
        Sliding windows of ``dfc`` and ``pairs``, in kept volumes
        (``window_length`` required for them).
    pairs_threshold : float, default=0.5
        ``pairs``: the threshold of the fraction-above summary.
    degree_thresholds : sequence of float, default=(0.25,)
        ``maps``: binary and weighted degree count the other voxels with
        r above each threshold (one pass for all).
    precision : {'exact', 'fp32', 'tf32'}, default='exact'
        ``maps``: the arithmetic of the degree's thresholded correlations on
        CUDA (see :func:`connscale.degree_centrality`).
    n_atoms : int, default=10
        ``networks``: the number of r1DL networks.
    network_sparsity : int or float, default=0.07
        ``networks``: voxels per network, a count or a fraction of the
        in-mask voxels (``connscale r1dl --sparsity``).
    participant_label, session_label, task, run, space, t_r
        Filters and TR fallback of :func:`connscale.bidsapp.find_runs`.
    min_dof : float, default=10
        Fewest residual degrees of freedom a run may keep
        (:func:`connscale.denoise.residual_dof`: kept volumes minus the
        mean, the trend, the independent confounds and what the filter
        removes); a run below it is refused before it is cleaned (status
        ``refused``, the numbers in its record and the errors table). Why
        10: the correlation of two unrelated series with ``d`` degrees of
        freedom has standard deviation about ``1/sqrt(d)``, so at ``d = 10``
        chance alone already reaches ``|r| = 0.6`` (two standard deviations),
        and at ``d`` near 0 the cleaned series are rounding noise (|r| near 1
        everywhere). It is a floor against degenerate runs (12 of 120 volumes
        kept against 36 regressors), not a recommendation: connectomes want
        far more (minutes of data after censoring).
    detrend, standardize, low_pass, high_pass
        Cleaning as in :func:`nilearn.signal.clean` (``t_r`` from each run).
    backend : {'serial', 'local', 'dask', 'spark'}, default='local'
        Where the run tasks execute (:func:`connscale.engines.get_engine`).
        'serial' runs them in this process, reading the next ``n_jobs``
        runs (BOLD and confounds) in background threads while this one
        computes (:func:`run_serial`).
    gpus : 'all', int or None
        Use every GPU of the node (or the first N): one Dask worker process
        per GPU (:mod:`connscale.bidsapp.gpus`), ``device='cuda'`` in each,
        ``n_jobs`` threads (runs in flight) per worker; ``backend`` is then
        not used. On a node without GPU the report's ``notes`` say so and the
        runs go to ``backend`` on the CPU.
    n_jobs : int or None
        Workers (None or -1: every core; -2: all but one, ...); with
        ``backend='serial'``, the threads reading runs ahead (None: 1; at most
        ``n_jobs + 1`` runs in memory); with ``gpus``, the threads of each GPU
        worker (None: 2).
    device : str, default='cpu'
        Device of each task's cleaning and correlation.
    dtype : {'float32', 'float64'}
    threads_per_task : int, default=1
    memory_limit : int, str or None
        Passed to :func:`connscale.correlation`.
    work_dir : path or None
        Scratch folder (the pybids index).
    reports : bool, default=True
        Write each run's HTML report.
    overwrite : bool, default=False
        Replace a run's published set made with other parameters (without
        it such a run fails, naming the parameters that differ).
    wait : bool, default=False
        When another participant or group run holds ``output``
        (:func:`output_lock`), wait for it instead of failing with
        :class:`connscale.io.lock.OutputLockedError` naming its pid.
    verbose : int, default=1

    Returns
    -------
    ParticipantReport
    """
    from connscale.io.bids import bids_name as _check_name

    measures = tuple(dict.fromkeys(measures))
    if (backend == "serial" or gpus is not None) and n_jobs is not None:
        n_jobs = resolve_n_jobs(n_jobs)  # -1: a reading thread (or GPU worker thread) per core
    if any(m in WINDOWED for m in measures) and window_length is None:
        raise ValueError(
            "The measures dfc and pairs need a window length (--window-length, in volumes)."
        )
    window_length = None if window_length is None else int(window_length)
    step, pairs_threshold = int(step), float(pairs_threshold)
    if "maps" in measures:
        from connscale.bidsapp.voxel_measures import check_degree_thresholds

        degree_thresholds = check_degree_thresholds(degree_thresholds)
    _check_name({"sub": "x", "seg": atlas_name}, suffix="relmat", extension=".tsv")
    atlas = Path(atlas).resolve()
    if not atlas.is_file():
        raise FileNotFoundError(f"No atlas image at {atlas}.")
    if atlas_labels is not None:
        atlas_labels = Path(atlas_labels).resolve()
    regional = any(m in REGION_MEASURES for m in measures)
    if regional:  # what would fail every run, found once
        atlas_space, _ = check_atlas(atlas, space=atlas_space, labels_file=atlas_labels)
    elif atlas_labels is not None:
        read_atlas_labels(atlas_labels)
    derivatives = Path(derivatives).resolve()
    output = Path(output).resolve()
    if output == derivatives:
        raise ValueError("The output folder must not be the derivatives folder itself.")
    notes: list[str] = []
    environments = _gpu_plan(gpus, backend, notes)
    if environments:
        device = "cuda"
    runs = find_runs(
        derivatives,
        participant_label=participant_label,
        session_label=session_label,
        task=task,
        run=run,
        space=space,
        strategy=strategy,
        t_r=t_r,
        work_dir=work_dir,
    )
    if regional:
        runs = refuse_other_spaces(runs, atlas_space)
    config = ParticipantConfig(
        derivatives=str(derivatives),
        output=str(output),
        atlas=str(atlas),
        atlas_name=atlas_name,
        atlas_labels=None if atlas_labels is None else str(atlas_labels),
        atlas_space=atlas_space,
        strategy=strategy,
        strategy_params=dict(strategy_params or {}),
        measures=measures,
        window_length=window_length,
        step=step,
        pairs_threshold=pairs_threshold,
        detrend=detrend,
        standardize=standardize,
        low_pass=low_pass,
        high_pass=high_pass,
        device=device,
        dtype=dtype,
        threads=threads_per_task,
        memory_limit=memory_limit,
        reports=reports,
        degree_thresholds=tuple(float(v) for v in degree_thresholds),
        precision=precision,
        n_atoms=int(n_atoms),
        network_sparsity=network_sparsity,
        overwrite=overwrite,
        min_dof=float(min_dof),
    )
    output.mkdir(parents=True, exist_ok=True)
    # One participant run per output at a time, its logs checked up front.
    with output_lock(output, wait=wait):
        logs = logs_folder(output / "logs")
        write_dataset_description(output, derivatives)
        one_per_gpu = backend == "serial" or bool(environments)
        config = replace(config, device=batch_device(config.device, one_task_per_gpu=one_per_gpu))
        result = run_batch(
            [_run_task(config, r) for r in runs],
            BatchOptions(
                "bids participant",
                BatchLogs(logs, "participant_report.json", "participant_errors.tsv"),
                desc="runs",
                unit="run",
                threads=config.threads,
                verbose=verbose,
            ),
            is_done=_published,
            open_engine=functools.partial(_open_engine, environments, backend, n_jobs),
            meta={
                "derivatives": str(derivatives),
                "backend": f"dask ({len(environments)} GPU workers)" if environments else backend,
                "device": config.device,
                "gpu_workers": environments,
                "notes": notes,
                "parameters": {**config.parameters(), "min_dof": config.min_dof},
            },
        )
    report = ParticipantReport(
        result.records, result.report_path, result.errors_path, result.seconds, notes
    )
    if verbose:
        logger.info(
            "bids participant: %s in %.1f s",
            ", ".join(f"{n} {s}" for s, n in report.counts.items()),
            result.seconds,
        )
    return report
