"""Confound removal for fMRIPrep outputs, exactly as nilearn does it, on the device.

Confounds and sample masks come from nilearn's
:func:`~nilearn.interfaces.fmriprep.load_confounds_strategy` (the preset
strategies giga-connectome offers: ``'simple'``, ``'scrubbing'``,
``'compcor'``, ``'ica_aroma'``; ``'none'`` removes nothing). Cleaning follows
:func:`nilearn.signal.clean` step for step: interpolation of censored volumes
(Butterworth filtering only), detrending, Butterworth band-pass of signals
*and* confounds (so the regression is orthogonal to the filter), censoring,
projection onto the orthogonal complement of the standardised confounds, and
z-scoring.

Every step before the final standardisation is linear in the signals and the
same for every voxel of a run. :func:`cleaning_operator` therefore builds, once
per run, the (T', T) matrix ``M`` of that linear map by running
:func:`nilearn.signal.clean` itself on the T x T identity in float64 on the
host (a few milliseconds for T = 400; this is where scipy's ``sosfiltfilt``,
the cubic-spline interpolation and the pivoted QR of the confounds run). The
part that scales with the data, ``M @ X`` for the (T, V) voxel or region
series and the z-scoring, runs in torch on the device (:func:`clean_signals`):
one projection per run. The result equals ``nilearn.signal.clean`` to float
tolerance because it *is* the same linear map.

To keep float32 products accurate on raw BOLD values (means of ~10^4 and
fluctuations of ~10), each series is centred before the product and its mean
added back through ``M @ 1``, computed in float64.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import torch

from connscale._choices import STRATEGIES
from connscale._compute.device import resolve_device, resolve_dtype

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "STRATEGIES",
    "CleaningOperator",
    "clean_signals",
    "clean_regions",
    "cleaning_operator",
    "load_confounds",
    "region_signals",
]

#: Denoising strategies: nilearn's preset strategies (those giga-connectome
#: offers) and 'none'.
_STANDARDIZE = ("zscore_sample", None)
_EPS64 = np.finfo(np.float64).eps


def load_confounds(
    bold: str | os.PathLike, strategy: str, **kwargs
) -> tuple[pd.DataFrame | None, np.ndarray | None]:
    """Confounds and sample mask of one fMRIPrep run for a denoising strategy.

    Parameters
    ----------
    bold : path
        The run's preprocessed BOLD (``*_desc-preproc_bold.nii.gz``, or
        ``*_desc-smoothAROMAnonaggr_bold.nii.gz`` for 'ica_aroma'); its
        confounds TSV and JSON sit beside it, as fMRIPrep writes them.
    strategy : {'simple', 'scrubbing', 'compcor', 'ica_aroma', 'none'}
        A preset of :func:`nilearn.interfaces.fmriprep.load_confounds_strategy`,
        or 'none' (no confound, no censoring).
    **kwargs
        Passed to ``load_confounds_strategy`` (e.g. ``fd_threshold``,
        ``global_signal``).

    Returns
    -------
    confounds : pandas.DataFrame or None
        (T, n_confounds), the regressors with their fMRIPrep names.
    sample_mask : ndarray of int or None
        Indices of the volumes kept (scrubbing, non-steady-state volumes), or
        None when every volume is kept.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}; got {strategy!r}.")
    if strategy == "none":
        if kwargs:
            raise ValueError(f"strategy 'none' takes no parameter; got {sorted(kwargs)}.")
        return None, None
    from nilearn.interfaces.fmriprep import load_confounds_strategy

    confounds, sample_mask = load_confounds_strategy(str(bold), denoise_strategy=strategy, **kwargs)
    if confounds is not None and confounds.shape[1] == 0:
        confounds = None
    return confounds, sample_mask


@dataclass(frozen=True)
class CleaningOperator:
    """The linear part of :func:`nilearn.signal.clean` for one run.

    Attributes
    ----------
    matrix : ndarray of shape (n_kept, n_timepoints), float64
        ``clean(X, standardize=None) == matrix @ X`` for every (T, V) ``X``.
    offset : ndarray of shape (n_kept,), float64
        ``matrix @ ones(T)``: what a constant series becomes.
    volumes : ndarray of int, shape (n_kept,)
        The input volume behind each output row.
    """

    matrix: np.ndarray
    offset: np.ndarray
    volumes: np.ndarray

    @property
    def n_timepoints(self) -> int:
        """T, the number of input volumes."""
        return self.matrix.shape[1]


def _sample_indices(sample_mask: npt.ArrayLike | None, n_timepoints: int) -> np.ndarray | None:
    if sample_mask is None:
        return None
    mask = np.asarray(sample_mask)
    if mask.dtype == bool:
        if mask.shape != (n_timepoints,):
            raise ValueError(
                f"A boolean sample_mask must have {n_timepoints} values; got shape {mask.shape}."
            )
        return np.flatnonzero(mask)
    mask = mask.astype(np.int64).ravel()
    if mask.size and (mask.min() < 0 or mask.max() >= n_timepoints):
        raise ValueError(
            f"sample_mask indices must lie in [0, {n_timepoints}); got {mask.min()}..{mask.max()}."
        )
    if mask.size == 0:
        raise ValueError("sample_mask removes every volume.")
    return mask


def cleaning_operator(
    n_timepoints: int,
    *,
    confounds: npt.ArrayLike | pd.DataFrame | None = None,
    sample_mask: npt.ArrayLike | None = None,
    detrend: bool = True,
    standardize_confounds: bool = True,
    filter: str | bool = "butterworth",
    low_pass: float | None = None,
    high_pass: float | None = None,
    t_r: float | None = None,
    extrapolate: bool = False,
) -> CleaningOperator:
    """The (T', T) matrix of :func:`nilearn.signal.clean` without standardisation.

    Parameters
    ----------
    n_timepoints : int
        T, the number of volumes of the run.
    confounds : array-like of shape (T, n_confounds), DataFrame or None
    sample_mask : array of int indices or of T booleans, or None
        Volumes to keep.
    detrend, standardize_confounds, filter, low_pass, high_pass, t_r, extrapolate
        As in :func:`nilearn.signal.clean` (same defaults).

    Returns
    -------
    CleaningOperator

    Notes
    -----
    Built by running ``nilearn.signal.clean`` on the T x T identity in
    float64 on the host, so every step and every default is nilearn's.
    """
    from nilearn.signal import clean
    from threadpoolctl import threadpool_limits

    n_timepoints = int(n_timepoints)
    if n_timepoints < 2:
        raise ValueError(f"A run needs at least 2 volumes to be cleaned; got {n_timepoints}.")
    if confounds is not None:
        confounds = np.asarray(confounds, dtype=np.float64)
        if confounds.ndim == 1:
            confounds = confounds[:, None]
        if confounds.shape[0] != n_timepoints:
            raise ValueError(
                f"The confounds have {confounds.shape[0]} rows but the run has "
                f"{n_timepoints} volumes."
            )
        if not np.isfinite(confounds).all():
            raise ValueError("The confounds hold NaN or infinite values.")
    indices = _sample_indices(sample_mask, n_timepoints)
    # A T x T problem: BLAS threads would only spin beside the caller's other work
    # (OpenBLAS's idle threads busy-wait), so nilearn runs on one.
    with threadpool_limits(limits=1, user_api="blas"), warnings.catch_warnings():
        # Identity input: nilearn's per-signal warnings (e.g. on 1-D input) do not apply.
        warnings.simplefilter("ignore", category=UserWarning)
        matrix = clean(
            np.eye(n_timepoints),
            detrend=detrend,
            standardize=None,
            sample_mask=None if indices is None else indices.copy(),
            confounds=confounds,
            standardize_confounds=standardize_confounds,
            filter=filter,
            low_pass=low_pass,
            high_pass=high_pass,
            t_r=t_r,
            extrapolate=extrapolate,
        )
    volumes = np.arange(n_timepoints) if indices is None else indices
    if matrix.shape[0] != volumes.size:
        raise RuntimeError(
            f"nilearn returned {matrix.shape[0]} volumes for {volumes.size} kept ones."
        )
    return CleaningOperator(matrix=matrix, offset=matrix.sum(axis=1), volumes=volumes)


def _as_tensor(
    signals: npt.ArrayLike | torch.Tensor, dev: torch.device, dtype: torch.dtype
) -> torch.Tensor:
    if isinstance(signals, torch.Tensor):
        return signals.to(device=dev, dtype=dtype)
    return torch.as_tensor(np.asarray(signals), device=dev).to(dtype)


def clean_signals(
    signals: npt.ArrayLike | torch.Tensor,
    operator: CleaningOperator,
    *,
    standardize: str | None = "zscore_sample",
    device: str = "auto",
    dtype: str = "float32",
    return_tensor: bool = False,
) -> np.ndarray | torch.Tensor:
    """Clean (T, V) series with a run's operator: one projection on the device.

    Parameters
    ----------
    signals : ndarray or torch.Tensor of shape (n_timepoints, n_series)
        Raw series (voxels or regions) of the run, time along axis 0.
    operator : CleaningOperator
        From :func:`cleaning_operator` for this run.
    standardize : {'zscore_sample', None}, default='zscore_sample'
        As in :func:`nilearn.signal.clean`: z-score each cleaned series
        (ddof=1; a series with standard deviation below float64 epsilon is
        only centred).
    device : str, default='auto'
    dtype : {'float32', 'float64'}, default='float32'
        Precision of the product and of the output. Series given in float64
        (e.g. region means of raw BOLD values) are centred in float64 before
        they are cast to it.
    return_tensor : bool, default=False
        Return the torch tensor on the device instead of a numpy array.

    Returns
    -------
    ndarray or torch.Tensor of shape (n_kept, n_series)
        Equal to ``nilearn.signal.clean(signals, ...)`` with the operator's
        arguments.
    """
    _check_standardize(standardize)
    dev = resolve_device(device)
    work = resolve_dtype(dtype)
    if isinstance(signals, torch.Tensor):
        wide = signals.dtype == torch.float64
    else:
        signals = np.asarray(signals)
        wide = signals.dtype == np.float64
    x = _as_tensor(signals, dev, torch.float64 if wide else work)
    if x.ndim != 2 or x.shape[0] != operator.n_timepoints:
        raise ValueError(
            f"Expected series of shape ({operator.n_timepoints}, n_series); got {tuple(x.shape)}."
        )
    mean = x.mean(dim=0, dtype=torch.float64)
    out = _project((x - mean.to(x.dtype)).to(work), mean, operator, standardize)
    return out if return_tensor else out.cpu().numpy()


def clean_regions(
    signals: npt.ArrayLike | torch.Tensor,
    labels: npt.ArrayLike,
    operator: CleaningOperator,
    *,
    regions: npt.ArrayLike | None = None,
    standardize: str | None = "zscore_sample",
    device: str = "auto",
    dtype: str = "float32",
    return_tensor: bool = False,
) -> np.ndarray | torch.Tensor:
    """Region means of voxel series, cleaned: nilearn's ``NiftiLabelsMasker``.

    Equals ``clean_signals(region_signals(signals, labels), operator)`` but
    keeps the region means centred until the projection, so float32 loses
    nothing to the large mean of raw BOLD values.

    Parameters
    ----------
    signals : ndarray or torch.Tensor of shape (n_timepoints, n_voxels)
    labels : array of int of shape (n_voxels,)
        Region label of each voxel; 0 is background.
    operator : CleaningOperator
    regions, standardize, device, dtype, return_tensor
        As in :func:`region_signals` and :func:`clean_signals`.

    Returns
    -------
    ndarray or torch.Tensor of shape (n_kept, n_regions)
    """
    _check_standardize(standardize)
    dev = resolve_device(device)
    work = resolve_dtype(dtype)
    x = _as_tensor(signals, dev, work)
    if x.ndim != 2 or x.shape[0] != operator.n_timepoints:
        raise ValueError(
            f"Expected series of shape ({operator.n_timepoints}, n_voxels); got {tuple(x.shape)}."
        )
    centred, mean = _region_parts(x, labels, regions)
    out = _project(centred, mean, operator, standardize)
    return out if return_tensor else out.cpu().numpy()


def _check_standardize(standardize: str | None) -> None:
    if standardize not in _STANDARDIZE:
        raise ValueError(f"standardize must be 'zscore_sample' or None; got {standardize!r}.")


def _project(
    centred: torch.Tensor, mean: torch.Tensor, operator: CleaningOperator, standardize: str | None
) -> torch.Tensor:
    """``M @ (centred + 1 mean)``, then z-scored; ``mean`` is float64."""
    dev, work = centred.device, centred.dtype
    matrix = torch.as_tensor(operator.matrix, device=dev, dtype=work)
    out = matrix @ centred
    offset = torch.as_tensor(operator.offset, device=dev)
    if standardize is not None:
        offset = offset - offset.mean()  # the column mean is removed below
    out += (offset[:, None] * mean[None, :]).to(work)
    if standardize == "zscore_sample" and out.shape[0] > 1:
        out -= out.mean(dim=0)
        std = out.std(dim=0, correction=1)
        std = torch.where(std < _EPS64, torch.ones_like(std), std)
        out /= std
    return out


def _region_parts(
    x: torch.Tensor, labels: npt.ArrayLike, regions: npt.ArrayLike | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Centred region means (work dtype) and the region means (float64)."""
    dev, work = x.device, x.dtype
    labels = np.asarray(labels).ravel()
    if x.ndim != 2 or x.shape[1] != labels.size:
        raise ValueError(
            f"Expected series of shape (n_timepoints, {labels.size}); got {tuple(x.shape)}."
        )
    if regions is None:
        regions = np.unique(labels[labels != 0])
    regions = np.asarray(regions)
    if regions.size == 0:
        raise ValueError("No region: every voxel is background (label 0).")
    index = np.full(labels.shape, -1, dtype=np.int64)
    for i, value in enumerate(regions):
        index[labels == value] = i
    counts = np.bincount(index[index >= 0], minlength=regions.size)
    if (counts == 0).any():
        raise ValueError(f"Region(s) {regions[counts == 0].tolist()} have no voxel.")
    inside = torch.as_tensor(np.flatnonzero(index >= 0), device=dev)
    target = torch.as_tensor(index[index >= 0], device=dev)
    # Centre each voxel before summing (accurate float32 sums): its deviations from
    # its first volume are small, so their float32 mean is accurate, and the voxel
    # mean is that first value plus the mean deviation (in float64). One copy of
    # the in-mask series, no float64 pass over it.
    centred = x[:, inside]
    shift = centred[0].clone()
    centred -= shift
    deviation = centred.mean(dim=0)
    centred -= deviation
    sums = torch.zeros((x.shape[0], regions.size), device=dev, dtype=work)
    sums.index_add_(1, target, centred)
    del centred
    base = torch.zeros(regions.size, device=dev, dtype=torch.float64)
    base.index_add_(0, target, shift.to(torch.float64) + deviation.to(torch.float64))
    size = torch.as_tensor(counts, device=dev, dtype=torch.float64)
    return sums / size.to(work), base / size


def region_signals(
    signals: npt.ArrayLike | torch.Tensor,
    labels: npt.ArrayLike,
    *,
    regions: npt.ArrayLike | None = None,
    device: str = "auto",
    dtype: str = "float32",
    return_tensor: bool = False,
) -> np.ndarray | torch.Tensor:
    """Mean series of each region: what nilearn's ``NiftiLabelsMasker`` extracts.

    Parameters
    ----------
    signals : ndarray or torch.Tensor of shape (n_timepoints, n_voxels)
    labels : array of int of shape (n_voxels,)
        Region label of each voxel; 0 is background.
    regions : array of int or None
        Labels to extract, in output order (default: the sorted non-zero
        labels present).
    device, dtype, return_tensor
        As in :func:`clean_signals`.

    Returns
    -------
    ndarray or torch.Tensor of shape (n_timepoints, n_regions)
    """
    x = _as_tensor(signals, resolve_device(device), resolve_dtype(dtype))
    centred, mean = _region_parts(x, labels, regions)
    out = centred + mean.to(centred.dtype)
    return out if return_tensor else out.cpu().numpy()
