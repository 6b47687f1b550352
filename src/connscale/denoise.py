"""Confound removal for fMRIPrep outputs, exactly as nilearn does it, on the device.

Confounds and sample masks come from nilearn's
:func:`~nilearn.interfaces.fmriprep.load_confounds_strategy` (the preset
strategies giga-connectome offers: ``'simple'``, ``'scrubbing'``,
``'compcor'``, ``'ica_aroma'``; ``'none'`` removes nothing), or from its
``load_confounds`` for XCP-D's nuisance sets (``'24P'``, ``'36P'``...) and
custom YAML/JSON sets (:mod:`connscale.nuisance`). Cleaning follows
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
tolerance because it *is* the same linear map. The host part (the confounds,
the operator, its degrees of freedom, the constant series) is in
``connscale._operator`` and imports no torch, so that the BIDS reader
processes build a run's operator without it; its names are public here.

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

import numpy as np
import numpy.typing as npt
import torch

from connscale._choices import STRATEGIES
from connscale._compute import MemoryPlanner, planner_for, resolve_device, resolve_dtype
from connscale._operator import (  # the host part, torch-free (the BIDS readers use it)
    _MEMORY_HINT,
    CONSTANT_RTOL,
    CleaningOperator,
    check_confounds_file,
    cleaning_operator,
    constant_series,
    load_confounds,
    residual_dof,
    xcpd_operator,
)

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
    "map_signals",
    "region_signals",
    "residual_dof",
    "xcpd_operator",
]

_STANDARDIZE = ("zscore_sample", None)
_EPS64 = np.finfo(np.float64).eps


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

    Examples
    --------
    >>> import numpy as np
    >>> from nilearn.signal import clean
    >>> from connscale.denoise import clean_signals, cleaning_operator
    >>> rng = np.random.default_rng(0)
    >>> x, confounds = rng.standard_normal((60, 3)), rng.standard_normal((60, 2))
    >>> operator = cleaning_operator(60, confounds=confounds)
    >>> cleaned = clean_signals(x, operator, device="cpu", dtype="float64")
    >>> bool(np.allclose(cleaned, clean(x, confounds=confounds, standardize="zscore_sample")))
    True
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

    Examples
    --------
    >>> import numpy as np
    >>> from connscale.denoise import clean_regions, cleaning_operator
    >>> x = 1000 + np.random.default_rng(0).standard_normal((40, 6))  # 6 voxels
    >>> labels = np.array([1, 1, 2, 2, 0, 3])  # voxel 4 is background
    >>> cleaned = clean_regions(x, labels, cleaning_operator(40), device="cpu")
    >>> cleaned.shape, round(float(cleaned[:, 0].std(ddof=1)), 3)
    ((40, 3), 1.0)
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

    Examples
    --------
    >>> import numpy as np
    >>> from connscale.denoise import region_signals
    >>> x = np.array([[1.0, 3.0, 10.0], [2.0, 4.0, 20.0]])  # 2 time points, 3 voxels
    >>> region_signals(x, [1, 1, 2], device="cpu")
    array([[ 2., 10.],
           [ 3., 20.]], dtype=float32)
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


def map_signals(
    signals: npt.ArrayLike | torch.Tensor,
    weights: npt.ArrayLike,
    *,
    columns: npt.ArrayLike | None = None,
    device: str = "auto",
    return_tensor: bool = False,
    memory_limit: int | str | MemoryPlanner | None = None,
) -> np.ndarray | torch.Tensor:
    """Region series of probabilistic maps: what nilearn's ``NiftiMapsMasker`` extracts.

    nilearn fits the maps to each volume by least squares
    (``img_to_signals_maps`` in ``nilearn/regions/signal_extraction.py``:
    ``scipy.linalg.lstsq(maps, data)`` over the voxels of the mask), not a
    weighted mean. That is one linear map of the series,
    ``signals[:, columns] @ pinv(weights).T``, computed here on the device in
    float64 as ``(signals[:, columns] @ weights) @ pinv(weights.T @ weights)``,
    the voxels in blocks (the same minimum-norm solution:
    ``pinv(A) = pinv(AᵀA) Aᵀ``; a voxel whose weights are all zero changes
    neither factor).

    Parameters
    ----------
    signals : ndarray or torch.Tensor of shape (n_timepoints, n_voxels)
    weights : array of shape (n_columns, n_maps)
        The maps at the voxels ``columns`` of ``signals``; each map non-zero
        somewhere (nilearn drops the maps empty inside the mask).
    columns : array of int of shape (n_columns,) or None
        The voxels the maps cover (None: all, in order).
    device, return_tensor, memory_limit
        As in :func:`clean_signals`.

    Returns
    -------
    ndarray or torch.Tensor of shape (n_timepoints, n_maps), float64

    Examples
    --------
    >>> import numpy as np
    >>> from connscale.denoise import map_signals
    >>> rng = np.random.default_rng(0)
    >>> weights = rng.uniform(size=(5, 2))  # 2 maps over 5 voxels
    >>> courses = rng.standard_normal((30, 2))
    >>> x = courses @ weights.T  # series made of the maps exactly
    >>> bool(np.allclose(map_signals(x, weights, device="cpu"), courses))
    True
    """
    dev = resolve_device(device)
    if not isinstance(signals, torch.Tensor):
        signals = np.asarray(signals)
    weights = np.asarray(weights)
    n_times, n_maps = signals.shape[0], weights.shape[1]
    columns = np.arange(signals.shape[1]) if columns is None else np.asarray(columns)
    if weights.shape[0] != columns.size:
        raise ValueError(f"weights has {weights.shape[0]} rows for {columns.size} voxels.")
    planner = planner_for(dev, memory_limit, hint=_MEMORY_HINT)
    with planner.transient():
        planner.reserve_device(2 * n_maps * (n_times + n_maps) * 8)  # X·A, AᵀA and its pinv
        per_voxel = n_times * (8 + signals.dtype.itemsize) + n_maps * 16
        block = planner.fit(per_voxel, "A block of voxels", at_most=max(columns.size, 1))
        projected = torch.zeros((n_times, n_maps), dtype=torch.float64, device=dev)
        gram = torch.zeros((n_maps, n_maps), dtype=torch.float64, device=dev)
        for start in range(0, columns.size, block):
            part = columns[start : start + block]
            maps = torch.as_tensor(weights[start : start + block], device=dev).double()
            voxels = _as_tensor(signals[:, part], dev, torch.float64)
            projected += voxels @ maps
            gram += maps.T @ maps
        out = projected @ torch.linalg.pinv(gram, hermitian=True)
    return _kept(planner, out, return_tensor)
