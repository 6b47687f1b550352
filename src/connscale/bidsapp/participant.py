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

and, for every run (volume or CIFTI), its QC table, its own set
(:mod:`connscale.bidsapp.qc_outputs`; the dataset's table of all runs is
rewritten at the call's end)::

    <source>_desc-<strategy>_qc.tsv / .json

and, with the measure ``voxelfc``, the voxel-level set of the run (it does
not depend on the atlas, so a second atlas reuses it)::

    <source>_meas-PearsonCorrelation_desc-<strategy>_relmat.h5 / .json

and, with the measures ``maps`` and ``networks``, voxel maps (degree,
eigenvector centrality, global correlation) and r1DL networks of the
cleaned voxel series, each its own set (:mod:`connscale.bidsapp.voxel_measures`)::

    <source>_meas-r<θ>_stat-degree_desc-<strategy>_boldmap.nii.gz / .json (also ecm, gcor)
    <source>_stat-r1dl_desc-<strategy>_components.nii.gz, _mixing.tsv / .json

CIFTI runs (``file_format='cifti'``: fMRIPrep's ``*_bold.dtseries.nii`` with a
``.dlabel.nii`` atlas) are read and checked by :mod:`connscale.bidsapp.cifti_decode`
and their sets (the same TSVs and stores, their CIFTI-2 twins, the denoised
dtseries, the dscalar maps) written by :mod:`connscale.bidsapp.cifti_measures`.

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
failing run is recorded (``logs/participant_<who>_<when>_report.json`` and
``_errors.tsv``, one pair per call: :mod:`connscale.bidsapp.participant_logs`)
and the others complete, a run that kills its worker on every attempt included
(``WorkerLost``). ``memory_limit`` covers a whole run: its measures get what
the run's data (read and cleaned) leave of it, and a run whose data alone
exceed it is recorded as a ``MemoryLimitError``. ``device='auto'`` is
resolved once per call: CUDA when torch sees a GPU and one run per GPU
computes at a time (the serial backend or ``gpus``), else the CPU; the
report records it.

Calls on disjoint participants may run at the same time on one output (an
array job's tasks: :mod:`connscale.bidsapp.selection` picks a task's
participant from a participants file): each holds the output's lock shared
(:func:`output_lock`), so the group level, which takes it exclusively, never
reads while a participant call writes; each run's set has its own lock, so
two calls that meet on a run do not both write it (the second records it as
failed, naming the first's pid, or waits for it with ``wait`` and finds it
published).

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
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from connscale._choices import MEASURES, REGION_MEASURES
from connscale._params import entry
from connscale._validation import parse_memory, resolve_n_jobs
from connscale.bidsapp.atlas import (
    check_atlas,
    read_atlas_labels,
    refuse_other_spaces,
)
from connscale.bidsapp.cifti_decode import decode_cifti_run, prefetch_cifti
from connscale.bidsapp.cleaning import DecodedRun, RunRefused, decode_run, prefetch
from connscale.bidsapp.config import WINDOWED, ParticipantConfig
from connscale.bidsapp.gpus import ReaderPlan, plan_readers, worker_device
from connscale.bidsapp.gpus import gpu_plan as _gpu_plan
from connscale.bidsapp.layout import BoldRun, find_runs
from connscale.bidsapp.named_atlas import check_named_atlas, is_atlas_name, run_atlases
from connscale.bidsapp.outputs import DATASET_LINK
from connscale.bidsapp.read_budget import ReadAhead, plan_read_ahead
from connscale.bidsapp.region_measures import write_region
from connscale.bidsapp.run_sets import is_published, needs_decode, output_sets, set_measures
from connscale.engines.base import SerialEngine
from connscale.engines.batch import (
    STATUSES,
    BatchOptions,
    Later,
    Progress,
    ReadAheadEngine,
    Task,
    TaskBudget,
    batch_device,
    count_statuses,
    error_text,
    logs_folder,
    map_tasks,
    run_batch,
)
from connscale.engines.slurm import SlurmJobs, slurm_jobs
from connscale.io.bids import dataset_relative
from connscale.nuisance import AROMA_STRATEGIES, check_strategy

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
        """Runs per status.

        ``ok``, ``skipped`` and ``error`` always, ``partial`` and ``refused``
        when there are any.
        """
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


def _run_task(config: ParticipantConfig, run: BoldRun) -> Task:
    """Return the batch runner's task of one run."""
    fields = {"session": run.entities.get("ses"), "outputs": []}
    read = prefetch_cifti if run.is_cifti else prefetch
    return Task(
        run.name, run.entities.get("sub"), str(run.bold), run_one, (config, run), fields, read
    )


def _published(task: Task) -> bool:
    """Return whether every set of the run is published with its fingerprint.

    The batch runner's "is it done?" hook.
    """
    config, run = task.payload
    return not run.problem and not needs_decode(config, run)


def _held_bytes(config: ParticipantConfig, decoded: DecodedRun) -> int:
    """Bytes a run holds through its task: what was read, and its widest cleaned series."""
    import numpy as np

    if not isinstance(decoded, DecodedRun):
        from connscale.bidsapp.cifti_decode import held_bytes

        return held_bytes(config, decoded)
    arrays = (decoded.data, decoded.region_means, decoded.mask, decoded.atlas)
    read = sum(a.nbytes for a in arrays if a is not None)
    widths = [] if decoded.region_means is None else [decoded.region_means.shape[1]]
    voxel_sets = config.write_denoised or any(m not in REGION_MEASURES for m in config.measures)
    if decoded.data is not None and voxel_sets:
        widths.append(decoded.data.shape[1])
    kept = decoded.context["operator"].volumes.size
    return read + kept * max(widths, default=0) * np.dtype(config.dtype).itemsize


def _process(
    config: ParticipantConfig, run: BoldRun, decoded: DecodedRun | None = None
) -> dict | Later:
    """Compute and publish the run's sets not published yet; return its record's fields.

    A :class:`~connscale.engines.batch.Later` of them while a set waits for
    its report or its tables, in a helper process (:mod:`connscale.bidsapp.beside`):
    the sets' locks are held until they are published.
    """
    from contextlib import ExitStack

    from connscale.bidsapp.xcpd_names import output_spelling
    from connscale.fc.normalize import ConstantSeriesWarning
    from connscale.io.publish import OutputSet

    timings = {"decode": 0.0, "clean": 0.0, "compute": 0.0, "write": 0.0}
    with ExitStack() as stack, output_spelling(config.output_spelling):  # the files' names
        todo, done = {}, 0
        for kind, (folder, prefix, fingerprint) in output_sets(config, run).items():
            out = stack.enter_context(
                OutputSet(
                    folder,
                    prefix,
                    command="bids participant",
                    fingerprint=fingerprint,
                    overwrite=config.overwrite,
                    wait=config.wait,
                )
            )
            if is_published(out):
                done += 1
            else:
                todo[kind] = out
        if not todo:
            return {"status": "skipped", "outputs": []}
        if decoded is None:
            decoded = decode_cifti_run(config, run) if run.is_cifti else decode_run(config, run)
        # memory_limit covers the whole task: the measures get what the run's data leave.
        budget = TaskBudget(config.memory_limit)
        budget.hold(_held_bytes(config, decoded), f"The data of {run.name} (read and cleaned)")
        config = replace(config, memory_limit=budget.left)
        timings["decode"] = decoded.seconds
        timings["clean"] = decoded.clean_seconds
        context = {**decoded.context, "warnings": []}
        decoded = _despike_and_measure(config, decoded, context, timings, "qc" in todo)
        record = {
            "status": "ok",
            "outputs": [],
            "read_started": round(decoded.started, 3),  # epoch seconds, in its reader
            "mean_fd": context["mean_fd"],
            **_sizes(decoded),
            "dof": context["dof"],
        }
        outcomes = {}
        with warnings.catch_warnings():
            # The run's constant series are reported once, below, not per measure.
            warnings.simplefilter("ignore", ConstantSeriesWarning)
            for kind, out in todo.items():
                try:
                    outcomes[kind] = _write_set(kind, config, run, decoded, out, context, timings)
                except Exception as exc:  # noqa: BLE001 - recorded per measure
                    outcomes[kind] = exc
        # (a probabilistic atlas's regions are known once its series are extracted)
        record["n_regions"] = None if decoded.regions is None else int(decoded.regions.size)
        # Nothing of the run's data (the context holds its voxel series) waits with it.
        conclude = functools.partial(
            _conclude, config, run.name, record, todo, outcomes, done, context["warnings"], timings
        )
        waiting = [o for o in outcomes.values() if isinstance(o, Later)]
        if waiting:
            return Later(
                lambda: all(o.ready() for o in waiting),
                functools.partial(_conclude_held, stack.pop_all(), conclude),
            )
    return conclude()


def _conclude_held(held, conclude) -> dict:
    """Publish the sets that waited for their reports, then release their locks (``held``)."""
    with held:
        return conclude()


def _conclude(config, name, record, todo, outcomes, done, messages, timings) -> dict:
    """Return the run's record: each set's outcome merged, a set that waited published first.

    ``outcomes``: each set's names written and failed measures, its
    exception, or a :class:`~connscale.engines.batch.Later` of them;
    ``record['n_regions']`` is kept once the region set is published;
    ``messages``: the run's warnings.
    """
    failed = {}
    n_regions = record.pop("n_regions")
    for kind, outcome in outcomes.items():
        if isinstance(outcome, Later):
            try:
                outcome = outcome.finish()
            except Exception as exc:  # noqa: BLE001 - recorded per measure
                outcome = exc
        if isinstance(outcome, Exception):
            failed.update(dict.fromkeys(set_measures(config, kind), error_text(outcome)))
            continue
        written, set_failed = outcome
        failed.update(set_failed)
        if kind == "region":
            record["n_regions"] = n_regions
        record["outputs"] += [str(todo[kind].out_dir / n) for n in written]
    if failed:
        record["failed_measures"] = failed
        record["status"] = "partial" if record["outputs"] or done else "error"
        if record["status"] == "error":
            record["error"] = "; ".join(f"{m}: {reason}" for m, reason in failed.items())
    messages = list(dict.fromkeys(messages))
    if messages:
        from connscale.fc.normalize import ConstantSeriesWarning

        record["warnings"] = messages
        warnings.warn(" ".join(messages), ConstantSeriesWarning, stacklevel=2)
        logger.warning("%s: %s", name, " ".join(messages))
    record["timings"] = {k: round(v, 6) for k, v in timings.items()}
    return record


def _despike_and_measure(config, decoded, context: dict, timings: dict, qc: bool):
    """Return the run despiked with ``--despike``; first, its initial DVARS for the QC table.

    A CIFTI run's grayordinates are despiked into a copy (:func:`despike_cifti_run`).
    """
    from connscale.bidsapp.cifti_decode import read_only_series
    from connscale.bidsapp.qc_outputs import despike_cifti_run, despike_run, initial_dvars

    with read_only_series():  # a CIFTI run's series are memory-mapped
        if qc:
            try:
                context["dvars_initial"] = initial_dvars(config, decoded, context)
            except Exception as exc:  # noqa: BLE001 - the QC set fails with it, the others go on
                context["qc_error"] = exc
        if not config.despike:
            return decoded
        despiked = despike_run if isinstance(decoded, DecodedRun) else despike_cifti_run
        return despiked(config, decoded, context, timings)


def _sizes(decoded) -> dict:
    """Return the run record's sizes: volumes, kept volumes, voxels (or grayordinates)."""
    if not isinstance(decoded, DecodedRun):
        return decoded.numbers()
    return {
        "n_volumes": int(decoded.img.shape[3]),
        "n_kept": int(decoded.context["operator"].volumes.size),
        "n_voxels": int(decoded.mask.sum()),
    }


def _write_set(kind, config, run, decoded, out, context, timings) -> tuple[list[str], dict]:
    """Compute and publish one set of the run.

    Returns the names written and the measures that failed
    (``{measure: reason}``; a set that fails as a whole raises).
    """
    if run.is_cifti:
        from connscale.bidsapp.cifti_measures import write_cifti_set

        return write_cifti_set(kind, config, run, decoded, out, context, timings)
    if kind == "region":
        return write_region(config, run, decoded, out, context, timings)
    if kind == "qc":
        from connscale.bidsapp.qc_outputs import write_qc

        return write_qc(config, run, decoded, out, context, timings), {}
    from connscale.bidsapp import local_maps, voxel_measures

    module = local_maps if kind in local_maps.MAPS else voxel_measures
    write = getattr(module, f"write_{kind}")
    return write(config, run, decoded, out, context, timings), {}


def output_lock(output: Path, *, wait: bool = False, shared: bool = False):
    """Return the lock of the BIDS-App on its output folder (``<output>/.bids.lock``).

    The participant level holds it ``shared`` from its first write to its
    logs, so calls on other participants run beside it; the group level
    holds it exclusively while it reads the runs' outputs and writes its
    own: it stops at once naming a participant call's pid, or waits for
    them all (``wait``), and a participant call stops (or waits) while the
    group level runs.
    """
    from connscale.io.lock import OutputLock

    return OutputLock(
        Path(output) / "bids",
        wait=wait,
        shared=shared,
        label=f"The BIDS-App output folder {output}",
    )


def run_serial(
    config: ParticipantConfig, runs: list[BoldRun], *, readers: int = 1, verbose: int = 0
) -> list[dict]:
    """Process the runs in order in this process, reading the next ones while this one computes.

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
        return map_tasks(_readers(readers), tasks, threads=config.threads, progress=progress)
    finally:
        progress.close()


#: What a reader process imports to read a run, once in the process it is forked from:
#: no torch, and nothing left to import at its first read (pybids builds the output
#: names that tell whether a run is published: 0.6 s in each reader otherwise)
#: (tests/bids/test_reader_imports.py).
READER_MODULES = (
    "bids.layout.writing",
    "connscale.bidsapp.cifti_decode",
    "connscale.bidsapp.cleaning",
    "nibabel",
    "nilearn.interfaces.fmriprep",
    "nilearn.signal",
)


def _reads_in_processes(backend: str, n_jobs: int | None, environments: list) -> bool:
    """Return whether the runs are read by reader processes (:func:`_readers`)."""
    return backend == "serial" and not environments and n_jobs is not None and n_jobs > 1


def _readers(readers: int, device: str | None = None) -> ReadAheadEngine | SerialEngine:
    """Return the serial engine with ``readers`` reading ahead: processes when several.

    One reader is a thread (a process would cost its start for no gain: the
    decompression releases the GIL); several are processes, which share no
    GIL with one another nor with the process computing
    (``benchmarks/profile_readers.py``). None (``memory_limit`` holds no run
    beside the one computing, :mod:`~connscale.bidsapp.read_budget`): each
    run is read in its own task. ``device``: the runs' device, started
    while the first reads run (:func:`_start_device`).
    """
    if readers == 0:
        return SerialEngine()
    warm = None if device is None else functools.partial(_start_device, device)
    return ReadAheadEngine(readers, processes=readers > 1, preload=READER_MODULES, warm=warm)


def _start_device(device: str) -> None:
    """Start the runs' device (a GPU's context) in this process, if it can.

    A device that cannot start is left to the runs, which record why.
    """
    from connscale._compute.device import start_device

    try:
        start_device(device)
    except Exception:  # noqa: BLE001 - the runs' own error, recorded with each of them
        logger.debug("The device %s did not start before the first run.", device, exc_info=True)


@contextmanager
def _reading_beside(readers: int, reports: bool, device: str | None = None):
    """Yield the serial engine with ``readers``, and helper processes beside them.

    The helpers (:func:`connscale.bidsapp.beside.helpers`) draw the runs'
    reports and write their region sets' tables while the computing process
    goes on to the next run: with ``reports``, half as many as there are
    readers, at least one (a run's figures cost about as much of a core as
    its read, ~3 s on an H100 host); with reader processes and no reports,
    one for every 8 readers, at least one (its tables ~70 ms, against the
    read's ~2.5 s). Without reading ahead (``readers`` 0: ``memory_limit``
    holds no run beside the one computing) or with one reading thread and no
    reports, the computing process does that work itself.
    """
    engine = _readers(readers, device)
    count = _helper_count(readers, reports)
    if not count:
        with engine:
            yield engine
        return
    from connscale.bidsapp.beside import helpers

    with helpers(count, drawing=reports), engine:
        yield engine


def _helper_count(readers: int, reports: bool) -> int:
    """Return the helper processes beside ``readers`` readers (:func:`_reading_beside`)."""
    if readers == 0:
        return 0
    if reports:
        return max(1, readers // 2)
    return max(1, readers // 8) if readers > 1 else 0


def _task_fields(config: ParticipantConfig, memory: ReadAhead, one_per_gpu: bool) -> dict:
    """Return what every run task's config takes from the call: its device, its memory share."""
    fields = {"device": batch_device(config.device, one_task_per_gpu=one_per_gpu)}
    if memory.run_limit is not None and memory.run_limit != parse_memory(config.memory_limit):
        fields["memory_limit"] = memory.run_limit  # each run's share
    return fields


def _share_memory(
    config: ParticipantConfig,
    tasks: list[tuple[ParticipantConfig, BoldRun]],
    environments: list,
    n_jobs: int | None,
    readers: ReaderPlan | None,
    remote: bool,
) -> tuple[ReadAhead, int | None, ReaderPlan | None]:
    """Share the call's ``memory_limit`` out among its runs (:func:`plan_read_ahead`).

    Returns the plan, the serial path's readers (``n_jobs``) and the GPU
    workers' reader plan, both lowered where the limit asks it. A cluster's
    jobs (``remote``) have their own memory: the limit stays each run's.
    """
    if remote or config.memory_limit is None:
        return ReadAhead(0, None, 0, 0), n_jobs, readers
    if environments:
        plan = plan_read_ahead(
            tasks, config.memory_limit, readers=readers.readers, computing=len(environments)
        )
        if plan.readers == 0:  # a GPU worker keeps one reader, counted
            plan = replace(plan, readers=1, run_limit=plan.run_limit - plan.run_bytes)
        return plan, n_jobs, replace(readers, readers=plan.readers)
    if config.backend == "serial":
        plan = plan_read_ahead(tasks, config.memory_limit, readers=1 if n_jobs is None else n_jobs)
        return plan, plan.readers, readers
    computing = resolve_n_jobs(-1 if n_jobs is None else n_jobs)
    plan = plan_read_ahead(tasks, config.memory_limit, readers=0, computing=computing)
    return plan, n_jobs, readers


def _slurm_jobs(config: ParticipantConfig, output: Path) -> SlurmJobs | None:
    """Return the SLURM jobs of ``cluster='slurm'`` (their logs in ``output/logs``), or None.

    Checked before any write: the job options need ``cluster='slurm'``, which
    needs ``backend='dask'`` and excludes ``gpus`` (this node's GPUs; the
    jobs' are ``gpus_per_job``).
    """
    if config.cluster == "slurm" and config.gpus is not None:
        raise ValueError(
            "cluster='slurm' computes on the jobs' GPUs ('gpus_per_job'), not on this "
            f"node's: drop 'gpus'; got gpus={config.gpus!r}."
        )
    return slurm_jobs(config, engine="backend", log_directory=output / "logs", tasks="run")


def _open_engine(
    environments: list[dict],
    backend: str,
    n_jobs: int | None,
    cluster: str | SlurmJobs | None = None,
    readers: ReaderPlan | None = None,
    reports: bool = False,
    device: str | None = None,
):
    """Return the engine of the runs.

    A Dask worker per GPU (each with the ``readers`` of its plan), the
    serial engine reading ahead (``n_jobs`` readers, helper processes
    beside them: :func:`_reading_beside`; ``device`` started while the first
    reads run), or
    ``backend`` (on ``cluster``: a Dask scheduler's address, SLURM jobs, a
    Spark master URL; with SLURM jobs ``n_jobs`` is their most at once,
    which they hold).
    """
    from connscale.engines import get_engine

    if environments:
        from connscale.bidsapp.gpus import gpu_engine

        return gpu_engine(environments, readers=readers, preload=READER_MODULES)
    if backend == "serial":
        return _reading_beside(1 if n_jobs is None else n_jobs, reports, device)
    if isinstance(cluster, SlurmJobs):
        return get_engine(backend, cluster=cluster)
    return get_engine(backend, cluster=cluster, n_jobs=n_jobs)


def _absolute(paths) -> list[str]:
    """Return ``paths`` resolved, as strings (what a run task receives)."""
    return [str(Path(p).resolve()) for p in paths]


def _file_format(config: ParticipantConfig, atlas: Path) -> str:
    """Return the runs' format: ``file_format``, else CIFTI for a dlabel atlas, ``den`` or fsLR."""
    if config.file_format is not None:
        return config.file_format
    fs_lr = any(str(s).startswith("fsLR") for s in config.space or ())
    cifti = atlas.name.endswith(".dlabel.nii") or config.den is not None or fs_lr
    return "cifti" if cifti else "nifti"


def _check_atlas(config, measures, file_format: str, atlas: Path, atlas_labels) -> str | None:
    """Check, once, what would fail every run; return the atlas's space (volumes).

    Raises
    ------
    ValueError
        One line: an atlas of the other format, a measure or option the
        format has not, an unreadable atlas (:func:`check_atlas`; a dlabel
        with no parcel).
    """
    regional = any(m in REGION_MEASURES for m in measures)
    if is_atlas_name(config.atlas):  # TemplateFlow's, taken in each run's space
        check_named_atlas(config, file_format)
        return None
    if file_format == "nifti":
        if config.surfaces is not None:
            raise ValueError("--surfaces draws CIFTI runs' maps; these runs are volumes.")
        if atlas.name.endswith(".dlabel.nii"):
            raise ValueError(
                f"The atlas {atlas.name} is a CIFTI label file: it parcellates CIFTI runs "
                "(--file-format cifti), not volumes."
            )
        if regional:  # what would fail every run, found once
            return check_atlas(atlas, space=config.atlas_space, labels_file=atlas_labels)[0]
        if atlas_labels is not None:
            read_atlas_labels(atlas_labels)
        return config.atlas_space
    from connscale.bidsapp.cifti_decode import CIFTI_MEASURES, check_cifti_atlas

    other = [m for m in measures if m not in CIFTI_MEASURES]
    if other:
        raise ValueError(
            f"CIFTI runs have no measure {', '.join(other)}; their measures: "
            f"{', '.join(CIFTI_MEASURES)} (and --write-denoised)."
        )
    if config.strategy in AROMA_STRATEGIES:
        raise ValueError(
            f"--denoise {config.strategy} reads fMRIPrep's AROMA volumes, not CIFTI runs."
        )
    if atlas_labels is not None:
        raise ValueError("--atlas-labels: a .dlabel.nii atlas names its own parcels; drop it.")
    check_cifti_atlas(atlas)
    if config.surfaces is not None:
        from connscale.report.cifti import load_surfaces

        if len(config.surfaces) != 2:
            raise ValueError(
                f"--surfaces takes 2 meshes (left, right); got {len(config.surfaces)}."
            )
        load_surfaces(*config.surfaces)
    return config.atlas_space


def _check_measures(config: ParticipantConfig, measures: tuple[str, ...]) -> tuple[float, ...]:
    """Check what the measures need (a window, thresholds, a BIDS name); return the thresholds."""
    from connscale.io.bids import bids_name

    if any(m in WINDOWED for m in measures) and config.window_length is None:
        raise ValueError(
            "The measures dfc and pairs need a window length (--window-length, in volumes)."
        )
    degree_thresholds = config.degree_thresholds
    if "maps" in measures:
        from connscale.bidsapp.voxel_measures import check_degree_thresholds

        degree_thresholds = check_degree_thresholds(degree_thresholds)
    bids_name({"sub": "x", "seg": config.atlas_name}, suffix="relmat", extension=".tsv")
    return degree_thresholds


def _atlas_path(config: ParticipantConfig) -> tuple[bool, Path]:
    """Return whether the atlas is a TemplateFlow name, and its path (a file: checked, absolute)."""
    named = is_atlas_name(config.atlas)
    atlas = Path(config.atlas) if named else Path(config.atlas).resolve()
    if not named and not atlas.is_file():
        raise FileNotFoundError(f"No atlas image at {atlas}.")
    if not named and config.atlas_desc is not None:
        raise ValueError(f"--atlas-desc: it selects a TemplateFlow atlas; {atlas.name} is a file.")
    return named, atlas


@entry(ParticipantConfig)
def run_participant(config: ParticipantConfig) -> ParticipantReport:
    """Denoised atlas connectivity of every matching fMRIPrep run, as BIDS derivatives.

    Pass a :class:`~connscale.bidsapp.config.ParticipantConfig` alone, or its
    fields as arguments (``run_participant(derivatives, output, atlas=...,
    atlas_name=..., ...)``); either way every value is checked before the
    first run.

    Parameters
    ----------
    %(parameters)s

    Returns
    -------
    ParticipantReport
    """
    from connscale.bidsapp.participant_logs import call_logs
    from connscale.bidsapp.selection import select_participants

    backend, n_jobs, gpus = config.backend, config.n_jobs, config.gpus
    wait, verbose = config.wait, config.verbose
    measures = tuple(dict.fromkeys(config.measures))
    slurm = _slurm_jobs(config, Path(config.output).resolve())  # before any write
    if (backend == "serial" or gpus is not None) and n_jobs is not None:
        n_jobs = resolve_n_jobs(n_jobs)  # -1: a reading thread (or GPU worker thread) per core
    degree_thresholds = _check_measures(config, measures)
    strategy = check_strategy(config.strategy)  # a nuisance file: read, its absolute path
    named, atlas = _atlas_path(config)
    atlas_labels = None if config.atlas_labels is None else Path(config.atlas_labels).resolve()
    regional = any(m in REGION_MEASURES for m in measures)
    file_format = _file_format(config, atlas)
    atlas_space = _check_atlas(config, measures, file_format, atlas, atlas_labels)
    derivatives = Path(config.derivatives).resolve()
    output = Path(config.output).resolve()
    if output == derivatives:
        raise ValueError("The output folder must not be the derivatives folder itself.")
    notes: list[str] = []
    environments = _gpu_plan(gpus, backend, notes)
    device = worker_device(config.device) if environments else config.device
    # The host's cores shared out as each GPU worker's readers (n_jobs: readers per worker).
    readers = plan_readers(len(environments), readers=n_jobs) if environments else None
    if _reads_in_processes(backend, n_jobs, environments):
        from connscale.engines.readers import forks_here, start_fork_server

        if not forks_here(READER_MODULES):  # else the readers fork from this process
            start_fork_server(READER_MODULES)  # its imports overlap the layout's index
    participant_label = select_participants(
        config.participant_label,
        config.participant_label_file,
        config.array_index,
        config.participants_per_task,
    )
    runs = find_runs(
        derivatives,
        participant_label=participant_label,
        session_label=config.session_label,
        task=config.task,
        run=config.run,
        space=config.space,
        strategy=strategy,
        t_r=config.t_r,
        work_dir=config.work_dir,
        den=config.den,
        file_format=file_format,
    )
    atlas_fields = {}  # a TemplateFlow atlas: each run's file, in its space and resolution
    if regional and named:
        runs, atlas_fields = run_atlases(config, runs)
    elif regional and file_format == "nifti":  # a CIFTI atlas is checked on each run's brain model
        runs = refuse_other_spaces(runs, atlas_space)
    config = replace(
        config,
        derivatives=str(derivatives),
        output=str(output),
        atlas=str(atlas),
        atlas_labels=None if atlas_labels is None else str(atlas_labels),
        surfaces=None if config.surfaces is None else tuple(_absolute(config.surfaces)),
        atlas_space=atlas_space,
        file_format=file_format,
        participant_label=participant_label,
        strategy=strategy,
        strategy_params=dict(config.strategy_params),
        measures=measures,
        window_length=None if config.window_length is None else int(config.window_length),
        step=int(config.step),
        pairs_threshold=float(config.pairs_threshold),
        device=device,
        degree_thresholds=tuple(float(v) for v in degree_thresholds),
        n_atoms=int(config.n_atoms),
        min_dof=float(config.min_dof),
    )
    output.mkdir(parents=True, exist_ok=True)
    # Participant calls side by side, never beside the group level; the logs checked up front.
    with output_lock(output, wait=wait, shared=True):
        logs = call_logs(logs_folder(output / "logs"), participant_label)
        write_dataset_description(output, derivatives)
        one_per_gpu = backend == "serial" or bool(environments)
        remote = slurm is not None or config.cluster is not None
        tasks = [(replace(config, **atlas_fields.get(r.name, {})), r) for r in runs]
        memory, n_jobs, readers = _share_memory(
            config, tasks, environments, n_jobs, readers, remote
        )
        notes += [memory.note()] if memory.note() else []
        shared = _task_fields(config, memory, one_per_gpu)
        result = run_batch(
            [_run_task(replace(c, **shared), r) for c, r in tasks],
            BatchOptions(
                "bids participant",
                logs,
                desc="runs",
                unit="run",
                threads=config.threads,
                verbose=verbose,
            ),
            is_done=_published,
            open_engine=functools.partial(
                _open_engine,
                environments,
                backend,
                n_jobs,
                config.cluster if slurm is None else slurm,
                readers,
                config.reports,
                shared["device"],
            ),
            meta={
                "derivatives": str(derivatives),
                "backend": f"dask ({len(environments)} GPU workers)" if environments else backend,
                "device": shared["device"],
                "gpu_workers": environments,
                "gpu_readers": None if readers is None else readers.record(),
                "memory": memory.record(config.memory_limit),
                "notes": notes,
                "parameters": {**config.parameters(), "min_dof": config.min_dof},
            },
        )
        from connscale.bidsapp.qc_outputs import write_dataset_qc

        write_dataset_qc(output, config.desc)
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
