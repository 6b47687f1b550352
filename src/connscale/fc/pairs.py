"""Multi-subject region-pair dynamic functional connectivity (Akgün et al.).

For every scan and every pair of regions (i < j), the sliding-window Pearson
correlation time course: window ``k`` covers time points
``[k*step, k*step + window_length)``, ``k = 0 .. n_windows - 1`` with
``n_windows = (n_timepoints - window_length) // step + 1``. The paper's
sequential definition is a triple loop (scans, pairs, windows) with one
correlation per iteration; here all windows of a batch of scans are
normalised at once and multiplied in one batched GEMM (``torch.bmm``) per
chunk: every (scan, window) is a small matrix ``U`` (regions × window) of
centred, unit-norm rows, whose Gram matrix ``U Uᵀ`` holds all its pair
correlations.

Each window is centred in float64 from the raw values by its float64 mean
(from running sums of the values less the scan mean) and written once in
the working precision; the GEMM of the centred windows holds the squared
norms on its diagonal, which scale every pair. So near-constant series
(1e6 + 1e-5 noise) keep their variation and match ``np.corrcoef``.
Windows in which a series is constant (all values equal) give NaN for every
pair that involves it (with one
:class:`~connscale.fc.normalize.ConstantSeriesWarning`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np
import torch

from connscale._compute import planner_for, resolve_device, resolve_dtype
from connscale._compute.device import numpy_dtype
from connscale._compute.memory import MemoryPlan, MemoryPlanner
from connscale._docs import fill_doc
from connscale._validation import (
    MIN_WINDOW_LENGTH,
    Interval,
    check_timeseries,
    check_window,
    user_stacklevel,
    validate_params,
)
from connscale.fc._sinks import ArraySink, DeviceSink, Region, Sender
from connscale.fc.normalize import ConstantSeriesWarning
from connscale.fc.triu import n_pairs

# On the CPU, bigger chunks only add memory traffic: cap the temporaries.
_CPU_CHUNK_BYTES = 64 * 1024**2
# On CUDA, results leave through reused pinned buffers of this size, so the
# copy of one chunk overlaps the compute of the next and no large pinned
# allocation (1.6-2.5 GB/s) is ever made per call.
_CUDA_CHUNK_OUT_BYTES = 32 * 1024**2


@dataclass
class PairwiseDFC:
    """Result of :func:`pairwise_dfc`.

    Attributes
    ----------
    courses : ndarray of shape (n_scans, n_pairs, n_windows), list of ndarray or torch.Tensor
        Windowed correlation time course of every pair of every scan. A list
        of (n_pairs, n_windows_i) arrays when the scans differ in length.
        A tensor on the compute device with ``as_tensor=True``.
    pairs : ndarray of shape (n_pairs, 2), int64
        Region indices (i, j), i < j, of each row, in the row-major
        strictly-upper order of :mod:`connscale.fc.triu`.
    window_starts : ndarray of int64 or list of ndarray
        First time point of each window (a list, one per scan, when the
        scans differ in length), as :attr:`DynamicConnectivity.window_starts`.
    window_length : int
    step : int
    n_constant : int
        Number of (scan, window, region) series that were constant.
    """

    courses: object
    pairs: np.ndarray
    window_starts: object
    window_length: int
    step: int
    n_constant: int = 0

    @property
    def n_scans(self) -> int:
        """Number of scans."""
        return len(self.courses)

    @property
    def n_pairs(self) -> int:
        """Number of region pairs (rows of each scan's courses)."""
        return int(self.pairs.shape[0])


@dataclass
class PairSummary:
    """Per-pair summary features of windowed correlation courses.

    Attributes
    ----------
    mean, std, fraction_above : ndarray of shape (n_scans, n_pairs)
        Mean, standard deviation (ddof=0) and fraction of windows with
        r > threshold, over each course's finite windows (NaN when a course
        has none).
    threshold : float
    """

    mean: np.ndarray
    std: np.ndarray
    fraction_above: np.ndarray
    threshold: float

    def features(self) -> np.ndarray:
        """(n_scans, 3 * n_pairs) matrix: all means, then stds, then fractions."""
        return np.concatenate([self.mean, self.std, self.fraction_above], axis=1)

    def feature_names(self, pairs: np.ndarray) -> list[str]:
        """Column names of :meth:`features` for the pair table ``pairs``."""
        names = [f"{i}-{j}" for i, j in np.asarray(pairs)]
        return (
            [f"mean_{n}" for n in names]
            + [f"std_{n}" for n in names]
            + [f"frac_above_{n}" for n in names]
        )


@dataclass(frozen=True)
class _PairsRun:
    """How the scans are computed: the windows, the device and the chunking.

    Attributes
    ----------
    window_length, step : int
        The validated windows.
    device : torch.device
    dtype : torch.dtype
        Precision of the centred windows, their products and the courses.
    pairs : ndarray of shape (n_pairs, 2), int64
        Region indices (i, j), i < j, of each course.
    flat : torch.Tensor
        Their flat positions in an N x N matrix, on the device.
    per_item : int
        Temporary bytes per (scan, window).
    budget : int
        Bytes a chunk's temporaries may use.
    as_tensor : bool
        Keep the courses on the device.
    planner : MemoryPlanner
        The call's memory planner, the result counted.
    """

    window_length: int
    step: int
    device: torch.device
    dtype: torch.dtype
    pairs: np.ndarray
    flat: torch.Tensor
    per_item: int
    budget: int
    as_tensor: bool
    planner: MemoryPlanner


def _window_count(n_timepoints: int, window_length: int, step: int) -> int:
    return (n_timepoints - window_length) // step + 1


def _check_scans(timeseries) -> tuple[list[np.ndarray], np.ndarray | None]:
    """List of validated (T_i, N) arrays, and the 3-D input array if one was given."""
    if isinstance(timeseries, torch.Tensor):
        timeseries = timeseries.detach().cpu().numpy()
    if isinstance(timeseries, np.ndarray):
        if timeseries.ndim != 3:
            raise ValueError(
                "'timeseries' must be an array of shape (n_scans, n_timepoints, "
                "n_regions) or a list of (n_timepoints, n_regions) arrays; got an "
                f"array of shape {timeseries.shape}."
            )
        scans = [
            check_timeseries(timeseries[s], name=f"timeseries[{s}]")
            for s in range(timeseries.shape[0])
        ]
        stacked = timeseries if timeseries.dtype in (np.float32, np.float64) else None
    elif isinstance(timeseries, (list, tuple)):
        scans = [check_timeseries(x, name=f"timeseries[{s}]") for s, x in enumerate(timeseries)]
        stacked = None
    else:
        raise ValueError(
            "'timeseries' must be an array of shape (n_scans, n_timepoints, "
            "n_regions) or a list of (n_timepoints, n_regions) arrays; got "
            f"{type(timeseries).__name__}."
        )
    if not scans:
        raise ValueError("'timeseries' holds no scans.")
    n_regions = {x.shape[1] for x in scans}
    if len(n_regions) > 1:
        raise ValueError(
            f"All scans must have the same number of regions (columns); got {sorted(n_regions)}."
        )
    if scans[0].shape[1] < 2:
        raise ValueError(f"Region-pair DFC needs at least 2 regions; got {scans[0].shape[1]}.")
    return scans, stacked


def _plan_chunks(
    planner: MemoryPlanner, n_scans: int, n_windows: int, per_item: int, budget: int
) -> MemoryPlan:
    """Return the scans and windows per chunk whose temporaries fit ``budget``.

    The plan's ``batch`` holds the scans per chunk, ``windows_per_batch``
    the windows per chunk; a (scan, window) takes ``per_item`` bytes.
    """
    items = max(1, budget // max(per_item, 1))
    if items >= n_windows:
        scans_per, windows_per = max(1, min(n_scans, items // n_windows)), n_windows
    else:
        scans_per, windows_per = 1, items
    n_rounds = -(-n_scans // scans_per) * -(-n_windows // windows_per)
    return planner.plan(
        block_rows=windows_per, n_rounds=n_rounds, batch=scans_per, windows_per_batch=windows_per
    )


def _window_stats(
    x64: torch.Tensor, window_length: int, onsets: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the float64 window means (S, K, N) and constant flags (S, K, N).

    The data are (S, T, N) float64; the means come from running sums (O(T)
    per series, not O(K w)).

    The running sums are of the values less their scan mean, so a series far
    from zero keeps its digits. A window is constant when all its values are
    equal: no change between consecutive time points (an exact count).
    """
    offset = x64.mean(dim=1, keepdim=True)
    s, t, n = x64.shape
    sums = torch.zeros((s, t + 1, n), dtype=torch.float64, device=x64.device)
    torch.cumsum(x64 - offset, dim=1, out=sums[:, 1:])
    ends = onsets + window_length
    means = (sums[:, ends] - sums[:, onsets]) / window_length + offset
    changes = torch.zeros((s, t, n), dtype=torch.int32, device=x64.device)
    torch.cumsum(x64[:, 1:] != x64[:, :-1], dim=1, out=changes[:, 1:])
    constant = changes[:, ends - 1] == changes[:, onsets]
    return means, constant


def _pairs_chunk(
    x64: torch.Tensor,
    means: torch.Tensor,
    constant: torch.Tensor,
    window_length: int,
    step: int,
    k0: int,
    k1: int,
    flat: torch.Tensor,
    dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the pair correlations of windows k0..k1-1 and the constant series.

    The correlations are (S, P, k1 - k0), of (S, T, N) float64 data; the
    (S, K, N) flags mark series that are constant or of zero centred norm.

    Each window is centred in float64 from the raw values by its float64 mean
    (:func:`_window_stats`), written once in ``dtype``; one batched GEMM gives
    the centred cross products, whose diagonal holds the squared norms that
    scale each pair (constant series give NaN, the rule of
    :func:`~connscale.fc.normalize.normalize_windows`).
    """
    s, _, n = x64.shape
    k = k1 - k0
    start = k0 * step
    stop = (k1 - 1) * step + window_length
    # (S, K, w, N) view of the windows (regions contiguous).
    windows = x64[:, start:stop].unfold(1, window_length, step).transpose(-1, -2)
    u = torch.empty((s, k, window_length, n), dtype=dtype, device=x64.device)
    torch.sub(windows, means[:, k0:k1, None, :], out=u)  # float64 arithmetic, one pass
    u = u.reshape(s * k, window_length, n)
    gram = torch.bmm(u.transpose(1, 2), u).reshape(s * k, n * n)  # (S*K, N*N)
    squares = gram[:, :: n + 1]  # (S*K, N)
    flags = constant[:, k0:k1].reshape(s * k, n) | (squares == 0)
    inv = torch.where(flags, torch.full_like(squares, float("nan")), squares.rsqrt())
    scaled = gram.view(s * k, n, n)
    scaled *= inv[:, :, None]
    scaled *= inv[:, None, :]
    vals = torch.index_select(gram, 1, flat)  # (S*K, P)
    return vals.reshape(s, k, -1).transpose(1, 2), flags.reshape(s, k, n)


@fill_doc
@validate_params(
    {
        "window_length": [Interval(Integral, MIN_WINDOW_LENGTH, None, closed="left"), str],
        "step": [Interval(Integral, 1, None, closed="left"), str],
        "device": ["device", None],
        "dtype": ["dtype"],
        "memory_limit": ["memory", None],
        "as_tensor": ["boolean"],
    }
)
def pairwise_dfc(
    timeseries,
    window_length: int,
    step: int = 1,
    *,
    device: str = "auto",
    dtype: str = "float32",
    memory_limit=None,
    as_tensor: bool = False,
) -> PairwiseDFC:
    """Sliding-window correlation course of every region pair of every scan.

    Parameters
    ----------
    timeseries : array-like of shape (n_scans, n_timepoints, n_regions) or list of arrays
        Region time courses of each scan; a list of (n_timepoints_i,
        n_regions) arrays may differ in length.
    window_length : int
        Window length w in time points (3 <= w <= the shortest scan; with 2
        points every r is ±1).
    step : int, default=1
        Window step s: ``n_windows = (n_timepoints - w) // s + 1``.
    %(device)s
    %(dtype)s
    %(memory_limit)s
    as_tensor : bool, default=False
        Keep the courses on the compute device as a torch tensor (for
        :func:`pair_summary` or further GPU work) instead of copying them to
        a numpy array. Only for scans of equal length.

    Returns
    -------
    PairwiseDFC
        ``courses`` (n_scans, n_pairs, n_windows) - a list of (n_pairs,
        n_windows_i) arrays when the scans differ in length -, ``pairs``
        (n_pairs, 2), ``window_starts`` and the parameters.

    Warns
    -----
    ConstantSeriesWarning
        Once, when some series are constant within some windows; their pairs
        are NaN in those windows.

    See Also
    --------
    pair_summary : per-pair mean, std and fraction of windows above a threshold.

    Notes
    -----
    Equal to the sequential definition ``np.corrcoef(x[k*s:k*s+w, i],
    x[k*s:k*s+w, j])[0, 1]`` for every scan, pair (i, j) and window k, to
    float tolerance.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> result = pairwise_dfc(rng.standard_normal((3, 40, 4)), 10, 5, device="cpu")
    >>> result.courses.shape, result.pairs[:2].tolist()
    ((3, 6, 7), [[0, 1], [0, 2]])
    """
    scans, stacked = _check_scans(timeseries)
    shortest = min(x.shape[0] for x in scans)
    window_length, step = check_window(
        window_length, step, shortest, where="the number of time points of the shortest scan"
    )
    dev = resolve_device(device)
    tdtype = resolve_dtype(dtype)
    if as_tensor and len({x.shape[0] for x in scans}) > 1:
        raise ValueError("'as_tensor=True' needs scans of equal length; got ragged scans.")
    planner = planner_for(
        dev,
        memory_limit,
        hint="Pass fewer scans or regions at a time, a larger step, or raise memory_limit.",
    )
    run = _plan_pairs(
        scans, stacked is not None, window_length, step, dev, tdtype, as_tensor, planner
    )
    courses, window_starts, n_constant = _run_groups(scans, stacked, run)
    if n_constant:
        warnings.warn(
            f"{n_constant} (scan, window, region) series are constant (zero "
            "variance within the window); the correlations of their pairs are "
            "undefined and set to NaN in those windows.",
            ConstantSeriesWarning,
            stacklevel=user_stacklevel(),
        )
    return PairwiseDFC(courses, run.pairs, window_starts, window_length, step, n_constant)


def _plan_pairs(
    scans: list[np.ndarray],
    stacked: bool,
    window_length: int,
    step: int,
    dev: torch.device,
    tdtype: torch.dtype,
    as_tensor: bool,
    planner: MemoryPlanner,
) -> _PairsRun:
    """Return how the scans are computed, their result counted by ``planner``.

    ``stacked``: the scans are one 3-D array already (no stacked copy).
    """
    n_regions = scans[0].shape[1]
    itemsize = numpy_dtype(tdtype).itemsize
    n_pair = n_pairs(n_regions)
    rows, cols = np.triu_indices(n_regions, 1)
    pairs = np.stack([rows, cols], axis=1).astype(np.int64)
    flat = torch.as_tensor(rows * n_regions + cols, device=dev)

    # Temporaries per (scan, window): U, the Gram matrix, the inverse norms,
    # the gathered pairs and their transposed copy.
    per_item = itemsize * (
        n_regions * window_length + n_regions * n_regions + 2 * n_regions + 2 * n_pair
    )
    # memory_limit also covers the result (on the device with as_tensor) and
    # the stacked copy of a list of scans, both in host memory on the CPU.
    result_bytes = (
        itemsize * n_pair * sum(_window_count(x.shape[0], window_length, step) for x in scans)
    )
    stack_bytes = 0 if stacked else sum(x.nbytes for x in scans)
    host_bytes = stack_bytes + (0 if as_tensor and dev.type != "cpu" else result_bytes)
    planner.reserve_host(host_bytes)
    planner.require(
        0,
        f"The correlation courses of {len(scans)} scans x {n_pair} pairs (and "
        "a stacked copy of list input)",
        on="host",
    )
    if dev.type != "cpu" and as_tensor:
        planner.reserve_device(result_bytes)
    budget = planner.device_left
    if dev.type == "cpu":
        budget = min(budget, _CPU_CHUNK_BYTES)
    return _PairsRun(
        window_length, step, dev, tdtype, pairs, flat, per_item, budget, as_tensor, planner
    )


def _run_groups(scans: list[np.ndarray], stacked: np.ndarray | None, run: _PairsRun):
    """Return the courses, the window starts and the count of constant series.

    Scans of equal length are batched together: the courses are one
    (S, P, K) array (or tensor) when all scans have one length, else a list.
    """
    groups: dict[int, list[int]] = {}
    for index, x in enumerate(scans):
        groups.setdefault(x.shape[0], []).append(index)
    ragged = len(groups) > 1

    courses: list = [None] * len(scans)
    onsets_of: dict[int, np.ndarray] = {}
    n_constant = 0
    for n_timepoints, members in groups.items():
        n_windows = _window_count(n_timepoints, run.window_length, run.step)
        onsets = np.arange(n_windows, dtype=np.int64) * run.step
        onsets_of[n_timepoints] = onsets
        group_data = stacked if stacked is not None else [scans[i] for i in members]
        group_out, n_const = _compute_group(group_data, onsets, run)
        n_constant += n_const
        if not ragged:
            courses = group_out  # (S, P, K): the one group holds every scan
            break
        for position, index in enumerate(members):
            courses[index] = group_out[position]

    if ragged:
        window_starts = [onsets_of[x.shape[0]] for x in scans]
    else:
        window_starts = onsets_of[scans[0].shape[0]]
    return courses, window_starts, n_constant


def _compute_group(scans, onsets: np.ndarray, run: _PairsRun):
    """Courses of scans of equal length: a (S, P, K) array or device tensor.

    Scans are processed in blocks (window statistics, then the windows in
    chunks), so device memory holds one block's data and one chunk's
    temporaries whatever the cohort size; ``run.planner`` has counted the result.
    """
    dev, tdtype, planner = run.device, run.dtype, run.planner
    window_length, step, flat = run.window_length, run.step, run.flat
    host = scans if isinstance(scans, np.ndarray) else np.stack(scans)
    host = np.ascontiguousarray(host)
    n_scans, n_timepoints, n_regions = host.shape
    n_windows = onsets.size
    n_pair = flat.numel()
    # Window statistics: ~8 float64 (S, K, N) temporaries, plus the scan itself.
    per_item = run.per_item + 64 * n_regions + 32 * n_regions * n_timepoints // n_windows
    budget = run.budget
    if dev.type == "cuda" and not run.as_tensor:
        out_item = n_pair * torch.tensor([], dtype=tdtype).element_size()
        budget = min(budget, per_item * max(1, _CUDA_CHUNK_OUT_BYTES // out_item))
    if per_item > budget:
        reserved = planner.device_bytes
        raise planner.error(
            f"The result ({reserved} bytes) and one window of {n_regions} regions",
            reserved + per_item,
            budget=reserved + budget,
            hint="Raise memory_limit.",
        )
    plan = _plan_chunks(planner, n_scans, n_windows, per_item, budget)
    scans_per, windows_per = plan.batch, plan.windows_per_batch

    shape = (n_scans, n_pair, n_windows)
    if run.as_tensor:
        sink = DeviceSink(shape, tdtype, dev)
    else:  # counted by ``planner`` above
        sink = ArraySink(
            None,
            shape,
            numpy_dtype(tdtype),
            torch.device("cpu"),
            None,
            what="The correlation courses",
            check=False,
        )
    # CUDA chunks to the host through the reused pinned staging ring: chunk
    # c's copy runs while chunk c + 1 is computed, chunk c - 1 is drained.
    sender = Sender(sink, dev, keep_staging=True)

    n_constant = torch.zeros((), dtype=torch.int64, device=dev)
    onsets_t = torch.as_tensor(onsets, device=dev)
    for s0 in range(0, n_scans, scans_per):
        s1 = min(s0 + scans_per, n_scans)
        # Copy in the input's precision, widen on the device.
        x64 = torch.from_numpy(host[s0:s1]).to(dev).to(torch.float64)
        means, constant_of = _window_stats(x64, window_length, onsets_t)
        for k0 in range(0, n_windows, windows_per):
            k1 = min(k0 + windows_per, n_windows)
            values, constant = _pairs_chunk(
                x64, means, constant_of, window_length, step, k0, k1, flat, tdtype
            )
            n_constant += constant.sum()
            region = Region((slice(s0, s1), slice(None), slice(k0, k1)))
            sender.send(values.contiguous() if sender.cuda else values, region)
    sender.flush()
    result = sink.finish()
    return result, int(n_constant)


@validate_params({"threshold": [Interval(Real, -1, 1, closed="both")]})
def pair_summary(courses, *, threshold: float = 0.5) -> PairSummary:
    """Mean, standard deviation and fraction of windows above a threshold, per pair.

    NaN windows (constant series) are left out of every statistic.

    Parameters
    ----------
    courses : ndarray, torch.Tensor, list of arrays or PairwiseDFC
        Of shape (n_scans, n_pairs, n_windows) (a list when scans differ in length).
        Correlation courses from :func:`pairwise_dfc`; a list of
        (n_pairs, n_windows_i) arrays for scans of different lengths.
    threshold : float, default=0.5
        Correlation threshold in [-1, 1] for ``fraction_above`` (r > threshold).

    Returns
    -------
    PairSummary
        ``mean``, ``std``, ``fraction_above`` of shape (n_scans, n_pairs) and
        :meth:`PairSummary.features` for classification.
    """
    threshold = float(threshold)
    if isinstance(courses, PairwiseDFC):
        courses = courses.courses
    if isinstance(courses, (list, tuple)):
        parts = [pair_summary(np.asarray(c)[None], threshold=threshold) for c in courses]
        if not parts:
            raise ValueError("'courses' holds no scans.")
        return PairSummary(
            np.concatenate([p.mean for p in parts]),
            np.concatenate([p.std for p in parts]),
            np.concatenate([p.fraction_above for p in parts]),
            threshold,
        )
    if not isinstance(courses, torch.Tensor):
        array = np.asarray(courses)
        if array.dtype == object or not np.issubdtype(array.dtype, np.floating):
            raise ValueError(f"'courses' must be a float array; got dtype {array.dtype}.")
        courses = torch.from_numpy(np.ascontiguousarray(array))
    if courses.ndim != 3:
        raise ValueError(
            "'courses' must have shape (n_scans, n_pairs, n_windows); got shape "
            f"{tuple(courses.shape)}."
        )
    x = courses.to(torch.float64)
    finite = torch.isfinite(x)
    count = finite.sum(dim=2).to(torch.float64)
    safe = torch.where(finite, x, torch.zeros_like(x))
    mean = safe.sum(dim=2) / count  # torch gives NaN for 0/0, without a warning
    dev = torch.where(finite, x - mean[..., None], torch.zeros_like(x))
    std = torch.sqrt((dev * dev).sum(dim=2) / count)
    frac = ((x > threshold) & finite).sum(dim=2).to(torch.float64) / count
    return PairSummary(mean.cpu().numpy(), std.cpu().numpy(), frac.cpu().numpy(), threshold)


__all__ = ["PairSummary", "PairwiseDFC", "pair_summary", "pairwise_dfc"]
