"""The HTML report of a CIFTI run's atlas-level set.

Its figures: the parcellated connectome, the grayordinates' carpet plot
before and after denoising, and the raw
series' temporal signal-to-noise ratio and the parcels' coverage, on the
cortical surfaces the user gives (``surfaces``) or in a flat per-structure
view (:mod:`connscale.report.cifti`); the report says which.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from connscale.bidsapp.report import write_run_report

__all__ = ["draw_map", "write_cifti_report"]

_MAX_CARPET = 2000


def draw_map(values, brain_model, path: Path, *, title: str, surfaces) -> tuple[Path, str]:
    """Draw a grayordinate map: on ``surfaces`` (left, right meshes) when they fit, else flat.

    Returns the figure and how it was drawn (what the report says).
    """
    from connscale.report.cifti import (
        FLAT_VIEW,
        load_surfaces,
        plot_structure_view,
        plot_surface_views,
        surface_problem,
    )

    if surfaces is not None:
        meshes = load_surfaces(*surfaces)
        problem = surface_problem(brain_model, meshes)
        if problem is None:
            names = ", ".join(Path(s).name for s in surfaces)
            drawn = f"cortical surfaces ({names}; nilearn plot_surf_stat_map, lateral views)"
            return plot_surface_views(values, brain_model, meshes, path, title=title), drawn
        return plot_structure_view(values, brain_model, path, title=title), (
            f"{FLAT_VIEW}; the surfaces given do not fit: {problem}"
        )
    return plot_structure_view(values, brain_model, path, title=title), FLAT_VIEW


def _tsnr(data: np.ndarray) -> np.ndarray:
    """Return each grayordinate's temporal mean over its standard deviation (NaN: constant)."""
    mean = data.mean(axis=0, dtype=np.float64)
    std = data.std(axis=0, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(std > 0, mean / std, np.nan)


def _figures(region_set, folder: Path) -> tuple[list[Path], str]:
    """Write the run's figures into ``folder``; return their paths and how the maps were drawn."""
    from connscale.denoise import clean_signals
    from connscale.fc.static import correlation
    from connscale.report.cifti import plot_grayordinate_carpet
    from connscale.report.plots import plot_correlation_matrix

    config, decoded, context = region_set.config, region_set.decoded, region_set.context
    brain_model, data = decoded.cifti.brain_model, decoded.data
    operator = context["operator"]
    folder.mkdir(parents=True, exist_ok=True)
    fc = region_set.fc
    if fc is None:
        fc = correlation(region_set.prepared.series, device="cpu")
    figures = [
        plot_correlation_matrix(
            fc,
            folder / "connectome.png",
            labels=region_set.prepared.names,
            title="parcellated connectome (Pearson r)",
        ),
        plot_grayordinate_carpet(
            data, brain_model, folder / "carpet.png", title="grayordinates before denoising"
        ),
    ]
    step = max(1, data.shape[1] // _MAX_CARPET)
    cleaned = clean_signals(
        np.array(data[:, ::step]), operator, standardize=config.standardize, device=config.device
    )
    figures.append(
        plot_grayordinate_carpet(
            cleaned,
            brain_model[::step] if step > 1 else brain_model,
            folder / "carpet_denoised.png",
            times=operator.volumes,
            title=f"grayordinates after denoising (kept volumes; 1 in {step})",
        )
    )
    tsnr, drawn = draw_map(
        _tsnr(data),
        brain_model,
        folder / "tsnr.png",
        title="temporal SNR of the BOLD (mean / SD)",
        surfaces=config.surfaces,
    )
    coverage = np.full(len(brain_model), np.nan)
    labels = decoded.atlas.labels
    for key, value in zip(decoded.regions, region_set.parcels.coverage):
        coverage[labels == key] = value
    covered, _ = draw_map(
        coverage,
        brain_model,
        folder / "coverage.png",
        title="parcel coverage (unlabelled: blank)",
        surfaces=config.surfaces,
    )
    return [*figures, tsnr, covered], drawn


def write_cifti_report(region_set, name: str) -> Path:
    """Write the CIFTI run's HTML report into the set's staging folder."""
    from connscale.io.cifti import brain_model_summary

    config, run, decoded = region_set.config, region_set.run, region_set.decoded
    figures, drawn = _figures(region_set, region_set.out.staging / "figures")
    return write_run_report(
        region_set,
        name,
        figures=figures,
        parameters={
            "atlas": config.atlas_name,
            "atlas map": decoded.atlas.map_name,
            "brain model": brain_model_summary(decoded.cifti.brain_model),
            "maps drawn as": drawn,
            "strategy": config.strategy,
            "bold": str(run.bold),
            "confounds": str(run.confounds),
            "t_r": run.t_r,
        },
        counts={
            "grayordinates": int(decoded.data.shape[1]),
            "parcels": len(region_set.prepared.names),
        },
    )
