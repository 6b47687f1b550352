"""The atlas-level set of a run.

Its connectome and region series, the
sliding-window stores (``dfc``, ``pairs``) and the run's HTML report.
"""

from __future__ import annotations

import functools
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from connscale._choices import PARCELLATED_MAPS, REGION_MEASURES
from connscale._version import __version__
from connscale.bidsapp.atlas import maps_region_series, read_atlas_labels
from connscale.bidsapp.cleaning import DecodedRun
from connscale.bidsapp.config import WINDOWED, ParticipantConfig
from connscale.bidsapp.layout import BoldRun
from connscale.bidsapp.outputs import (
    MEASURE,
    bids_uri,
    constant_columns,
    constant_message,
    run_sidecars,
)
from connscale.cohort import compute_scan_pairs, write_scan_pairs
from connscale.engines.batch import Later, error_text
from connscale.io.atomic import write_json_atomic
from connscale.io.bids import bids_name
from connscale.io.publish import OutputSet

if TYPE_CHECKING:
    from connscale.bidsapp.report import RunFigures, RunReport

__all__ = ["write_region"]


def write_region(config, run, decoded, out, context, timings) -> tuple[list[str], dict] | Later:
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

    Both in a :class:`~connscale.engines.batch.Later` while the report is
    drawn or the tables are written by a helper process
    (:mod:`connscale.bidsapp.beside`): the set is committed once its files are
    written.

    Raises
    ------
    ValueError
        Fewer than 2 atlas regions inside the mask, or no region varies after
        cleaning.
    """
    prepared = _prepare(config, run, decoded, context, timings)
    region_set = _RegionSet(config, run, decoded, out, context, timings, prepared)
    return region_set.write()


@dataclass(frozen=True)
class _Prepared:
    """A run's cleaned region series, their names and the sidecars of the set."""

    series: np.ndarray
    names: list[str]
    relmat_meta: dict
    series_meta: dict
    low_coverage: np.ndarray | None = None
    coverage: tuple | None = None
    keys: np.ndarray | None = None

    @property
    def written_series(self) -> np.ndarray:
        """Return the region series as written: NaN in the parcels below ``min_coverage``."""
        if self.low_coverage is None or not self.low_coverage.any():
            return self.series
        series = np.array(self.series, dtype=np.float64)
        series[:, self.low_coverage] = np.nan
        return series


def _prepare(config, run, decoded, context, timings) -> _Prepared:
    """Clean the decoded region means; name the regions; build the sidecars.

    Constant regions are named in the sidecars (``ConstantRegions``) and in
    the run's one warning (``context['warnings']``).
    """
    if decoded.region_means is None:  # probabilistic maps: their series, from the voxels
        tic = time.perf_counter()
        decoded.region_means, decoded.regions, decoded.atlas, decoded.atlas_resampling = (
            maps_region_series(
                config.atlas, decoded.img, decoded.mask, decoded.data, device=config.device
            )
        )
        timings["compute"] += time.perf_counter() - tic
    regions = decoded.regions
    if regions.size < 2:
        raise ValueError(f"Fewer than 2 atlas regions inside the mask of {run.bold.name}.")
    names = _region_names(config, regions)
    coverage, region_coverage = _coverage(config, decoded)
    # The region means were summed in float64 while decoding (NiftiLabelsMasker's
    # extraction); cleaning them is NiftiLabelsMasker's signal.clean.
    cleaned = _clean_regions(
        config,
        run,
        context,
        timings,
        decoded.region_means,
        names,
        what="atlas region",
        coverage=region_coverage,
        n_volumes=int(decoded.img.shape[3]),
        extra={"AtlasSpace": config.atlas_space, "AtlasResampling": decoded.atlas_resampling},
    )
    series, low, constant = cleaned.series, cleaned.low, cleaned.constant
    relmat_meta, series_meta = cleaned.relmat_meta, cleaned.series_meta
    if constant.any():
        _note_constant_regions(config, run, decoded, context, names, constant)
        for meta in (relmat_meta, series_meta):
            meta["ConstantRegions"] = [n for n, c in zip(names, constant) if c]
    if coverage is not None:  # every atlas label's coverage: (names, fractions)
        from connscale.bidsapp.coverage import coverage_sidecar

        labels, fractions = coverage
        coverage = (_region_names(config, labels), fractions)
        by_name = dict(zip(*coverage))
        covered = coverage_sidecar(names, [by_name[n] for n in names], low, config.min_coverage)
        relmat_meta.update(covered)
        series_meta.update(covered)
    return _Prepared(series, names, relmat_meta, series_meta, low, coverage, decoded.regions)


@dataclass(frozen=True)
class _Cleaned:
    """A run's cleaned region series, those below the minimum coverage or constant, the sidecars."""

    series: np.ndarray
    low: np.ndarray
    constant: np.ndarray
    relmat_meta: dict
    series_meta: dict


def _clean_regions(
    config: ParticipantConfig,
    run: BoldRun,
    context: dict,
    timings: dict,
    means: np.ndarray,
    names: list[str],
    *,
    what: str,
    coverage: np.ndarray | None,
    n_volumes: int,
    extra: dict,
) -> _Cleaned:
    """Clean a run's region means; refuse the run when none varies; build the set's sidecars.

    ``context`` gives the cleaning's ``operator``; the seconds spent are added to
    ``timings['clean']``.

    Parameters
    ----------
    means : ndarray of shape (n_volumes, n_regions)
        The region (parcel) means, before cleaning.
    names : list of str
        The regions' names.
    what : str
        What a region is called in the refusal (``"parcel"``, ``"atlas region"``).
    coverage : ndarray of shape (n_regions,) or None
        Each region's coverage: the series of those below ``config.min_coverage``
        are zeroed (:func:`connscale.bidsapp.coverage.apply_min_coverage`); None: none is.
    n_volumes : int
        The run's volumes (the sidecars').
    extra : dict
        Keys added to both sidecars.
    """
    from connscale.bidsapp.coverage import apply_min_coverage
    from connscale.denoise import clean_signals

    tic = time.perf_counter()
    series = clean_signals(
        means,
        context["operator"],
        standardize=config.standardize,
        device=config.device,
        dtype=config.dtype,
    )
    timings["clean"] += time.perf_counter() - tic
    if coverage is None:
        low = np.zeros(series.shape[1], bool)
    else:
        low = apply_min_coverage(series, coverage, config.min_coverage)
    constant = constant_columns(series) & ~low
    if (constant | low).all():
        raise ValueError(
            f"No {what} of {run.bold.name} varies after cleaning"
            + (f" with --min-coverage {config.min_coverage:g}." if low.any() else ".")
        )
    relmat_meta, series_meta = run_sidecars(config, run, names, context, n_volumes)
    relmat_meta.update(extra)
    series_meta.update(extra)
    return _Cleaned(series, low, constant, relmat_meta, series_meta)


def _coverage(config, decoded) -> tuple[tuple | None, np.ndarray | None]:
    """Return every atlas label's coverage of the run's mask, and each region's.

    A 4-D (probabilistic) atlas has no coverage (None, None): no series is set to NaN.
    """
    from connscale.bidsapp.atlas import is_probabilistic
    from connscale.bidsapp.coverage import volume_coverage

    if decoded.atlas is None or decoded.atlas.ndim != 3 or is_probabilistic(config.atlas):
        return None, None  # maps: their strongest labels are no parcels
    labels, fractions = volume_coverage(decoded.atlas, decoded.mask)
    by_label = dict(zip(labels.tolist(), fractions))
    return (labels, fractions), np.array([by_label[int(r)] for r in decoded.regions])


def _note_constant_regions(config, run, decoded, context, names, constant) -> None:
    """Add the run's one warning naming its constant regions (and which were so in the BOLD)."""
    from connscale.denoise import constant_series

    raw = constant_series(decoded.region_means, dtype=config.dtype)
    listed = [f"{n} (constant in the BOLD)" if r else n for n, r in zip(names, raw)]
    listed = [entry for entry, c in zip(listed, constant) if c]
    context["warnings"].append(
        constant_message(run, "atlas regions", ", ".join(listed), len(listed), len(names))
    )


@dataclass
class _RegionSet:
    """The atlas-level set of one run, written measure by measure.

    Each ``_write_<measure>`` stages its files in ``out`` and returns their
    names; :meth:`write` runs the requested ones, records those that fail and
    commits the set.
    """

    config: ParticipantConfig
    run: BoldRun
    decoded: DecodedRun
    out: OutputSet
    context: dict
    timings: dict
    prepared: _Prepared
    fc: np.ndarray | None = None
    written: list[str] = field(default_factory=list)
    # Files written here or by a helper process: (measure, the measure's names, the future).
    pending: list[tuple[str, list[str], Future]] = field(default_factory=list)
    auxiliary: set[str] = field(default_factory=set)  # the report's and coverage's names

    @property
    def _measured(self) -> dict:
        """Return the entities of the set's connectivity files."""
        return {
            **self.run.entities,
            "seg": self.config.atlas_name,
            "meas": MEASURE,
            "desc": self.config.desc,
        }

    @property
    def _labelled(self) -> dict:
        """Return the entities of the set's series and report."""
        return {**self.run.entities, "seg": self.config.atlas_name, "desc": self.config.desc}

    def _region_means(self) -> np.ndarray:
        """Return the region means of every volume, before cleaning."""
        return self.decoded.region_means

    def write(self) -> tuple[list[str], dict] | Later:
        """Write every requested measure, the coverage table, then the report; commit the set.

        Returns the names written (empty when nothing but a report and the
        coverage table was) and ``{measure: reason}`` of the measures that
        failed; while a helper process (:mod:`connscale.bidsapp.beside`) draws
        the report or writes a table, a :class:`~connscale.engines.batch.Later`
        of them: the set is committed once its files are written.
        """
        config, out = self.config, self.out
        failed = {}
        todo = [m for m in config.measures if m in REGION_MEASURES + PARCELLATED_MAPS]
        for measure in todo + ["coverage"] + ["report"] * bool(config.reports):
            names_before = set(out.names)
            try:
                names = self._writer(measure)()
                self.written += names
                if measure in ("coverage", "report"):
                    self.auxiliary.update(names)
            except Exception as exc:  # noqa: BLE001 - recorded, the other measures go on
                failed[measure] = error_text(exc)
                for name in set(out.names) - names_before:
                    out.discard(name)
        publish = functools.partial(
            _commit,
            out,
            self.written,
            failed,
            self.pending,
            self.auxiliary,
            self.run.name,
            self.timings,
        )
        futures = [future for _, _, future in self.pending]
        if not all(future.done() for future in futures):
            return Later(lambda: all(future.done() for future in futures), publish)
        return publish()

    def _writer(self, measure: str):
        """Return the function that writes ``measure``."""
        if measure in WINDOWED:
            return functools.partial(self._write_windowed, measure)
        if measure in PARCELLATED_MAPS:
            from connscale.bidsapp.local_maps import parcel_tables

            return functools.partial(parcel_tables, measure, self)
        return getattr(self, f"_write_{measure}")

    def _write_fc(self) -> list[str]:
        from connscale.fc.static import correlation
        from connscale.io.relmat import write_relmat_tsv

        config, prepared = self.config, self.prepared
        tic = time.perf_counter()
        self.fc = correlation(
            prepared.series,
            device=config.device,
            dtype=config.dtype,
            memory_limit=config.memory_limit,
        )
        self.timings["compute"] += time.perf_counter() - tic
        stem = bids_name(self._measured, suffix="relmat", extension=".tsv")
        table = functools.partial(
            write_relmat_tsv, self.out.path(stem), self.fc, prepared.names, fmt="%.8g"
        )
        return self._hand_table("fc", stem, table, prepared.relmat_meta)

    def _write_timeseries(self) -> list[str]:
        from connscale.io.timeseries import save_timeseries

        series, meta = _published_series(self)
        stem = bids_name(self._labelled, suffix="timeseries", extension=".tsv")
        table = functools.partial(save_timeseries, self.out.path(stem), series, self.prepared.names)
        return self._hand_table("timeseries", stem, table, meta)

    def _hand_table(self, measure: str, stem: str, table, meta: dict) -> list[str]:
        """Write ``measure``'s sidecar here and hand its TSV (``table()``) to a helper process.

        Returns the measure's names; the set waits for the table (``pending``).
        """
        from connscale.bidsapp.beside import write

        tic = time.perf_counter()
        names = [stem, stem[:-4] + ".json"]
        write_json_atomic(self.out.path(names[1]), meta)
        self.pending.append((measure, names, write(table)))
        self.timings["write"] += time.perf_counter() - tic
        return names

    def _write_coverage(self) -> list[str]:
        """Stage the coverage table beside the set's region files (none written: nothing)."""
        from connscale.bidsapp.coverage import write_coverage_tsv

        if self.prepared.coverage is None or not self.written:
            return []
        name = bids_name({**self._labelled, "stat": "coverage"}, suffix="bold", extension=".tsv")
        write_coverage_tsv(self.out.path(name), *self.prepared.coverage)
        meta = {
            "Description": "Each atlas parcel's fraction of voxels (grayordinates) inside the "
            "run's mask",
            **{
                k: v
                for k, v in self.prepared.series_meta.items()
                if k in ("Sources", "Atlas", "AtlasFile", "MinimumCoverage", "LowCoverageRegions")
            },
        }
        write_json_atomic(self.out.path(name[:-4] + ".json"), meta)
        return [name, name[:-4] + ".json"]

    def _write_windowed(self, measure: str) -> list[str]:
        prepared = self.prepared
        name = bids_name(self._measured, suffix=measure, extension=".h5")
        _windowed_store(
            measure,
            self.config,
            self.run,
            prepared.series,
            prepared.names,
            self.out.path(name),
            self.context["operator"].volumes,
            self.timings,
        )
        write_json_atomic(
            self.out.path(name[:-3] + ".json"),
            _windowed_sidecar(measure, self.config, prepared.relmat_meta, prepared.series.shape[0]),
        )
        return [name, name[:-3] + ".json"]

    def _write_report(self) -> list[str]:
        from connscale.bidsapp.beside import draw
        from connscale.bidsapp.report import draw_run_report

        tic = time.perf_counter()
        name = bids_name(self._labelled, suffix="report", extension=".html")
        self.out.path(name)
        page = draw(functools.partial(draw_run_report, _run_report(self, name)))
        self.pending.append(("report", [name], page))
        self.timings["write"] += time.perf_counter() - tic
        return [name]


def _commit(
    out: OutputSet,
    written: list[str],
    failed: dict,
    pending: list[tuple[str, list[str], Future]],
    auxiliary: set[str],
    run_name: str,
    timings: dict,
) -> tuple[list[str], dict]:
    """Commit the set once its pending files are written (or left out, their failure recorded).

    ``pending``: each measure written here or by a helper process, its
    names and the future of its writing; a measure whose writing failed is
    recorded in ``failed`` and its files discarded. Returns the names
    published (none when nothing but a report and the coverage table was
    written: no set is published) and ``{measure: reason}`` of the measures
    that failed. ``auxiliary``: the names of the report and the coverage
    table, which are not published alone.
    """
    for measure, names, future in pending:
        if future.exception() is not None:
            failed[measure] = error_text(future.exception())
            for name in names:
                written.remove(name)
                out.discard(name)
    if set(written) <= auxiliary:
        for name in written:
            out.discard(name)
        return [], failed
    tic = time.perf_counter()
    out.commit(extra={"run": run_name, **({"failed_measures": failed} if failed else {})})
    timings["write"] += time.perf_counter() - tic
    return written, failed


def _published_series(region_set: _RegionSet) -> tuple[np.ndarray, dict]:
    """Return the region series to publish and their sidecar.

    The cleaned kept volumes (NaN in the parcels below ``min_coverage``);
    with ``--output-type interpolated`` and a
    censored volume, every volume after the dummy scans (the run's
    ``series_operator``: XCP-D's interpolated output, standardised over
    them), the interpolated ones named in ``InterpolatedVolumes``.
    """
    from connscale.denoise import clean_signals

    config, context, prepared = region_set.config, region_set.context, region_set.prepared
    operator = context.get("series_operator", context["operator"])
    if operator.interpolated is None:
        return prepared.written_series, prepared.series_meta
    tic = time.perf_counter()
    series = clean_signals(
        region_set._region_means(),
        operator,
        standardize=config.standardize,
        device=config.device,
        dtype=config.dtype,
    )
    region_set.timings["clean"] += time.perf_counter() - tic
    if prepared.low_coverage is not None and prepared.low_coverage.any():
        series = np.array(series, dtype=np.float64)
        series[:, prepared.low_coverage] = np.nan  # below --min-coverage, as the kept volumes
    meta = {
        **prepared.series_meta,
        "KeptVolumes": operator.volumes.tolist(),
        "InterpolatedVolumes": operator.volumes[operator.interpolated].tolist(),
    }
    return series, meta


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


def _run_report(region_set: _RegionSet, name: str) -> RunReport:
    """Return the run's report to draw into the set's staging folder.

    The report lists the set's other files written so far; its figures show
    the BOLD, the mask and atlas, the cleaning and the connectome (computed
    here from the cleaned region means when ``fc`` was not asked for).
    """
    from connscale.bidsapp.report import RunReport, describe_resampling, run_record

    config, run, decoded = region_set.config, region_set.run, region_set.decoded
    names = region_set.prepared.names
    record = run_record(
        region_set,
        parameters={
            "atlas": config.atlas_name,
            "atlas space": config.atlas_space,
            "atlas grid": describe_resampling(decoded.atlas_resampling),
            "strategy": config.strategy,
            "bold": str(run.bold),
            "mask": str(run.mask),
            "confounds": str(run.confounds),
            "t_r": run.t_r,
        },
        counts={"voxels in mask": int(decoded.data.shape[1]), "regions": int(len(names))},
    )
    return RunReport(region_set.out.staging, name, record, _run_figures(region_set))


def _run_figures(region_set: _RegionSet) -> RunFigures:
    """Return what the run's figures show (copies: nothing of the run's data is held)."""
    from connscale.bidsapp.report import RunFigures, carpet_step
    from connscale.denoise import clean_signals

    config, decoded, context = region_set.config, region_set.decoded, region_set.context
    data, mask, operator = decoded.data, decoded.mask, context["operator"]
    raw = region_set._region_means()  # as read (and despiked): the series the set cleans
    with np.errstate(divide="ignore", invalid="ignore"):  # constant regions: NaN, warned once
        raw_fc = np.corrcoef(raw.T)
    step = carpet_step(data.shape[1])
    carpet = np.array(data[:, ::step])  # a copy, whatever the step
    cleaned = clean_signals(carpet, operator, standardize=config.standardize, device=config.device)
    fc = region_set.fc
    if fc is None:
        from connscale.fc.static import correlation

        fc = correlation(clean_signals(raw, operator, device=config.device), device="cpu")
    mean = np.zeros(mask.shape, np.float32)
    mean[mask] = data.mean(axis=0)
    return RunFigures(
        affine=decoded.img.affine,
        mean=mean,
        regions=np.where(mask, decoded.atlas, 0).astype(np.int32),
        mask=np.array(mask, dtype=bool),
        carpet=carpet,
        cleaned_carpet=np.asarray(cleaned),
        step=step,
        raw_fc=raw_fc,
        fc=np.asarray(fc),
        names=list(region_set.prepared.names),
        fd=context["fd"],
        kept=operator.volumes,
        dvars=context.get("dvars_initial"),
    )


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
