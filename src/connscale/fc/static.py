"""Static all-pairs Pearson correlation at voxel scale (Fast-GPU-PCC).

Rows are normalised once on the device (Eq. 2) and the correlation matrix is
U·Uᵀ by GEMM. When the result does not fit the device, it is computed in
rounds: a block of B rows against the remaining N' rows (Alg. 2-3), B planned
from free memory; each round's strictly-upper triangle is extracted on the
device into one contiguous segment of the row-major edge vector and copied
to the host while the next round computes. When the result does not fit host
memory either, or ``out`` names a file, the rounds stream into a chunked
HDF5 store instead.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np
import torch

from connscale._choices import CORRELATION_KINDS, PRECISIONS
from connscale._compute import (
    MemoryMeter,
    MemoryPlanner,
    planner_for,
    resolve_device,
    resolve_dtype,
    synchronize,
)
from connscale._compute import (
    allow_tf32 as _allow_tf32,
)
from connscale._compute.device import numpy_dtype
from connscale._docs import fill_doc
from connscale._validation import (
    Interval,
    StrOptions,
    check_not_all_constant,
    check_output_path,
    check_timeseries,
    validate_params,
)
from connscale.fc import _exact
from connscale.fc._sinks import Rows, Sender, Triangle, relmat_sink
from connscale.fc.normalize import normalize_series, warn_constant
from connscale.fc.sparse import tile_to_csr_parts
from connscale.fc.triu import n_pairs, triu_row_offsets

logger = logging.getLogger(__name__)

KINDS = CORRELATION_KINDS
# Rounds on CUDA hold at most this many output elements, so that copies of
# round r overlap the compute of round r + 1 and progress is visible.
_MAX_ROUND_ELEMENTS_CUDA = 1 << 28
_MAX_ROUND_ELEMENTS_CPU = 1 << 26

# Declared once for correlation and compute_correlation (the entry of the
# CLI, the cohort and the BIDS pipeline).
_PARAMETER_CONSTRAINTS = {
    "timeseries": ["array-like"],
    "kind": [StrOptions(KINDS)],
    "threshold": [Interval(Real, -1, 1, closed="both"), None],
    "absolute": ["boolean"],
    "device": ["device", None],
    "dtype": ["dtype"],
    "memory_limit": ["memory", None],
    "precision": [StrOptions(PRECISIONS)],
    "verbose": [Interval(Integral, 0, None, closed="left"), "boolean"],
}


@dataclass(frozen=True)
class _Round:
    start: int  # first row
    stop: int  # one past the last row
    n_cols: int  # columns in this round's block (N' or N)

    @property
    def n_rows(self) -> int:
        return self.stop - self.start


@fill_doc
@validate_params(_PARAMETER_CONSTRAINTS)
def correlation(
    timeseries,
    *,
    kind: str = "dense",
    threshold: float | None = None,
    absolute: bool = False,
    device: str = "auto",
    dtype: str = "float32",
    memory_limit: int | str | MemoryPlanner | None = None,
    out=None,
    precision: str = "exact",
    verbose: int = 0,
):
    """Pearson correlation of every pair of series.

    Parameters
    ----------
    %(timeseries)s
    kind : {'dense', 'triu', 'sparse'}, default='dense'
        ``'dense'``: the (N, N) matrix. ``'triu'``: the strictly-upper
        triangle as a vector of N(N-1)/2 values in row-major order, pair
        (i, j), i < j, at ``k = i*N - i*(i+1)/2 + j - i - 1`` (see
        :func:`connscale.triu_index`, :func:`connscale.triu_pairs`).
        ``'sparse'``: a ``scipy.sparse.csr_array`` of the upper triangle
        keeping r >= ``threshold``.
    threshold : float in [-1, 1] or None
        Required for ``kind='sparse'``, not used otherwise.
    absolute : bool, default=False
        With ``kind='sparse'``, keep |r| >= ``threshold`` (strong negative
        edges too) instead of r >= ``threshold``.
    %(device)s
    %(dtype)s
    %(memory_limit)s
        A :class:`connscale._compute.MemoryPlanner` counts the call into a task's budget.
    out : str, path, ndarray, torch.Tensor or None, default=None
        Where to put the result. A path (``.h5``): stream it into a chunked
        HDF5 store (written atomically; read it back with
        :func:`connscale.io.load_relmat`); needed when the result does not fit
        host memory. An array or CPU tensor of the result's shape and dtype:
        fill it in place (a pinned tensor gives the fastest copies from a
        GPU). None: allocate the result.
    precision : {'exact', 'fp32', 'tf32'}, default='exact'
        Arithmetic of float32 products on CUDA. For ``kind='sparse'``,
        ``'exact'`` decides with TF32 tensor cores every pair farther than a
        proven bound from the threshold and recomputes the few closer ones and
        the kept values to fp32 accuracy (the result of ``'fp32'``, faster);
        ``'fp32'`` uses fp32 products; ``'tf32'`` TF32 products (fastest, ~3
        decimal digits: pairs within ~1e-3 of the threshold may be kept or
        dropped wrongly). Other kinds compute in fp32 unless ``'tf32'``. The
        CPU computes in fp32 for ``'exact'``.
    %(verbose)s

    Returns
    -------
    ndarray, scipy.sparse.csr_array, torch.Tensor or pathlib.Path
        The matrix, the triangle vector or the sparse matrix; ``out`` when it
        is an array or tensor; the file's path when ``out`` is a path.

    Notes
    -----
    This is plain Pearson correlation: it equals ``np.corrcoef(timeseries.T)``
    and nilearn's ``ConnectivityMeasure(kind="correlation",
    cov_estimator=EmpiricalCovariance())``; nilearn's default shrinks towards
    zero (Ledoit-Wolf). Constant (zero-variance) series give NaN rows and
    columns in dense and triangle output, are left out of sparse output, and
    are counted in one :class:`~connscale.fc.normalize.ConstantSeriesWarning`.

    Memory: the normalised series (N·T values) stay on the device; each round
    holds a block of B×N' values (×3 with the extraction buffers on CUDA).
    The in-memory result takes N(N-1)/2 values for ``'triu'`` (20 GB in
    float32 for N = 100,000), N² for ``'dense'``.

    References
    ----------
    Eslami T., Saeed F. (2018). Fast-GPU-PCC: a GPU-based technique to
    compute pairwise Pearson's correlation coefficients for time series data
    - fMRI study. High-Throughput 7(2):11.

    Examples
    --------
    >>> import numpy as np, connscale
    >>> x = np.random.default_rng(0).standard_normal((100, 5))
    >>> r = connscale.correlation(x, kind="triu", device="cpu")
    >>> r.shape
    (10,)
    """
    result, _ = compute_correlation(
        timeseries,
        kind=kind,
        threshold=threshold,
        absolute=absolute,
        device=device,
        dtype=dtype,
        memory_limit=memory_limit,
        out=out,
        precision=precision,
        verbose=verbose,
    )
    return result


@validate_params(_PARAMETER_CONSTRAINTS)
def compute_correlation(
    timeseries,
    *,
    kind="dense",
    threshold=None,
    absolute=False,
    device="auto",
    dtype="float32",
    memory_limit=None,
    out=None,
    precision="exact",
    verbose=0,
    attrs=None,
):
    """Compute :func:`correlation`, also returning its plan, constants and confirmation.

    :func:`correlation`, also returning the :class:`MemoryPlan` it followed,
    the number of constant series and, when the exact scheme ran, its
    :class:`~connscale.fc._exact.Confirmation` (else None), for logs and reports.
    """
    if kind == "sparse":
        if threshold is None:
            raise ValueError("kind='sparse' needs a 'threshold' (e.g. 0.5).")
        threshold = float(threshold)
    elif threshold is not None:
        raise ValueError(
            f"'threshold' applies to kind='sparse' only; got threshold={threshold} "
            f"with kind={kind!r}."
        )
    x = check_timeseries(timeseries)
    check_not_all_constant(x)
    if isinstance(out, (str, os.PathLike)):
        out = check_output_path(out)
    dev = resolve_device(device)
    work_dtype = resolve_dtype(dtype)
    np_dtype = numpy_dtype(work_dtype)
    n_timepoints, n = x.shape
    if n < 2 and kind != "dense":
        raise ValueError(f"kind={kind!r} needs at least 2 series; got {n}.")
    in_memory = not isinstance(out, (str, os.PathLike))
    planner = planner_for(dev, memory_limit, hint=_memory_hint(in_memory))

    sink = relmat_sink(
        out,
        kind,
        n,
        np_dtype,
        dev,
        planner,
        threshold,
        absolute,
        attrs,
        result_bytes=_result_bytes(n, kind, np_dtype.itemsize),
    )
    exact = None
    if kind == "sparse":
        exact = _exact.exact_method(torch.empty(0, dtype=work_dtype, device=dev), precision)
    try:
        if sink.in_memory:  # the result, kept (pinned on CUDA)
            planner.reserve_host(_result_bytes(n, kind, torch.finfo(work_dtype).bits // 8))
        with planner.transient():
            plan, rounds, columns = _plan_rounds(
                n,
                n_timepoints,
                kind,
                work_dtype,
                planner,
                sink.in_memory,
                x.dtype.itemsize,
                split=exact == "torch",
            )
            logger.debug("correlation plan: %s (precision %s, exact: %s)", plan, precision, exact)
            if kind == "sparse" and sink.in_memory:
                sink.meter = MemoryMeter(
                    plan.host_budget,
                    planner.memory_limit,
                    f"The sparse result of {n} series",
                    "Pass out='result_relmat.h5' to stream it to disk, raise the threshold or "
                    "raise memory_limit.",
                )
            stats = _exact.new_stats(dev) if exact else None
            with _allow_tf32(_exact.products_in_tf32(precision, exact)), torch.no_grad():
                normalized, constant = _normalize(x, dev, work_dtype, columns)
                n_constant = warn_constant(constant)
                if exact != "triton" or not _run_exact_triton(
                    normalized, rounds, threshold, absolute, sink, stats
                ):
                    _run_rounds(
                        normalized,
                        rounds,
                        kind,
                        threshold,
                        absolute,
                        dev,
                        sink,
                        verbose,
                        stats=stats,
                    )
        confirmation = None
        if stats is not None:
            confirmation = _exact.Confirmation.from_stats(stats, n_pairs(n))
            logger.debug("correlation confirmation: %s", confirmation.as_dict())
    except BaseException:
        sink.abort()
        raise
    return sink.finish(), (plan, n_constant, confirmation)


def _memory_hint(in_memory: bool) -> str:
    """Return what to do when :func:`correlation` does not fit (for its messages)."""
    if in_memory:
        return (
            "Raise memory_limit, or pass out='result_relmat.h5' to keep the result out of memory."
        )
    return "Raise memory_limit."


def _plan_rounds(n, n_timepoints, kind, work_dtype, planner, in_memory, input_item, split=False):
    """Split the rows into rounds that fit the memory budget (Alg. 3).

    Counted into ``planner`` (the call's, with its in-memory result already
    counted: in the same memory on the CPU; pinned host memory on CUDA):
    the normalised series, the float64 temporaries of normalising them (in
    column chunks), each round's block and its extraction, staging or
    thresholding buffers. A sparse
    result's size is known only as it grows: on the CPU the rounds get at
    most a quarter of what is left and the result the rest (``host_budget`` of
    the plan), checked as it grows.

    With ``split``, the TF32 parts of the normalised series (the exact
    scheme's torch path) are counted too.

    Returns the plan, the rounds and the columns normalised at a time.
    """
    item = torch.finfo(work_dtype).bits // 8
    dev = planner.device
    cpu = dev.type == "cpu"
    planner.reserve_device(n * n_timepoints * item * (3 if split else 1))  # the normalised series
    # Normalising a column: its raw copy, four float64 temporaries, the cast.
    per_column = n_timepoints * (input_item + 4 * 8 + item)
    columns = planner.fit(
        per_column,
        f"Not enough memory for one row of the correlation matrix: normalising "
        f"{n} series of {n_timepoints} time points on {dev}",
        at_most=n,
    )
    available = planner.device_left
    # Bytes per element of a round's block: the GEMM output, plus two
    # extraction buffers on CUDA or a staging buffer for files; the sparse
    # path also needs its masks and, when every value is kept, 28 bytes of
    # indices and a value per element.
    per_element = item
    if kind == "sparse":
        per_element += 2 + 28 + item
    elif not cpu:
        per_element += 2 * item
    elif not in_memory:
        per_element += item
    work = available
    if kind == "sparse" and in_memory and cpu:
        work = available // 4  # the rest is for the result
    max_elements = _MAX_ROUND_ELEMENTS_CPU if cpu else _MAX_ROUND_ELEMENTS_CUDA
    max_elements = min(max_elements, max(work // per_element, 0))
    if not cpu and not in_memory and kind != "sparse":
        # two pinned staging buffers
        max_elements = min(max_elements, planner.host_left // (2 * item))
    rounds: list[_Round] = []
    start = 0
    while start < n:
        n_cols = n if kind == "dense" else n - start
        rows = min(n - start, max_elements // max(n_cols, 1))
        if rows < 1:
            need = planner.device_bytes + per_element * n_cols
            if kind == "sparse" and in_memory and cpu:
                need += 3 * per_element * n_cols
            raise planner.error(
                f"Not enough memory for one row of the correlation matrix: "
                f"one row of {n} series on {dev}",
                need,
            )
        rounds.append(_Round(start, start + rows, n_cols))
        start += rows
    largest = max(r.n_rows * r.n_cols for r in rounds)
    planner.reserve_device(largest * per_element)
    if not cpu and not in_memory and kind != "sparse":
        planner.reserve_host(2 * item * largest)
    result_budget = None
    if kind == "sparse" and in_memory:
        # What the growing result may reach: beside the rounds on the CPU; in
        # host memory not yet counted (by this call or the task) on CUDA.
        result_budget = available - largest * per_element if cpu else planner.host_left
    plan = planner.plan(
        host_budget=result_budget,
        block_rows=rounds[0].n_rows,
        n_rounds=len(rounds),
        out_of_core=not in_memory,
    )
    return plan, rounds, int(columns)


def _normalize(x, dev, work_dtype, columns):
    """Normalise ``x`` on ``dev``, ``columns`` series at a time.

    :func:`normalize_series` of ``x`` (T, N) on ``dev``, ``columns`` series
    at a time so that its float64 temporaries stay within the plan.
    """
    n_timepoints, n = x.shape
    if columns >= n:
        return normalize_series(torch.from_numpy(np.ascontiguousarray(x)).to(dev), dtype=work_dtype)
    normalized = torch.empty((n, n_timepoints), dtype=work_dtype, device=dev)
    constant = torch.empty(n, dtype=torch.bool, device=dev)
    for c0 in range(0, n, columns):
        c1 = min(n, c0 + columns)
        chunk = torch.from_numpy(np.ascontiguousarray(x[:, c0:c1])).to(dev)
        normalized[c0:c1], constant[c0:c1] = normalize_series(chunk, dtype=work_dtype)
        del chunk
    return normalized, constant


def _result_bytes(n: int, kind: str, item: int) -> int:
    if kind == "dense":
        return n * n * item
    if kind == "triu":
        return n_pairs(n) * item
    return 0  # sparse: unknown in advance, counted as it arrives


def _run_rounds(normalized, rounds, kind, threshold, absolute, dev, sink, verbose, stats=None):
    """Form each round's block and send it to ``sink``.

    With ``stats`` (sparse only) the blocks are decided by the exact scheme's
    torch path, counted there.
    """
    n = normalized.shape[0]
    split = _exact.Split(normalized) if stats is not None else None
    offsets = triu_row_offsets(n)
    cuda = dev.type == "cuda"
    max_elements = max(r.n_rows * r.n_cols for r in rounds)
    workspace = torch.empty(max_elements, dtype=normalized.dtype, device=dev)
    sender = Sender(sink, dev, max_elements) if kind != "sparse" else None
    from tqdm.auto import tqdm  # the progress bar only (the numerical core imports none)

    progress = tqdm(total=n, unit="row", desc="correlation", disable=not verbose, leave=False)
    for rnd in rounds:
        block = workspace[: rnd.n_rows * rnd.n_cols].view(rnd.n_rows, rnd.n_cols)
        rows = normalized[rnd.start : rnd.stop]
        cols = normalized if kind == "dense" else normalized[rnd.start :]
        if split is not None:
            _exact.exact_block(
                split,
                rnd.start,
                rnd.stop,
                thresholds=[threshold],
                absolute=absolute,
                lowest=threshold,
                stats=stats,
                out=block,
            )
        else:
            torch.mm(rows, cols.T, out=block)
        block.clamp_(-1.0, 1.0)
        if kind == "dense":
            diag = torch.arange(rnd.n_rows, device=dev)
            finite = ~torch.isnan(block[diag, diag + rnd.start])
            block[diag[finite], diag[finite] + rnd.start] = 1.0
            sender.send_block(block.reshape(-1), Rows(rnd.start, rnd.n_rows, rnd.n_cols))
        elif kind == "triu":
            sender.send_triu(block, Triangle(int(offsets[rnd.start])))
        else:
            sink.append_sparse(*_threshold_block(block, rnd.start, threshold, absolute))
        progress.update(rnd.n_rows)
    if sender is not None:
        sender.flush()
    synchronize(dev)
    progress.close()
    del workspace
    if cuda:
        torch.cuda.empty_cache()


def _run_exact_triton(normalized, rounds, threshold, absolute, sink, stats) -> bool:
    """Send the sparse result by the exact scheme's fused Triton kernels, if it fits.

    The sparse result by the exact scheme's fused Triton kernels in one
    pass over the whole triangle, its buffers within the rounds' share of the
    plan (16 bytes an entry, grown on overflow); False, with nothing sent,
    when the kept entries do not fit there (the rounds then run).
    """
    n = normalized.shape[0]
    largest = max(r.n_rows * r.n_cols for r in rounds)
    room = largest * (2 + 28 + 2 * normalized.element_size()) // 16  # what the rounds would hold
    found = _exact.compact_exact(
        normalized,
        threshold,
        absolute=absolute,
        block_rows=rounds[0].n_rows,
        stats=stats,
        method="triton",
        capacity=min(n_pairs(n), max(1 << 20, n_pairs(n) // 16), room),
        max_capacity=room,
    )
    if found is None:
        stats.zero_()
        return False
    values, columns, counts = found
    values = values.clamp_(-1.0, 1.0)
    sink.append_sparse(counts.cpu().numpy(), columns.cpu().numpy(), values.cpu().numpy())
    return True


def _threshold_block(block, start, threshold, absolute):
    """Return the kept upper-triangle entries of a block, on the host.

    The entries are compacted on the device (:func:`tile_to_csr_parts`);
    returned are per-row counts, global column indices and values.
    """
    values, columns, counts = tile_to_csr_parts(
        block, threshold, absolute=absolute, row_offset=start
    )  # NaN compares False
    return counts.cpu().numpy(), columns.cpu().numpy(), values.cpu().numpy()
