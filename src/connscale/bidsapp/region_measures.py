"""The atlas-level set of a run.

Its connectome and region series, the
sliding-window stores (``dfc``, ``pairs``) and the run's HTML report.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path

import numpy as np

from connscale._choices import REGION_MEASURES
from connscale._version import __version__
from connscale.bidsapp.atlas import read_atlas_labels
from connscale.bidsapp.config import WINDOWED, ParticipantConfig
from connscale.bidsapp.outputs import (
    MEASURE,
    bids_uri,
    constant_columns,
    constant_message,
    failure_reason,
    sidecars,
)
from connscale.cohort import compute_scan_pairs, write_scan_pairs
from connscale.io.atomic import write_json_atomic
from connscale.io.bids import bids_name

__all__ = ["write_region"]


def write_region(config, run, decoded, out, context, timings) -> tuple[list[str], dict]:
    """Compute and publish the atlas-level set of one run.

    Clean the decoded region means, then write each requested region measure
    (``fc`` relmat, ``timeseries``, the windowed ``dfc``/``pairs`` stores) and
    the run's HTML report when ``config.reports``. A measure that fails is
    recorded and its files discarded; the others go on. The set is committed
    only when at least one file besides the report was written.

    Parameters
    ----------
    config : ParticipantConfig
        The participant-level settings.
    run : BoldRun
        The BOLD run.
    decoded : DecodedRun
        The run's decoded image, mask, atlas and region means.
    out : OutputSet
        The output set the files are staged into and committed from.
    context : dict
        Per-run values shared by the sets (``operator``, ``confounds``,
        ``sample_mask``, ``mean_fd``, ``fd``, ``dof``, ``warnings``);
        warnings about constant regions are appended to ``warnings``.
    timings : dict
        Seconds per step (``clean``, ``compute``, ``write``), added to.

    Returns
    -------
    written : list of str
        The names of the files written (empty when nothing was published).
    failed : dict
        ``{measure: reason}`` of the measures that failed.

    Raises
    ------
    ValueError
        Fewer than 2 atlas regions inside the mask, or no region varies after
        cleaning.
    """
    from connscale.denoise import clean_signals, constant_series
    from connscale.fc.static import correlation
    from connscale.io.relmat import write_relmat_tsv
    from connscale.io.timeseries import save_timeseries

    entities = dict(run.entities)
    seg = {"seg": config.atlas_name, "desc": config.desc}
    operator = context["operator"]
    img, regions = decoded.img, decoded.regions
    if regions.size < 2:
        raise ValueError(f"Fewer than 2 atlas regions inside the mask of {run.bold.name}.")

    tic = time.perf_counter()
    # The region means were summed in float64 while decoding (NiftiLabelsMasker's
    # extraction); cleaning them is NiftiLabelsMasker's signal.clean.
    series = clean_signals(
        decoded.region_means,
        operator,
        standardize=config.standardize,
        device=config.device,
        dtype=config.dtype,
    )
    timings["clean"] += time.perf_counter() - tic
    names = _region_names(config, regions)
    constant = constant_columns(series)
    if constant.all():
        raise ValueError(f"No atlas region of {run.bold.name} varies after cleaning.")
    relmat_meta, series_meta = sidecars(
        config,
        run,
        names,
        context["confounds"],
        context["sample_mask"],
        int(img.shape[3]),
        context["mean_fd"],
        dof=context["dof"],
    )
    atlas_meta = {"AtlasSpace": config.atlas_space, "AtlasResampling": decoded.atlas_resampling}
    relmat_meta.update(atlas_meta)
    series_meta.update(atlas_meta)
    if constant.any():
        raw = constant_series(decoded.region_means, dtype=config.dtype)
        listed = [f"{n} (constant in the BOLD)" if r else n for n, r in zip(names, raw)]
        listed = [entry for entry, c in zip(listed, constant) if c]
        context["warnings"].append(
            constant_message(run, "atlas regions", ", ".join(listed), len(listed), len(names))
        )
        for meta in (relmat_meta, series_meta):
            meta["ConstantRegions"] = [n for n, c in zip(names, constant) if c]
    measured = {**entities, "seg": config.atlas_name, "meas": MEASURE, "desc": config.desc}
    failed, results = {}, {"fc": None}

    def write_fc() -> list[str]:
        tic = time.perf_counter()
        results["fc"] = correlation(
            series, device=config.device, dtype=config.dtype, memory_limit=config.memory_limit
        )
        timings["compute"] += time.perf_counter() - tic
        tic = time.perf_counter()
        stem = bids_name(measured, suffix="relmat", extension=".tsv")
        write_relmat_tsv(out.path(stem), results["fc"], names, fmt="%.8g")
        write_json_atomic(out.path(stem[:-4] + ".json"), relmat_meta)
        timings["write"] += time.perf_counter() - tic
        return [stem, stem[:-4] + ".json"]

    def write_timeseries() -> list[str]:
        tic = time.perf_counter()
        stem = bids_name({**entities, **seg}, suffix="timeseries", extension=".tsv")
        save_timeseries(out.path(stem), series, names)
        write_json_atomic(out.path(stem[:-4] + ".json"), series_meta)
        timings["write"] += time.perf_counter() - tic
        return [stem, stem[:-4] + ".json"]

    def write_windowed(measure: str) -> list[str]:
        name = bids_name(measured, suffix=measure, extension=".h5")
        _windowed_store(
            measure, config, run, series, names, out.path(name), operator.volumes, timings
        )
        write_json_atomic(
            out.path(name[:-3] + ".json"),
            _windowed_sidecar(measure, config, relmat_meta, series.shape[0]),
        )
        return [name, name[:-3] + ".json"]

    def write_report() -> list[str]:
        tic = time.perf_counter()
        name = bids_name({**entities, **seg}, suffix="report", extension=".html")
        out.path(name)
        _run_report(
            out.staging,
            name,
            config=config,
            run=run,
            img=img,
            mask=decoded.mask,
            atlas=decoded.atlas,
            resampling=decoded.atlas_resampling,
            data=decoded.data,
            labels=decoded.atlas[decoded.mask],
            regions=regions,
            operator=operator,
            fc=results["fc"],
            names=names,
            fd=context["fd"],
            timings=timings,
            outputs=list(written),
            started=decoded.started,
            notes=context["warnings"],
            dof=context["dof"],
        )
        timings["write"] += time.perf_counter() - tic
        return [name]

    jobs = {"fc": write_fc, "timeseries": write_timeseries}
    jobs.update({m: functools.partial(write_windowed, m) for m in WINDOWED})
    written = []
    for measure in [m for m in config.measures if m in REGION_MEASURES] + ["report"] * bool(
        config.reports
    ):
        names_before = set(out.names)
        try:
            written += (write_report if measure == "report" else jobs[measure])()
        except Exception as exc:  # noqa: BLE001 - recorded, the other measures go on
            failed[measure] = failure_reason(exc)
            for name in set(out.names) - names_before:
                out.discard(name)
    if not [n for n in written if not n.endswith("_report.html")]:
        return [], failed  # nothing but a report: no set to publish
    tic = time.perf_counter()
    out.commit(extra={"run": run.name, **({"failed_measures": failed} if failed else {})})
    timings["write"] += time.perf_counter() - tic
    return written, failed


def _window_onsets(n_kept: int, config, volumes: np.ndarray, t_r: float) -> dict:
    from connscale.fc.dynamic import window_starts

    starts = window_starts(n_kept, config.window_length, config.step)
    return {
        "window_onsets": starts,
        "window_onset_volumes": volumes[starts],
        "window_onset_seconds": volumes[starts] * float(t_r),
    }


def _windowed_store(measure, config, run, series, names, path: Path, volumes, timings) -> None:
    """Write ``dfc`` (connscale.dynamic_correlation) or ``pairs`` (pairwise_dfc) of a run."""
    from connscale.io.hdf5 import add_datasets

    if series.shape[0] < config.window_length:
        raise ValueError(
            f"--window-length {config.window_length} is longer than the "
            f"{series.shape[0]} volumes kept in {run.bold.name}."
        )
    onsets = _window_onsets(series.shape[0], config, volumes, run.t_r)
    extra = {"kept_volumes": volumes, **onsets, "labels": np.asarray(names, dtype=object)}
    attrs = {
        "measure": MEASURE,
        "atlas": config.atlas_name,
        "strategy": config.strategy,
        "source": bids_uri(run.bold, Path(config.derivatives)),
        "software": f"connscale {__version__}",
        "repetition_time": float(run.t_r),
    }
    path.unlink(missing_ok=True)  # an unpublished leftover of a failed attempt
    if measure == "dfc":
        from connscale.fc.dynamic import dynamic_correlation

        tic = time.perf_counter()
        result = dynamic_correlation(
            series,
            config.window_length,
            config.step,
            kind="triu",
            device=config.device,
            dtype=config.dtype,
            memory_limit=config.memory_limit,
            out=path,
        )
        result.close()
        timings["compute"] += time.perf_counter() - tic
        tic = time.perf_counter()
        add_datasets(path, {k: v for k, v in extra.items() if k != "window_onsets"}, attrs=attrs)
        timings["write"] += time.perf_counter() - tic
        return

    tic = time.perf_counter()
    result, summary = compute_scan_pairs(
        series,
        config.window_length,
        config.step,
        threshold=config.pairs_threshold,
        device=config.device,
        dtype=config.dtype,
        memory_limit=config.memory_limit,
    )
    timings["compute"] += time.perf_counter() - tic
    tic = time.perf_counter()
    write_scan_pairs(
        path,
        result,
        summary,
        labels=names,
        attrs=attrs,
        datasets={k: v for k, v in extra.items() if k not in ("window_onsets", "labels")},
    )
    timings["write"] += time.perf_counter() - tic


def _windowed_sidecar(measure: str, config, relmat_meta: dict, n_kept: int) -> dict:
    meta = {k: v for k, v in relmat_meta.items() if k not in ("StorageFormat", "ValidDiagonal")}
    meta.update(
        {
            "MeasureDescription": (
                "Sliding-window Pearson correlation of every pair of denoised atlas region "
                "series"
                + (
                    ", with each pair's mean, standard deviation and fraction of "
                    f"windows above {config.pairs_threshold}"
                    if measure == "pairs"
                    else ""
                )
            ),
            "WindowLength": config.window_length,
            "WindowStep": config.step,
            "NumberOfWindows": (n_kept - config.window_length) // config.step + 1,
            "WindowsSpan": "the kept volumes, in order (with censoring a window may span a gap; "
            "window_onset_volumes and window_onset_seconds give each window's "
            "first source volume)",
            "StorageFormat": (
                "HDF5 (connscale-dfc-1): triu (windows, pairs), row-major strictly-upper pairs"
                if measure == "dfc"
                else "HDF5: courses (pairs, windows), pairs (pairs, 2), summary/*"
            ),
        }
    )
    if measure == "pairs":
        meta["Threshold"] = config.pairs_threshold
    return meta


def _run_report(
    staging: Path,
    name: str,
    *,
    config,
    run,
    img,
    mask,
    atlas,
    resampling,
    data,
    labels,
    regions,
    operator,
    fc,
    names,
    fd,
    timings,
    outputs,
    started,
    notes=(),
    dof=None,
) -> Path:
    """Write the run's HTML report into ``staging``.

    The report is written beside ``outputs`` (the names of the set's other
    files); ``started`` is in epoch seconds.
    """
    from connscale.bidsapp.report import describe_resampling, run_figures, run_header
    from connscale.denoise import clean_signals, region_signals
    from connscale.report import write_report

    raw = region_signals(data, labels, regions=regions, device=config.device)
    with np.errstate(divide="ignore", invalid="ignore"):  # constant regions: NaN, warned once
        raw_fc = np.corrcoef(raw.T)
    step = max(1, data.shape[1] // 2000)
    voxels = clean_signals(
        data[:, ::step], operator, standardize=config.standardize, device=config.device
    )
    if fc is None:
        from connscale.fc.static import correlation

        fc = correlation(clean_signals(raw, operator, device=config.device), device="cpu")
    figures = run_figures(
        staging / "figures",
        img=img,
        mask=mask,
        atlas=atlas,
        data=data,
        cleaned_voxels=voxels,
        raw_fc=raw_fc,
        fc=fc,
        names=names,
        fd=fd,
        kept=operator.volumes,
    )
    results = {
        "volumes": int(data.shape[0]),
        "volumes kept": int(operator.volumes.size),
        "voxels in mask": int(data.shape[1]),
        "regions": int(len(names)),
        "mean FD (mm)": None if fd is None else float(fd.mean()),
    }
    if dof is not None:
        results["residual degrees of freedom"] = dof["dof"]
    record = {
        "command": f"bids participant: {run.name}",
        **run_header(config.device, started),
        "parameters": {
            "atlas": config.atlas_name,
            "atlas space": config.atlas_space,
            "atlas grid": describe_resampling(resampling),
            "strategy": config.strategy,
            "bold": str(run.bold),
            "mask": str(run.mask),
            "confounds": str(run.confounds),
            "t_r": run.t_r,
        },
        "results": results,
        "timings_s": dict(timings),
        "figures": [str(f) for f in figures],
        "outputs": outputs,
        "warnings": list(notes),
    }
    return write_report(record, staging, filename=name)


def _region_names(config: ParticipantConfig, regions: np.ndarray) -> list[str]:
    """Return region names from the labels file, else ``label-<value>``.

    A header row of bare numbers would read back as a row of data.
    """
    if config.atlas_labels is None:
        return [f"label-{int(r)}" for r in regions]
    table = read_atlas_labels(config.atlas_labels)
    missing = [int(r) for r in regions if int(r) not in table]
    if missing:
        raise ValueError(f"The atlas labels file names no region for label(s) {missing[:10]}.")
    return [table[int(r)] for r in regions]
