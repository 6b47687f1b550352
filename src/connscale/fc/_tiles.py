"""Correlation tiles consumed where they are formed.

The upper triangle of R = U·Uᵀ (U: N×T normalised series, one row per series)
is visited tile by tile and each tile is reduced at once by an *epilogue*;
R itself is never stored. Epilogues:

- degree: for each of several thresholds θ, the entries r > θ (|r| > θ with
  ``absolute``) of the strict upper triangle are counted, and optionally
  summed, into per-row and per-column accumulators. A pair (i, j), i < j,
  counts for both i and j, so every series gets its full degree from the
  upper triangle alone.
- histogram: counts of r in uniform bins, and collect: the values of one
  bin (the two passes that find a global sparsity threshold exactly).

Three implementations of the degree epilogue:

- :func:`degree_torch`: row blocks ``[r0, r1)`` against columns ``[r0, N)``
  by GEMM, thresholded with torch; any device and dtype. The block is held
  in memory, sized from the budget.
- :func:`degree_triton` (float32): one Triton kernel per pass. Each program
  forms one BM×BN tile of the upper triangle in registers (fp32 FMA
  products, no TF32) and reduces it there with atomic adds into the
  accumulators: nothing of R reaches device memory.
- :func:`degree_blocks_triton` (float32): row blocks by the BLAS (cuBLAS),
  each reduced by one Triton kernel that reads it once, overlapped with the
  next block's GEMM (see ``CUDA_METHOD`` for which one CUDA uses).

The Triton kernels are checked on the CPU through Triton's interpreter
(``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import torch

from connscale._compute.device import HAS_TRITON
from connscale._compute.memory import MemoryLimitError, MemoryPlan, MemoryPlanner
from connscale.fc._kernel_helpers import PLACE_CHUNK, tiles_on

if HAS_TRITON:  # pragma: no cover - exercised on GPU machines and by the interpreter test
    import triton
    import triton.language as tl

    from connscale.fc._kernel_helpers import degree_epilogue, place_kernel

if TYPE_CHECKING:
    from tqdm import tqdm

# Every walker over row blocks takes ``progress``: a tqdm bar (or None) that
# each block advances by its rows once its epilogue is queued (on CUDA the
# device may still be working on it).

# Row blocks of the torch path hold at most this many tile elements, and at
# least this many rows where the budget allows. On the CPU the tile and its
# masks are read once per threshold: a block that stays in the caches (4 MB
# of float32) is several times faster than one streamed from memory (P = 3,000,
# T = 1,200, two thresholds, weighted, 2 cores: 0.08 s at 349 rows against
# 0.18 s for the whole matrix at once), and fewer than ~128 rows make the
# GEMM of each block inefficient.
_MAX_TILE_ELEMENTS = {"cpu": 1 << 20, "cuda": 1 << 28}
_MIN_BLOCK_ROWS = {"cpu": 128, "cuda": 1}
# Bytes per tile element in the torch path: the tile, |tile| or the weighted
# tile, and a boolean mask.
_TORCH_BYTES_PER_ELEMENT = 3
# How degree runs on CUDA in float32: "fused" (:func:`degree_triton`) or
# "blocks" (:func:`degree_blocks_triton`). On an H100 (bench_maps.py,
# P = 204,492, T = 1,200) Triton's fp32 FMA products ran at under half of
# cuBLAS's rate (2.0 s against 0.94 s for the GEMM floor), so blocks by
# cuBLAS with a one-read Triton epilogue, overlapped, are faster (1.12 s).
CUDA_METHOD = "blocks"
# Uniform bins of the sparsity histogram.
HISTOGRAM_BINS = 1 << 16


def _block_plan(
    n: int,
    resident: int,
    budget: int,
    per_row: int,
    at_most: int,
    device: torch.device,
    needed: str,
) -> MemoryPlan:
    """Plan row blocks of ``per_row`` bytes beside ``resident`` bytes within ``budget``.

    Raises a :class:`MemoryLimitError` naming the smallest budget when not
    even one row fits.
    """
    planner = MemoryPlanner(device, device_budget=budget, host_budget=0)
    planner.reserve_device(resident)
    if planner.device_left < per_row:
        raise MemoryLimitError(
            f"'memory_limit' is too small for {n} series: at least "
            f"{(resident + per_row) / 1e6:.1f} MB are needed{needed}; got "
            f"{budget / 1e6:.1f} MB."
        )
    rows = int(max(1, min(n, planner.device_left // per_row, at_most)))
    planner.reserve_device(rows * per_row)
    return planner.plan(block_rows=rows, n_rounds=-(-n // rows))


def plan_block_rows(
    n: int, n_series_bytes: int, budget: int, *, item: int, device: torch.device
) -> MemoryPlan:
    """Return the rows per block of the torch path that fit ``budget`` bytes.

    The rows are the plan's ``block_rows``.

    ``n_series_bytes`` is what stays resident (U and the accumulators). Raises
    a ValueError naming the smallest budget when not even one row fits.
    """
    per_row = n * (_TORCH_BYTES_PER_ELEMENT * item + 1)
    cap = _MAX_TILE_ELEMENTS.get(device.type, _MAX_TILE_ELEMENTS["cuda"])
    rows = max(_MIN_BLOCK_ROWS.get(device.type, 1), cap // n)
    return _block_plan(
        n,
        n_series_bytes,
        budget,
        per_row,
        rows,
        device,
        " (the normalised series and one row of correlations)",
    )


def _blocks(n: int, block_rows: int):
    for r0 in range(0, n, block_rows):
        yield r0, min(n, r0 + block_rows)


def _upper_values(u: torch.Tensor, r0: int, r1: int, absolute: bool):
    """Return a row block of r against columns [r0, N) and its diagonal square's mask.

    Block of rows [r0, r1) against columns [r0, N) (|r| with ``absolute``)
    and the mask of its strict upper triangle's diagonal square.
    """
    tile = u[r0:r1] @ u[r0:].T
    if absolute:
        tile.abs_()
    rows = r1 - r0
    upper = torch.ones((rows, rows), dtype=torch.bool, device=u.device).triu_(1)
    return tile, upper


# --- degree -----------------------------------------------------------------


def degree_torch(
    u: torch.Tensor,
    thresholds: torch.Tensor,
    *,
    absolute: bool,
    weighted: bool,
    block_rows: int,
    progress: tqdm | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Degree of every series at every threshold, by row blocks in torch.

    Parameters
    ----------
    u : torch.Tensor of shape (N, T)
        Normalised series (rows of constant series all NaN: never counted).
    thresholds : torch.Tensor of shape (K,)
        Count r > θ (|r| > θ with ``absolute``).
    absolute, weighted : bool
        ``weighted`` also sums the kept r (|r| with ``absolute``).
    block_rows : int
        Rows per block (see :func:`plan_block_rows`).
    progress : tqdm or None
        Advanced by the rows of each block.

    Returns
    -------
    counts : torch.Tensor of shape (K, N), int64
    sums : torch.Tensor of shape (K, N), float64, or None
    """
    n = u.shape[0]
    k = thresholds.numel()
    counts = torch.zeros((k, n), dtype=torch.int64, device=u.device)
    sums = torch.zeros((k, n), dtype=torch.float64, device=u.device) if weighted else None
    for r0, r1 in _blocks(n, block_rows):
        tile, _ = _upper_values(u, r0, r1, absolute)
        accumulate_degree(tile, r0, r1, thresholds.tolist(), counts, sums)
        del tile
        if progress is not None:
            progress.update(r1 - r0)
    return counts, sums


def accumulate_degree(
    tile: torch.Tensor,
    r0: int,
    r1: int,
    thresholds: list[float],
    counts: torch.Tensor,
    sums: torch.Tensor | None,
) -> None:
    """Add the strict upper triangle's r > θ of ``tile`` to ``counts`` (and ``sums``).

    Add the strict upper triangle's r > θ of the block ``tile`` (rows
    [r0, r1) × columns [r0, N), |r| already taken with ``absolute``) to the
    rows' and columns' ``counts`` (and ``sums`` unless None).
    """
    upper = torch.ones((r1 - r0, r1 - r0), dtype=torch.bool, device=tile.device).triu_(1)
    for i, theta in enumerate(thresholds):
        keep = tile > theta
        keep[:, : r1 - r0] &= upper
        counts[i, r0:r1] += keep.sum(1)
        counts[i, r0:] += keep.sum(0)
        if sums is not None:
            kept = torch.where(keep, tile, 0)
            sums[i, r0:r1] += kept.sum(1, dtype=torch.float64)
            sums[i, r0:] += kept.sum(0, dtype=torch.float64)
            del kept
        del keep


if HAS_TRITON:  # pragma: no cover - GPU, or the interpreter test in a subprocess

    @triton.jit
    def _degree_kernel(
        u_ptr,
        pairs_ptr,
        thr_ptr,
        count_ptr,
        sum_ptr,
        n,
        k_padded,
        N_THRESH: tl.constexpr,
        ABSOLUTE: tl.constexpr,
        WEIGHTED: tl.constexpr,
        BM: tl.constexpr,
        BK: tl.constexpr,
    ):
        pid = tl.program_id(0)
        bi = tl.load(pairs_ptr + 2 * pid)
        bj = tl.load(pairs_ptr + 2 * pid + 1)
        rows = bi * BM + tl.arange(0, BM)
        cols = bj * BM + tl.arange(0, BM)
        ks = tl.arange(0, BK)
        # U is padded with zero rows to a multiple of BM and zero columns to a
        # multiple of BK: unmasked loads, the padding adds nothing.
        a_ptrs = u_ptr + rows.to(tl.int64)[:, None] * k_padded + ks[None, :]
        b_ptrs = u_ptr + cols.to(tl.int64)[:, None] * k_padded + ks[None, :]
        acc = tl.zeros((BM, BM), dtype=tl.float32)
        for _ in range(0, k_padded, BK):
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
            acc = tl.dot(a, tl.trans(b), acc, input_precision="ieee")
            a_ptrs += BK
            b_ptrs += BK
        degree_epilogue(
            acc, rows, cols, n, thr_ptr, count_ptr, sum_ptr, N_THRESH, ABSOLUTE, WEIGHTED
        )

    @triton.jit
    def _load_upper_piece(tile_ptr, n, r0, r1, n_cols, BM: tl.constexpr, BN: tl.constexpr):
        # One BM×BN piece of a stored row block (rows [r0, r1), columns [r0, N)):
        # its values (NaN off the strict upper triangle), global rows and columns, mask.
        local_rows = tl.program_id(0) * BM + tl.arange(0, BM)
        local_cols = tl.program_id(1) * BN + tl.arange(0, BN)
        rows = r0 + local_rows
        cols = r0 + local_cols
        inside = (rows[:, None] < r1) & (cols[None, :] < n) & (cols[None, :] > rows[:, None])
        values = tl.load(
            tile_ptr + local_rows.to(tl.int64)[:, None] * n_cols + local_cols[None, :],
            mask=inside,
            other=float("nan"),
        )
        return values, rows, cols, inside

    @triton.jit
    def _degree_block_kernel(  # noqa: PLR0913 - a Triton kernel: its tensors, strides and block sizes
        tile_ptr,
        thr_ptr,
        count_ptr,
        sum_ptr,
        n,
        r0,
        r1,
        n_cols,
        N_THRESH: tl.constexpr,
        ABSOLUTE: tl.constexpr,
        WEIGHTED: tl.constexpr,
        BM: tl.constexpr,
        BN: tl.constexpr,
    ):
        acc, rows, cols, inside = _load_upper_piece(tile_ptr, n, r0, r1, n_cols, BM, BN)
        row_ids = tl.where(rows < r1, rows, n)  # rows past the block: ignored as past N
        degree_epilogue(
            acc, row_ids, cols, n, thr_ptr, count_ptr, sum_ptr, N_THRESH, ABSOLUTE, WEIGHTED
        )


def degree_triton(
    u: torch.Tensor,
    thresholds: torch.Tensor,
    *,
    absolute: bool,
    weighted: bool,
    block: int = 128,
    block_k: int = 32,
    num_warps: int = 8,
    num_stages: int = 3,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`degree_torch` in one fused Triton kernel (float32 ``u``).

    Only U (padded to whole tiles) and the (K, N) accumulators are allocated.
    """
    n, t = u.shape
    n_tiles = triton.cdiv(n, block)
    k_padded = triton.cdiv(t, block_k) * block_k
    padded = torch.zeros((n_tiles * block, k_padded), dtype=torch.float32, device=u.device)
    padded[:n, :t] = u
    k = thresholds.numel()
    thr = thresholds.to(device=u.device, dtype=torch.float32).contiguous()
    counts = torch.zeros((k, n), dtype=torch.int32, device=u.device)
    sums = torch.zeros((k, n) if weighted else (1,), dtype=torch.float64, device=u.device)
    pairs = tiles_on(n, block, block, u.device)
    grid = (pairs.numel() // 2,)
    options = {} if not u.is_cuda else {"num_warps": num_warps, "num_stages": num_stages}
    _degree_kernel[grid](
        padded,
        pairs,
        thr,
        counts,
        sums,
        n,
        k_padded,
        N_THRESH=k,
        ABSOLUTE=bool(absolute),
        WEIGHTED=bool(weighted),
        BM=block,
        BK=block_k,
        **options,
    )
    return counts.to(torch.int64), (sums if weighted else None)


def block_buffers(
    n: int, block_rows: int, *, dtype: torch.dtype, device: torch.device
) -> list[torch.Tensor]:
    """Return the block buffers of :func:`walk_row_blocks` (two on CUDA, one else)."""
    return [
        torch.empty(min(n, block_rows) * n, dtype=dtype, device=device)
        for _ in range(2 if device.type == "cuda" else 1)
    ]


def walk_row_blocks(
    u: torch.Tensor,
    block_rows: int,
    epilogue,
    *,
    buffers: list[torch.Tensor] | None = None,
    side: torch.cuda.Stream | None = None,
    progress: tqdm | None = None,
) -> None:
    """Compute row blocks of U·Uᵀ by the BLAS and hand each to ``epilogue``.

    Row blocks ``[r0, r1)`` × ``[r0, N)`` of U·Uᵀ by the BLAS (cuBLAS on
    CUDA) into device memory, each handed to ``epilogue(tile, r0, r1)``
    (and counted in ``progress``, a tqdm bar, when given).

    On CUDA two block buffers alternate: the epilogue of block k runs on a
    second stream (``side``) while the GEMM of block k + 1 runs on the
    current one; on return the current stream waits for every epilogue.
    ``tile`` is a contiguous (r1 - r0, N - r0) view of a buffer. Callers that
    walk many matrices (one per window) pass the same ``buffers`` (from
    :func:`block_buffers`) and ``side`` every time: buffers freed behind a
    second stream are not reusable until it has finished, so fresh ones per
    walk would make the allocator go back to the driver.
    """
    n = u.shape[0]
    owned = buffers is None
    if owned:
        buffers = block_buffers(n, block_rows, dtype=u.dtype, device=u.device)
    main = torch.cuda.current_stream(u.device) if u.is_cuda else None
    if u.is_cuda and side is None:
        side = torch.cuda.Stream(u.device)
    done = [None] * len(buffers)
    for index, (r0, r1) in enumerate(_blocks(n, block_rows)):
        slot = index % len(buffers)
        if done[slot] is not None:
            main.wait_event(done[slot])  # the epilogue that read this buffer is over
        tile = buffers[slot][: (r1 - r0) * (n - r0)].view(r1 - r0, n - r0)
        torch.mm(u[r0:r1], u[r0:].T, out=tile)
        if not u.is_cuda:
            epilogue(tile, r0, r1)
        else:
            side.wait_stream(main)
            with torch.cuda.stream(side):
                epilogue(tile, r0, r1)
                done[slot] = side.record_event()
        if progress is not None:
            progress.update(r1 - r0)
    if u.is_cuda:
        main.wait_stream(side)
        if owned:
            for buffer in buffers:
                buffer.record_stream(side)


def degree_blocks_triton(
    u: torch.Tensor,
    thresholds: torch.Tensor,
    *,
    absolute: bool,
    weighted: bool,
    block_rows: int,
    block_m: int = 64,
    block_n: int = 128,
    num_warps: int = 4,
    progress: tqdm | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Count degrees as :func:`degree_torch`, with BLAS row blocks and a Triton epilogue.

    :func:`degree_torch` with the GEMM of each row block by the BLAS
    (cuBLAS) into device memory and the epilogue as one Triton kernel that
    reads the block once (float32 ``u``), overlapped (:func:`walk_row_blocks`).
    """
    n = u.shape[0]
    k = thresholds.numel()
    thr = thresholds.to(device=u.device, dtype=torch.float32).contiguous()
    counts = torch.zeros((k, n), dtype=torch.int32, device=u.device)
    sums = torch.zeros((k, n) if weighted else (1,), dtype=torch.float64, device=u.device)
    options = {"num_warps": num_warps} if u.is_cuda else {}

    def epilogue(tile, r0, r1):
        grid = (triton.cdiv(r1 - r0, block_m), triton.cdiv(n - r0, block_n))
        _degree_block_kernel[grid](
            tile,
            thr,
            counts,
            sums,
            n,
            r0,
            r1,
            n - r0,
            N_THRESH=k,
            ABSOLUTE=bool(absolute),
            WEIGHTED=bool(weighted),
            BM=block_m,
            BN=block_n,
            **options,
        )

    walk_row_blocks(u, block_rows, epilogue, progress=progress)
    return counts.to(torch.int64), (sums if weighted else None)


def plan_block_rows_stored(
    n: int, resident: int, budget: int, *, item: int, device: torch.device | None = None
) -> MemoryPlan:
    """Return the rows per block of :func:`degree_blocks_triton`.

    The rows (the plan's ``block_rows``) leave room for its two block buffers.
    """
    return _block_plan(
        n,
        resident,
        budget,
        2 * n * item,
        (1 << 30) // n,
        torch.device("cuda") if device is None else device,
        "",
    )


# --- compact (sparse FC and DFC), histogram and collect on CUDA ------------
#
# One read of each stored row block (:func:`walk_row_blocks`). The compact
# epilogue handles BM×BN pieces of the strict upper triangle: it keeps r >= θ
# (|r| >= θ), reserves room for the piece's kept entries with one atomic add
# on a cursor and writes them there ("staged", row-major inside the piece),
# with the count of every (row, column block of BN) in a table. A scan of
# that table gives every row piece's place in the final CSR, and a second
# kernel moves the staged entries there: what is read twice is the kept
# entries, not the block.

if HAS_TRITON:  # pragma: no cover - GPU, or the interpreter test in a subprocess

    @triton.jit
    def _bin_of(values, ABSOLUTE: tl.constexpr, N_BINS: tl.constexpr):
        # As _bin_index: uniform bins on [-1, 1] ([0, 1] for |r|), in float64.
        if ABSOLUTE:
            scaled = tl.abs(values).to(tl.float64) * N_BINS
        else:
            scaled = (values.to(tl.float64) + 1.0) * (N_BINS // 2)
        return tl.minimum(tl.maximum(scaled, 0.0), N_BINS - 1.0).to(tl.int32)

    @triton.jit
    def _compact_block_kernel(  # noqa: PLR0913 - a Triton kernel: its tensors, strides and block sizes
        tile_ptr,
        counts_ptr,
        bases_ptr,
        staged_values_ptr,
        staged_columns_ptr,
        cursor_ptr,
        n,
        r0,
        r1,
        n_cols,
        n_cb,
        capacity,
        threshold,
        target_bin,
        ABSOLUTE: tl.constexpr,
        BY_BIN: tl.constexpr,
        N_BINS: tl.constexpr,
        TABLES: tl.constexpr,
        BM: tl.constexpr,
        BN: tl.constexpr,
    ):
        # Rows r0 + [pid0·BM, +BM), global columns [cb·BN, +BN) with
        # cb = r0 // BN + pid1 (column blocks aligned on the whole matrix).
        rows = r0 + tl.program_id(0) * BM + tl.arange(0, BM)
        cb = r0 // BN + tl.program_id(1)
        cols = cb * BN + tl.arange(0, BN)
        inside = (rows[:, None] < r1) & (cols[None, :] < n) & (cols[None, :] > rows[:, None])
        local = (rows - r0).to(tl.int64)[:, None] * n_cols + (cols - r0)[None, :]
        values = tl.load(tile_ptr + local, mask=inside, other=float("nan"))
        if BY_BIN:  # the values (|r| with ABSOLUTE) of one histogram bin
            keep = inside & (values == values) & (_bin_of(values, ABSOLUTE, N_BINS) == target_bin)
            if ABSOLUTE:
                values = tl.abs(values)
        elif ABSOLUTE:
            keep = inside & (tl.abs(values) >= threshold)
        else:
            keep = inside & (values >= threshold)  # NaN compares False
        kept = keep.to(tl.int32)
        row_counts = tl.sum(kept, axis=1)
        total = tl.sum(row_counts, axis=0)
        base = tl.atomic_add(cursor_ptr, total.to(tl.int64), mask=total > 0, sem="relaxed")
        row_start = tl.cumsum(row_counts, axis=0) - row_counts
        within = tl.cumsum(kept, axis=1) - kept
        position = base + (row_start[:, None] + within).to(tl.int64)
        ok = keep & (position < capacity)
        tl.store(staged_values_ptr + position, values, mask=ok)
        if TABLES:
            tl.store(
                staged_columns_ptr + position, tl.broadcast_to(cols[None, :], (BM, BN)), mask=ok
            )
            tl.store(counts_ptr + rows.to(tl.int64) * n_cb + cb, row_counts, mask=rows < r1)
            tl.store(bases_ptr + (r0 // BM + tl.program_id(0)).to(tl.int64) * n_cb + cb, base)

    @triton.jit
    def _histogram_block_kernel(
        tile_ptr,
        hist_ptr,
        n,
        r0,
        r1,
        n_cols,
        ABSOLUTE: tl.constexpr,
        N_BINS: tl.constexpr,
        BM: tl.constexpr,
        BN: tl.constexpr,
    ):
        values, _, _, inside = _load_upper_piece(tile_ptr, n, r0, r1, n_cols, BM, BN)
        valid = inside & (values == values)
        bins = _bin_of(values, ABSOLUTE, N_BINS)
        tl.atomic_add(hist_ptr + bins, tl.full((BM, BN), 1, tl.int64), mask=valid, sem="relaxed")


# Pieces of the compact, histogram and collect epilogues.
COMPACT_BLOCK_M, COMPACT_BLOCK_N = 64, 128


def aligned_block_rows(block_rows: int) -> int:
    """Return the rows per block of :func:`compact_upper_triangle`, aligned on its pieces.

    A multiple of its row pieces, so that pieces are aligned on the whole
    matrix.
    """
    return max(COMPACT_BLOCK_M, block_rows // COMPACT_BLOCK_M * COMPACT_BLOCK_M)


def compact_table_bytes(n: int, block_m: int = COMPACT_BLOCK_M) -> int:
    """Return the device bytes of :func:`compact_upper_triangle`'s tables for N series.

    The tables are per piece of ``block_m`` rows.
    """
    n_cb = -(-n // COMPACT_BLOCK_N)
    return n * n_cb * 8 + -(-n // block_m) * n_cb * 8 + n * 16


def compact_upper_triangle(  # noqa: PLR0913 - launches the kernel with its tensors, sizes and options
    u: torch.Tensor,
    threshold: float,
    *,
    absolute: bool,
    block_rows: int,
    values: torch.Tensor,
    columns: torch.Tensor,
    row_counts: torch.Tensor,
    staged_values: torch.Tensor,
    staged_columns: torch.Tensor,
    buffers: list[torch.Tensor] | None = None,
    side: torch.cuda.Stream | None = None,
    block_m: int = COMPACT_BLOCK_M,
    num_warps: int = 4,
) -> torch.Tensor:
    """Compact the strict upper triangle's r >= θ of U·Uᵀ to CSR parts.

    The strict upper triangle's r >= θ (|r| >= θ with ``absolute``) of
    U·Uᵀ as CSR parts, reading each stored row block once (float32 ``u``).

    Kept values go to ``values`` and their int32 columns to ``columns`` in
    row-major order, the kept count of every row to ``row_counts`` (int64,
    length N); entries past the buffers' capacity (``values.numel()``) are
    dropped. ``staged_values`` and ``staged_columns`` are work buffers of at
    least that capacity. ``buffers`` and ``side``: see :func:`walk_row_blocks`
    (their rows a multiple of ``COMPACT_BLOCK_M``, or N). ``block_m``: rows
    of each piece (a divisor of ``COMPACT_BLOCK_M``). Runs on the current
    stream without synchronising.

    Returns
    -------
    torch.Tensor of shape (1,), int64, on the device
        The number of entries kept (larger than the capacity when entries
        were dropped: redo with larger buffers).
    """
    n = u.shape[0]
    if COMPACT_BLOCK_M % block_m:
        raise ValueError(f"'block_m' must divide {COMPACT_BLOCK_M}; got {block_m}.")
    bm, bn = block_m, COMPACT_BLOCK_N
    block_rows = aligned_block_rows(block_rows)
    n_cb = triton.cdiv(n, bn)
    capacity = values.numel()
    counts = torch.zeros((n, n_cb), dtype=torch.int32, device=u.device)
    bases = torch.empty((triton.cdiv(n, bm), n_cb), dtype=torch.int64, device=u.device)
    cursor = torch.zeros(1, dtype=torch.int64, device=u.device)
    options = {"num_warps": num_warps} if u.is_cuda else {}

    def epilogue(tile, r0, r1):
        grid = (triton.cdiv(r1 - r0, bm), n_cb - r0 // bn)
        _compact_block_kernel[grid](
            tile,
            counts,
            bases,
            staged_values,
            staged_columns,
            cursor,
            n,
            r0,
            r1,
            n - r0,
            n_cb,
            capacity,
            float(threshold),
            0,
            ABSOLUTE=bool(absolute),
            BY_BIN=False,
            N_BINS=HISTOGRAM_BINS,
            TABLES=True,
            BM=bm,
            BN=bn,
            **options,
        )

    walk_row_blocks(u, block_rows, epilogue, buffers=buffers, side=side)
    inclusive = torch.cumsum(counts, 1, dtype=torch.int32)
    row_counts.copy_(inclusive[:, -1])
    row_offsets = torch.cumsum(row_counts, 0)
    row_offsets -= row_counts
    place_kernel[(triton.cdiv(n, bm), n_cb)](
        counts,
        inclusive,
        row_offsets,
        bases,
        staged_values,
        staged_columns,
        values,
        columns,
        n,
        n_cb,
        capacity,
        BM=bm,
        CH=PLACE_CHUNK,
        **options,
    )
    return cursor


# --- compact in one pass: decoupled look-back -------------------------------
#
# Each program takes the next tile (one row × CHUNK columns of a stored row
# block, in row-major order over the whole matrix) from a ticket counter,
# thresholds it, publishes its kept count, and adds up the counts published by
# the tiles before it (LOOK statuses at a time, back to the nearest one that
# already knows its own start: the single-pass scan of Merrill & Garland,
# "Single-pass parallel prefix scan with decoupled look-back", 2016). It then
# writes its kept entries at their final CSR places: one read of the block,
# no staging, no table. Tickets make a tile wait only on tiles already
# running, so it cannot deadlock; MAX_SPINS bounds the wait all the same and
# reports a failure instead of hanging.

if HAS_TRITON:  # pragma: no cover - GPU, or the interpreter test in a subprocess
    # Flags of a status (kept counts stay below 2**48): the tile's own count
    # (AGGREGATE) or the count of every entry up to and including it (PREFIX).
    _AGGREGATE = tl.constexpr(1 << 48)
    _PREFIX = tl.constexpr(1 << 49)

    @triton.jit
    def _lookback_compact_kernel(  # noqa: PLR0913 - a Triton kernel: its tensors, strides and block sizes
        tile_ptr,
        status_ptr,
        ticket_ptr,
        values_ptr,
        columns_ptr,
        row_counts_ptr,
        result_ptr,
        n,
        r0,
        n_cols,
        n_chunks,
        tile_base,
        last_tile,
        capacity,
        threshold,
        ABSOLUTE: tl.constexpr,
        CHUNK: tl.constexpr,
        LOOK: tl.constexpr,
        MAX_SPINS: tl.constexpr,
    ):
        t = tl.atomic_add(ticket_ptr, 1).to(tl.int64)
        local = t - tile_base
        row_local = local // n_chunks
        row = r0 + row_local
        cols = r0 + (local % n_chunks) * CHUNK + tl.arange(0, CHUNK)
        inside = (cols < n) & (cols > row)
        values = tl.load(
            tile_ptr + row_local * n_cols + (cols - r0), mask=inside, other=float("nan")
        )
        if ABSOLUTE:
            keep = inside & (tl.abs(values) >= threshold)
        else:
            keep = inside & (values >= threshold)  # NaN compares False
        kept = keep.to(tl.int32)
        count = tl.sum(kept, axis=0).to(tl.int64)
        tl.atomic_xchg(status_ptr + t, count + _AGGREGATE)
        start = count * 0
        j = t - 1
        spins = 0
        lanes = tl.arange(0, LOOK)
        while (j >= 0) & (spins < MAX_SPINS):
            index = j - (LOOK - 1) + lanes
            status = tl.load(status_ptr + index, mask=index >= 0, other=_PREFIX, volatile=True)
            nearest = tl.max(tl.where(status >= _PREFIX, lanes, -1), axis=0)
            needed = lanes >= nearest  # from the nearest PREFIX on (all when none)
            waiting = tl.sum((needed & (status == 0)).to(tl.int32), axis=0)
            found = tl.sum(tl.where(needed, status & (_AGGREGATE - 1), 0), axis=0)
            start += tl.where(waiting == 0, found, 0)
            j = tl.where(waiting == 0, tl.where(nearest >= 0, -1, j - LOOK), j)
            spins += 1
        tl.atomic_xchg(status_ptr + t, start + count + _PREFIX)
        position = start + (tl.cumsum(kept, axis=0) - kept).to(tl.int64)
        ok = keep & (position < capacity)
        tl.store(values_ptr + position, values, mask=ok)
        tl.store(columns_ptr + position, cols.to(tl.int32), mask=ok)
        tl.atomic_add(row_counts_ptr + row, count, mask=count > 0)
        tl.store(result_ptr, start + count, mask=t == last_tile)
        tl.atomic_max(result_ptr + 1, (j >= 0).to(tl.int64))  # 1: gave up waiting


def compact_upper_triangle_lookback(  # noqa: PLR0913 - launches the kernel with its tensors, sizes and options
    u: torch.Tensor,
    threshold: float,
    *,
    absolute: bool,
    block_rows: int,
    values: torch.Tensor,
    columns: torch.Tensor,
    row_counts: torch.Tensor,
    buffers: list[torch.Tensor] | None = None,
    side: torch.cuda.Stream | None = None,
    chunk: int = 4096,
    look: int = 32,
    num_warps: int = 4,
    max_spins: int = 1 << 22,
) -> torch.Tensor:
    """Compact as :func:`compact_upper_triangle`, in one pass with a decoupled look-back.

    As :func:`compact_upper_triangle`, in one pass over each stored row
    block: every tile of ``chunk`` columns of one row finds where its kept
    entries go by a decoupled look-back and writes them there.

    ``row_counts`` is overwritten. Returns a (2,) int64 device tensor: the
    number of entries kept, and 1 where a tile gave up waiting for the tiles
    before it (the entries are then wrong; never seen, see ``max_spins``).
    """
    n = u.shape[0]
    capacity = values.numel()
    blocks = list(_blocks(n, block_rows))
    n_chunks = [triton.cdiv(n - r0, chunk) for r0, _ in blocks]
    bases = np.concatenate(
        [[0], np.cumsum([(r1 - r0) * k for (r0, r1), k in zip(blocks, n_chunks)])]
    ).tolist()
    status = torch.zeros(bases[-1] + 1, dtype=torch.int64, device=u.device)
    result = torch.zeros(2, dtype=torch.int64, device=u.device)
    row_counts.zero_()
    options = {"num_warps": num_warps} if u.is_cuda else {}
    index = iter(range(len(blocks)))

    def epilogue(tile, r0, r1):
        b = next(index)
        _lookback_compact_kernel[((r1 - r0) * n_chunks[b],)](
            tile,
            status,
            status[-1:],
            values,
            columns,
            row_counts,
            result,
            n,
            r0,
            n - r0,
            n_chunks[b],
            bases[b],
            bases[-1] - 1,
            capacity,
            float(threshold),
            ABSOLUTE=bool(absolute),
            CHUNK=chunk,
            LOOK=look,
            MAX_SPINS=max_spins,
            **options,
        )

    walk_row_blocks(u, block_rows, epilogue, buffers=buffers, side=side)
    return result


def histogram_triton(
    u: torch.Tensor,
    *,
    absolute: bool,
    block_rows: int,
    n_bins: int = HISTOGRAM_BINS,
    progress: tqdm | None = None,
) -> torch.Tensor:
    """:func:`histogram_torch` by BLAS row blocks and a Triton epilogue."""
    n = u.shape[0]
    counts = torch.zeros(n_bins, dtype=torch.int64, device=u.device)
    bm, bn = COMPACT_BLOCK_M, COMPACT_BLOCK_N
    options = {"num_warps": 4} if u.is_cuda else {}

    def epilogue(tile, r0, r1):
        grid = (triton.cdiv(r1 - r0, bm), triton.cdiv(n - r0, bn))
        _histogram_block_kernel[grid](
            tile,
            counts,
            n,
            r0,
            r1,
            n - r0,
            ABSOLUTE=bool(absolute),
            N_BINS=n_bins,
            BM=bm,
            BN=bn,
            **options,
        )

    walk_row_blocks(u, block_rows, epilogue, progress=progress)
    return counts


def collect_bin_triton(
    u: torch.Tensor,
    bin_index: int,
    size: int,
    *,
    absolute: bool,
    block_rows: int,
    n_bins: int = HISTOGRAM_BINS,
    progress: tqdm | None = None,
) -> torch.Tensor:
    """Collect a bin's values as :func:`collect_bin_torch`, with a Triton epilogue.

    :func:`collect_bin_torch` by BLAS row blocks and a Triton epilogue
    (``size``: the bin's count, from the histogram; the values in any order).
    """
    n = u.shape[0]
    bm, bn = COMPACT_BLOCK_M, COMPACT_BLOCK_N
    found = torch.empty(max(1, size), dtype=u.dtype, device=u.device)
    cursor = torch.zeros(1, dtype=torch.int64, device=u.device)
    unused = torch.empty(1, dtype=torch.int64, device=u.device)
    options = {"num_warps": 4} if u.is_cuda else {}

    def epilogue(tile, r0, r1):
        grid = (triton.cdiv(r1 - r0, bm), triton.cdiv(n, bn) - r0 // bn)
        _compact_block_kernel[grid](
            tile,
            unused,
            unused,
            found,
            unused,
            cursor,
            n,
            r0,
            r1,
            n - r0,
            1,
            size,
            0.0,
            int(bin_index),
            ABSOLUTE=bool(absolute),
            BY_BIN=True,
            N_BINS=n_bins,
            TABLES=False,
            BM=bm,
            BN=bn,
            **options,
        )

    walk_row_blocks(u, block_rows, epilogue, progress=progress)
    return found[: min(size, int(cursor))]


# --- histogram and collect (the sparsity passes) ---------------------------


def _bin_index(values: torch.Tensor, absolute: bool, n_bins: int) -> torch.Tensor:
    """Uniform bins on [-1, 1] (on [0, 1] for |r|); out-of-range values clamp."""
    low, width = (0.0, 1.0) if absolute else (-1.0, 2.0)
    scaled = (values.double() - low) * (n_bins / width)
    return scaled.floor_().clamp_(0, n_bins - 1).long()


def histogram_torch(
    u: torch.Tensor,
    *,
    absolute: bool,
    block_rows: int,
    n_bins: int = HISTOGRAM_BINS,
    progress: tqdm | None = None,
) -> torch.Tensor:
    """Count the upper-triangle r (|r|) in ``n_bins`` uniform bins (int64)."""
    n = u.shape[0]
    counts = torch.zeros(n_bins, dtype=torch.int64, device=u.device)
    for r0, r1 in _blocks(n, block_rows):
        tile, upper = _upper_values(u, r0, r1, absolute)
        keep = tile == tile  # finite (not NaN)
        keep[:, : r1 - r0] &= upper
        counts += torch.bincount(_bin_index(tile[keep], absolute, n_bins), minlength=n_bins)
        del tile, keep
        if progress is not None:
            progress.update(r1 - r0)
    return counts


def collect_bin_torch(
    u: torch.Tensor,
    bin_index: int,
    *,
    absolute: bool,
    block_rows: int,
    n_bins: int = HISTOGRAM_BINS,
    progress: tqdm | None = None,
) -> torch.Tensor:
    """Return the upper-triangle values that fall in bin ``bin_index``.

    Same binning as :func:`histogram_torch`.
    """
    n = u.shape[0]
    found = []
    for r0, r1 in _blocks(n, block_rows):
        tile, upper = _upper_values(u, r0, r1, absolute)
        keep = tile == tile
        keep[:, : r1 - r0] &= upper
        values = tile[keep]
        found.append(values[_bin_index(values, absolute, n_bins) == bin_index])
        del tile, keep, values
        if progress is not None:
            progress.update(r1 - r0)
    return torch.cat(found)


def top_threshold(
    u: torch.Tensor,
    n_kept: list[int],
    *,
    absolute: bool,
    block_rows: int,
    use_triton: bool = False,
    progress: tqdm | None = None,
) -> list[float]:
    """For each k in ``n_kept``: the k-th largest upper-triangle r (|r|), exactly.

    One histogram pass finds the bin of each k-th value; one more pass per
    distinct bin collects that bin's values and selects in it. With
    ``use_triton`` (see :func:`connscale._compute.device.use_triton`) the passes are BLAS row blocks
    with Triton epilogues (``block_rows`` from :func:`plan_block_rows_stored`),
    else torch row blocks (from :func:`plan_block_rows`). ``progress`` (a
    tqdm bar) counts the rows of every pass; the caller's total covers the
    histogram pass, and N is added to it for each collect pass once their
    number is known.
    """
    walk = {"absolute": absolute, "block_rows": block_rows, "progress": progress}
    if use_triton:
        hist = histogram_triton(u, **walk)
    else:
        hist = histogram_torch(u, **walk)
    above = torch.flip(torch.cumsum(torch.flip(hist, [0]), 0), [0])  # count in bins >= b
    bins = [int(torch.nonzero(above >= k).max()) for k in n_kept]
    if progress is not None:
        progress.total += u.shape[0] * len(set(bins))
        progress.refresh()
    found = {}
    result = []
    for k, b in zip(n_kept, bins):
        higher = int(above[b + 1]) if b + 1 < hist.numel() else 0
        if b not in found:
            if use_triton:
                values = collect_bin_triton(u, b, int(hist[b]), **walk)
            else:
                values = collect_bin_torch(u, b, **walk)
            found[b] = torch.sort(values, descending=True).values
        result.append(float(found[b][k - higher - 1]))
    return result


def below(value: float, dtype: torch.dtype) -> float:
    """Return the largest ``dtype`` number below ``value``: r > below(θ) <=> r >= θ."""
    t = torch.tensor(value, dtype=dtype)
    return float(torch.nextafter(t, torch.tensor(-math.inf, dtype=dtype)))
