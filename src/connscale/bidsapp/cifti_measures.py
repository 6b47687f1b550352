"""The outputs of a CIFTI run: its parcellated set and its denoised grayordinates.

A CIFTI run (:mod:`connscale.bidsapp.cifti_decode`) is parcellated with
:func:`connscale.cifti.parcellate` (the mean of each ``.dlabel.nii`` parcel's
grayordinates that vary, as ``wb_command -cifti-parcellate``; the parcels
without one are left out and have coverage 0), its parcel series cleaned
with the run's operator as a volume run's region means are
(:func:`connscale.denoise.clean_signals`: nilearn's ``signal.clean``), and
its atlas-level set written as a volume run's, plus the CIFTI-2 twins in
XCP-D's spelling (:mod:`connscale.io.cifti`)::

    <source>_seg-<atlas>_meas-PearsonCorrelation_desc-<strategy>_relmat.tsv / .json (fc)
    <source>_seg-<atlas>_stat-pearsoncorrelation_desc-<strategy>_boldmap.pconn.nii (fc)
    <source>_seg-<atlas>_desc-<strategy>_timeseries.tsv / .json (timeseries)
    <source>_seg-<atlas>_stat-mean_desc-<strategy>_timeseries.ptseries.nii (timeseries)
    <source>_seg-<atlas>_stat-coverage_desc-<strategy>_boldmap.pscalar.nii
    <source>_seg-<atlas>_stat-coverage_desc-<strategy>_bold.tsv / .json
    <source>_seg-<atlas>_meas-PearsonCorrelation_desc-<strategy>_dfc.h5 / _pairs.h5 (as volumes)
    <source>_seg-<atlas>_desc-<strategy>_report.html

where ``<source>`` keeps the run's ``space-`` and ``den-`` entities. With
``write_denoised``, the cleaned grayordinate series are their own set::

    <source>_desc-<strategy>_bold.dtseries.nii / .json

With the measure ``maps``, the grayordinate maps are their own set
(:mod:`connscale.bidsapp.cifti_maps`). The series axis of every written
series holds the kept volumes (the sidecars' ``KeptVolumes`` say which); with
``--output-type interpolated`` and a censored volume, the parcel series and the
denoised dtseries hold every volume after the dummy scans, the censored ones
interpolated (``InterpolatedVolumes``), as XCP-D's; the correlations are of
the kept volumes. The run's QC table is :mod:`connscale.bidsapp.qc_outputs`'s.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from connscale.bidsapp.cifti_decode import read_only_series
from connscale.bidsapp.coverage import coverage_sidecar
from connscale.bidsapp.outputs import constant_columns, constant_message, run_sidecars
from connscale.bidsapp.region_measures import _clean_regions, _Prepared, _RegionSet
from connscale.io.atomic import write_json_atomic
from connscale.io.bids import bids_name

__all__ = ["write_cifti_set"]


def write_cifti_set(kind, config, run, decoded, out, context, timings) -> tuple[list[str], dict]:
    """Compute and publish one set of a CIFTI run (``region``, ``denoised``, ``maps``, ``qc``...).

    Returns the names written and ``{measure: reason}`` of the measures that failed.
    """
    if kind == "region":
        prepared, parcels = _prepare(config, run, decoded, context, timings)
        region_set = _CiftiRegionSet(
            config, run, decoded, out, context, timings, prepared, parcels=parcels
        )
        return region_set.write()
    if kind == "denoised":
        return write_denoised(config, run, decoded, out, context, timings), {}
    if kind == "maps":
        from connscale.bidsapp.cifti_maps import write_cifti_maps

        return write_cifti_maps(config, run, decoded, out, context, timings), {}
    if kind == "qc":
        from connscale.bidsapp.qc_outputs import write_qc

        with read_only_series():  # the final DVARS cleans the memory-mapped series
            return write_qc(config, run, decoded, out, context, timings), {}
    if kind in ("alff", "reho"):
        from connscale.bidsapp.local_maps import write_local_maps

        return write_local_maps(kind, config, run, decoded, out, context, timings), {}
    raise ValueError(f"A CIFTI run has no {kind} set.")


@dataclass(frozen=True)
class _Parcels:
    """The parcels of a run: those written (with a grayordinate that varies) and their coverage.

    ``axis`` is the ParcelsAxis of the written parcels, ``atlas_axis`` that
    of every parcel of the atlas, ``coverage`` each atlas parcel's fraction
    of grayordinates used, ``means`` the written parcels' means of every
    volume before cleaning.
    """

    axis: object
    atlas_axis: object
    coverage: np.ndarray
    means: np.ndarray


def _kept_series_axis(decoded, n_rows: int | None = None):
    """Return the SeriesAxis of the published volumes (the run's start and step, their count).

    ``n_rows``: their count, when not the kept volumes' (``--output-type interpolated``).
    """
    from nibabel.cifti2 import SeriesAxis

    series = decoded.cifti.series
    if n_rows is None:
        n_rows = decoded.context["operator"].volumes.size
    return SeriesAxis(series.start, series.step, int(n_rows), series.unit)


def _prepare(config, run, decoded, context, timings) -> tuple[_Prepared, _Parcels]:
    """Parcellate and clean the run; name the parcels; build the sidecars."""
    from connscale.cifti import parcellate
    from connscale.cifti.parcellate import parcels_axis
    from connscale.io.cifti import brain_model_summary

    atlas, keys = decoded.atlas, decoded.regions
    tic = time.perf_counter()
    with read_only_series():
        parcellation = parcellate(
            decoded.data,
            atlas.labels,
            keys=keys,
            device=config.device,
            memory_limit=config.memory_limit,
        )
    timings["clean"] += time.perf_counter() - tic
    kept = parcellation.coverage > 0
    if kept.sum() < 2:
        raise ValueError(
            f"Fewer than 2 parcels of the atlas hold a grayordinate that varies in {run.bold.name}."
        )
    names = [atlas.names[int(k)] for k in keys[kept]]
    cleaned = _clean_regions(
        config,
        run,
        context,
        timings,
        parcellation.series[:, kept],
        names,
        what="parcel",
        coverage=parcellation.coverage[kept],
        n_volumes=int(decoded.data.shape[0]),
        extra={
            "AtlasMap": atlas.map_name,
            "BrainModel": brain_model_summary(decoded.cifti.brain_model),
            "ParcelMethod": "mean of the parcel's grayordinates that vary (wb_command "
            "-cifti-parcellate -method MEAN); coverage: the fraction used",
            "EmptyParcels": [atlas.names[int(k)] for k in keys[~kept]],
        },
    )
    series, low, constant = cleaned.series, cleaned.low, cleaned.constant
    relmat_meta, series_meta = cleaned.relmat_meta, cleaned.series_meta
    covered = coverage_sidecar(names, parcellation.coverage[kept], low, config.min_coverage)
    relmat_meta.update(covered)
    series_meta.update(covered)
    if decoded.constant.any():
        context["warnings"].append(
            f"{int(decoded.constant.sum())} of {decoded.constant.size} grayordinates of "
            f"{run.bold.name} are constant over time: left out of their parcels' means "
            "(the coverage map counts them out)."
        )
    if constant.any():
        listed = [n for n, c in zip(names, constant) if c]
        context["warnings"].append(
            constant_message(run, "parcels", ", ".join(listed), len(listed), len(names))
        )
        for meta in (relmat_meta, series_meta):
            meta["ConstantRegions"] = listed
    brain_model = decoded.cifti.brain_model
    written = {int(k): atlas.names[int(k)] for k in keys[kept]}
    parcels = _Parcels(
        axis=parcels_axis(atlas.labels, written, brain_model),
        atlas_axis=parcels_axis(atlas.labels, atlas.names, brain_model),
        coverage=parcellation.coverage,
        means=parcellation.series[:, kept],
    )
    all_names = [atlas.names[int(k)] for k in keys]
    prepared = _Prepared(
        series,
        names,
        relmat_meta,
        series_meta,
        low,
        (all_names, parcellation.coverage),
        keys[kept],
    )
    return prepared, parcels


@dataclass
class _CiftiRegionSet(_RegionSet):
    """The atlas-level set of a CIFTI run: a volume run's files and their CIFTI-2 twins."""

    parcels: _Parcels | None = None

    def _name(self, stat: str, suffix: str, extension: str) -> str:
        entities = {**self._labelled, "stat": stat}
        return bids_name(entities, suffix=suffix, extension=extension)

    def _write_coverage(self) -> list[str]:
        """Stage the coverage table and map beside the set's region files."""
        from connscale.io.cifti import write_pscalar

        if not self.written:
            return []
        name = self._name("coverage", "boldmap", ".pscalar.nii")
        coverage = self.parcels.coverage[None].astype(np.float32)
        write_pscalar(self.out.path(name), self.parcels.atlas_axis, ["coverage"], coverage)
        return [*super()._write_coverage(), name]

    def _write_fc(self) -> list[str]:
        from connscale.io.cifti import write_pconn

        written = super()._write_fc()
        tic = time.perf_counter()
        name = self._name("pearsoncorrelation", "boldmap", ".pconn.nii")
        write_pconn(self.out.path(name), self.parcels.axis, self.fc.astype(np.float32))
        written.append(name)
        self.timings["write"] += time.perf_counter() - tic
        return written

    def _region_means(self) -> np.ndarray:
        return self.parcels.means

    def _write_timeseries(self) -> list[str]:
        from connscale.bidsapp.region_measures import _published_series
        from connscale.io.cifti import write_ptseries

        written = super()._write_timeseries()
        series, _ = _published_series(self)  # the TSV's rows: kept, or interpolated
        tic = time.perf_counter()
        name = self._name("mean", "timeseries", ".ptseries.nii")
        write_ptseries(
            self.out.path(name),
            self.parcels.axis,
            _kept_series_axis(self.decoded, series.shape[0]),
            np.asarray(series, dtype=np.float32),
        )
        written.append(name)
        self.timings["write"] += time.perf_counter() - tic
        return written

    def _write_report(self) -> list[str]:
        from connscale.bidsapp.cifti_report import write_cifti_report

        tic = time.perf_counter()
        name = bids_name(self._labelled, suffix="report", extension=".html")
        self.out.path(name)
        write_cifti_report(self, name)
        self.timings["write"] += time.perf_counter() - tic
        return [name]


def write_denoised(config, run, decoded, out, context, timings) -> list[str]:
    """Publish the run's denoised grayordinate series (``_desc-<strategy>_bold.dtseries.nii``).

    The kept volumes, cleaned and standardized as the parcel series are
    (with ``--output-type interpolated`` and a censored volume, every volume
    after the dummy scans, as the parcel series, :func:`_interpolated`); a
    grayordinate constant over time is 0 (counted in the sidecar and the
    run's warning).
    """
    from connscale.bidsapp.cifti_maps import cleaned_grayordinates
    from connscale.io.cifti import write_dtseries

    every = context.get("series_operator", context["operator"])
    n = decoded.data.shape[1]
    out.check_space(4 * every.volumes.size * n, what=f"the denoised series of {run.name}")
    if every.interpolated is None:
        cleaned = cleaned_grayordinates(config, decoded, context, timings)
    else:
        cleaned = _interpolated(config, decoded, every, timings)
    constant = constant_columns(cleaned)
    tic = time.perf_counter()
    name = bids_name(
        {**run.entities, "desc": config.desc}, suffix="bold", extension=".dtseries.nii"
    )
    write_dtseries(
        out.path(name),
        decoded.cifti.brain_model,
        _kept_series_axis(decoded, cleaned.shape[0]),
        np.asarray(cleaned, dtype=np.float32),
    )
    _, meta = run_sidecars(config, run, [], context, decoded.data.shape[0])
    for key in ("Columns", "Atlas", "AtlasFile", "AtlasLabelsFile"):
        meta.pop(key)
    if every.interpolated is not None:
        meta["KeptVolumes"] = every.volumes.tolist()
        meta["InterpolatedVolumes"] = every.volumes[every.interpolated].tolist()
    meta["NumberOfGrayordinates"] = int(n)
    meta["NumberOfConstantGrayordinates"] = int(constant.sum())
    sidecar = name[: -len(".dtseries.nii")] + ".json"
    write_json_atomic(out.path(sidecar), meta)
    out.commit(extra={"run": run.name})
    timings["write"] += time.perf_counter() - tic
    return [name, sidecar]


def _interpolated(config, decoded, operator, timings) -> np.ndarray:
    """Return the grayordinates cleaned by the run's ``series_operator`` (XCP-D's interpolated).

    Every volume after the dummy scans, the censored ones interpolated before
    the filter, standardized over them as the parcel series are
    (:func:`connscale.bidsapp.region_measures._published_series`).
    """
    from connscale.denoise import clean_signals

    tic = time.perf_counter()
    with read_only_series():
        cleaned = clean_signals(
            decoded.data,
            operator,
            standardize=config.standardize,
            device=config.device,
            dtype=config.dtype,
            memory_limit=config.memory_limit,
        )
    timings["clean"] += time.perf_counter() - tic
    return cleaned
