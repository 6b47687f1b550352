"""ALFF, fALFF and ReHo of a run: the participant measures ``alff`` and ``reho``.

XCP-D's maps (``xcp_d/workflows/bold/metrics.py``, ``xcp_d/utils/restingstate.py``)
from the run's denoised series, on the device (:func:`connscale.alff`,
:func:`connscale.maps.reho_series`), each measure its own output set::

    <source>_stat-alff_desc-<strategy>_boldmap.nii.gz / .json   (.dscalar.nii: CIFTI runs)
    <source>_stat-falff_desc-<strategy>_boldmap.nii.gz / .json
    <source>_stat-reho_desc-<strategy>_boldmap.nii.gz / .json
    <source>_stat-alff_desc-<strategy>_report.html / _stat-reho_desc-<strategy>_report.html

and, in the atlas-level set (when an atlas-level measure is written too), the
mean of each map over each parcel's voxels (grayordinates), NaN below
``min_coverage`` as the region series (one row, a column per parcel, as XCP-D's
parcellated maps)::

    <source>_seg-<atlas>_stat-<alff|falff|reho>_desc-<strategy>_bold.tsv / .json

As XCP-D, the series are not standardised (its denoised BOLD is not z-scored:
ALFF keeps the BOLD's scale; ReHo, from ranks, is the same either way). ALFF's
band is the run's filter (``high_pass`` to ``low_pass``) where set, else XCP-D's
default band, 0.01-0.08 Hz. XCP-D computes ALFF on its interpolated denoised
BOLD with the temporal mask (Lomb-Scargle on the kept volumes, the censored
ones entering only the series' standard deviation) and ReHo on the censored
one: here the kept volumes are the cleaned series, and a censored volume's value
(for the standard deviation alone) is XCP-D's interpolated one with
``--output-type interpolated``, else the linear interpolation in time of the
kept volumes beside it; the sidecars say which. Dummy scans are left out.
ReHo's neighbourhood: 27 voxels (AFNI ``3dReHo -nneigh 27``, XCP-D's); on
grayordinates, the cortical mesh's (``surfaces``, or the package's fs_LR 32k
triangles) and 27 voxels for the rest.
"""

from __future__ import annotations

import time
import warnings

import numpy as np

from connscale.bidsapp.voxel_measures import NEIGHBOURHOOD, alff_band
from connscale.io.atomic import atomic_path, write_json_atomic
from connscale.io.bids import bids_name

__all__ = ["MAPS", "local_maps", "parcel_tables", "write_alff", "write_local_maps", "write_reho"]

#: The maps of each measure.
MAPS = {"alff": ("alff", "falff"), "reho": ("reho",)}

_TITLES = {"alff": "ALFF", "falff": "fALFF", "reho": "ReHo"}


def _all_volumes(series: np.ndarray, kept: np.ndarray, n_volumes: int) -> np.ndarray:
    """Return (n_volumes, N) series: the kept rows, the censored ones linearly interpolated."""
    full = np.empty((n_volumes, series.shape[1]), dtype=series.dtype)
    full[kept] = series
    censored = np.setdiff1d(np.arange(n_volumes), kept)
    after = np.clip(np.searchsorted(kept, censored), 0, kept.size - 1)
    before = np.clip(np.searchsorted(kept, censored) - 1, 0, kept.size - 1)
    span = (kept[after] - kept[before]).astype(np.float64)
    weight = np.divide(censored - kept[before], span, out=np.zeros(censored.size), where=span > 0)
    weight = np.clip(weight, 0, 1).astype(series.dtype)[:, None]
    full[censored] = (1 - weight) * series[before] + weight * series[after]
    return full


def _alff_series(config, decoded, context, series) -> tuple[np.ndarray, np.ndarray | None]:
    """Return ALFF's series over every volume after the dummy scans, and the kept ones among them.

    No volume censored: the cleaned series and None. Censored, with XCP-D's
    interpolated series (``--output-type interpolated``): those, cleaned by
    the run's ``series_operator``; otherwise the kept volumes with the censored
    ones linearly interpolated (:func:`_all_volumes`).
    """
    from connscale.denoise import clean_signals

    operator = context["operator"]
    every = context.get("series_operator", operator)
    if every.interpolated is not None:  # XCP-D's interpolated denoised BOLD
        full = clean_signals(
            decoded.data,
            every,
            standardize=None,
            device=config.device,
            dtype=config.dtype,
            memory_limit=config.memory_limit,
        )
        return full, np.searchsorted(every.volumes, operator.volumes)
    first = int(context.get("dummy_scans") or 0)
    n_volumes = decoded.data.shape[0] - first
    if operator.volumes.size == n_volumes:
        return series, None
    kept = operator.volumes - first
    return _all_volumes(series.cpu().numpy(), kept, n_volumes), kept


def _neighbours(config, decoded) -> np.ndarray:
    """Return ReHo's neighbour list of the run's voxels (its mask) or grayordinates."""
    from connscale.maps import grayordinate_neighbours, voxel_neighbours

    if getattr(decoded, "cifti", None) is None:
        return voxel_neighbours(decoded.mask, NEIGHBOURHOOD)
    surfaces = (
        None
        if config.surfaces is None
        else {"left": config.surfaces[0], "right": config.surfaces[1]}
    )
    return grayordinate_neighbours(decoded.cifti.brain_model, surfaces, neighbourhood=NEIGHBOURHOOD)


def local_maps(config, run, decoded, context, timings) -> dict:
    """Return the run's ALFF, fALFF and ReHo values (those asked for), computed once per run.

    The unstandardised cleaned series are the run's one copy
    (:func:`~connscale.bidsapp.cleaned_voxels.unstandardised_series`, shared
    with the QC table); the maps stay in ``context['local_maps']`` for the
    other sets of the run (the atlas-level tables). ``'constant'`` counts the
    series constant after cleaning.
    """
    from connscale.bidsapp.cleaned_voxels import unstandardised_series
    from connscale.bidsapp.outputs import constant_columns
    from connscale.maps import alff, reho_series

    if "local_maps" in context:
        return context["local_maps"]
    tic = time.perf_counter()
    with warnings.catch_warnings():  # a CIFTI run's memory-mapped series are only read
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        series = unstandardised_series(config, decoded, context)
    timings["clean"] += time.perf_counter() - tic
    tic = time.perf_counter()
    maps = {"constant": int(constant_columns(series).sum())}
    compute = {"device": config.device, "memory_limit": config.memory_limit}
    if "alff" in config.measures:
        high, low = alff_band(config)
        every, kept = _alff_series(config, decoded, context, series)
        maps["alff"], maps["falff"] = alff(
            every,
            run.t_r,
            low_pass=low,
            high_pass=high,
            sample_mask=kept,
            dtype=config.dtype,
            **compute,
        )
        del every
    if "reho" in config.measures:
        maps["reho"] = reho_series(series, _neighbours(config, decoded), **compute)
    del series
    timings["compute"] += time.perf_counter() - tic
    context["local_maps"] = maps
    return maps


def _map_sidecar(stat: str, config, context, n_nodes: int, cifti: bool) -> dict:
    """Return what a map's sidecar says of its measure."""
    from connscale.io.maps import map_sidecar

    nodes = "grayordinate" if cifti else "voxel"
    if stat == "reho":
        hood = (
            "cortex: the vertices sharing a triangle of the mesh; elsewhere 27 voxels"
            if cifti
            else "27 voxels (AFNI 3dReHo -nneigh 27, XCP-D's)"
        )
        return map_sidecar(
            "Regional homogeneity (ReHo)",
            f"Kendall's W of each {nodes}'s denoised series with its neighbourhood ({hood}), "
            "ties at their average rank (connscale.maps.reho)",
            n_nodes=n_nodes,
            Neighbourhood=NEIGHBOURHOOD,
        )
    high, low = alff_band(config)
    kept = context["operator"].volumes.size
    censored = kept < context["operator"].n_timepoints - int(context.get("dummy_scans") or 0)
    extra = {
        "HighPass": high,
        "LowPass": low,
        "Periodogram": "Lomb-Scargle of the kept volumes" if censored else "periodogram",
    }
    if censored:
        interpolated = context.get("series_operator", context["operator"]).interpolated
        extra["CensoredVolumes"] = (
            "entering only the series' standard deviation (XCP-D's scale), "
            + (
                "as XCP-D's interpolated denoised volumes"
                if interpolated is not None
                else "as the linear interpolation in time of the cleaned kept volumes"
            )
        )
    if stat == "alff":
        return map_sidecar(
            "Amplitude of low-frequency fluctuations (ALFF)",
            f"2 x the mean amplitude spectrum of the denoised, unstandardised series in "
            f"[{high:g}, {low:g}) Hz (XCP-D's compute_alff)",
            n_nodes=n_nodes,
            **extra,
        )
    return map_sidecar(
        "Fractional ALFF (fALFF)",
        f"The amplitudes in [{high:g}, {low:g}) Hz over those of every frequency above 0 "
        "(Zou et al. 2008)",
        n_nodes=n_nodes,
        **extra,
    )


def _common_sidecar(config, run, decoded, context, n_constant: int) -> dict:
    """Return the keys every map of the run shares (sources, denoising, volumes kept)."""
    from connscale.bidsapp.outputs import run_sidecars

    _, meta = run_sidecars(config, run, [], context, decoded.data.shape[0])
    for key in ("Columns", "SamplingFrequency", "Atlas", "AtlasFile", "AtlasLabelsFile"):
        meta.pop(key)
    meta["DenoiseParameters"]["standardize"] = None  # the maps' series are not standardised
    if _is_cifti(decoded):
        meta["NumberOfConstantGrayordinates"] = n_constant
    else:
        from pathlib import Path

        from connscale.bidsapp.outputs import bids_uri

        meta["NumberOfConstantVoxels"] = n_constant
        meta["Mask"] = bids_uri(run.mask, Path(config.derivatives))  # the group's common mask
    return meta


def _is_cifti(decoded) -> bool:
    return getattr(decoded, "cifti", None) is not None


def write_local_maps(measure, config, run, decoded, out, context, timings) -> list[str]:
    """Compute and publish the maps of ``measure`` ('alff' or 'reho'); return the names written."""
    from connscale.bidsapp.voxel_measures import _image, _publish

    cifti = _is_cifti(decoded)
    n_nodes = decoded.data.shape[1]
    out.check_space(4 * n_nodes * len(MAPS[measure]), what=f"the {measure} maps of {run.name}")
    maps = local_maps(config, run, decoded, context, timings)
    tic = time.perf_counter()
    common = _common_sidecar(config, run, decoded, context, maps["constant"])
    written, drawn = [], []
    for stat in MAPS[measure]:
        extension = ".dscalar.nii" if cifti else ".nii.gz"
        name = bids_name(
            {**run.entities, "stat": stat, "desc": config.desc},
            suffix="boldmap",
            extension=extension,
        )
        values = np.asarray(maps[stat], dtype=np.float32)
        if cifti:
            from connscale.io.cifti import write_dscalar

            write_dscalar(out.path(name), decoded.cifti.brain_model, [stat], values[None])
        else:
            from connscale.io.nifti import save_nifti_gz

            affine = np.asarray(decoded.img.affine, dtype=np.float64)
            save_nifti_gz(out.path(name), _image(values, decoded.mask, affine))
        meta = {**_map_sidecar(stat, config, context, n_nodes, cifti), **common}
        sidecar = name[: -len(extension)] + ".json"
        write_json_atomic(out.path(sidecar), meta)
        written += [name, sidecar]
        drawn.append((name, values, _TITLES[stat]))
    timings["write"] += time.perf_counter() - tic
    if config.reports:
        written.append(_report(measure, config, run, decoded, out, drawn, written, timings))
    tic = time.perf_counter()
    _publish(out, written, run)
    timings["write"] += time.perf_counter() - tic
    return written


def _report(measure, config, run, decoded, out, drawn, written, timings) -> str:
    """Write the set's report: each map over the run's mean image (or its grayordinates)."""
    from connscale.bidsapp.voxel_measures import _map_figures, _mean_image
    from connscale.bidsapp.voxel_measures import _report as write_report

    tic = time.perf_counter()
    if _is_cifti(decoded):
        from connscale.bidsapp.cifti_report import draw_map

        folder = out.staging / "figures"
        folder.mkdir(parents=True, exist_ok=True)
        figures = [
            draw_map(
                values,
                decoded.cifti.brain_model,
                folder / f"{title}.png",
                title=title,
                surfaces=config.surfaces,
            )[0]
            for _, values, title in drawn
        ]
    else:
        figures = _map_figures(out, [(n, t) for n, _, t in drawn], _mean_image(decoded))
    name = bids_name(
        {**run.entities, "stat": measure, "desc": config.desc}, suffix="report", extension=".html"
    )
    results = {"nodes": int(decoded.data.shape[1])}
    if measure == "alff":
        results["band (Hz)"] = list(alff_band(config))
    else:
        results["neighbourhood"] = NEIGHBOURHOOD
    results["volumes kept"] = int(decoded.context["operator"].volumes.size)
    write_report(
        out,
        name,
        config=config,
        run=run,
        figures=figures,
        results=results,
        timings=timings,
        outputs=list(written),
        started=decoded.started,
    )
    timings["write"] += time.perf_counter() - tic
    return name


def parcel_tables(measure, region_set) -> list[str]:
    """Stage the mean of each map of ``measure`` over each parcel in the atlas-level set.

    One row, a column per region of the set (its series' columns); NaN
    (``n/a``) for the regions below ``min_coverage`` and where every value of
    the parcel is NaN. Returns the names staged.
    """
    config, prepared = region_set.config, region_set.prepared
    maps = local_maps(
        config, region_set.run, region_set.decoded, region_set.context, region_set.timings
    )
    labels = _node_labels(region_set.decoded)
    written = []
    for stat in MAPS[measure]:
        values = np.asarray(maps[stat], dtype=np.float64)
        means = np.array(
            [_nanmean(values[labels == key]) for key in prepared.keys], dtype=np.float64
        )
        if prepared.low_coverage is not None:
            means[prepared.low_coverage] = np.nan
        name = bids_name({**region_set._labelled, "stat": stat}, suffix="bold", extension=".tsv")
        with atomic_path(region_set.out.path(name)) as tmp, open(tmp, "w") as handle:
            handle.write("\t".join(prepared.names) + "\n")
            handle.write("\t".join("n/a" if np.isnan(v) else f"{v:.8g}" for v in means) + "\n")
        meta = {
            "Description": f"The mean {_TITLES[stat]} of each region's voxels (grayordinates) "
            "in the run's mask; n/a below MinimumCoverage",
            **{
                k: v
                for k, v in prepared.series_meta.items()
                if k in ("Sources", "Atlas", "AtlasFile", "MinimumCoverage", "LowCoverageRegions")
            },
        }
        write_json_atomic(region_set.out.path(name[:-4] + ".json"), meta)
        written += [name, name[:-4] + ".json"]
    return written


def _node_labels(decoded) -> np.ndarray:
    """Return the atlas label of each voxel (grayordinate) of the run, in its series' order."""
    if _is_cifti(decoded):
        return np.asarray(decoded.atlas.labels)
    return np.asarray(decoded.atlas)[decoded.mask]


def _nanmean(values: np.ndarray) -> float:
    finite = values[~np.isnan(values)]
    return float(finite.mean()) if finite.size else float("nan")


def write_alff(config, run, decoded, out, context, timings) -> list[str]:
    """Write the ALFF and fALFF maps of the run (:func:`write_local_maps`)."""
    return write_local_maps("alff", config, run, decoded, out, context, timings)


def write_reho(config, run, decoded, out, context, timings) -> list[str]:
    """Write the ReHo map of the run (:func:`write_local_maps`)."""
    return write_local_maps("reho", config, run, decoded, out, context, timings)
