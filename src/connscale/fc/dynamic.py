"""Dynamic functional connectivity: sliding-window correlation (GPU-DFC).

Windows of length w slide by s over T time points: k = ⌊(T − w)/s⌋ + 1
windows starting at 0, s, 2s, … For each window the Pearson correlation of
every pair of the N series is computed, and stored in one of four forms
(``kind``): the strictly-upper triangle, a thresholded CSR, GPU-DFC's
randomized (Q, B) low-rank form, or the exact/truncated factor F with
R ≈ F Fᵀ.

How it runs (any device torch supports):

1. The raw series go to the device once, in their own dtype. There they
   are shifted by their global mean and summed cumulatively in float64; the
   means of all k windows are differences of those running sums (one pass
   over the data instead of one per window). Each window is centred with its
   mean and scaled by its centred norm (computed from the centred window,
   two-pass, so no cancellation), giving U (N × w) with R = U Uᵀ.
2. Windows are processed in batches (one batched GEMM for several windows
   when N is small, as small inner dimensions run far below the GEMM peak),
   and, when a window's N × N does not fit the device, in tiles of rows
   computed against the columns to their right only (the upper triangle).
3. ``triu`` gathers the strict upper triangle on the device; ``sparse``
   thresholds and compacts each tile on the device so that only the kept
   values, their int32 column indices and per-row counts cross to the host;
   ``lowrank`` and ``factor`` never form the N × N matrix at all (products
   with R go through U).
4. Results are copied to the host on a side stream (overlapping the next
   batch's compute), into the caller's pinned ``host_buffer`` when given, or
   streamed window by window into an HDF5 file (``out=``), resumable.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import warnings
from dataclasses import dataclass, replace
from numbers import Integral, Real
from pathlib import Path

import numpy as np
import torch

from connscale._choices import DFC_METHODS, PRECISIONS
from connscale._compute import allow_tf32 as _allow_tf32
from connscale._compute import planner_for, resolve_device, resolve_dtype
from connscale._compute.device import numpy_dtype, use_triton
from connscale._compute.memory import (
    MemoryMeter,
    MemoryPlan,
    MemoryPlanner,
)
from connscale._compute.transfer import DeviceToHost
from connscale._docs import fill_doc
from connscale._validation import (
    MIN_WINDOW_LENGTH,
    Interval,
    StrOptions,
    check_kind_options,
    check_not_all_constant,
    check_output_path,
    check_random_state,
    check_timeseries,
    check_window,
    user_stacklevel,
    validate_params,
)
from connscale.fc import _exact
from connscale.fc._sinks import WindowFileSink
from connscale.fc._sparse_cuda import SparseWindowsCUDA
from connscale.fc.dynamic_result import (
    KINDS,
    DynamicConnectivity,
    HostArena,
    MemoryBackend,
    load_dynamic,
)
from connscale.fc.lowrank import (
    randomized_qb,
    reconstruction_mae,
    svd_qb,
    truncated_factor,
)
from connscale.fc.normalize import ConstantSeriesWarning, normalize_windows
from connscale.fc.sparse import compact_tile, keep_mask
from connscale.fc.triu import n_pairs
from connscale.fc.windows import TAPERS, taper_weights, window_support
from connscale.io.h5 import H5WriteError

logger = logging.getLogger("connscale")

METHODS = DFC_METHODS
# Windows per batched GEMM: at most this many N×N elements in flight.
_BATCH_ELEMENTS = 1 << 28
_MAX_BATCH = 64
# Default row-tile height for the thresholded (sparse) path.
_SPARSE_TILE_ROWS = 4096


def n_windows(n_timepoints: int, window_length: int, step: int = 1) -> int:
    """Return the number of windows, ⌊(T − w)/s⌋ + 1."""
    return (n_timepoints - window_length) // step + 1


def window_starts(n_timepoints: int, window_length: int, step: int = 1) -> np.ndarray:
    """Return the first time point of every window."""
    return np.arange(n_windows(n_timepoints, window_length, step), dtype=np.int64) * step


@dataclass(frozen=True)
class _Windows:
    """The validated sliding windows of one call.

    Attributes
    ----------
    length : int
        The rectangle's width w in time points (the window size papers report).
    support : int
        Time points a window covers: w, or w + 2⌈3σ⌉ with the Gaussian taper.
    step : int
        Time points between window starts.
    starts : ndarray of int64
        First time point of every window.
    taper : str
        ``'rectangular'`` or ``'gaussian'``.
    taper_sigma : float
        σ of the Gaussian taper, in time points.
    weights : ndarray or None
        The taper's weights over the support; None for the rectangle.
    """

    length: int
    support: int
    step: int
    starts: np.ndarray
    taper: str
    taper_sigma: float
    weights: np.ndarray | None


@dataclass(frozen=True)
class _Storage:
    """What each window stores, validated: the kind and that kind's options.

    Attributes
    ----------
    kind : str
        One of :data:`KINDS`.
    threshold : float or None
        ``'sparse'``: the kept correlations' bound.
    absolute : bool
        ``'sparse'``: keep ``|r| >= threshold``.
    rank : int or None
        The requested rank (``'lowrank'``, ``'factor'``).
    width : int or None
        Columns stored per window (``'lowrank'``, ``'factor'``), else None.
    method : str
        ``'lowrank'``: one of :data:`METHODS`.
    power_iterations : int
        ``'lowrank'``, randomized: power iterations.
    compute_error : bool
        Each window's mean absolute error (``'lowrank'``, ``'factor'``).
    precision : str
        Arithmetic of float32 products (:data:`connscale._choices.PRECISIONS`).
    base_seed : int or None
        The seed every window's Ω is drawn from (randomized ``'lowrank'``).
    recorded_seed : int, str or None
        The seed as the result's parameters record it.
    """

    kind: str
    threshold: float | None
    absolute: bool
    rank: int | None
    width: int | None
    method: str
    power_iterations: int
    compute_error: bool
    precision: str
    base_seed: int | None = None
    recorded_seed: int | str | None = None

    def seeded(self, random_state) -> _Storage:
        """Return this storage with its base seed (randomized ``'lowrank'`` only)."""
        if self.kind != "lowrank" or self.method != "randomized":
            return self
        return replace(
            self, base_seed=_seed_of(random_state), recorded_seed=_recorded_seed(random_state)
        )


@dataclass(frozen=True)
class _Engine:
    """Where and how one call computes.

    Attributes
    ----------
    device : torch.device
    dtype : torch.dtype
        Working precision of the normalised windows and their products.
    planner : MemoryPlanner
        The call's one memory planner (the caller's, or built from ``memory_limit``).
    verbose : int
        Progress bar over windows when nonzero.
    """

    device: torch.device
    dtype: torch.dtype
    planner: MemoryPlanner
    verbose: int

    @property
    def np_dtype(self) -> np.dtype:
        """The numpy dtype of :attr:`dtype`."""
        return numpy_dtype(self.dtype)


@dataclass(frozen=True)
class _Output:
    """Where the windows go.

    The checked ``out`` path (None: memory), the file's extra root ``attrs``
    and the caller's ``host_buffer``.
    """

    path: Path | None
    attrs: dict | None
    host_buffer: object


def _check_series(timeseries) -> np.ndarray:
    """Return the (n_timepoints, n_series) array, checked: not every series constant."""
    array = check_timeseries(timeseries, min_timepoints=MIN_WINDOW_LENGTH)
    check_not_all_constant(array)
    return array


def _check_windows(n_timepoints, window_length, step, taper, taper_sigma, t_r) -> _Windows:
    """Return the windows over ``n_timepoints`` time points (seconds converted with ``t_r``)."""
    window_length, step = check_window(window_length, step, n_timepoints, t_r=t_r)
    support = window_support(window_length, taper, taper_sigma)
    if support > n_timepoints:
        raise ValueError(
            f"A {taper} window of {window_length} time points spans {support} (the taper adds "
            f"⌈3σ⌉ on each side) but the series have {n_timepoints}; use a shorter window."
        )
    weights = taper_weights(window_length, taper_sigma) if taper == "gaussian" else None
    starts = window_starts(n_timepoints, support, step)
    return _Windows(window_length, support, step, starts, taper, float(taper_sigma), weights)


def _check_storage(
    n_series: int,
    windows: _Windows,
    *,
    kind,
    threshold,
    absolute,
    rank,
    method,
    power_iterations,
    compute_error,
    precision,
) -> _Storage:
    """Return the stored form of the windows of ``n_series`` series, checked."""
    check_kind_options(kind, threshold, absolute, rank, compute_error)
    if threshold is not None:
        threshold = float(threshold)
    if rank is not None:
        rank = int(rank)
        if rank >= n_series:
            raise ValueError(
                f"'rank' must be smaller than the number of series ({n_series}); got {rank}."
            )
    if kind == "lowrank" and rank >= windows.length:
        warnings.warn(
            f"'rank' ({rank}) >= 'window_length' ({windows.length}): a window's correlation "
            f"matrix has rank at most {windows.length - 1}, so the extra columns store "
            f"nothing ({2 * n_series * rank} numbers per window against "
            f"{n_series * (n_series - 1) // 2} for kind='triu'). Use rank < window_length, "
            "or kind='factor' (exact with window_length columns).",
            UserWarning,
            stacklevel=user_stacklevel(),
        )
    return _Storage(
        kind=kind,
        threshold=threshold,
        absolute=bool(absolute),
        rank=rank,
        width=_stored_width(kind, rank, windows.support),
        method=method,
        power_iterations=int(power_iterations),
        compute_error=compute_error,
        precision=precision,
    )


def _engine(device, dtype, memory_limit, verbose) -> _Engine:
    """Return the device, the precision and the call's one memory planner."""
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype)
    # One planner counts the run: the in-memory result, then the device work.
    planner = planner_for(
        torch_device,
        memory_limit,
        hint="Raise memory_limit, or pass out='file.h5' to keep the result out of memory.",
    )
    return _Engine(torch_device, torch_dtype, planner, verbose)


def _metadata(shape, windows: _Windows, storage: _Storage, np_dtype: np.dtype) -> dict:
    """Return the parameters a result records (and a resumed file must match)."""
    n_timepoints, n_series = shape
    lowrank = storage.kind == "lowrank"
    meta = {
        "kind": storage.kind,
        "n_series": n_series,
        "n_timepoints": n_timepoints,
        "window_length": windows.support,
        "step": windows.step,
        "n_windows": int(windows.starts.size),
        "window_starts": windows.starts.tolist(),
        "threshold": storage.threshold,
        "absolute": storage.absolute,
        "rank": storage.rank,
        "stored_width": storage.width,
        "method": storage.method if lowrank else None,
        "power_iterations": storage.power_iterations if lowrank else None,
        "random_state": storage.recorded_seed,
        "dtype": np_dtype.name,
        "precision": storage.precision,
    }
    if windows.weights is not None:
        meta["taper"] = {
            "kind": windows.taper,
            "width": windows.length,
            "sigma": windows.taper_sigma,
        }
    return meta


def _stored_width(kind: str, rank: int | None, window_length: int) -> int | None:
    if kind == "lowrank":
        return rank
    if kind == "factor":
        return window_length if rank is None else min(rank, window_length)
    return None


def _fingerprint(array: np.ndarray) -> str:
    digest = hashlib.blake2b(digest_size=16)
    digest.update(f"{array.shape}{array.dtype}".encode())
    digest.update(np.ascontiguousarray(array).view(np.uint8).reshape(-1).data)
    return digest.hexdigest()


def _seed_of(random_state) -> int | None:
    """Return one base seed from which every window's Ω is drawn.

    Ω is drawn window-wise, so a resumed run draws the same Ω as an
    uninterrupted one.
    """
    rng = check_random_state(random_state)
    return int(rng.integers(0, 2**62))


def _recorded_seed(random_state):
    """Return the seed as recorded in parameters: an int, None, or a description.

    A Generator's draws cannot be replayed, so such runs never resume.
    """
    if random_state is None or isinstance(random_state, (int, np.integer)):
        return None if random_state is None else int(random_state)
    return f"{type(random_state).__name__}@{id(random_state):x}"


def _window_generator(device: torch.device, base_seed: int, index: int) -> torch.Generator:
    generator = torch.Generator(device=device)
    generator.manual_seed((base_seed + 0x9E3779B97F4A7C15 * (index + 1)) % (2**63 - 1))
    return generator


class _WindowNormalizer:
    """All windows' means from float64 running sums; U for a batch of windows."""

    def __init__(
        self,
        x: torch.Tensor,
        starts: np.ndarray,
        window_length: int,
        dtype: torch.dtype,
        weights: np.ndarray | None = None,
    ) -> None:
        # The raw values are kept (never modified: x may be the caller's array) so
        # each window is centred from them exactly; the running sums are taken
        # of the values shifted by their global mean, for accuracy.
        x64 = x.to(torch.float64)
        offset = x64.mean(dim=0)
        cumulative = torch.zeros(
            (x64.shape[0] + 1, x64.shape[1]), dtype=torch.float64, device=x64.device
        )
        torch.cumsum(x64 - offset, dim=0, out=cumulative[1:])
        self.x = x64
        starts_t = torch.as_tensor(starts, device=x64.device)
        self.means = (
            cumulative[starts_t + window_length] - cumulative[starts_t]
        ) / window_length + offset
        del cumulative
        self.starts = starts_t
        self.offsets = torch.arange(window_length, device=x64.device)
        self.dtype = dtype
        # Tapered windows: weighted Pearson, sqrt(weight)-scaled centred series.
        self.weights = (
            None
            if weights is None
            else torch.as_tensor(weights, dtype=torch.float64, device=x64.device)
        )

    def __call__(self, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """U of shape (B, N, w) (NaN rows for constant series) and the (B, N) mask.

        ``indices`` are consecutive window numbers: they are sliced, not
        uploaded, so no host-device synchronisation happens here.
        """
        window = slice(indices[0], indices[-1] + 1)
        if indices[-1] - indices[0] + 1 != len(indices):
            raise ValueError("Window batches must be consecutive.")
        times = self.starts[window][:, None] + self.offsets[None, :]  # (B, w)
        windows = self.x[times]  # (B, w, N)
        # Centred from the running-sum means, then the one rule of
        # normalize_windows (second pass, constant series, tapered weights).
        centred, constant = normalize_windows(
            windows, dim=1, means=self.means[window][:, None, :], weights=self.weights
        )
        u = torch.empty(
            (centred.shape[0], centred.shape[2], centred.shape[1]),
            dtype=self.dtype,
            device=centred.device,
        )
        u.copy_(centred.transpose(1, 2))  # one pass: transpose and cast
        return u, constant


def _triu_gather_index(n: int, r0: int, r1: int, device: torch.device) -> torch.Tensor:
    """Return the flat positions of the strictly-upper entries of a tile.

    The tile is (r1 − r0) × (n − r0); the positions are in row-major order.
    """
    width = n - r0
    rows = torch.arange(r1 - r0, device=device)
    counts = width - 1 - rows
    local_row = torch.repeat_interleave(rows, counts)
    starts = torch.cumsum(counts, 0) - counts
    position = torch.arange(int(counts.sum()), device=device)
    column = position - starts[local_row] + local_row + 1
    return local_row * width + column


def _plan(
    planner, n, w, k, kind, itemsize, budget, width, compute_error, resident, split=False, **fields
) -> MemoryPlan:
    """Return the windows per batch and rows per tile that fit, as the planner's plan.

    They fit ``budget`` device bytes, ``resident`` of them kept throughout;
    ``split``: each window's TF32 parts too (the exact scheme's torch path).
    """
    free = budget - resident

    def plan(batch, tile_rows):
        planner.reserve_device(resident)
        return planner.plan(
            batch=int(batch), block_rows=int(tile_rows), n_rounds=-(-k // int(batch)), **fields
        )

    per_window_prep = 4 * w * n * 8 + n * w * itemsize * (3 if split else 1)
    if kind in ("lowrank", "factor"):
        per_window = per_window_prep + 6 * n * (width or w) * itemsize
        batch = max(1, min(k, _MAX_BATCH, free // max(per_window, 1) // 2))
        tile_rows = n
        if compute_error:
            # reconstruction_mae: two (B, R, N) products and two boolean masks per tile
            tile_rows = max(1, min(n, free // (2 * batch * n * (2 * itemsize + 2))))
        return plan(batch, tile_rows)
    full = n * n
    if kind == "triu":
        pairs = n_pairs(n)
        # The device holds: gather index (int64), this batch's and the
        # previous batch's triangles (copy in flight), U, the N×N products.
        per_window = full * itemsize + 2 * pairs * itemsize + per_window_prep
        if pairs * 8 + per_window <= free:
            batch = min(
                k, _MAX_BATCH, max(1, _BATCH_ELEMENTS // full), (free - pairs * 8) // per_window
            )
            return plan(max(1, batch), n)
        rest = free - 2 * pairs * itemsize - per_window_prep
        tile_rows = rest // (n * (itemsize + 16))
        if tile_rows < 1:
            raise planner.error(
                f"One window's triangle ({n} series, twice for overlapped copies) with one "
                "row of products",
                resident + 2 * pairs * itemsize + per_window_prep + n * (itemsize + 16),
                budget=budget,
                hint="Use kind='sparse', 'lowrank' or 'factor', or raise memory_limit.",
            )
        return plan(1, min(n, tile_rows))
    # sparse: two tiles in flight (values, bool masks, nonzero indices), U,
    # and a window's kept entries compacted and concatenated (at worst every
    # pair: its value and int32 column, twice).
    tile_rows = n if n <= 2 * _SPARSE_TILE_ROWS else _SPARSE_TILE_ROWS
    per_row = n * (2 * (itemsize + 2) + 16 + itemsize + 4)
    per_window_kept = 2 * n_pairs(n) * (itemsize + 4) + 16 * n
    per_window = per_window_prep + per_window_kept
    batch = min(k, _MAX_BATCH, max(1, _BATCH_ELEMENTS // full))
    while batch > 1 and batch * (tile_rows * per_row + per_window) > free:
        batch //= 2
    tile_rows = int(min(tile_rows, (free - batch * per_window) // (batch * per_row)))
    if tile_rows < 1:
        raise planner.error(
            f"One sparse window of {n} series (every pair kept, at worst) with one row of products",
            resident + per_window + per_row,
            budget=budget,
            hint="Raise memory_limit, or use kind='lowrank' or 'factor'.",
        )
    return plan(batch, tile_rows)


def _runs(indices: list[int], size: int) -> list[list[int]]:
    """Split sorted window indices into runs of consecutive ones, at most ``size`` long."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and runs[-1][-1] == i - 1 and len(runs[-1]) < size:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


@fill_doc
@validate_params(
    {
        "timeseries": ["array-like"],
        "window_length": [Interval(Integral, MIN_WINDOW_LENGTH, None, closed="left"), str],
        "step": [Interval(Integral, 1, None, closed="left"), str],
        "kind": [StrOptions(KINDS)],
        "threshold": [Interval(Real, -1, 1, closed="both"), None],
        "absolute": ["boolean"],
        "rank": [Interval(Integral, 1, None, closed="left"), None],
        "method": [StrOptions(METHODS)],
        "power_iterations": [Interval(Integral, 0, None, closed="left")],
        "random_state": ["random_state"],
        "device": ["device", None],
        "dtype": ["dtype"],
        "memory_limit": ["memory", None],
        "compute_error": ["boolean"],
        "precision": [StrOptions(PRECISIONS)],
        "taper": [StrOptions(TAPERS)],
        "taper_sigma": [Interval(Real, 0, None, closed="neither")],
        "t_r": [Interval(Real, 0, None, closed="neither"), None],
        "verbose": [Interval(Integral, 0, None, closed="left"), "boolean"],
        "attrs": [dict, None],
    }
)
def dynamic_correlation(  # noqa: PLR0913 - public keywords (one per window, storage and compute option)
    timeseries,
    window_length: int | str,
    step: int | str = 1,
    *,
    kind: str = "triu",
    threshold: float | None = None,
    absolute: bool = False,
    rank: int | None = None,
    method: str = "randomized",
    power_iterations: int = 0,
    random_state=None,
    device: str = "auto",
    dtype: str = "float32",
    memory_limit: int | str | None = None,
    out: str | os.PathLike | None = None,
    host_buffer=None,
    compute_error: bool = False,
    precision: str = "exact",
    taper: str = "rectangular",
    taper_sigma: float = 3.0,
    t_r: float | None = None,
    verbose: int = 0,
    attrs: dict | None = None,
) -> DynamicConnectivity:
    """Sliding-window Pearson correlation of every pair of series (GPU-DFC).

    Parameters
    ----------
    %(timeseries)s
    window_length : int or str
        w, time points per window (3 <= w <= n_timepoints), or seconds as
        ``'44s'`` with ``t_r``. For the Gaussian taper, the rectangle's width.
    step : int or str, default=1
        s, time points (or ``'2s'``) between window starts; there are
        ⌊(T − w)/s⌋ + 1 windows (w: the window's support).
    kind : {'triu', 'sparse', 'lowrank', 'factor'}, default='triu'
        Stored form of each window: ``'triu'`` the strictly-upper triangle
        (row-major order, as :mod:`connscale.fc.triu`); ``'sparse'`` a CSR
        of the upper-triangle entries with r >= threshold (GPU-DFC Alg. 3);
        ``'lowrank'`` Q (N×l) and B = QᵀR (l×N) (Alg. 4); ``'factor'`` F
        (N×r) with R ≈ F Fᵀ: the normalised window itself (exact, r = w) or
        its truncated SVD (the optimal rank-r approximation, N·r numbers).
    threshold : float or None
        For ``kind='sparse'``: keep r >= threshold (|r| >= threshold with
        ``absolute``); in [-1, 1].
    absolute : bool, default=False
        Keep strong negative correlations too.
    rank : int or None
        l, for ``'lowrank'`` (required) and ``'factor'`` (None: exact);
        1 <= rank < n_series. Ranks >= w are exact up to rounding (a window's
        matrix has rank <= w − 1).
    method : {'randomized', 'svd'}, default='randomized'
        For ``'lowrank'``: Alg. 4's randomized range finder, or the exact
        truncated eigendecomposition in the same (Q, B) form.
    power_iterations : int, default=0
        Power (subspace) iterations of the randomized range finder.
    %(random_state)s
    %(device)s
    %(dtype)s
    %(memory_limit)s
    out : path or None
        HDF5 file to write the windows into, one by one (resumable: a re-run
        with the same input and parameters keeps finished windows; the file
        appears under its name only when complete, after its windows are
        read back). One run writes a file at a time: another run on the same
        ``out`` raises :class:`~connscale.io.lock.OutputLockedError` naming its
        pid. The space the windows need is checked up front (not for
        ``'sparse'``, whose size is known only as it grows); a failed write
        raises an ``OSError`` and keeps the finished windows for a re-run.
        None keeps the result in memory.
    host_buffer : uint8 torch.Tensor or ndarray, optional
        Preallocated (ideally pinned) host memory to place in-memory results
        in, so that no host memory is allocated during the run; results that
        do not fit go to ordinary arrays.
    compute_error : bool, default=False
        For ``'lowrank'`` and ``'factor'``: each window's mean absolute error
        against the exact matrix over off-diagonal pairs (``result.mae``).
    precision : {'exact', 'fp32', 'tf32'}, default='exact'
        Arithmetic of float32 products on CUDA. For ``kind='sparse'``,
        ``'exact'`` decides with TF32 tensor cores every pair farther than a
        proven bound from the threshold and recomputes the few closer ones and
        the kept values to fp32 accuracy (the windows of ``'fp32'``, faster;
        ``result.confirmation`` counts them); ``'fp32'`` uses fp32 products;
        ``'tf32'`` TF32 products (inputs rounded to 10 mantissa bits: values
        near the threshold can flip). Other kinds compute in fp32 unless
        ``'tf32'``. The CPU computes in fp32 for ``'exact'``.
    taper : {'rectangular', 'gaussian'}, default='rectangular'
        ``'gaussian'``: Allen et al. (2014)'s tapered window, the rectangle
        of w time points convolved with a Gaussian of ``taper_sigma`` time
        points (:func:`connscale.fc.windows.taper_weights`); each window
        then covers w + 2⌈3σ⌉ time points (``result.window_length``) and its
        correlations are weighted Pearson correlations.
    taper_sigma : float, default=3.0
        σ of the Gaussian taper, in time points.
    t_r : float or None
        Repetition time in seconds, to give ``window_length`` and ``step``
        in seconds.
    %(verbose)s
    attrs : dict or None
        Extra root attributes of the ``out`` file (provenance, e.g. the
        source file), written before it gets its final name.

    Returns
    -------
    DynamicConnectivity
        ``len()`` windows, ``window_starts``, ``result[i]`` (stored form),
        ``to_dense(i)``, ``nbytes``, ``compression_ratio``, ``mae``.

    Notes
    -----
    Constant series within a window have undefined correlations: NaN in
    ``triu`` and dense forms, absent from ``sparse``; one
    :class:`~connscale.fc.normalize.ConstantSeriesWarning` names them.

    References
    ----------
    M. Eslami et al., "GPU-DFC: A GPU-based parallel algorithm for computing
    dynamic-functional connectivity of big fMRI data".

    Examples
    --------
    >>> import numpy as np
    >>> x = np.random.default_rng(0).standard_normal((40, 6))
    >>> dfc = dynamic_correlation(x, 10, 5, device="cpu")
    >>> len(dfc), dfc[0].shape
    (7, (15,))
    """
    array = _check_series(timeseries)
    windows = _check_windows(array.shape[0], window_length, step, taper, taper_sigma, t_r)
    storage = _check_storage(
        array.shape[1],
        windows,
        kind=kind,
        threshold=threshold,
        absolute=absolute,
        rank=rank,
        method=method,
        power_iterations=power_iterations,
        compute_error=compute_error,
        precision=precision,
    )
    engine = _engine(device, dtype, memory_limit, verbose)
    storage = storage.seeded(random_state)
    output = _Output(None if out is None else check_output_path(out), attrs, host_buffer)
    return _run(array, windows, storage, engine, output)


def _open_sink(
    array, meta: dict, storage: _Storage, engine: _Engine, output: _Output
) -> tuple[WindowFileSink | MemoryBackend, list[int] | None]:
    """Return where the windows go and the windows still to compute.

    The windows are None when ``output.path`` is a finished file of these
    windows (``sink.reused``). An in-memory result is counted by the planner.
    """
    if output.path is not None:
        sink = WindowFileSink(output.path, meta, _fingerprint(array), storage.width)
        return sink, (None if sink.reused is not None else sink.todo)
    if output.attrs:
        raise ValueError("'attrs' are written into the 'out' file; got out=None.")
    kind, k, n_series, width = storage.kind, meta["n_windows"], meta["n_series"], storage.width
    np_dtype = engine.np_dtype
    values, kept = MemoryBackend.result_nbytes(kind, k, n_series, width, np_dtype.itemsize)
    host_buffer = output.host_buffer
    engine.planner.reserve_result(
        values,
        f"Keeping all {k} windows ({kind}, {n_series} series) in memory",
        kept=kept,
        preallocated=None if host_buffer is None else _buffer_nbytes(host_buffer),
        hint="To keep them on disk pass out='file.h5'; or use kind='sparse', 'lowrank' "
        "or 'factor'.",
    )
    arena = HostArena(host_buffer) if host_buffer is not None else None
    return MemoryBackend(kind, k, n_series, np_dtype, width, arena), list(range(k))


def _run(
    array, windows: _Windows, storage: _Storage, engine: _Engine, output: _Output
) -> DynamicConnectivity:
    """Compute the windows still to do into their sink, then return the result.

    An ``out`` file that holds these windows already is returned as it is.
    On failure the sink is aborted; an ``out`` file keeps its finished
    windows for a re-run, and a failed write raises :class:`H5WriteError`.
    """
    meta = _metadata(array.shape, windows, storage, engine.np_dtype)
    sink, todo = _open_sink(array, meta, storage, engine, output)
    if todo is None:  # ``out`` is a finished file of these windows
        return sink.reused
    plan = confirmation = None
    try:
        if todo:
            plan, confirmation = _compute(array, todo, sink, windows, storage, engine)
        if output.path is not None:
            if output.attrs:
                sink.set_attrs(output.attrs)
            result = sink.finish()
        else:
            result = DynamicConnectivity(sink, meta)
    except OSError as exc:
        sink.abort()
        if output.path is None:
            raise
        raise H5WriteError(
            exc.errno or errno.EIO,
            f"{exc.strerror or exc}; the finished windows are kept in "
            f"{sink.tmp.name} and a re-run resumes from them",
        ) from None
    except BaseException:
        sink.abort()
        raise
    result.plan = plan
    result.confirmation = confirmation
    return result


def _buffer_nbytes(host_buffer) -> int:
    """Bytes of the caller's ``host_buffer``."""
    if isinstance(host_buffer, torch.Tensor):
        return host_buffer.numel()
    return np.asarray(host_buffer).nbytes


def _compute(
    array,
    todo: list[int],
    backend,
    windows: _Windows,
    storage: _Storage,
    engine: _Engine,
) -> tuple[MemoryPlan, _exact.Confirmation | None]:
    """Compute windows ``todo`` into ``backend``.

    Returns the plan, and the exact scheme's counts when it ran.

    The planner's limit covers, on the CPU, the in-memory result (counted
    already, or a sparse result counted as it grows, which gets half of what
    the series leave) beside the series in float64, their window means and
    each batch's temporaries; on CUDA those are on the device and the result
    in host memory, each within the limit.
    """
    plan, exact = _plan_windows(array, backend, windows, storage, engine)
    stats = _exact.new_stats(engine.device) if exact else None
    with _allow_tf32(_exact.products_in_tf32(storage.precision, exact)), torch.no_grad():
        x = torch.as_tensor(array).to(engine.device)
        normalizer = _WindowNormalizer(
            x, windows.starts, windows.support, engine.dtype, windows.weights
        )
        del x
        logger.debug(
            "dynamic_correlation plan: %s (precision %s, exact: %s)",
            plan,
            storage.precision,
            exact,
        )
        n_constant_windows, constant_any = _run_batches(
            normalizer, todo, backend, plan, storage, engine, exact, stats
        )
    _warn_constant(int(n_constant_windows), constant_any, len(todo))
    confirmation = None
    if stats is not None:
        confirmation = _exact.Confirmation.from_stats(stats, len(todo) * n_pairs(array.shape[1]))
        logger.debug("dynamic_correlation confirmation: %s", confirmation.as_dict())
    return plan, confirmation


def _plan_windows(
    array, backend, windows: _Windows, storage: _Storage, engine: _Engine
) -> tuple[MemoryPlan, str | None]:
    """Return the plan of the run and the exact scheme's path (``'sparse'`` only).

    Counts the float64 series and window means, and meters a sparse result
    kept in memory.
    """
    n_timepoints, n = array.shape
    k = windows.starts.size
    planner = engine.planner
    itemsize = torch.empty((), dtype=engine.dtype).element_size()
    cpu = engine.device.type == "cpu"
    in_memory = backend.in_memory
    budget = planner.device_left
    # The series in float64 and the window means stay; while they are made,
    # a second copy of the series and the running sums exist beside them.
    resident = n_timepoints * n * 8 + k * n * 8
    setup = 2 * resident + (0 if cpu else n_timepoints * n * array.dtype.itemsize)
    planner.require(
        setup,
        f"Centring {n} series of {n_timepoints} time points in float64 "
        f"(and the means of {k} windows)",
    )
    plan_budget = budget
    if storage.kind == "sparse" and in_memory:
        if cpu:
            plan_budget = resident + (budget - resident) // 2
            result_budget = budget - plan_budget
        else:
            result_budget = planner.host_budget
        backend.meter = MemoryMeter(
            result_budget,
            planner.memory_limit,
            f"Keeping the sparse windows of {n} series",
            "Pass out='file.h5' to stream them to disk, raise the threshold or raise memory_limit.",
        )
    exact = None
    if storage.kind == "sparse":
        probe = torch.empty(0, dtype=engine.dtype, device=engine.device)
        exact = _exact.exact_method(probe, storage.precision)
    plan = _plan(
        planner,
        n,
        windows.support,
        k,
        storage.kind,
        itemsize,
        plan_budget,
        storage.width,
        storage.compute_error,
        resident,
        split=exact == "torch",
        out_of_core=not in_memory,
    )
    return plan, exact


def _run_batches(
    normalizer: _WindowNormalizer,
    todo: list[int],
    backend,
    plan: MemoryPlan,
    storage: _Storage,
    engine: _Engine,
    exact: str | None,
    stats,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Compute and queue windows ``todo`` in the ``plan``'s batches and row tiles.

    Returns the number of windows with a constant series and the (N,) mask
    of series constant in some window, both on the device (counted there:
    no host synchronisation per batch).
    """
    from tqdm.auto import tqdm

    kind, device, tile_rows = storage.kind, engine.device, plan.block_rows
    n = normalizer.x.shape[1]
    copier = DeviceToHost(device, depth=2)
    full_index = None
    if kind == "triu" and tile_rows >= n:
        full_index = _triu_gather_index(n, 0, n, device)
    n_constant_windows = torch.zeros((), dtype=torch.int64, device=device)
    constant_any = torch.zeros(n, dtype=torch.bool, device=device)
    fused_sparse = None
    if kind == "sparse" and use_triton(device, interpreted=False):
        fused_sparse = SparseWindowsCUDA(
            n,
            tile_rows,
            storage.threshold,
            storage.absolute,
            _sparse_submitter(backend, copier),
            # The plain path otherwise (float64; TF32 there when asked, by the context)
            precision="exact" if exact == "triton" else "fp32",
            stats=stats,
        )
    progress = tqdm(total=len(todo), desc="windows", unit="win", disable=not engine.verbose)
    try:
        for batch in _runs(todo, plan.batch):
            u, constant = normalizer(batch)
            constant_any |= constant.any(dim=0)
            n_constant_windows += constant.any(dim=1).sum()
            if kind == "triu":
                _triu_batch(u, constant, batch, backend, copier, tile_rows, full_index)
            elif kind == "sparse" and fused_sparse is not None:
                for b, index in enumerate(batch):
                    fused_sparse.add(u[b], constant[b], index)
            elif kind == "sparse":
                _sparse_batch(
                    u,
                    constant,
                    batch,
                    backend,
                    copier,
                    tile_rows,
                    storage.threshold,
                    storage.absolute,
                    stats,
                )
            else:
                _compressed_batch(u, constant, batch, backend, copier, storage, tile_rows)
            progress.update(len(batch))
        if fused_sparse is not None:
            fused_sparse.flush()
        copier.flush()
    finally:
        progress.close()
    return n_constant_windows, constant_any


def _warn_constant(n_constant_windows: int, constant_any: torch.Tensor, n_todo: int) -> None:
    """Warn once when some series are constant in some of the ``n_todo`` windows."""
    if not n_constant_windows:
        return
    constant_any = constant_any.cpu().numpy()
    first = np.flatnonzero(constant_any)[:5].tolist()
    warnings.warn(
        f"{int(constant_any.sum())} of {constant_any.size} series are constant (zero variance) "
        f"in at least one window ({n_constant_windows} of {n_todo} windows affected; first "
        f"columns: {first}); their correlations there are undefined: NaN in dense and "
        "triangle output, left out of sparse output.",
        ConstantSeriesWarning,
        stacklevel=user_stacklevel(),
    )


def _write_batch(backend, batch, names):
    """Host callback writing a batch's arrays (B leading) window by window."""

    def callback(arrays):
        *values, constant, mae = arrays
        for b, index in enumerate(batch):
            payload = {name: array[b] for name, array in zip(names, values)}
            backend.write(index, {**payload, "constant": constant[b], "mae": float(mae[b])})

    return callback


def _triu_batch(u, constant, batch, backend, copier, tile_rows, full_index):
    n = u.shape[1]
    n_batch = len(batch)
    if full_index is not None:
        products = torch.bmm(u, u.transpose(1, 2))
        triangles = products.view(n_batch, -1).index_select(1, full_index)
        del products
    else:
        triangles = torch.empty((n_batch, n_pairs(n)), dtype=u.dtype, device=u.device)
        offset = 0
        for r0 in range(0, n, tile_rows):
            r1 = min(n, r0 + tile_rows)
            tile = torch.bmm(u[:, r0:r1], u[:, r0:].transpose(1, 2))
            index = _triu_gather_index(n, r0, r1, u.device)
            size = index.numel()
            triangles[:, offset : offset + size] = tile.reshape(n_batch, -1).index_select(1, index)
            offset += size
            del tile, index
    mae = torch.full((n_batch,), float("nan"), dtype=torch.float64, device=u.device)
    destination = None
    if backend.in_memory:
        destination = backend.destination("triu", batch[0], batch[-1] + 1)
    copier.submit(
        [triangles, constant, mae],
        _write_batch(backend, batch, ["triu"]),
        [destination, None, None],
    )


def _sparse_batch(u, constant, batch, backend, copier, tile_rows, threshold, absolute, stats=None):
    """Compute a batch of sparse windows by row tiles and queue them for the host.

    With ``stats``, the kept pairs are decided by the exact scheme's torch
    path (:func:`connscale.fc._exact.exact_block`).
    """
    n = u.shape[1]
    split = _exact.Split(u) if stats is not None else None
    n_batch = len(batch)
    values: list[list[torch.Tensor]] = [[] for _ in batch]
    columns: list[list[torch.Tensor]] = [[] for _ in batch]
    counts: list[list[torch.Tensor]] = [[] for _ in batch]

    def compact(r0, tile, keep):
        for b in range(n_batch):
            vals, cols, row_counts = compact_tile(tile[b], keep[b], r0)
            values[b].append(vals)
            columns[b].append(cols)
            counts[b].append(row_counts)

    # Software pipeline: tile t + 1's GEMM and mask are queued before tile t's
    # compaction synchronises, so the device stays busy across that wait.
    pending = None
    for r0 in range(0, n, tile_rows):
        r1 = min(n, r0 + tile_rows)
        if split is None:
            tile = torch.bmm(u[:, r0:r1], u[:, r0:].transpose(1, 2))
        else:
            tile = _exact.exact_block(
                split,
                r0,
                r1,
                thresholds=[threshold],
                absolute=absolute,
                lowest=threshold,
                stats=stats,
            )
        keep = keep_mask(tile, threshold, absolute=absolute)
        if pending is not None:
            compact(*pending)
        pending = (r0, tile, keep)
        del tile, keep
    compact(*pending)
    del pending
    submit = _sparse_submitter(backend, copier)
    for b, index in enumerate(batch):
        vals = torch.cat(values[b]) if len(values[b]) > 1 else values[b][0]
        cols = torch.cat(columns[b]) if len(columns[b]) > 1 else columns[b][0]
        row_counts = torch.cat(counts[b]) if len(counts[b]) > 1 else counts[b][0]
        submit(index, vals, cols, row_counts, constant[b])


def _sparse_submitter(backend, copier):
    """Return a function queueing one sparse window's device arrays for the host.

    The arrays (values, int32 columns, row counts) go into the pinned result
    when it has room, else via staging.
    """

    def submit(index, values, columns, row_counts, constant):
        destination = [None, None, None, None]
        if backend.in_memory:
            taken = backend.sparse_destination(values.numel())
            if taken is not None:
                destination[:2] = [taken[0][1], taken[1][1]]

        def callback(arrays):
            data, indices, counts_host, constant_host = arrays
            backend.write(
                index,
                {
                    "data": data,
                    "indices": indices,
                    "counts": counts_host,
                    "constant": constant_host,
                    "mae": float("nan"),
                },
            )

        copier.submit([values, columns, row_counts, constant], callback, destination)

    return submit


def _compressed_batch(u, constant, batch, backend, copier, storage: _Storage, tile_rows: int):
    """Compute a batch of ``'lowrank'`` or ``'factor'`` windows and queue them for the host.

    With ``storage.compute_error``, each window's error too.
    """
    kind, width, base_seed = storage.kind, storage.width, storage.base_seed
    nan_rows = constant[:, :, None]
    u0 = torch.where(nan_rows, torch.zeros((), dtype=u.dtype, device=u.device), u)
    mae = torch.full((len(batch),), float("nan"), dtype=torch.float64, device=u.device)
    if kind == "lowrank":
        if storage.method == "randomized":
            omega = torch.stack(
                [
                    torch.randn(
                        (u.shape[1], width),
                        generator=_window_generator(u.device, base_seed, i),
                        device=u.device,
                        dtype=u.dtype,
                    )
                    for i in batch
                ]
            )
            q, b = randomized_qb(u0, omega, power_iterations=storage.power_iterations)
        else:
            q, b = svd_qb(u0, width)
        if storage.compute_error:
            mae = reconstruction_mae(u0, q, b, tile_rows=tile_rows)
        q = q.masked_fill(nan_rows, float("nan"))
        b = b.masked_fill(constant[:, None, :], float("nan"))
        tensors, names = [q, b], ["q", "b"]
    else:
        factor = truncated_factor(u0, width)
        if storage.compute_error:
            mae = reconstruction_mae(u0, factor, factor.transpose(1, 2), tile_rows=tile_rows)
        factor = factor.masked_fill(nan_rows, float("nan"))
        tensors, names = [factor], ["factor"]
    destinations = [None] * (len(tensors) + 2)
    if backend.in_memory:
        destinations[: len(tensors)] = [
            backend.destination(name, batch[0], batch[-1] + 1) for name in names
        ]
    copier.submit(tensors + [constant, mae], _write_batch(backend, batch, names), destinations)


__all__ = [
    "DynamicConnectivity",
    "dynamic_correlation",
    "load_dynamic",
    "n_windows",
    "window_starts",
]
