"""What the participant level writes beside each result.

Source URIs, set names, sidecars, and the one warning about constant series.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from connscale._version import __version__
from connscale.bidsapp.config import ParticipantConfig
from connscale.bidsapp.layout import BoldRun
from connscale.io.bids import bids_prefix, dataset_relative, spelling

__all__ = [
    "DATASET_LINK",
    "MEASURE",
    "bids_uri",
    "run_sidecars",
    "constant_columns",
    "constant_message",
    "note_constant_voxels",
    "set_prefix",
    "sidecars",
]

#: The name under which the outputs' ``DatasetLinks`` hold the fMRIPrep dataset.
DATASET_LINK = "preprocessed"

#: The ``meas-`` entity of every connectivity output.
MEASURE = "PearsonCorrelation"


def bids_uri(path: Path, root: Path) -> str:
    """``path`` as a BIDS URI in the fMRIPrep dataset linked as :data:`DATASET_LINK`."""
    return f"bids:{DATASET_LINK}:{path.resolve().relative_to(root.resolve()).as_posix()}"


def sidecars(
    config: ParticipantConfig,
    run: BoldRun,
    names,
    confounds,
    sample_mask,
    n_volumes: int,
    mean_fd: float | None,
    dof: dict | None = None,
    temporal: dict | None = None,
) -> tuple[dict, dict]:
    """Return the JSON sidecars of a run's connectivity matrix and of its region series.

    Parameters
    ----------
    config : ParticipantConfig
        The participant level's settings (atlas, denoising, output folder).
    run : BoldRun
        The run: its BOLD, mask and confounds become the ``Sources``.
    names : sequence of str
        The region names (``NodeNames``, ``Columns``).
    confounds : pandas.DataFrame or None
        The confounds regressed out (their columns are ``ConfoundRegressors``).
    sample_mask : array-like of int or None
        The volumes kept (None: all).
    n_volumes : int
        The number of volumes of the BOLD.
    mean_fd : float or None
        The run's mean framewise displacement.
    dof : dict or None
        The residual degrees of freedom (:func:`connscale.denoise.residual_dof`).
    temporal : dict or None
        What the temporal steps did (``TemporalSteps``: dummy scans, motion
        filter, FD threshold, volumes censored, seconds kept, output type;
        :mod:`connscale.bidsapp.temporal`).

    Returns
    -------
    relmat : dict
        The sidecar of the ``_relmat.tsv``.
    timeseries : dict
        The sidecar of the ``_timeseries.tsv``.
    """
    root = Path(config.derivatives)
    sources = [bids_uri(p, root) for p in (run.bold, run.mask, run.confounds) if p is not None]
    kept = np.arange(n_volumes) if sample_mask is None else np.asarray(sample_mask)
    common = {
        "Sources": sources,
        "Atlas": config.atlas_name,
        # Relative to the output root: the atlas is outside both datasets.
        "AtlasFile": dataset_relative(config.atlas, config.output),
        "AtlasLabelsFile": (
            None
            if config.atlas_labels is None
            else dataset_relative(config.atlas_labels, config.output)
        ),
        "DenoiseStrategy": config.strategy,
        "DenoiseParameters": {
            **config.strategy_params,
            "detrend": config.detrend,
            "standardize": config.standardize,
            "low_pass": config.low_pass,
            "high_pass": config.high_pass,
        },
        "ConfoundRegressors": [] if confounds is None else list(map(str, confounds.columns)),
        "NumberOfVolumes": int(n_volumes),
        "NumberOfVolumesDiscarded": int(n_volumes - kept.size),
        "RepetitionTime": run.t_r,
        "MeanFramewiseDisplacement": mean_fd,
        **({} if dof is None else {"ResidualDegreesOfFreedom": dof}),
        **({} if temporal is None else {"TemporalSteps": temporal}),
        "SoftwareName": "connscale",
        "SoftwareVersion": __version__,
    }
    relmat = {
        "Measure": "Pearson correlation",
        "MeasureDescription": "Pearson correlation of the denoised mean time series of each "
        "pair of atlas regions (no shrinkage)",
        "Weighted": True,
        "Directed": False,
        "ValidDiagonal": True,
        "StorageFormat": "Full",
        "NonNegative": False,
        "NodeNames": list(names),
        "Code": f"connscale {__version__}",
        **common,
    }
    timeseries = {
        "SamplingFrequency": 1.0 / run.t_r,
        "Columns": list(names),
        "KeptVolumes": kept.tolist(),
        **common,
    }
    return relmat, timeseries


def run_sidecars(
    config: ParticipantConfig, run: BoldRun, names, context: dict, n_volumes: int
) -> tuple[dict, dict]:
    """Return :func:`sidecars` of a run from its context (confounds, kept volumes, FD, dof)."""
    return sidecars(
        config,
        run,
        names,
        context["confounds"],
        context["sample_mask"],
        int(n_volumes),
        context["mean_fd"],
        dof=context["dof"],
        temporal=context.get("temporal"),
    )


def set_prefix(entities: dict, extra: dict) -> str:
    """Return a set's name: its outputs' common entities (its lock, staging folder, manifest).

    It is spelled connscale's way whichever spelling names the set's files
    (:mod:`connscale.bidsapp.xcpd_names`), so that resume finds it the same way.
    """
    with spelling(None):
        return bids_prefix({**entities, **extra})


def constant_message(run: BoldRun, what: str, listed: str, n_constant: int, n_total: int) -> str:
    """Return the run's one warning about its constant series."""
    return (
        f"{n_constant} of {n_total} {what} of {run.bold.name} are constant over time or have "
        f"no variance left after cleaning ({listed}): their correlations are NaN."
    )


def constant_columns(series) -> np.ndarray:
    """Return which columns of cleaned series (an array, or a tensor on its device) are constant.

    Cleaning makes such a series exactly constant, see :mod:`connscale.denoise`.
    """
    if not series.shape[0]:
        return np.zeros(series.shape[1], bool)
    if not isinstance(series, np.ndarray):  # a torch tensor: checked where it lies
        low, high = series.aminmax(dim=0)
        return (low == high).cpu().numpy()
    return np.ptp(series, axis=0) == 0


def note_constant_voxels(run: BoldRun, voxels: np.ndarray, context: dict) -> np.ndarray:
    """Which cleaned voxel series are constant; the run's warning names how many."""
    constant = constant_columns(voxels)
    if constant.any():
        first = np.flatnonzero(constant)[:5].tolist()
        context["warnings"].append(
            constant_message(
                run,
                "voxels of the mask",
                f"the first in voxels/ijk order: {first}",
                int(constant.sum()),
                constant.size,
            )
        )
    return constant
