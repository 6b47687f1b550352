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

A run whose set is already published with the same inputs and parameters is
skipped; a failing run is recorded (``logs/participant_errors.tsv``) and the
others complete.

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

import csv
import io
import logging
import os
import stat
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path

from connscale._choices import MAP_MEASURES, MEASURES, REGION_MEASURES, VOXEL_MEASURES
from connscale._params import entry
from connscale._validation import resolve_n_jobs
from connscale._version import __version__
from connscale.bidsapp.atlas import (
    check_atlas,
    read_atlas_labels,
    refuse_other_spaces,
)
from connscale.bidsapp.cleaning import DecodedRun, RunRefused, decode_run
from connscale.bidsapp.config import WINDOWED, ParticipantConfig
from connscale.bidsapp.layout import BoldRun, find_runs
from connscale.bidsapp.outputs import DATASET_LINK, failure_reason, set_prefix
from connscale.bidsapp.region_measures import write_region
from connscale.cohort import failure_fields
from connscale.io.atomic import write_json_atomic, write_text_atomic
from connscale.io.bids import (
    dataset_relative,
    derivative_path,
)

__all__ = [
    "MEASURES",
    "ParticipantConfig",
    "ParticipantReport",
    "read_atlas_labels",
    "run_participant",
    "write_dataset_description",
]

logger = logging.getLogger("connscale")

#: Statuses of a run record: every measure published, nothing to do, some measures
#: failed (the others published), refused (the data cannot support it), failed.
STATUSES = ("ok", "skipped", "partial", "refused", "error")


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
        return _counts(self.records)

    @property
    def n_failed(self) -> int:
        """Runs not fully published: failed, refused or partial."""
        return sum(v for k, v in self.counts.items() if k not in ("ok", "skipped"))


def _counts(records: list[dict]) -> dict:
    counts = {s: sum(r["status"] == s for r in records) for s in STATUSES}
    return {s: n for s, n in counts.items() if n or s in ("ok", "skipped", "error")}


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


def run_one(task: tuple) -> dict:
    """Process one run; never raises (a failure comes back as an ``error`` record).

    ``task`` is ``(config, run)``, or ``(config, run, decoded)`` where
    ``decoded`` is a future of :func:`decode_run` started earlier (the
    prefetch of :func:`run_serial`); its error is the run's error.
    """
    import torch

    config, run = task[:2]
    prefetched = task[2] if len(task) > 2 else None
    record = {
        "name": run.name,
        "subject": run.entities.get("sub"),
        "session": run.entities.get("ses"),
        "bold": str(run.bold),
        "outputs": [],
        "started": round(time.time(), 3),  # epoch seconds: when each worker took each run
    }
    start = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    try:
        if run.problem:
            raise ValueError(run.problem)
        decoded = None if prefetched is None else prefetched.result()
        record.update(_process(config, run, decoded))
        record["status"] = record.get("status", "ok")
    except RunRefused as exc:
        record.update(status="refused", error=str(exc), **exc.details)
        logger.warning("%s refused: %s", run.name, exc)
    except Exception as exc:  # noqa: BLE001 - reported per run, never raised
        record.update(failure_fields(exc))
    finally:
        torch.set_num_threads(threads)
    record["seconds"] = round(time.perf_counter() - start, 6)
    return record


def _output_sets(config: ParticipantConfig, run: BoldRun) -> dict:
    """The run's output sets: ``{'region'|'voxel'|'maps'|'networks': (folder, prefix,
    fingerprint)}``."""
    from connscale.io.fingerprint import run_fingerprint

    entities = dict(run.entities)
    folder = derivative_path(config.output, entities, suffix="relmat", extension=".tsv").parent
    bold_inputs = [
        p for p in (run.bold, run.mask, run.confounds, run.confounds_json) if p is not None
    ]
    sets = {}
    if any(m in REGION_MEASURES for m in config.measures):
        inputs = bold_inputs + [p for p in (config.atlas, config.atlas_labels) if p is not None]
        sets["region"] = (
            folder,
            set_prefix(entities, {"seg": config.atlas_name, "desc": config.desc}),
            run_fingerprint(inputs, {**config.region_parameters(), "t_r": run.t_r}),
        )
    if any(m in VOXEL_MEASURES for m in config.measures):
        sets["voxel"] = (
            folder,
            set_prefix(entities, {"desc": config.desc}),
            run_fingerprint(bold_inputs, {**config.voxel_parameters(), "t_r": run.t_r}),
        )
    maps = [m for m in MAP_MEASURES if m in config.measures]
    if maps:
        from connscale.bidsapp.voxel_measures import map_sets

        sets.update(map_sets(config, run, folder, bold_inputs, maps))
    return sets


def needs_decode(config: ParticipantConfig, run: BoldRun) -> bool:
    """False when every output set of the run is already published (nothing to read)."""
    from connscale.io.publish import OutputSet

    if run.problem:
        return False
    for folder, prefix, fingerprint in _output_sets(config, run).values():
        probe = OutputSet(folder, prefix, command="bids participant", fingerprint=fingerprint)
        if not _done(probe):
            return True
    return False


def _recorded_failures(out_dir, prefix: str) -> dict:
    """The measures that failed in a published set (its manifest's ``failed_measures``)."""
    from connscale.io.publish import IncompleteOutputError, read_manifest

    try:
        manifest = read_manifest(out_dir, prefix, verify="none")
    except IncompleteOutputError:
        return {}
    return dict(manifest.get("failed_measures") or {})


def _done(out) -> bool:
    """A set published with the same fingerprint and no failed measure (a set with
    failed measures is computed again: the failure may have been transient)."""
    return out.complete() and not _recorded_failures(out.out_dir, out.prefix)


def _set_measures(config: ParticipantConfig, kind: str) -> list[str]:
    """The measures a set of the run holds."""
    if kind == "region":
        return [m for m in config.measures if m in REGION_MEASURES]
    if kind == "voxel":
        return [m for m in config.measures if m in VOXEL_MEASURES]
    return [kind]


def _process(config: ParticipantConfig, run: BoldRun, decoded: DecodedRun | None = None) -> dict:
    from contextlib import ExitStack

    from connscale.fc.normalize import ConstantSeriesWarning
    from connscale.io.publish import OutputSet

    timings = {"decode": 0.0, "clean": 0.0, "compute": 0.0, "write": 0.0}
    with ExitStack() as stack:
        todo, done = {}, 0
        for kind, (folder, prefix, fingerprint) in _output_sets(config, run).items():
            out = stack.enter_context(
                OutputSet(
                    folder,
                    prefix,
                    command="bids participant",
                    fingerprint=fingerprint,
                    overwrite=config.overwrite,
                )
            )
            if _done(out):
                done += 1
            else:
                todo[kind] = out
        if not todo:
            return {"status": "skipped", "outputs": []}
        if decoded is None:
            decoded = decode_run(config, run)
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
                    failed.update(dict.fromkeys(_set_measures(config, kind), failure_reason(exc)))
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


def error_rows(records: list[dict]) -> list[list[str]]:
    """The errors table: ``name, bold, status, measure, error``; one row per failed
    measure (``measure`` empty when the run failed or was refused as a whole)."""
    rows = []
    for r in records:
        failed = r.get("failed_measures") or {}
        if failed:
            rows += [[r["name"], r["bold"], r["status"], m, why] for m, why in failed.items()]
        elif r["status"] in ("error", "refused"):
            rows.append([r["name"], r["bold"], r["status"], "", r["error"]])
    return [[str(c).replace("\t", " ").replace("\n", " ") for c in row] for row in rows]


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


def _logs_folder(output: Path) -> Path:
    """``<output>/logs``, created or reused without following a link (one
    planted there would send the logs outside the output)."""
    logs = output / "logs"
    try:
        os.mkdir(logs)
    except FileExistsError:
        if not stat.S_ISDIR(os.lstat(logs).st_mode):
            kind = "a symbolic link" if os.path.islink(logs) else "not a folder"
            raise PermissionError(
                f"{logs} is {kind}; connscale writes the participant logs there and does not "
                "follow links. Remove it and run again."
            ) from None
    return logs


def _write_logs(output: Path, records: list[dict], meta: dict) -> tuple[Path, Path]:
    logs = _logs_folder(output)
    report = write_json_atomic(
        logs / "participant_report.json", {**meta, "counts": _counts(records), "records": records}
    )
    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter="\t", lineterminator="\n")
    writer.writerow(["name", "bold", "status", "measure", "error"])
    writer.writerows(error_rows(records))
    return report, write_text_atomic(logs / "participant_errors.tsv", buffer.getvalue())


def _gpu_plan(gpus, backend: str, notes: list[str]) -> list[dict]:
    """Worker environments for ``--gpus`` (empty: no GPU, a note says so)."""
    if gpus is None:
        return []
    from connscale.bidsapp.gpus import available_gpus, parse_gpus, plan_gpu_workers

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


def run_serial(
    config: ParticipantConfig, runs: list[BoldRun], *, readers: int = 1, verbose: int = 0
) -> list[dict]:
    """The runs in order in this process, reading the next ones while this one computes.

    ``readers`` background threads read runs (:func:`decode_run`: the BOLD,
    decompressed with the GIL released, and the confounds) at most
    ``readers`` runs ahead of the one being computed, so at most
    ``readers + 1`` runs are in memory; a run whose outputs are all published
    is not read at all. ``verbose``: a progress bar over the runs.
    """
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    from tqdm.auto import tqdm

    def prefetch(run: BoldRun) -> DecodedRun | None:
        return decode_run(config, run) if needs_decode(config, run) else None

    records = []
    with (
        ThreadPoolExecutor(max_workers=readers, thread_name_prefix="connscale-read") as pool,
        tqdm(total=len(runs), desc="runs", unit="run", disable=not verbose) as progress,
    ):
        ahead = deque(pool.submit(prefetch, run) for run in runs[:readers])
        for index, run in enumerate(runs):
            current = ahead.popleft()
            if index + readers < len(runs):
                ahead.append(pool.submit(prefetch, runs[index + readers]))
            records.append(run_one((config, run, current)))
            del current  # this run's data, before the next read is queued
            progress.set_postfix_str(f"{run.name}: {records[-1]['status']}", refresh=False)
            progress.update()
    return records


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
    from connscale.engines import get_engine
    from connscale.io.bids import bids_name as _check_name

    backend, n_jobs, gpus = config.backend, config.n_jobs, config.gpus
    wait, verbose = config.wait, config.verbose
    measures = tuple(dict.fromkeys(config.measures))
    if (backend == "serial" or gpus is not None) and n_jobs is not None:
        n_jobs = resolve_n_jobs(n_jobs)  # -1: a reading thread (or GPU worker thread) per core
    if any(m in WINDOWED for m in measures) and config.window_length is None:
        raise ValueError(
            "The measures dfc and pairs need a window length (--window-length, in volumes)."
        )
    degree_thresholds = config.degree_thresholds
    if "maps" in measures:
        from connscale.bidsapp.voxel_measures import check_degree_thresholds

        degree_thresholds = check_degree_thresholds(degree_thresholds)
    _check_name({"sub": "x", "seg": config.atlas_name}, suffix="relmat", extension=".tsv")
    atlas = Path(config.atlas).resolve()
    if not atlas.is_file():
        raise FileNotFoundError(f"No atlas image at {atlas}.")
    atlas_labels = None if config.atlas_labels is None else Path(config.atlas_labels).resolve()
    atlas_space = config.atlas_space
    regional = any(m in REGION_MEASURES for m in measures)
    if regional:  # what would fail every run, found once
        atlas_space, _ = check_atlas(atlas, space=atlas_space, labels_file=atlas_labels)
    elif atlas_labels is not None:
        read_atlas_labels(atlas_labels)
    derivatives = Path(config.derivatives).resolve()
    output = Path(config.output).resolve()
    if output == derivatives:
        raise ValueError("The output folder must not be the derivatives folder itself.")
    notes: list[str] = []
    environments = _gpu_plan(gpus, backend, notes)
    device = "cuda" if environments else config.device
    runs = find_runs(
        derivatives,
        participant_label=config.participant_label,
        session_label=config.session_label,
        task=config.task,
        run=config.run,
        space=config.space,
        strategy=config.strategy,
        t_r=config.t_r,
        work_dir=config.work_dir,
    )
    if regional:
        runs = refuse_other_spaces(runs, atlas_space)
    config = replace(
        config,
        derivatives=str(derivatives),
        output=str(output),
        atlas=str(atlas),
        atlas_labels=None if atlas_labels is None else str(atlas_labels),
        atlas_space=atlas_space,
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
    # One participant run per output at a time, its logs checked up front.
    with output_lock(output, wait=wait):
        _logs_folder(output)
        write_dataset_description(output, derivatives)
        start = time.perf_counter()
        if environments:
            from connscale.bidsapp.gpus import THREADS_PER_GPU_WORKER, gpu_cluster

            threads = THREADS_PER_GPU_WORKER if n_jobs is None else n_jobs
            with (
                gpu_cluster(environments, threads=threads) as client,
                get_engine("dask", cluster=client) as engine,
            ):
                records = engine.map(run_one, [(config, r) for r in runs])
            backend = f"dask ({len(environments)} GPU workers)"
        elif backend == "serial":
            records = run_serial(
                config, runs, readers=1 if n_jobs is None else n_jobs, verbose=verbose
            )
        else:
            with get_engine(backend, n_jobs=n_jobs) as engine:
                records = engine.map(run_one, [(config, r) for r in runs])
        seconds = time.perf_counter() - start
        meta = {
            "command": "bids participant",
            "software": f"connscale {__version__}",
            "derivatives": str(derivatives),
            "backend": backend,
            "device": device,
            "gpu_workers": environments,
            "notes": notes,
            "parameters": {**config.parameters(), "min_dof": config.min_dof},
            "seconds": round(seconds, 3),
        }
        report_path, errors_path = _write_logs(output, records, meta)
    report = ParticipantReport(records, report_path, errors_path, seconds, notes)
    if verbose:
        logger.info(
            "bids participant: %s in %.1f s",
            ", ".join(f"{n} {s}" for s, n in report.counts.items()),
            seconds,
        )
    return report
