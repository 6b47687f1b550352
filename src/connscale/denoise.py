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

Two things the data may not support are decided here, not left to rounding:

- :func:`residual_dof`: the residual degrees of freedom of a run, from the
  operator itself (censoring, confounds, detrending, the mean and the filter
  in one number), so a caller can refuse a run before computing anything.
- Constant series: a series constant over time (its standard deviation at
  most ``CONSTANT_RTOL`` of its mean) or with no variance left after cleaning
  (at most ``CONSTANT_RTOL`` of its standard deviation before) comes out
  exactly constant (0 when standardised), so every correlation with it is
  NaN, instead of rounding noise scaled up to unit variance.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import torch

from connscale._choices import STRATEGIES
from connscale._compute import MemoryPlanner, planner_for, resolve_device, resolve_dtype

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "CONSTANT_RTOL",
    "STRATEGIES",
    "CleaningOperator",
    "check_confounds_file",
    "clean_signals",
    "clean_regions",
    "cleaning_operator",
    "constant_series",
    "load_confounds",
    "region_signals",
    "residual_dof",
]

#: Denoising strategies: nilearn's preset strategies (those giga-connectome
#: offers) and 'none'.
_STANDARDIZE = ("zscore_sample", None)
_EPS64 = np.finfo(np.float64).eps
#: Relative tolerance of "constant" per working precision: a series whose
#: standard deviation is at most this fraction of its mean magnitude (before
#: cleaning), or of its standard deviation before cleaning (after), is constant.
#: About a hundred roundings of the precision: far below any real BOLD
#: fluctuation (1e-4 to 1e-2 of the mean), far above what rounding leaves.
CONSTANT_RTOL = {"float32": 1e-5, "float64": 1e-12}
#: Singular values of the (centred) operator below this gain are rounding, not
#: a degree of freedom (the gains of a kept component are of order 1).
_GAIN_TOL = 1e-6
#: Copies of the T x T float64 identity that nilearn's ``clean`` holds while
#: the operator is built (measured: about 4.5 at T = 300 and 600, with 24
#: confounds and a band-pass).
_OPERATOR_COPIES = 6
#: What to do when cleaning does not fit (for messages).
_MEMORY_HINT = "Raise memory_limit, or clean fewer series at a time."


def check_confounds_file(path: str | os.PathLike) -> None:
    """Check that a confounds TSV is a UTF-8 table of numbers, as pandas reads it.

    Parameters
    ----------
    path : path
        fMRIPrep's ``*_desc-confounds_timeseries.tsv``.

    Raises
    ------
    ValueError
        One line naming the file (and the line, column and value): not
        UTF-8, empty, not a table, no row, text in a column (``n/a`` is
        fMRIPrep's missing value).
    """
    import pandas as pd

    path = Path(path)
    raw = path.read_bytes()
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ValueError(
            f"{path.name} is not UTF-8 text: byte {raw[exc.start]:#04x} at line {line}."
        ) from None
    try:
        table = pd.read_csv(path, sep="\t", encoding="utf-8")
    except pd.errors.EmptyDataError:
        raise ValueError(f"{path.name} is empty: no header, no row.") from None
    except pd.errors.ParserError as exc:
        message = " ".join(str(exc).split())
        raise ValueError(f"{path.name} is not a tab-separated table: {message}") from None
    if table.shape[0] == 0:
        raise ValueError(f"{path.name} has a header and no row.")
    for column in table.columns:
        values = table[column]
        if pd.api.types.is_numeric_dtype(values):
            continue
        text = pd.to_numeric(values, errors="coerce").isna() & values.notna()
        if text.any():
            row = int(text.to_numpy().argmax())
            raise ValueError(
                f"{path.name}: column {column!r} holds {values.iloc[row]!r} at line {row + 2} "
                f"(volume {row}), not a number."
            )


def _check_finite(confounds: pd.DataFrame, source: str) -> None:
    """Name the first regressor with a missing or infinite value.

    Only the first volume is filled by nilearn, where fMRIPrep leaves
    derivatives and differences n/a.
    """
    values = confounds.to_numpy(dtype=np.float64)
    bad = ~np.isfinite(values)
    if bad.any():
        column = int(bad.any(axis=0).argmax())
        row = int(bad[:, column].argmax())
        raise ValueError(
            f"{source}: regressor {str(confounds.columns[column])!r} is "
            f"{'n/a' if np.isnan(values[row, column]) else values[row, column]} at line "
            f"{row + 2} (volume {row}); only its first volume may be n/a."
        )


def load_confounds(
    bold: str | os.PathLike,
    strategy: str,
    *,
    confounds_file: str | os.PathLike | None = None,
    **kwargs,
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
    confounds_file : path or None
        The confounds TSV nilearn reads for ``bold``: checked first
        (:func:`check_confounds_file`), and named in the errors.
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

    Raises
    ------
    ValueError
        One line naming the confounds file (or the BOLD): what nilearn
        cannot read, or a regressor with a missing value after the first
        volume (naming the regressor and the line).
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}; got {strategy!r}.")
    if strategy == "none":
        if kwargs:
            raise ValueError(f"strategy 'none' takes no parameter; got {sorted(kwargs)}.")
        return None, None
    import pandas as pd
    from nilearn.interfaces.fmriprep import load_confounds_strategy

    source = Path(bold).name if confounds_file is None else Path(confounds_file).name
    if confounds_file is not None:
        check_confounds_file(confounds_file)
    try:
        confounds, sample_mask = load_confounds_strategy(
            str(bold), denoise_strategy=strategy, **kwargs
        )
    except (ValueError, TypeError, KeyError, pd.errors.ParserError) as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        raise ValueError(f"{source}: nilearn cannot load the confounds: {message}") from exc
    if confounds is not None and confounds.shape[1] == 0:
        confounds = None
    if confounds is not None:
        _check_finite(confounds, source)
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
    memory_limit: int | str | MemoryPlanner | None = None,
) -> CleaningOperator:
    """Return the (T', T) matrix of :func:`nilearn.signal.clean` without standardisation.

    Parameters
    ----------
    n_timepoints : int
        T, the number of volumes of the run.
    confounds : array-like of shape (T, n_confounds), DataFrame or None
    sample_mask : array of int indices or of T booleans, or None
        Volumes to keep.
    detrend, standardize_confounds, filter, low_pass, high_pass, t_r, extrapolate
        As in :func:`nilearn.signal.clean` (same defaults).
    memory_limit : int, str, MemoryPlanner or None, default=None
        Most host memory the operator's construction may use (nilearn's
        copies of the T x T identity), or the task's planner.

    Returns
    -------
    CleaningOperator

    Raises
    ------
    MemoryLimitError
        When the construction does not fit, before it starts.

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
    _host_planner(memory_limit).require(
        _OPERATOR_COPIES * n_timepoints**2 * 8,
        f"The cleaning operator of {n_timepoints} volumes",
        on="host",
    )
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


def residual_dof(
    operator: CleaningOperator,
    *,
    confounds: npt.ArrayLike | pd.DataFrame | None = None,
    detrend: bool = True,
) -> dict:
    """Residual degrees of freedom of a run's cleaned series, and their parts.

    The cleaned and z-scored series of a run are ``C M x``: ``M`` the run's
    operator, ``C`` the removal of the mean over the kept volumes. With ``s``
    the singular values of ``C M`` (the gains of what is left), the residual
    degrees of freedom are ``(sum s^2)^2 / sum s^4``: the rank of ``C M`` when
    it is a projection (no filter: kept volumes minus the mean, the trend and
    the independent confounds, exactly), and the effective degrees of freedom
    of a filtered series (Worsley & Friston 1995) when a band-pass filter
    attenuates part of the spectrum. Censoring, confounds, detrending, the
    mean and the filter are counted in this one number.

    Parameters
    ----------
    operator : CleaningOperator
        From :func:`cleaning_operator`.
    confounds : array-like of shape (T, n_confounds), DataFrame or None
        The confounds the operator was built with (for the parts only).
    detrend : bool, default=True
        Whether the operator detrends (for the parts only).

    Returns
    -------
    dict
        ``volumes`` (T), ``volumes_kept``, ``confounds`` (columns),
        ``confound_rank`` (independent confounds over the kept volumes, once
        detrended), ``detrend`` (1 or 0, the linear trend), ``mean`` (1),
        ``filter`` (the filter's share, effective: what the other parts
        leave of ``volumes_kept - dof``), ``regressors`` (the sum of the
        parts) and ``dof``, rounded to 0.01.
    """
    from threadpoolctl import threadpool_limits

    matrix = operator.matrix - operator.matrix.mean(axis=0)
    with threadpool_limits(limits=1, user_api="blas"):
        gains = np.linalg.eigvalsh(matrix @ matrix.T)  # s^2
    gains = gains[gains > _GAIN_TOL**2]
    dof = float(gains.sum() ** 2 / (gains**2).sum()) if gains.size else 0.0
    kept = int(operator.volumes.size)
    rank = 0
    if confounds is not None:
        values = np.asarray(confounds, dtype=np.float64).reshape(operator.n_timepoints, -1)
        rank = _confound_rank(values[operator.volumes], detrend=detrend)
    fixed = 1 + int(bool(detrend)) + rank
    regressors = max(float(fixed), kept - dof)
    return {
        "volumes": int(operator.n_timepoints),
        "volumes_kept": kept,
        "confounds": 0 if confounds is None else int(np.shape(confounds)[1]),
        "confound_rank": rank,
        "detrend": int(bool(detrend)),
        "mean": 1,
        "filter": round(max(0.0, regressors - fixed), 2),
        "regressors": round(regressors, 2),
        "dof": round(dof, 2),
    }


def _confound_rank(confounds: np.ndarray, *, detrend: bool) -> int:
    """Return the number of independent confounds over the kept volumes.

    Counted once the mean (and trend) are removed: the numerical rank of the
    standardised residual confounds.
    """
    n = confounds.shape[0]
    basis = [np.ones(n)] + ([np.arange(n, dtype=np.float64)] if detrend else [])
    basis = np.stack(basis, axis=1)
    residual = confounds - basis @ np.linalg.lstsq(basis, confounds, rcond=None)[0]
    scale = residual.std(axis=0)
    residual = residual[:, scale > _EPS64 * np.abs(confounds).max(axis=0).clip(1)]
    if residual.shape[1] == 0:
        return 0
    return int(np.linalg.matrix_rank(residual / residual.std(axis=0)))


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
    memory_limit: int | str | MemoryPlanner | None = None,
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
        (ddof=1). A series constant before cleaning, or with no variance left
        after it (see the module's notes), is 0 (nilearn only centres a
        series whose standard deviation is below float64 epsilon, so it
        scales the rounding of such a series up to unit variance).
    device : str, default='auto'
    dtype : {'float32', 'float64'}, default='float32'
        Precision of the product and of the output. Series given in float64
        (e.g. region means of raw BOLD values) are centred in float64 before
        they are cast to it.
    return_tensor : bool, default=False
        Return the torch tensor on the device instead of a numpy array.
    memory_limit : int, str, MemoryPlanner or None, default=None
        Most memory the cleaning may use (the series' copies on the device,
        the operator, the cleaned series), or the task's planner (the
        cleaned series stay counted in it).

    Returns
    -------
    ndarray or torch.Tensor of shape (n_kept, n_series)
        Equal to ``nilearn.signal.clean(signals, ...)`` with the operator's
        arguments.

    Raises
    ------
    MemoryLimitError
        When the cleaning does not fit, before anything is allocated.
    """
    _check_standardize(standardize)
    dev = resolve_device(device)
    work = resolve_dtype(dtype)
    if isinstance(signals, torch.Tensor):
        wide = signals.dtype == torch.float64
    else:
        signals = np.asarray(signals)
        wide = signals.dtype == np.float64
    if signals.ndim != 2 or signals.shape[0] != operator.n_timepoints:
        raise ValueError(
            f"Expected series of shape ({operator.n_timepoints}, n_series); "
            f"got {tuple(signals.shape)}."
        )
    planner = planner_for(dev, memory_limit, hint=_MEMORY_HINT)
    n_series = signals.shape[1]
    item = torch.finfo(work).bits // 8
    with planner.transient():
        # The series on the device, centred (and cast from float64).
        series = signals.shape[0] * n_series * (8 if wide else item)
        planner.reserve_device(_copied(signals, dev, 8 if wide else item) * series)
        planner.reserve_device(series + (signals.shape[0] * n_series * item if wide else 0))
        _count_projection(planner, operator, n_series, item, return_tensor)
        x = _as_tensor(signals, dev, torch.float64 if wide else work)
        mean = x.mean(dim=0, dtype=torch.float64)
        out = _project((x - mean.to(x.dtype)).to(work), mean, operator, standardize)
    return _kept(planner, out, return_tensor)


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
    memory_limit: int | str | MemoryPlanner | None = None,
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
    regions, standardize, device, dtype, return_tensor, memory_limit
        As in :func:`region_signals` and :func:`clean_signals`.

    Returns
    -------
    ndarray or torch.Tensor of shape (n_kept, n_regions)
    """
    _check_standardize(standardize)
    dev = resolve_device(device)
    work = resolve_dtype(dtype)
    if not isinstance(signals, torch.Tensor):
        signals = np.asarray(signals)
    if signals.ndim != 2 or signals.shape[0] != operator.n_timepoints:
        raise ValueError(
            f"Expected series of shape ({operator.n_timepoints}, n_voxels); "
            f"got {tuple(signals.shape)}."
        )
    planner = planner_for(dev, memory_limit, hint=_MEMORY_HINT)
    item = torch.finfo(work).bits // 8
    with planner.transient():
        n_regions = _count_regions(planner, signals, labels, regions, dev, item)
        _count_projection(planner, operator, n_regions, item, return_tensor)
        centred, mean = _region_parts(_as_tensor(signals, dev, work), labels, regions)
        out = _project(centred, mean, operator, standardize)
    return _kept(planner, out, return_tensor)


def _check_standardize(standardize: str | None) -> None:
    if standardize not in _STANDARDIZE:
        raise ValueError(f"standardize must be 'zscore_sample' or None; got {standardize!r}.")


def _project(
    centred: torch.Tensor, mean: torch.Tensor, operator: CleaningOperator, standardize: str | None
) -> torch.Tensor:
    """Compute ``M @ (centred + 1 mean)``, then z-score.

    ``mean`` is float64. Constant
    series (before or after cleaning, see :func:`constant_series`) come out
    exactly constant: 0 when z-scored, their mean otherwise.
    """
    dev, work = centred.device, centred.dtype
    rtol = CONSTANT_RTOL["float64" if work == torch.float64 else "float32"]
    low, high = torch.aminmax(centred, dim=0)
    magnitude = mean.abs() + torch.maximum(low.abs(), high.abs()).to(torch.float64)
    raw_std = torch.linalg.vector_norm(centred, dim=0, dtype=torch.float64)
    raw_std /= centred.shape[0] ** 0.5
    matrix = torch.as_tensor(operator.matrix, device=dev, dtype=work)
    out = matrix @ centred
    offset = torch.as_tensor(operator.offset, device=dev)
    if standardize is not None:
        offset = offset - offset.mean()  # the column mean is removed below
    out += (offset[:, None] * mean[None, :]).to(work)
    centre = out.mean(dim=0)
    out -= centre
    spread = torch.linalg.vector_norm(out, dim=0, dtype=torch.float64) / out.shape[0] ** 0.5
    constant = ((high - low).to(torch.float64) <= rtol * magnitude) | (spread <= rtol * raw_std)
    if standardize == "zscore_sample" and out.shape[0] > 1:
        std = out.std(dim=0, correction=1)
        std = torch.where((std < _EPS64) | constant, torch.ones_like(std), std)
        out /= std
        out[:, constant] = 0
    else:
        out += centre
        out[:, constant] = centre[constant]
    return out


def constant_series(signals: npt.ArrayLike, *, dtype: str = "float32") -> np.ndarray:
    """Return which (T, V) series are constant over time.

    A series is constant when its range is at most ``CONSTANT_RTOL[dtype]`` of
    its magnitude (no exact-zero test).

    Parameters
    ----------
    signals : array-like of shape (n_timepoints, n_series)
        Raw series (e.g. region means or voxels), before cleaning.
    dtype : {'float32', 'float64'}, default='float32'
        The working precision the series are cleaned in.

    Returns
    -------
    ndarray of bool, shape (n_series,)
    """
    x = np.asarray(signals)
    high, low = x.max(axis=0).astype(np.float64), x.min(axis=0).astype(np.float64)
    return (high - low) <= CONSTANT_RTOL[dtype] * np.maximum(np.abs(high), np.abs(low))


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
    memory_limit: int | str | MemoryPlanner | None = None,
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
    device, dtype, return_tensor, memory_limit
        As in :func:`clean_signals`.

    Returns
    -------
    ndarray or torch.Tensor of shape (n_timepoints, n_regions)
    """
    dev, work = resolve_device(device), resolve_dtype(dtype)
    if not isinstance(signals, torch.Tensor):
        signals = np.asarray(signals)
    planner = planner_for(dev, memory_limit, hint=_MEMORY_HINT)
    item = torch.finfo(work).bits // 8
    with planner.transient():
        n_regions = _count_regions(planner, signals, labels, regions, dev, item)
        result = signals.shape[0] * n_regions * item
        planner.require(result, f"The mean series of {n_regions} regions")
        if not return_tensor and dev.type != "cpu":
            planner.require(result, f"The mean series of {n_regions} regions", on="host")
        centred, mean = _region_parts(_as_tensor(signals, dev, work), labels, regions)
        out = centred + mean.to(centred.dtype)
    return _kept(planner, out, return_tensor)


def _host_planner(memory_limit) -> MemoryPlanner:
    """Return the planner of a host-memory step.

    The task's (whatever its device), or one of the CPU from the limit.
    """
    dev = memory_limit.device if isinstance(memory_limit, MemoryPlanner) else torch.device("cpu")
    return planner_for(dev, memory_limit, hint=_MEMORY_HINT)


def _copied(signals: np.ndarray | torch.Tensor, dev: torch.device, item: int) -> bool:
    """Whether putting ``signals`` on ``dev`` as ``item``-byte floats copies them."""
    target = torch.float64 if item == 8 else torch.float32
    if isinstance(signals, torch.Tensor):
        return signals.device != dev or signals.dtype != target
    return dev.type != "cpu" or signals.dtype != np.dtype(str(target).removeprefix("torch."))


def _count_regions(planner, signals, labels, regions, dev, item) -> int:
    """Count the region means' work into ``planner``; return the number of regions.

    The work is the series on the device, the copy of the in-mask voxels, the
    sums and their centred means.
    """
    t, v = signals.shape if signals.ndim == 2 else (0, 0)  # refused by _region_parts
    labels = np.asarray(labels).ravel()
    n_regions = np.unique(labels[labels != 0]).size if regions is None else np.size(regions)
    planner.reserve_device(_copied(signals, dev, item) * t * v * item)
    planner.reserve_device(t * int(np.count_nonzero(labels)) * item + 2 * t * n_regions * item)
    return int(n_regions)


def _count_projection(planner, operator, n_series: int, item: int, to_tensor: bool) -> None:
    """Count the operator on the device and require room for the cleaned series.

    Room is also required for their host copy unless they stay on the device.
    """
    n_kept = operator.matrix.shape[0]
    planner.reserve_device(n_kept * operator.n_timepoints * item)
    what = f"The cleaned series ({n_kept} volumes x {n_series} series)"
    planner.require(n_kept * n_series * item, what)
    if not to_tensor and planner.device.type != "cpu":
        planner.require(n_kept * n_series * item, what, on="host")


def _kept(planner, out: torch.Tensor, return_tensor: bool):
    """Return the result, counted as kept in ``planner``.

    On the device as a tensor, else in host memory as an array.
    """
    nbytes = out.numel() * out.element_size()
    if return_tensor:
        planner.reserve_device(nbytes)
        return out
    planner.reserve_host(nbytes)
    return out.cpu().numpy()
