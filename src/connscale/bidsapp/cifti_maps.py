"""Grayordinate maps of a CIFTI run: the participant measure ``maps`` as ``.dscalar.nii``.

The maps of a volume run (:mod:`connscale.bidsapp.voxel_measures`: binary
and weighted degree at each threshold, eigenvector centrality, global
correlation) computed on the run's denoised grayordinate series, each
written as a one-map ``.dscalar.nii`` on the run's brain model (the map's
name in the ScalarAxis) with its JSON sidecar, under the volume maps' names::

    <source>_meas-r<θ>_stat-degree_desc-<strategy>_boldmap.dscalar.nii / .json
    <source>_meas-r<θ>_stat-weighteddegree_desc-<strategy>_boldmap.dscalar.nii / .json
    <source>_stat-ecm_desc-<strategy>_boldmap.dscalar.nii / .json
    <source>_stat-gcor_desc-<strategy>_boldmap.dscalar.nii / .json
    <source>_stat-maps_desc-<strategy>_report.html

The report draws each map on the cortical surfaces given (``surfaces``) or in a
flat per-structure view, and says which.
"""

from __future__ import annotations

import time

import numpy as np

from connscale.io.atomic import write_json_atomic
from connscale.io.bids import bids_name

__all__ = ["cleaned_grayordinates", "write_cifti_maps"]


def cleaned_grayordinates(config, decoded, context, timings) -> np.ndarray:
    """Return the run's denoised grayordinate series (n_kept, n_grayordinates), cleaned once.

    The first set of the run that needs them (``write_denoised``, ``maps``)
    cleans them within ``memory_limit``; the others read them from
    ``context['cleaned_grayordinates']`` (the run's budget counts them once,
    see :func:`connscale.bidsapp.cifti_decode.held_bytes`).
    """
    from connscale.bidsapp.cifti_decode import read_only_series
    from connscale.denoise import clean_signals

    cleaned = context.get("cleaned_grayordinates")
    if cleaned is None:
        tic = time.perf_counter()
        with read_only_series():
            cleaned = clean_signals(
                decoded.data,
                context["operator"],
                standardize=config.standardize,
                device=config.device,
                dtype=config.dtype,
                memory_limit=config.memory_limit,
            )
        timings["clean"] += time.perf_counter() - tic
        context["cleaned_grayordinates"] = cleaned
    return cleaned


def _cleaned(config, run, decoded, context, timings) -> tuple[np.ndarray, int]:
    """Return the run's denoised grayordinate series and how many are constant (noted)."""
    from connscale.bidsapp.outputs import constant_columns

    series = cleaned_grayordinates(config, decoded, context, timings)
    n_constant = int(constant_columns(series).sum())
    if n_constant:
        context["warnings"].append(
            f"{n_constant} of {series.shape[1]} grayordinates of {run.bold.name} are constant "
            "over time or have no variance left after cleaning: their correlations are NaN."
        )
    return series, n_constant


def _maps(config, series: np.ndarray) -> list[tuple[dict, np.ndarray, dict]]:
    """Compute the maps: ``(entities, values, sidecar)`` each."""
    from connscale.io.maps import map_sidecar, threshold_label
    from connscale.maps import eigenvector_centrality, global_correlation
    from connscale.maps.degree import compute_degree
    from connscale.maps.prepare import normalize_once

    n = series.shape[1]
    thresholds = [float(v) for v in config.degree_thresholds]
    normalized = normalize_once(series, device=config.device, dtype=config.dtype)
    (binary, weighted), info = compute_degree(
        normalized, thresholds, memory_limit=config.memory_limit, precision=config.precision,
        both=True,
    )  # fmt: skip
    found = {"Method": info["method"], "Precision": config.precision}
    maps = []
    for theta, counts, sums in zip(thresholds, binary, weighted):
        kept = f"r > {theta:.6g}"
        for stat, values, measure, what, is_weighted in (
            ("degree", counts, "Degree centrality", "Number", False),
            ("weighteddegree", sums, "Weighted degree centrality", "Sum of r over", True),
        ):
            sidecar = map_sidecar(
                measure,
                f"{what} the other grayordinates with {kept} (denoised series)",
                n_nodes=n, Threshold=theta, Weighted=is_weighted, **found,
            )  # fmt: skip
            maps.append(({"meas": threshold_label(theta), "stat": stat}, values, sidecar))
    ecm = map_sidecar(
        "Eigenvector centrality",
        "Leading eigenvector of R + 1 (fastECM, Wink et al. 2012), unit norm",
        n_nodes=n,
    )
    gcor = map_sidecar("Global correlation", "Mean r to all other grayordinates", n_nodes=n)
    maps.append(({"stat": "ecm"}, eigenvector_centrality(normalized), ecm))
    maps.append(({"stat": "gcor"}, global_correlation(normalized), gcor))
    return maps


def write_cifti_maps(config, run, decoded, out, context, timings) -> list[str]:
    """Compute and publish the grayordinate maps of a CIFTI run; return the names written."""
    from connscale.bidsapp.voxel_measures import _publish
    from connscale.io.cifti import write_dscalar

    brain_model = decoded.cifti.brain_model
    n_maps = 2 * len(config.degree_thresholds) + 2
    out.check_space(4 * len(brain_model) * n_maps, what=f"the maps of {run.name}")
    series, n_constant = _cleaned(config, run, decoded, context, timings)
    tic = time.perf_counter()
    maps = _maps(config, series)
    del series
    timings["compute"] += time.perf_counter() - tic
    tic = time.perf_counter()
    written, drawn = [], []
    for extra, values, sidecar in maps:
        entities = {**run.entities, **extra, "desc": config.desc}
        name = bids_name(entities, suffix="boldmap", extension=".dscalar.nii")
        title = name.split("_desc-")[0].split("_boldmap.")[0].split("_", 1)[-1]
        write_dscalar(out.path(name), brain_model, [title], np.asarray(values)[None])
        meta = {**sidecar, "Nodes": "grayordinates", "NumberOfConstantGrayordinates": n_constant}
        meta["RepetitionTime"] = run.t_r
        meta["NumberOfVolumesKept"] = int(context["operator"].volumes.size)
        json_name = name[: -len(".dscalar.nii")] + ".json"
        write_json_atomic(out.path(json_name), meta)
        written += [name, json_name]
        drawn.append((values, title))
    timings["write"] += time.perf_counter() - tic
    if config.reports:
        written.append(_report(config, run, decoded, out, drawn, written, timings))
    tic = time.perf_counter()
    _publish(out, written, run)
    timings["write"] += time.perf_counter() - tic
    return written


def _report(config, run, decoded, out, drawn: list, written: list, timings) -> str:
    """Write the maps' report (each map in a flat per-structure view); return its name."""
    from connscale.bidsapp.cifti_report import draw_map
    from connscale.bidsapp.voxel_measures import _report as write_report

    tic = time.perf_counter()
    folder = out.staging / "figures"
    folder.mkdir(parents=True, exist_ok=True)
    brain_model = decoded.cifti.brain_model
    figures, how = [], None
    for values, title in drawn:
        path = folder / f"{title}.png"
        figure, how = draw_map(values, brain_model, path, title=title, surfaces=config.surfaces)
        figures.append(figure)
    name = bids_name(
        {**run.entities, "stat": "maps", "desc": config.desc}, suffix="report", extension=".html"
    )
    write_report(
        out,
        name,
        config=config,
        run=run,
        figures=figures,
        results={
            "grayordinates": len(brain_model),
            "volumes kept": int(decoded.context["operator"].volumes.size),
            "degree thresholds": [float(v) for v in config.degree_thresholds],
            "maps drawn as": how,
        },
        timings=timings,
        outputs=list(written),
        started=decoded.started,
    )
    timings["write"] += time.perf_counter() - tic
    return name
