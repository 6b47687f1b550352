"""Quality reports of the BIDS-App: one HTML page per run, one per group.

Each page is self-contained (figures embedded as PNG ``data:`` URIs through
:func:`connscale.report.write_report`, no script, no external resource).

Per run: the brain mask and the atlas over the run's mean image, carpet plots
of the voxel series before and after denoising, framewise displacement with
the censored volumes marked, the connectome with region names, and the
distribution of region-pair correlations before and after denoising.
Per group: the group-average connectome, QC-FC (across runs, the correlation
of each edge with the run's mean framewise displacement), with DFC states the
state matrices, the first run's state sequence and the mean transition
matrix, with voxel maps each group mean map (nilearn's ``plot_stat_map``),
with a target the classification's result, and a table linking every run's
report.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from connscale.qc import qc_fc

__all__ = [
    "GroupPage",
    "RunFigures",
    "RunReport",
    "carpet_step",
    "describe_resampling",
    "draw_run_report",
    "figures_bytes",
    "qc_fc",
    "run_figures",
    "run_header",
    "run_record",
    "write_group_report",
    "write_run_report",
]

_MAX_CARPET_VOXELS = 2000
#: State matrices are drawn up to this many regions.
_MAX_STATE_NODES = 400


def _plt():
    from connscale.report.plots import _pyplot

    return _pyplot()


def _save(fig, path: Path) -> Path:
    from connscale.report.plots import _save as save

    return save(fig, path)


def run_header(device: str, started: float | None) -> dict:
    """Return the header fields of a run's report record.

    The fields are the connscale and Python versions, the start time
    (``started``, epoch seconds, as ISO 8601 local time) and the torch device
    ``device`` resolves to.
    """
    import platform
    import time

    from connscale._compute import resolve_device
    from connscale._version import __version__

    return {
        "software": {"connscale": __version__, "python": platform.python_version()},
        "started": None
        if started is None
        else time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "device": str(resolve_device(device)),
    }


def run_record(region_set, *, parameters: dict, counts: dict) -> dict:
    """Return the record of a run's report: what it says besides its figures.

    Parameters
    ----------
    region_set : connscale.bidsapp.region_measures._RegionSet
        The set (its run, settings, decoded data, context, timings and files written).
    parameters : dict
        The report's parameter table.
    counts : dict
        The results shown after the volumes (the grayordinates or voxels, the parcels or regions).

    Returns
    -------
    dict
        The fields of :func:`connscale.report.write_report`'s record but ``figures``.
    """
    config, run, decoded, context = (
        region_set.config,
        region_set.run,
        region_set.decoded,
        region_set.context,
    )
    fd = context["fd"]
    results = {
        "volumes": int(decoded.data.shape[0]),
        "volumes kept": int(context["operator"].volumes.size),
        **counts,
        "mean FD (mm)": None if fd is None else float(fd.mean()),
    }
    if context["dof"] is not None:
        results["residual degrees of freedom"] = context["dof"]["dof"]
    return {
        "command": f"bids participant: {run.name}",
        **run_header(config.device, decoded.started),
        "parameters": parameters,
        "results": results,
        "timings_s": dict(region_set.timings),
        "outputs": list(region_set.written),
        "warnings": list(context["warnings"]),
    }


def write_run_report(
    region_set, name: str, *, figures: list[Path], parameters: dict, counts: dict
) -> Path:
    """Write the HTML report of a run's atlas-level set into the set's staging folder.

    Parameters
    ----------
    region_set : connscale.bidsapp.region_measures._RegionSet
        The set (its run, settings, decoded data, context, timings and files written).
    name : str
        The report's file name.
    figures : list of Path
        The run's figures.
    parameters, counts : dict
        As :func:`run_record` takes them.

    Returns
    -------
    Path
        The report.
    """
    from connscale.report import write_report

    record = run_record(region_set, parameters=parameters, counts=counts)
    record["figures"] = [str(f) for f in figures]
    return write_report(record, region_set.out.staging, filename=name)


def framewise_displacement(confounds_tsv) -> np.ndarray | None:
    """Return fMRIPrep's ``framewise_displacement`` column (first value 0), or None."""
    import pandas as pd

    table = pd.read_csv(confounds_tsv, sep="\t", na_values=["n/a"])
    if "framewise_displacement" not in table:
        return None
    return table["framewise_displacement"].fillna(0.0).to_numpy(dtype=float)


def _motion_carpet(path: Path, figures: RunFigures) -> Path:
    """Draw the motion and censoring trace over the carpet plots, as XCP-D's executive summary.

    Top row: framewise displacement of every volume (the censored ones in
    red) and the standardised DVARS of the
    BOLD (over the last volumes: after the dummy scans), then of
    the kept volumes only; below, the carpet of the same voxels' series
    before denoising (z-scored) and after (the kept volumes).
    """
    plt = _plt()
    from connscale.report.plots import _draw_carpet

    fd, kept, dvars = figures.fd, figures.kept, figures.dvars
    fig, axes = plt.subplots(
        2,
        2,
        figsize=(11, 5.5),
        sharex="col",
        gridspec_kw={"height_ratios": [1, 2.5]},
        layout="constrained",
    )
    volumes = np.arange(figures.carpet.shape[0])
    censored = np.setdiff1d(volumes, kept)
    for ax, times in ((axes[0, 0], volumes), (axes[0, 1], kept)):
        if fd is not None:
            ax.plot(times, fd[times], color="#1f3a5f", lw=1, label="FD (mm)")
        if dvars is not None and times is volumes:
            dv = ax.twinx()
            dv.plot(volumes[-dvars.size :], dvars, color="#ff7f0e", lw=0.8)
            dv.set_ylabel("std. DVARS", color="#ff7f0e")
        ax.set_ylabel("FD (mm)")
    for volume in censored:
        axes[0, 0].axvspan(volume - 0.5, volume + 0.5, color="#d62728", alpha=0.3, lw=0)
    axes[0, 0].set_title(f"motion: {censored.size} of {volumes.size} volumes censored")
    axes[0, 1].set_title(f"kept volumes ({kept.size})")
    for ax, values, zscore, title, times in (
        (axes[1, 0], figures.carpet, True, "before denoising (z-scored)", volumes),
        (axes[1, 1], figures.cleaned_carpet, False, "after denoising", kept),
    ):
        _draw_carpet(ax, values, times, zscore=zscore)
        ax.set_title(title)
        ax.set_xlabel("volume")
    axes[1, 0].set_ylabel(f"voxels (1 in {figures.step})")
    return _save(fig, path)


def _grid_text(grid: dict) -> str:
    size = "×".join(f"{v:g}" for v in grid["VoxelSize"])
    return f"{'×'.join(map(str, grid['Shape']))} voxels of {size} mm"


#: How ``AtlasResampling``'s interpolations read (labels; probabilistic maps).
_INTERPOLATIONS = {"nearest": "nearest neighbour", "linear": "linear interpolation"}


def describe_resampling(resampling: dict) -> str:
    """One line saying how the atlas reached the run's grid (``AtlasResampling``)."""
    if not resampling["Resampled"]:
        return f"not resampled (already on the run grid: {_grid_text(resampling['To'])})"
    lost = resampling["LabelsLost"]
    return (
        f"resampled by {_INTERPOLATIONS[resampling['Interpolation']]} from "
        f"{_grid_text(resampling['From'])} to "
        f"{_grid_text(resampling['To'])}"
        + (f"; label(s) {lost[:10]} lost on this grid" if lost else "")
    )


@dataclass(frozen=True)
class RunFigures:
    """What a run's figures show: small arrays, cheap to send to a helper process.

    Attributes
    ----------
    affine : ndarray of shape (4, 4)
        The run's grid.
    mean : ndarray of shape (x, y, z)
        The mean image in the mask, 0 outside.
    regions : ndarray of shape (x, y, z)
        The atlas labels in the mask, 0 outside.
    mask : ndarray of shape (x, y, z)
        The brain mask.
    carpet, cleaned_carpet : ndarray of shape (n_volumes, n_shown), (n_kept, n_shown)
        The series of every ``step``-th voxel in the mask, before and after denoising.
    step : int
    raw_fc, fc : ndarray of shape (n_regions, n_regions)
        The connectome of the region means before and after denoising.
    names : list of str
        The regions' names.
    fd : ndarray of shape (n_volumes,) or None
        Framewise displacement.
    kept : ndarray of int
        The kept volumes.
    dvars : ndarray or None
        The standardised DVARS of the volumes after the dummy scans.
    """

    affine: np.ndarray
    mean: np.ndarray
    regions: np.ndarray
    mask: np.ndarray
    carpet: np.ndarray
    cleaned_carpet: np.ndarray
    step: int
    raw_fc: np.ndarray
    fc: np.ndarray
    names: list[str]
    fd: np.ndarray | None
    kept: np.ndarray
    dvars: np.ndarray | None = None


def carpet_step(n_voxels: int) -> int:
    """Return the carpet plots' stride over the voxels: at most about 2,000 are drawn."""
    return max(1, n_voxels // _MAX_CARPET_VOXELS)


def figures_bytes(n_volumes: int, n_voxels: int, grid: int, n_regions: int) -> int:
    """Return the bytes of a run's :class:`RunFigures` (at most; all volumes kept).

    The mean image and the atlas (4 bytes a grid point), the mask (1), both
    carpets (float32, at most ``n_volumes`` rows each) and both connectomes (float64).
    """
    step = carpet_step(n_voxels)
    shown = -(-n_voxels // step)
    return grid * 9 + 2 * n_volumes * shown * 4 + 2 * n_regions * n_regions * 8


def run_figures(folder: Path, figures: RunFigures) -> list[Path]:
    """Write the PNG figures of one run into ``folder``; return their paths.

    The atlas and mask over the mean image, the motion and censoring trace
    over the carpet plots (:func:`_motion_carpet`), the connectome and the
    distribution of its correlations before and after denoising.
    """
    import nibabel as nib

    plt = _plt()  # the non-interactive backend, before nilearn's plotting imports pyplot
    from nilearn import plotting

    from connscale.report.plots import plot_correlation_matrix

    folder.mkdir(parents=True, exist_ok=True)
    drawn = []
    fig = plt.figure(figsize=(9, 3))
    display = plotting.plot_roi(
        nib.Nifti1Image(figures.regions, figures.affine),
        bg_img=nib.Nifti1Image(figures.mean, figures.affine),
        figure=fig,
        alpha=0.5,
        cmap="tab20",
        title="atlas and brain mask over the mean image",
        draw_cross=False,
    )
    display.add_contours(
        nib.Nifti1Image(figures.mask.astype(np.int8), figures.affine), levels=[0.5], colors="r"
    )
    drawn.append(_save(fig, folder / "atlas_mask.png"))
    drawn.append(_motion_carpet(folder / "carpet.png", figures))
    fc = figures.fc
    drawn.append(
        plot_correlation_matrix(
            fc,
            folder / "connectome.png",
            labels=figures.names,
            title="denoised connectome (Pearson r)",
        )
    )
    iu = np.triu_indices(fc.shape[0], 1)
    fig, ax = plt.subplots(figsize=(6, 3))
    bins = np.linspace(-1, 1, 41)
    ax.hist(figures.raw_fc[iu], bins=bins, alpha=0.6, label="before denoising")
    ax.hist(fc[iu], bins=bins, alpha=0.6, label="after denoising")
    ax.set_xlabel("region-pair correlation")
    ax.set_ylabel("pairs")
    ax.legend()
    drawn.append(_save(fig, folder / "fc_distribution.png"))
    return drawn


@dataclass(frozen=True)
class RunReport:
    """A run's report to draw and write: where, its record, its figures' data.

    Attributes
    ----------
    folder : Path
        The set's staging folder (the page goes there, its figures in ``figures/``).
    name : str
        The page's file name.
    record : dict
        The page's record (:func:`run_record`).
    figures : RunFigures
    """

    folder: Path
    name: str
    record: dict
    figures: RunFigures


def draw_run_report(report: RunReport) -> Path:
    """Draw the run's figures and write its page; return the page.

    A module-level function of picklable data: it runs in this process or in
    a helper process (:mod:`connscale.bidsapp.beside`).
    """
    from connscale.report import write_report

    figures = run_figures(report.folder / "figures", report.figures)
    record = {**report.record, "figures": [str(f) for f in figures]}
    return write_report(record, report.folder, filename=report.name)


def _classification_results(summary: dict) -> dict:
    """Return what the group page shows of a classification JSON.

    The JSON is written by :mod:`connscale.bidsapp.group`.
    """
    folds = f"{summary['folds']} folds × {summary['repeats']} repeats"
    if summary.get("folds_requested", summary["folds"]) != summary["folds"]:
        folds += f" ({summary['folds_requested']} folds asked for)"
    shown = {
        "target": summary["target"],
        "classes (negative, positive)": summary["classes"],
        "participants": summary["n_subjects"],
        "features": f"{summary['n_features']}: {summary['features']}",
        "model": summary["model"],
        "cross-validation": folds,
        **{name: summary[name] for name in ("accuracy", "sensitivity", "specificity")},
        "AUC (mean, std over repeats)": [summary["auc"]["mean"], summary["auc"]["std"]],
    }
    if summary.get("notes"):
        shown["notes"] = summary["notes"]
    return shown


@dataclass(frozen=True)
class GroupPage:
    """What the group page shows.

    Attributes
    ----------
    mean : ndarray of shape (n_regions, n_regions)
        The group-average connectome.
    names : list of str
        Its region names.
    runs : list of dict
        One row per run: ``name``, ``report`` (the run's report relative to
        the folder the page is published in, or None), ``mean_fd``, ``n_kept``.
    qcfc : ndarray of shape (n_edges,) or None
        QC-FC of every edge (:func:`qc_fc`).
    parameters, results : dict
        The page's parameter and result tables.
    states : GroupStates or None
        A :class:`connscale.bidsapp.group_states.GroupStates`.
    maps : dict or None
        ``{"maps": [(image path, title), ...], "background": image or None}``
        (None: nilearn's MNI template).
    classification : dict or None
        The published classification JSON.
    warnings : sequence of str
        The runs and measures left out, and why.
    qcfc_distances : ndarray of shape (n_edges,) or None
        The length (mm) of each edge of ``qcfc``, for its distance dependence.
    """

    mean: np.ndarray
    names: list[str]
    runs: list[dict]
    qcfc: np.ndarray | None
    parameters: dict
    results: dict
    states: object = None
    maps: dict | None = None
    classification: dict | None = None
    warnings: tuple[str, ...] | list[str] = ()
    qcfc_distances: np.ndarray | None = None


def _group_figures(page: GroupPage, figures_dir: Path) -> list[Path]:
    """Draw the group page's figures into ``figures_dir``.

    The mean connectome, QC-FC, the DFC states and the mean maps.
    """
    from connscale.report.plots import (
        plot_correlation_matrix,
        plot_state_matrices,
        plot_state_sequence,
        plot_transition_matrix,
    )

    _plt()  # the non-interactive backend, before any figure
    figures = [
        plot_correlation_matrix(
            page.mean,
            figures_dir / "group_connectome.png",
            labels=page.names,
            title="group-average connectome",
        )
    ]
    qcfc, states = page.qcfc, page.states
    if qcfc is not None and np.isfinite(qcfc).any():
        figures.append(_qc_fc_figure(qcfc, page.qcfc_distances, figures_dir / "qc_fc.png"))
    if states is not None:
        if len(states.names) <= _MAX_STATE_NODES:
            figures.append(
                plot_state_matrices(
                    states.centres,
                    figures_dir / "states.png",
                    fractions=states.fractions,
                    title=f"DFC states ({states.metric} k-means of every run's windows)",
                )
            )
        example = states.sequences[0]
        figures.append(
            plot_state_sequence(
                example["states"],
                figures_dir / "state_sequence.png",
                n_states=states.n_states,
                window_times=example["onset_s"],
                title=f"{page.runs[0]['name']}: DFC state of each window",
            )
        )
        figures.append(
            plot_transition_matrix(
                states.transition_matrix,
                figures_dir / "state_transitions.png",
                title="State transition probabilities (mean over runs)",
            )
        )
    if page.maps is not None:
        from connscale.report.maps import plot_stat_map

        for k, (image, title) in enumerate(page.maps["maps"]):
            figures.append(
                plot_stat_map(
                    image,
                    figures_dir / f"map{k}.png",
                    bg_img=page.maps["background"],
                    title=f"group mean: {title}",
                )
            )
    return figures


def _qc_fc_figure(qcfc: np.ndarray, distances: np.ndarray | None, path: Path) -> Path:
    """Draw QC-FC's distribution and, with the edges' lengths, QC-FC against distance."""
    plt = _plt()
    finite = np.isfinite(qcfc)
    fig, axes = plt.subplots(
        1, 1 if distances is None else 2, figsize=(6 if distances is None else 11, 3)
    )
    hist = axes if distances is None else axes[0]
    hist.hist(qcfc[finite], bins=np.linspace(-1, 1, 41), color="#4c78a8")
    hist.set_xlabel("QC-FC: correlation of edge with mean FD across runs")
    hist.set_ylabel("edges")
    if distances is not None:
        axes[1].scatter(distances[finite], qcfc[finite], s=4, alpha=0.5, color="#4c78a8")
        axes[1].set_xlabel("distance between region centroids (mm)")
        axes[1].set_ylabel("QC-FC")
        axes[1].set_title("distance dependence of QC-FC")
    return _save(fig, path)


def _runs_table(runs: list[dict]) -> str:
    """Return the page's HTML table linking every run's report."""
    rows = "".join(
        f'<tr><td><a href="{html.escape(r["report"])}">{html.escape(r["name"])}</a></td>'
        f'<td class="num">{r.get("mean_fd", float("nan")):.3f}</td>'
        f'<td class="num">{r.get("n_kept", "")}</td></tr>'
        if r.get("report")
        else f'<tr><td>{html.escape(r["name"])}</td><td class="num">'
        f'{r.get("mean_fd", float("nan")):.3f}</td><td class="num">{r.get("n_kept", "")}'
        "</td></tr>"
        for r in runs
    )
    return (
        '<section id="runs"><h2>Runs</h2><table><tr><th>run (report)</th>'
        f"<th>mean FD (mm)</th><th>volumes kept</th></tr>{rows}</table></section>"
    )


def write_group_report(
    path: Path,
    page: GroupPage,
    *,
    started: str | None = None,
    device: str | None = None,
    published_dir: Path | None = None,
) -> Path:
    """Write the group page.

    Average connectome, QC-FC, DFC states, mean maps, classification, every
    run linked.

    Parameters
    ----------
    path : Path
        The page (its figures are drawn in a hidden folder beside it, then removed).
    page : GroupPage
        What the page shows.
    started, device : str or None
        When the group level started, and where it computed.
    published_dir : Path or None
        The folder the page is published in (default: ``path``'s, when it is
        not staged); the runs' ``report`` links are relative to it.

    Returns
    -------
    Path
        The page.
    """
    import platform

    from connscale._version import __version__
    from connscale.io.atomic import write_text_atomic
    from connscale.report import write_report

    figures_dir = path.parent / f".{path.stem}_figures"
    figures_dir.mkdir(parents=True, exist_ok=True)
    figures = _group_figures(page, figures_dir)
    results = page.results
    if page.classification is not None:
        results = {**results, "classification": _classification_results(page.classification)}
    record = {
        "command": "bids group",
        "software": {"connscale": __version__, "python": platform.python_version()},
        "started": started,
        "device": device,
        "parameters": page.parameters,
        "results": results,
        "figures": [str(f) for f in figures],
        "outputs": [r["report"] for r in page.runs if r.get("report")],
        "warnings": list(page.warnings),
    }
    report = write_report(record, path.parent, filename=path.name, published_dir=published_dir)
    for figure in figures:
        figure.unlink(missing_ok=True)
    figures_dir.rmdir()
    text = report.read_text().replace("</main>", _runs_table(page.runs) + "</main>", 1)
    return write_text_atomic(report, text)
