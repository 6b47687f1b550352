"""The HTML report of a CIFTI run's atlas-level set.

Its figures: the parcellated connectome, the grayordinates' carpet plot
before and after denoising, and the raw
series' temporal signal-to-noise ratio and the parcels' coverage in a flat
per-structure view (:mod:`connscale.report.cifti`; no surface mesh is used,
and the report says so).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from connscale.bidsapp.report import run_header

__all__ = ["write_cifti_report"]

_MAX_CARPET = 2000


def _tsnr(data: np.ndarray) -> np.ndarray:
    """Return each grayordinate's temporal mean over its standard deviation (NaN: constant)."""
    mean = data.mean(axis=0, dtype=np.float64)
    std = data.std(axis=0, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(std > 0, mean / std, np.nan)


def _figures(region_set, folder: Path) -> list[Path]:
    """Write the run's figures into ``folder``; return their paths."""
    from connscale.denoise import clean_signals
    from connscale.fc.static import correlation
    from connscale.report.cifti import plot_grayordinate_carpet, plot_structure_view
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
    figures.append(
        plot_structure_view(
            _tsnr(data),
            brain_model,
            folder / "tsnr.png",
            title="temporal SNR of the BOLD (mean / SD)",
        )
    )
    coverage = np.full(len(brain_model), np.nan)
    labels = decoded.atlas.labels
    for key, value in zip(decoded.regions, region_set.parcels.coverage):
        coverage[labels == key] = value
    figures.append(
        plot_structure_view(
            coverage,
            brain_model,
            folder / "coverage.png",
            title="parcel coverage (unlabelled: blank)",
        )
    )
    return figures


def write_cifti_report(region_set, name: str) -> Path:
    """Write the CIFTI run's HTML report into the set's staging folder."""
    from connscale.io.cifti import brain_model_summary
    from connscale.report import write_report
    from connscale.report.cifti import FLAT_VIEW

    config, run, decoded, context = (
        region_set.config,
        region_set.run,
        region_set.decoded,
        region_set.context,
    )
    staging = region_set.out.staging
    figures = _figures(region_set, staging / "figures")
    fd = context["fd"]
    results = {
        "volumes": int(decoded.data.shape[0]),
        "volumes kept": int(context["operator"].volumes.size),
        "grayordinates": int(decoded.data.shape[1]),
        "parcels": len(region_set.prepared.names),
        "mean FD (mm)": None if fd is None else float(fd.mean()),
    }
    if context["dof"] is not None:
        results["residual degrees of freedom"] = context["dof"]["dof"]
    record = {
        "command": f"bids participant: {run.name}",
        **run_header(config.device, decoded.started),
        "parameters": {
            "atlas": config.atlas_name,
            "atlas map": decoded.atlas.map_name,
            "brain model": brain_model_summary(decoded.cifti.brain_model),
            "maps drawn as": FLAT_VIEW,
            "strategy": config.strategy,
            "bold": str(run.bold),
            "confounds": str(run.confounds),
            "t_r": run.t_r,
        },
        "results": results,
        "timings_s": dict(region_set.timings),
        "figures": [str(f) for f in figures],
        "outputs": list(region_set.written),
        "warnings": list(context["warnings"]),
    }
    return write_report(record, staging, filename=name)
