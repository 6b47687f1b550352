"""Run one per-scan connectivity job over a whole cohort, on any engine.

Inputs come from files, folders, glob patterns or a BIDS derivatives tree
(``*_bold.nii.gz`` / ``*_timeseries.tsv`` found under ``sub-*`` folders);
each input file (one scan) is one task, named after its BIDS entities
(``sub-01_task-rest_run-1``) with the subject id taken from ``sub-XX``.

The scans run through the batch runner (:mod:`connscale.engines.batch`),
as the BIDS-App's runs do. Each task loads its own input where it runs,
computes the job and writes one output file atomically (temporary name,
then rename); ``memory_limit`` covers the whole task (the job gets what the
loaded scan leaves of it). An exception is recorded for its scan, so a bad
input never stops the others. A scan whose task kills its worker process (a
segfault, the out-of-memory killer, ``os._exit``) is tried ``1 + retries``
times on every engine, then recorded as failed (``WorkerLost: ...``) while
the other scans go on. Outputs that exist and were made with the same job
and parameters are skipped (resume after a crash; the fingerprint is read
from the output's attributes); leftover temporary files of interrupted
writes are removed. ``cohort_report.json`` (every record) and
``cohort_errors.tsv`` (failures only; the columns of every batch's errors
table) are rewritten after every batch of tasks.

Jobs (looked up lazily, so a job's dependencies load only when it runs):

``pairs``
    :func:`connscale.fc.pairs.pairwise_dfc` of the scan's region series plus
    :func:`~connscale.fc.pairs.pair_summary`, into ``<name>_pairs.h5``.
``fc``
    Static correlation (:func:`connscale.correlation`) into the BIDS-named
    ``<name>_meas-PearsonCorrelation_relmat.h5`` store of
    :mod:`connscale.io.hdf5`.
``dfc``
    Sliding-window correlation of all pairs
    (:func:`connscale.dynamic_correlation`, stored as 'triu', 'sparse',
    'lowrank' or 'factor') into ``<name>_dfc.h5``; an interrupted scan
    resumes from its finished windows.
"""

from __future__ import annotations

import functools
import glob
import importlib
import json
import os
import re
from collections.abc import Iterable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from connscale import _params
from connscale._choices import DTYPES
from connscale._validation import (
    check_kind_options,
    check_option,
    check_window,
    validate_parameter_values,
)
from connscale.cohort_config import CohortConfig, job_defaults
from connscale.engines import Engine, SerialEngine, get_engine
from connscale.engines.batch import (
    BatchLogs,
    BatchOptions,
    Task,
    TaskBudget,
    batch_device,
    run_batch,
)
from connscale.engines.slurm import SlurmJobs, slurm_jobs
from connscale.io.bids import write_dataset_description
from connscale.io.lock import OutputLock, is_locked

# Files a folder or BIDS tree is searched for, most specific first.
BIDS_PATTERNS = ("*_bold.nii.gz", "*_bold.nii", "*_timeseries.tsv")
INPUT_SUFFIXES = (".nii.gz", ".nii", ".tsv", ".csv", ".npy")
_SUBJECT = re.compile(r"sub-([A-Za-z0-9]+)")


@dataclass(frozen=True)
class CohortJob:
    """A per-scan job: where its function lives and what it writes.

    Attributes
    ----------
    name : str
    function : str
        ``'module:function'``, imported when the job runs.
    suffix : str
        BIDS suffix of the output (``<entities>_meas-PearsonCorrelation_<suffix>.h5``).
    """

    name: str
    function: str
    suffix: str


JOBS = {
    "pairs": CohortJob("pairs", "connscale.cohort:_job_pairs", "pairs"),
    "fc": CohortJob("fc", "connscale.cohort:_job_fc", "relmat"),
    "dfc": CohortJob("dfc", "connscale.cohort:_job_dfc", "dfc"),
}


@dataclass(frozen=True)
class CohortItem:
    """One input scan of the cohort."""

    path: Path
    name: str
    subject: str | None


@dataclass
class CohortTask:
    """Everything a worker needs to run one item (picklable).

    ``function`` is the job's ``'module:function'``, resolved by the driver:
    the worker imports it and does not consult its own :data:`JOBS`.
    """

    item: CohortItem
    job: str
    params: dict
    output: Path
    key: str
    threads: int
    function: str
    fingerprint: str = ""


@dataclass
class CohortReport:
    """What :func:`run_cohort` did.

    Attributes
    ----------
    records : list of dict
        One per input, in input order: ``name``, ``subject``, ``input``,
        ``output``, ``status`` ('ok', 'skipped' or 'error'), ``seconds``,
        and ``error`` / ``traceback`` for failures (the records of
        :mod:`connscale.engines.batch`, as the BIDS-App's).
    report_path, errors_path : Path
        ``cohort_report.json`` and ``cohort_errors.tsv``.
    device : str
        The device the scans were computed on ('auto' resolved).
    """

    records: list[dict]
    report_path: Path
    errors_path: Path
    engine: str = ""
    seconds: float = 0.0
    counts: dict = field(default_factory=dict)
    device: str = ""

    @property
    def n_ok(self) -> int:
        """Scans computed and written (status 'ok')."""
        return self.counts.get("ok", 0)

    @property
    def n_skipped(self) -> int:
        """Scans skipped, their output already complete (status 'skipped')."""
        return self.counts.get("skipped", 0)

    @property
    def n_failed(self) -> int:
        """Scans that failed (status 'error')."""
        return self.counts.get("error", 0)


# --------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------


def _is_input(path: Path) -> bool:
    return path.is_file() and path.name.lower().endswith(INPUT_SUFFIXES)


def _scan_name(path: Path, subject: str | None) -> str:
    """Return the source entities of a scan, joined (``sub-01_task-rest``): its outputs' stem."""
    from connscale.io.bids import bids_prefix, source_entities

    return bids_prefix(source_entities(path, subject=subject))


def _subject(path: Path) -> str | None:
    for part in (path.name, *reversed(path.parent.parts)):
        match = _SUBJECT.search(part)
        if match:
            return match.group(1)
    return None


def find_inputs(inputs: str | Path | Iterable[str | Path]) -> list[CohortItem]:
    """Input scans from files, folders, glob patterns or a BIDS tree.

    Parameters
    ----------
    inputs : str, path or list of them
        A file is taken as is. A folder is searched recursively for BIDS
        derivatives (``*_bold.nii.gz``, ``*_bold.nii``, ``*_timeseries.tsv``);
        when it holds none, its own ``.nii.gz``/``.nii``/``.tsv``/``.csv``/
        ``.npy`` files are used. A pattern with ``*``, ``?`` or ``[`` is
        expanded (``**`` recursive).

    Returns
    -------
    list of CohortItem
        Sorted by path, each with its name (BIDS entities of the file name)
        and subject id (from ``sub-XX``, or None).
    """
    if isinstance(inputs, (str, Path)):
        inputs = [inputs]
    paths: list[Path] = []
    for entry in inputs:
        text = str(entry)
        if any(c in text for c in "*?["):
            found = [Path(p) for p in sorted(glob.glob(text, recursive=True))]
            found = [p for p in found if _is_input(p)]
            if not found:
                raise ValueError(
                    f"The pattern {text!r} matches no input file ({', '.join(INPUT_SUFFIXES)})."
                )
        elif Path(text).is_dir():
            root = Path(text)
            found = sorted(
                {p for pattern in BIDS_PATTERNS for p in root.rglob(pattern) if p.is_file()}
            )
            if not found:
                found = sorted(p for p in root.iterdir() if _is_input(p))
            if not found:
                raise ValueError(
                    f"The folder {root} holds no input: no BIDS derivatives "
                    f"({', '.join(BIDS_PATTERNS)}) and no {', '.join(INPUT_SUFFIXES)} file."
                )
        elif Path(text).is_file():
            found = [Path(text)]
        else:
            raise FileNotFoundError(f"No input file, folder or matching pattern: {text}")
        paths.extend(found)
    unique = sorted(dict.fromkeys(p.resolve() for p in paths))
    if not unique:
        raise ValueError("No input scans were given.")
    items = [CohortItem(p, _scan_name(p, _subject(p)), _subject(p)) for p in unique]
    seen: dict[str, Path] = {}
    for item in items:
        if item.name in seen:
            raise ValueError(
                f"Two inputs have the same name {item.name!r} and would write the same "
                f"output: {seen[item.name]} and {item.path}. Rename one or run them "
                "separately."
            )
        seen[item.name] = item.path
    return items


# --------------------------------------------------------------------------
# Jobs
# --------------------------------------------------------------------------


def _job_entries(job: str) -> list:
    """Return the public functions a job calls.

    Its parameters must meet their declared constraints.
    """
    if job == "pairs":
        from connscale.fc.pairs import pair_summary, pairwise_dfc

        return [pairwise_dfc, pair_summary]
    if job == "dfc":
        from connscale.fc.dynamic import dynamic_correlation

        return [dynamic_correlation]
    from connscale.fc.static import compute_correlation

    return [compute_correlation]


def check_job_params(job: str, params: dict | None) -> dict:
    """Validate a job's parameters; return them with defaults filled in.

    The parameters a job takes and their defaults are declared in
    :mod:`connscale.cohort_config` (:func:`~connscale.cohort_config.job_defaults`).
    Every parameter is checked against the constraints declared by the
    public function the job calls (:func:`~connscale.fc.pairwise_dfc`,
    :func:`~connscale.fc.dynamic_correlation`, :func:`~connscale.correlation`),
    so invalid parameters fail here, before the first scan.
    """
    check_option(job, "job", set(JOBS))
    params = dict(params or {})
    allowed = job_defaults(job)
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValueError(
            f"Unknown parameter(s) {unknown} for job {job!r}; it takes {sorted(allowed)}."
        )
    merged = {**allowed, **params}
    if job in ("pairs", "dfc") and merged["window_length"] is None:
        raise ValueError(f"The {job!r} job needs 'window_length' (e.g. 32).")
    for entry in _job_entries(job):
        validate_parameter_values(
            entry.parameter_constraints, merged, f"the {job!r} job ({entry.__name__})"
        )
    if job in ("pairs", "dfc"):
        merged["window_length"], merged["step"] = check_window(
            merged["window_length"], merged["step"]
        )
    if job == "dfc":
        check_kind_options(merged["kind"], merged["threshold"], merged["absolute"], merged["rank"])
        merged["absolute"] = bool(merged["absolute"])
    elif job == "fc":
        check_option(merged["kind"], "kind", {"triu", "dense"})
    if merged.get("threshold") is not None:
        merged["threshold"] = float(merged["threshold"])
    if merged["atlas_name"] is not None:
        from connscale.io.bids import bids_prefix

        bids_prefix({"sub": "x", "seg": merged["atlas_name"]})
    # Recorded in the report and the outputs' fingerprints: a name, not a dtype object.
    check_option(merged["dtype"], "dtype", DTYPES)
    for name in ("atlas", "mask"):
        if merged[name] is not None:
            merged[name] = str(Path(merged[name]).resolve())
    return merged


def _load_item(path: Path, params: dict):
    """(timeseries, labels) of one input."""
    from connscale.io.timeseries import TIMESERIES_SUFFIXES, load_timeseries

    name = path.name.lower()
    if name.endswith((".nii", ".nii.gz")):
        from connscale.io.nifti import load_masked

        if params.get("atlas") is None and params.get("mask") is None:
            raise ValueError(
                f"{path.name} is a NIfTI image: give an 'atlas' (region series) or a "
                "'mask' (voxel series)."
            )
        timeseries, _ = load_masked(path, mask=params.get("mask"), atlas=params.get("atlas"))
        return timeseries, None
    if path.suffix.lower() in TIMESERIES_SUFFIXES:
        return load_timeseries(path)
    raise ValueError(f"Cannot read {path.name}: expected NIfTI or {TIMESERIES_SUFFIXES}.")


def compute_scan_pairs(
    timeseries, window_length: int, step: int, *, threshold: float, device, dtype, memory_limit
):
    """Compute the pair courses of one scan of shape (T, N) and their summary.

    The pair courses are :func:`~connscale.fc.pairs.pairwise_dfc`'s, the
    summary :func:`~connscale.fc.pairs.pair_summary`'s.
    """
    from connscale.fc.pairs import pair_summary, pairwise_dfc

    result = pairwise_dfc(
        timeseries[None],
        window_length,
        step,
        device=device,
        dtype=dtype,
        memory_limit=memory_limit,
    )
    return result, pair_summary(result.courses, threshold=threshold)


def write_scan_pairs(path: Path, result, summary, *, labels, attrs: dict, datasets=None) -> None:
    """Write the ``_pairs.h5`` store of one scan's :func:`compute_scan_pairs`."""
    from connscale.io.pairs import PAIR_STATISTICS, write_pairs_h5

    write_pairs_h5(
        path,
        courses=result.courses[0],
        pairs=result.pairs,
        window_onsets=result.window_starts,
        window_length=result.window_length,
        step=result.step,
        summary={stat: getattr(summary, stat)[0] for stat in PAIR_STATISTICS},
        threshold=summary.threshold,
        labels=labels,
        n_constant=result.n_constant,
        datasets=datasets,
        attrs=attrs,
    )


def _job_pairs(timeseries, labels, params: dict, output: Path, attrs: dict) -> dict:
    from connscale.io.atomic import check_free_space

    result, summary = compute_scan_pairs(
        timeseries,
        params["window_length"],
        params["step"],
        threshold=params["threshold"],
        device=params["device"],
        dtype=params["dtype"],
        memory_limit=params["memory_limit"],
    )
    with OutputLock(output):
        check_free_space(output.parent, result.courses.nbytes, what=output.name)
        write_scan_pairs(output, result, summary, labels=labels, attrs=attrs)
    return {
        "n_regions": int(timeseries.shape[1]),
        "n_timepoints": int(timeseries.shape[0]),
        "n_windows": int(result.window_starts.size),
    }


def _job_fc(timeseries, labels, params: dict, output: Path, attrs: dict) -> dict:
    from connscale.fc.static import compute_correlation

    compute_correlation(
        timeseries,
        kind=params["kind"],
        device=params["device"],
        dtype=params["dtype"],
        memory_limit=params["memory_limit"],
        out=output,
        attrs=attrs,
    )
    return {"n_series": int(timeseries.shape[1]), "n_timepoints": int(timeseries.shape[0])}


def _job_dfc(timeseries, labels, params: dict, output: Path, attrs: dict) -> dict:
    from connscale.fc.dynamic import dynamic_correlation

    # The labels (attrs) go in before the file gets its name: a file under
    # the output's name is finished and labelled, or absent.
    result = dynamic_correlation(
        timeseries,
        params["window_length"],
        params["step"],
        kind=params["kind"],
        threshold=params["threshold"],
        absolute=params["absolute"],
        rank=params["rank"],
        random_state=params["random_state"],
        device=params["device"],
        dtype=params["dtype"],
        memory_limit=params["memory_limit"],
        out=output,
        attrs=attrs,
    )
    n_windows = len(result)
    result.close()
    return {
        "n_series": int(timeseries.shape[1]),
        "n_timepoints": int(timeseries.shape[0]),
        "n_windows": n_windows,
    }


def _job_function(function: str):
    module, name = function.split(":")
    return getattr(importlib.import_module(module), name)


def _job_key(job: str, params: dict) -> str:
    """Return what makes an output reusable.

    The job and every parameter that changes the result (not the device or
    memory limit it was computed under).
    """
    kept = {k: v for k, v in params.items() if k not in ("device", "memory_limit")}
    return json.dumps({"job": job, "params": kept}, sort_keys=True)


def _task_fingerprint(item: CohortItem, job: str, params: dict) -> str:
    """Return the digest of what a scan's output depends on.

    Its input file (and the atlas or mask), the job and the parameters that
    change the result, and the connscale version.
    """
    from connscale.io.fingerprint import run_fingerprint

    inputs = [item.path] + [params[name] for name in ("atlas", "mask") if params.get(name)]
    kept = {k: v for k, v in params.items() if k != "device"}
    return run_fingerprint(inputs, {"job": job, "params": kept})["digest"]


def _is_complete(output: Path, job: str, fingerprint: str) -> bool:
    """Return True when ``output`` is finished and records ``fingerprint``.

    False when it is missing, unfinished, or made from other input or
    parameters (it is then redone).

    Raises
    ------
    ValueError
        When ``output`` exists but connscale's cohort runner did not write it
        (no fingerprint: another tool's file, or a link); it is never replaced
        without ``overwrite``.
    """
    if not os.path.lexists(output):
        return False
    foreign = ValueError(
        f"{output} exists and was not written by connscale cohort (it records no input "
        "fingerprint); remove it, or re-run with --overwrite to replace it."
    )
    if output.is_symlink() or not output.is_file():
        raise foreign
    import h5py

    try:
        with h5py.File(output, "r") as h5:
            recorded = h5.attrs.get("cohort_fingerprint")
            if recorded is None or "cohort_job" not in h5.attrs:
                raise foreign
            if recorded != fingerprint:
                return False
            if job == "dfc":
                from connscale.io.dfc import is_dfc_store

                return is_dfc_store(h5.attrs) and bool(h5["done"][...].all())
            return bool(h5.attrs.get("complete", False))
    except OSError:
        raise foreign from None


def run_scan(task: CohortTask, prepared=None) -> dict:
    """Load one scan, run its job and write its output; return the record's fields.

    ``memory_limit`` covers the whole task: the job gets what the loaded scan
    leaves of it (:class:`~connscale.engines.batch.TaskBudget`). ``prepared``
    is not used (the scan is read here, where the task runs).
    """
    # We get here only when the output is missing or was made otherwise:
    # writers refuse to overwrite a different run, so clear it first.
    task.output.unlink(missing_ok=True)
    timeseries, labels = _load_item(task.item.path, task.params)
    budget = TaskBudget(task.params.get("memory_limit"))
    budget.hold(
        timeseries.nbytes, f"Loading the scan ({timeseries.shape[0]} x {timeseries.shape[1]})"
    )
    params = task.params if budget.left is None else {**task.params, "memory_limit": budget.left}
    attrs = {
        "source": str(task.item.path),
        "cohort_job": task.key,
        "cohort_fingerprint": task.fingerprint,
    }
    details = _job_function(task.function)(timeseries, labels, params, task.output, attrs)
    return {"status": "ok", **details}


# --------------------------------------------------------------------------
# Runner
# --------------------------------------------------------------------------


def output_path(out_dir: Path, item: CohortItem, job: str, *, seg: str | None = None) -> Path:
    """Return the path of a scan's output, named by its source entities.

    ``<out_dir>/sub-<id>/[ses-<id>/]func/<entities>[_seg-<seg>]_meas-PearsonCorrelation_<suffix>.h5``:
    the scan's source entities (:func:`connscale.io.bids.source_entities`).
    """
    from connscale.io.bids import derivative_path, source_entities

    entities = source_entities(item.path, subject=item.subject)
    if seg is not None:
        entities["seg"] = seg
    entities["meas"] = "PearsonCorrelation"
    return derivative_path(out_dir, entities, suffix=JOBS[job].suffix, extension=".h5")


def _seg(params: dict) -> str | None:
    """Return the seg- label of the outputs: ``atlas_name``, else from the atlas file's name."""
    from connscale.io.bids import seg_label

    if params.get("atlas_name") is not None:
        return params["atlas_name"]
    return seg_label(params["atlas"]) if params.get("atlas") else None


def _remove_stale_temporaries(output: Path) -> int:
    """Remove the hidden ``.<name>.*.tmp`` that killed runs left beside ``output``.

    Not when a live run holds the output's lock (they are its own).
    """
    removed = 0
    if output.parent.exists() and not is_locked(output):
        for tmp in output.parent.glob(f".{glob.escape(output.name)}.*.tmp"):
            tmp.unlink(missing_ok=True)
            removed += 1
    return removed


@_params.entry(CohortConfig)
def run_cohort(config: CohortConfig) -> CohortReport:
    """Run a per-scan job over a cohort, one task per scan.

    Takes a :class:`~connscale.cohort_config.CohortConfig`, or its fields as
    arguments (``inputs``, ``job`` and ``out_dir`` positional).

    Parameters
    ----------
    %(parameters)s

    Returns
    -------
    CohortReport

    Notes
    -----
    One run writes into ``out_dir`` at a time (the lock
    ``out_dir/.cohort_run.lock`` names its holder's pid). A scan is skipped
    when its output is finished and records the same fingerprint: the input
    file's (and atlas' or mask's) size, modification time and content hash,
    the job, its parameters and the connscale version; an input overwritten
    with other data is recomputed. An output without a fingerprint was not
    written by connscale: that scan is reported as an error, not replaced.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> import numpy as np
    >>> import connscale
    >>> rng = np.random.default_rng(0)
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     for subject in ("01", "02"):
    ...         np.save(Path(tmp) / f"sub-{subject}_task-rest_timeseries.npy",
    ...                 rng.standard_normal((60, 4)))
    ...     report = connscale.run_cohort(tmp, "fc", Path(tmp) / "out", engine="serial",
    ...                                   params={"device": "cpu"})
    ...     print(report.n_ok, [r["status"] for r in report.records])
    2 ['ok', 'ok']
    """
    job = config.job
    params = check_job_params(job, config.params)  # before the first scan, and before any write
    slurm = slurm_jobs(config, engine="engine", log_directory=Path(config.out_dir) / "logs")
    out_dir = Path(config.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    options = BatchOptions(
        "cohort",
        BatchLogs(out_dir, "cohort_report.json", "cohort_errors.tsv"),
        desc=f"cohort {job}",
        unit="scan",
        threads=config.threads_per_task,
        batch_size=config.batch_size,
        # Unbounded SLURM jobs: every scan left at once, so the jobs scale to them all.
        per_worker=None if slurm is not None and slurm.max_jobs is None else 4,
        verbose=config.verbose,
    )
    serial = config.engine == "serial" or isinstance(config.engine, SerialEngine)
    params = {**params, "device": batch_device(params["device"], one_task_per_gpu=serial)}
    with OutputLock(out_dir / "cohort_run", wait=config.wait):
        return _run_cohort(
            find_inputs(config.inputs),
            job,
            out_dir,
            params,
            options,
            functools.partial(_open_engine, config, slurm),
            config.overwrite,
        )


def _scan_done(task: Task, *, overwrite: bool) -> bool:
    """Return whether the scan's output is complete (the runner's "is it done?" hook).

    Fills in the task's fingerprint, the one its output will record.
    """
    scan = task.payload
    scan.fingerprint = _task_fingerprint(scan.item, scan.job, scan.params)
    return not overwrite and _is_complete(scan.output, scan.job, scan.fingerprint)


def _open_engine(config: CohortConfig, slurm: SlurmJobs | None):
    """Return the engine named by ``config.engine`` (closed after), or the caller's (left open)."""
    if isinstance(config.engine, Engine):
        return nullcontext(config.engine)
    return get_engine(
        config.engine,
        cluster=config.cluster if slurm is None else slurm,
        n_jobs=None if slurm is not None else config.n_jobs,
        retries=config.retries,
        dashboard_address=config.dashboard_address,
    )


def _run_cohort(
    items: list[CohortItem],
    job: str,
    out_dir: Path,
    params: dict,
    options: BatchOptions,
    open_engine,
    overwrite: bool,
) -> CohortReport:
    """:func:`run_cohort`, under the lock of ``out_dir``: one task per scan."""
    key = _job_key(job, params)
    tasks = []
    for item in items:
        output = output_path(out_dir, item, job, seg=_seg(params))
        _remove_stale_temporaries(output)
        scan = CohortTask(item, job, params, output, key, options.threads, JOBS[job].function)
        fields = {"output": str(output)}
        tasks.append(Task(item.name, item.subject, str(item.path), run_scan, scan, fields))
    result = run_batch(
        tasks,
        options,
        is_done=functools.partial(_scan_done, overwrite=overwrite),
        open_engine=open_engine,
        meta={"job": job, "params": params, "device": params["device"], "n_inputs": len(items)},
    )
    write_dataset_description(out_dir)
    return CohortReport(
        result.records,
        result.report_path,
        result.errors_path,
        result.engine,
        result.seconds,
        result.counts,
        params["device"],
    )


__all__ = [
    "JOBS",
    "CohortItem",
    "CohortJob",
    "CohortReport",
    "check_job_params",
    "find_inputs",
    "output_path",
    "run_cohort",
    "run_scan",
]
