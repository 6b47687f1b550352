"""Exact thresholded correlation tiles on TF32 tensor cores (CUDA, Triton).

The scheme and its error bound are those of :mod:`connscale.fc._exact`:
U (N×T, float32, unit rows) is split into hi = tf32(U) and lo = tf32(U − hi).
Each upper-triangle tile of R is formed as r̃ = hi·hiᵀ on the tensor cores
(every product exact, fp32 accumulation) and decided there: an entry farther
than the margin ε from every threshold is on the side r̃ says. A tile that
holds an entry within ε of a threshold, or (when kept values are returned:
weighted degree, sparse output) an entry at or above θ − ε, is *corrected*
in the same program: r̃ + lo·hiᵀ + hi·loᵀ (3×TF32, an error about fp32's),
and all its decisions and kept values then use the corrected values. Nothing
of R reaches device memory except the kept entries.

Two epilogues, each one kernel over the tiles of the upper triangle:

- :func:`degree_exact_triton`: counts (and sums) of r > θ for several θ
  into per-row and per-column accumulators (a pair counts for both).
- :func:`compact_exact_triton`: θ <= r < upper (|r| with ``absolute``) as
  CSR parts, staged by an atomic cursor with a (row, column tile) count
  table, then placed by :func:`connscale.fc._kernel_helpers.place_kernel`.

``stats`` (int64, (3,), on the device; :func:`connscale.fc._exact.new_stats`)
accumulates in place the entries within ε of a threshold (confirmed), the
corrected tiles and the tiles in all (:func:`tiles_in`), without
synchronising.

The kernels are checked on the CPU through Triton's interpreter, where the
products of hi are exact in fp32 just as on the tensor cores.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

from connscale._compute.device import HAS_TRITON
from connscale.fc._kernel_helpers import split_tf32

if HAS_TRITON:  # pragma: no cover - GPU, or the interpreter test in a subprocess
    import triton
    import triton.language as tl

    from connscale.fc._kernel_helpers import degree_epilogue, place_kernel

# Tile shape of the kernels (rows × columns) and the K step of the products.
BLOCK_M = 128
BLOCK_N = 128
BLOCK_K = 32
NUM_WARPS = 8
# Pipeline stages of the degree kernel (long T) and of the compaction kernel
# (a window's T). On an H100 (benchmarks/RESULTS.md, "Exact thresholds"):
# degree at P = 204,492, T = 1,200 took 0.276 s with 4 stages, 0.306 s with
# 3, 0.444 s with 2; the compaction of a Table II window (N = 30,697,
# w = 150) 2.06 ms with 3 stages, 2.33 ms with 2 (the whole Table II run 0.280 s
# with 4 stages, 0.300 s with 3); 4 warps spill registers.
DEGREE_STAGES = 4
COMPACT_STAGES = 4
# Entries moved per step and row by the placing kernel, and its warps.
PLACE_CHUNK = 16
PLACE_WARPS = 4


def padded_split(u: torch.Tensor):
    """Return the TF32 hi and lo parts of ``u``, zero-padded to whole tiles.

    Hi and lo of ``u`` (see :func:`connscale.fc._kernel_helpers.split_tf32`), padded
    with zeros to whole tiles: rows to a multiple of both tile sides, columns
    to a multiple of ``BLOCK_K``.
    """
    n, t = u.shape
    block = max(BLOCK_M, BLOCK_N)
    rows = -(-n // block) * block
    cols = -(-t // BLOCK_K) * BLOCK_K
    hi = torch.zeros((rows, cols), dtype=torch.float32, device=u.device)
    lo = torch.zeros_like(hi)
    h, low = split_tf32(u.float())
    hi[:n, :t] = h
    lo[:n, :t] = low
    return hi, lo


@functools.lru_cache(maxsize=8)
def upper_tiles(n: int, block_m: int, block_n: int, group: int = 8) -> torch.Tensor:
    """Return the (bi, bj) table of the tiles that meet the strict upper triangle.

    (bi, bj) of the BM×BN tiles that meet the strict upper triangle of N
    series, as a flat int32 table, in groups of ``group`` row tiles swept
    along the columns (the group's row tiles and each column tile are reused
    from L2).
    """
    n_rows, n_cols = -(-n // block_m), -(-n // block_n)
    parts = []
    for g0 in range(0, n_rows, group):
        bi = np.arange(g0, min(n_rows, g0 + group))
        bj = np.arange(n_cols)
        grid_j, grid_i = np.meshgrid(bj, bi, indexing="ij")  # column-major sweep
        upper = (grid_j + 1) * block_n - 1 > grid_i * block_m  # a column past the first row
        parts.append(np.stack([grid_i[upper], grid_j[upper]], axis=1))
    return torch.from_numpy(np.concatenate(parts).astype(np.int32).reshape(-1))


def tiles_in(n: int) -> int:
    """Tiles of the kernels over the upper triangle of N series."""
    return upper_tiles(n, BLOCK_M, BLOCK_N).numel() // 2


if HAS_TRITON:  # pragma: no cover - GPU, or the interpreter test in a subprocess

    @triton.jit
    def _tile_dot(
        x_ptr, y_ptr, rows, cols, k_padded, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr
    ):
        # X[rows]·Y[cols]ᵀ over the padded K on the tensor cores (TF32 inputs).
        ks = tl.arange(0, BK)
        a_off = rows.to(tl.int64)[:, None] * k_padded + ks[None, :]
        b_off = cols.to(tl.int64)[:, None] * k_padded + ks[None, :]
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for _ in range(0, k_padded, BK):
            a = tl.load(x_ptr + a_off)
            b = tl.load(y_ptr + b_off)
            acc = tl.dot(a, tl.trans(b), acc, input_precision="tf32")
            a_off += BK
            b_off += BK
        return acc

    @triton.jit
    def _tile_correction(
        hi_ptr, lo_ptr, rows, cols, k_padded, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr
    ):
        # lo·hiᵀ + hi·loᵀ: two loops of two operands each, so that the shared
        # memory of the pipeline stays that of the main product.
        acc = _tile_dot(lo_ptr, hi_ptr, rows, cols, k_padded, BM, BN, BK)
        return acc + _tile_dot(hi_ptr, lo_ptr, rows, cols, k_padded, BM, BN, BK)

    @triton.jit
    def _tile_start(
        hi_ptr,
        pairs_ptr,
        n,
        k_padded,
        ABSOLUTE: tl.constexpr,
        BM: tl.constexpr,
        BN: tl.constexpr,
        BK: tl.constexpr,
    ):
        # This program's tile of the upper triangle: its block indices, rows,
        # columns, r̃ = hi·hiᵀ, the strict-upper mask and r̃ (|r̃| with ABSOLUTE).
        pid = tl.program_id(0)
        bi = tl.load(pairs_ptr + 2 * pid)
        bj = tl.load(pairs_ptr + 2 * pid + 1)
        rows = bi * BM + tl.arange(0, BM)
        cols = bj * BN + tl.arange(0, BN)
        acc = _tile_dot(hi_ptr, hi_ptr, rows, cols, k_padded, BM, BN, BK)
        valid = (rows[:, None] < n) & (cols[None, :] < n) & (cols[None, :] > rows[:, None])
        value = _magnitude(acc, ABSOLUTE)
        return bi, bj, rows, cols, acc, valid, value

    @triton.jit
    def _magnitude(acc, ABSOLUTE: tl.constexpr):
        if ABSOLUTE:
            value = tl.abs(acc)
        else:
            value = acc
        return value

    @triton.jit
    def _exact_degree_kernel(  # noqa: PLR0913 - a Triton kernel: its tensors, strides and block sizes
        hi_ptr,
        lo_ptr,
        pairs_ptr,
        thr_ptr,
        count_ptr,
        sum_ptr,
        stats_ptr,
        n,
        k_padded,
        margin_ptr,
        theta_min,
        N_THRESH: tl.constexpr,
        ABSOLUTE: tl.constexpr,
        WEIGHTED: tl.constexpr,
        BM: tl.constexpr,
        BN: tl.constexpr,
        BK: tl.constexpr,
    ):
        margin = tl.load(margin_ptr)
        bi, bj, rows, cols, acc, valid, value = _tile_start(
            hi_ptr, pairs_ptr, n, k_padded, ABSOLUTE, BM, BN, BK
        )
        if WEIGHTED:  # kept values are returned: correct tiles with any r̃ >= θ_min − ε
            high = valid & (value >= theta_min - margin)
            correct = tl.max(tl.max(high.to(tl.int32), axis=1), axis=0) > 0
        else:  # correct tiles with an entry within ε of a threshold
            near = valid & (tl.abs(value - tl.load(thr_ptr)) <= margin)
            for i in tl.static_range(1, N_THRESH):
                near = near | (valid & (tl.abs(value - tl.load(thr_ptr + i)) <= margin))
            correct = tl.max(tl.max(near.to(tl.int32), axis=1), axis=0) > 0
        if correct:  # count the entries within ε of any threshold (each once)
            near = valid & (tl.abs(value - tl.load(thr_ptr)) <= margin)
            for i in tl.static_range(1, N_THRESH):
                near = near | (valid & (tl.abs(value - tl.load(thr_ptr + i)) <= margin))
            n_near = tl.sum(tl.sum(near.to(tl.int32), axis=1), axis=0)
            acc += _tile_correction(hi_ptr, lo_ptr, rows, cols, k_padded, BM, BN, BK)
            tl.atomic_add(stats_ptr, n_near.to(tl.int64))
            tl.atomic_add(stats_ptr + 1, 1)
            value = _magnitude(acc, ABSOLUTE)
        degree_epilogue(
            acc, rows, cols, n, thr_ptr, count_ptr, sum_ptr, N_THRESH, ABSOLUTE, WEIGHTED
        )

    @triton.jit
    def _exact_compact_kernel(  # noqa: PLR0913 - a Triton kernel: its tensors, strides and block sizes
        hi_ptr,
        lo_ptr,
        pairs_ptr,
        counts_ptr,
        bases_ptr,
        staged_values_ptr,
        staged_columns_ptr,
        cursor_ptr,
        stats_ptr,
        n,
        k_padded,
        n_cb,
        capacity,
        threshold,
        upper,
        margin_ptr,
        ABSOLUTE: tl.constexpr,
        BOUNDED: tl.constexpr,
        BM: tl.constexpr,
        BN: tl.constexpr,
        BK: tl.constexpr,
    ):
        margin = tl.load(margin_ptr)
        bi, bj, rows, cols, acc, valid, value = _tile_start(
            hi_ptr, pairs_ptr, n, k_padded, ABSOLUTE, BM, BN, BK
        )
        high = valid & (value >= threshold - margin)
        if BOUNDED:
            high = high & (value < upper + margin)
        if tl.max(tl.max(high.to(tl.int32), axis=1), axis=0) > 0:
            near = valid & (tl.abs(value - threshold) <= margin)
            if BOUNDED:
                near = near | (valid & (tl.abs(value - upper) <= margin))
            n_near = tl.sum(tl.sum(near.to(tl.int32), axis=1), axis=0)
            acc += _tile_correction(hi_ptr, lo_ptr, rows, cols, k_padded, BM, BN, BK)
            tl.atomic_add(stats_ptr, n_near.to(tl.int64))
            tl.atomic_add(stats_ptr + 1, 1)
            value = _magnitude(acc, ABSOLUTE)
            keep = valid & (value >= threshold)  # NaN compares False
            if BOUNDED:
                keep = keep & (value < upper)
            kept = keep.to(tl.int32)
            row_counts = tl.sum(kept, axis=1)
            total = tl.sum(row_counts, axis=0)
            if total > 0:
                base = tl.atomic_add(cursor_ptr, total.to(tl.int64))
                row_start = tl.cumsum(row_counts, axis=0) - row_counts
                within = tl.cumsum(kept, axis=1) - kept
                position = base + (row_start[:, None] + within).to(tl.int64)
                ok = keep & (position < capacity)
                tl.store(staged_values_ptr + position, acc, mask=ok)  # signed r
                tl.store(
                    staged_columns_ptr + position,
                    tl.broadcast_to(cols[None, :], (BM, BN)),
                    mask=ok,
                )
                tl.store(counts_ptr + rows.to(tl.int64) * n_cb + bj, row_counts, mask=rows < n)
                tl.store(bases_ptr + bi.to(tl.int64) * n_cb + bj, base)


def _margin_tensor(margin, device: torch.device) -> torch.Tensor:
    """Return ε as a one-element float32 device tensor, rounded up.

    ``margin`` is a float, or a device tensor computed without synchronising;
    it is rounded up so that ε is never smaller.
    """
    # 2⁻¹⁶ more: the kernels compare fl(r̃ − θ) with ε, which rounds.
    m = torch.as_tensor(margin, dtype=torch.float64, device=device).reshape(1) * (1 + 2.0**-16)
    m32 = m.float()
    return torch.where(m32.double() < m, torch.nextafter(m32, m32 + 1), m32)


def _launch_options(u: torch.Tensor, stages: int) -> dict:
    return {"num_warps": NUM_WARPS, "num_stages": stages} if u.is_cuda else {}


def degree_exact_triton(
    u: torch.Tensor,
    thresholds: torch.Tensor,
    *,
    absolute: bool,
    weighted: bool,
    margin: float,
    stats: torch.Tensor,
    split: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Count the degree of every series at every threshold by the exact Triton kernels.

    Degree of every series at every threshold (r > θ, |r| > θ with
    ``absolute``), decided on TF32 tensor cores and confirmed where within
    ``margin`` (see the module docstring).

    Parameters
    ----------
    u : torch.Tensor of shape (N, T), float32
        Normalised series (rows of constant series all NaN: never counted).
    thresholds : torch.Tensor of shape (K,)
    absolute, weighted : bool
        ``weighted`` also sums the kept r (|r|), from corrected values.
    margin : float or torch.Tensor
        ε of :func:`connscale.fc._exact.decision_margin` (a 0-d or 1-element
        device tensor is read by the kernel, without a host round trip).
    stats : torch.Tensor of shape (3,), int64, on the device
        Confirmed entries, corrected tiles and tiles are added to it.
    split : (hi, lo), optional
        :func:`padded_split` of ``u`` when the caller has it.

    Returns
    -------
    counts : torch.Tensor of shape (K, N), int64
    sums : torch.Tensor of shape (K, N), float64, or None
    """
    n = u.shape[0]
    hi, lo = padded_split(u) if split is None else split
    k = thresholds.numel()
    thr = thresholds.to(device=u.device, dtype=torch.float32).contiguous()
    counts = torch.zeros((k, n), dtype=torch.int32, device=u.device)
    sums = torch.zeros((k, n) if weighted else (1,), dtype=torch.float64, device=u.device)
    pairs = upper_tiles(n, BLOCK_M, BLOCK_N).to(u.device)
    _exact_degree_kernel[(pairs.numel() // 2,)](
        hi,
        lo,
        pairs,
        thr,
        counts,
        sums,
        stats,
        n,
        hi.shape[1],
        _margin_tensor(margin, u.device),
        float(thr.min()) if k else 0.0,
        N_THRESH=k,
        ABSOLUTE=bool(absolute),
        WEIGHTED=bool(weighted),
        BM=BLOCK_M,
        BN=BLOCK_N,
        BK=BLOCK_K,
        **_launch_options(u, DEGREE_STAGES),
    )
    stats[2] += tiles_in(n)
    return counts.to(torch.int64), (sums if weighted else None)


def compact_table_bytes(n: int) -> int:
    """Device bytes of :func:`compact_exact_triton`'s tables for N series."""
    n_cb = -(-n // BLOCK_N)
    return n * n_cb * 4 * 2 + -(-n // BLOCK_M) * n_cb * 8 + n * 16


def compact_exact_triton(
    u: torch.Tensor,
    threshold: float,
    *,
    absolute: bool,
    margin: float,
    values: torch.Tensor,
    columns: torch.Tensor,
    row_counts: torch.Tensor,
    staged_values: torch.Tensor,
    staged_columns: torch.Tensor,
    stats: torch.Tensor,
    upper: float = math.inf,
    split: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Compact the kept upper-triangle entries to CSR parts by the exact Triton kernels.

    The strict upper triangle's ``threshold`` <= r < ``upper`` (|r| with
    ``absolute``) as CSR parts, decided on TF32 tensor cores and confirmed
    where within ``margin``; kept values from corrected tiles.

    Same contract as :func:`connscale.fc._tiles.compact_upper_triangle`:
    kept values to ``values``, their int32 columns to ``columns`` (row-major),
    the kept count of every row to ``row_counts`` (int64, N); entries past
    the capacity (``values.numel()``) are dropped; ``staged_values`` and
    ``staged_columns`` are work buffers of at least that capacity. ``stats``:
    see :func:`degree_exact_triton`. Runs on the current stream without
    synchronising.

    Returns
    -------
    torch.Tensor of shape (1,), int64, on the device
        The number of entries kept (larger than the capacity when entries
        were dropped: redo with larger buffers).
    """
    n = u.shape[0]
    hi, lo = padded_split(u) if split is None else split
    n_rb, n_cb = -(-n // BLOCK_M), -(-n // BLOCK_N)
    capacity = values.numel()
    counts = torch.zeros((n, n_cb), dtype=torch.int32, device=u.device)
    bases = torch.zeros((n_rb, n_cb), dtype=torch.int64, device=u.device)
    cursor = torch.zeros(1, dtype=torch.int64, device=u.device)
    pairs = upper_tiles(n, BLOCK_M, BLOCK_N).to(u.device)
    bounded = math.isfinite(upper)
    _exact_compact_kernel[(pairs.numel() // 2,)](
        hi,
        lo,
        pairs,
        counts,
        bases,
        staged_values,
        staged_columns,
        cursor,
        stats,
        n,
        hi.shape[1],
        n_cb,
        capacity,
        float(threshold),
        float(upper) if bounded else 0.0,
        _margin_tensor(margin, u.device),
        ABSOLUTE=bool(absolute),
        BOUNDED=bounded,
        BM=BLOCK_M,
        BN=BLOCK_N,
        BK=BLOCK_K,
        **_launch_options(u, COMPACT_STAGES),
    )
    stats[2] += tiles_in(n)
    inclusive = torch.cumsum(counts, 1, dtype=torch.int32)
    row_counts.copy_(inclusive[:, -1])
    row_offsets = torch.cumsum(row_counts, 0)
    row_offsets -= row_counts
    place_kernel[(n_rb, n_cb)](
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
        BM=BLOCK_M,
        CH=PLACE_CHUNK,
        **({"num_warps": PLACE_WARPS} if u.is_cuda else {}),
    )
    return cursor


__all__ = [
    "BLOCK_M",
    "BLOCK_N",
    "compact_exact_triton",
    "compact_table_bytes",
    "degree_exact_triton",
    "padded_split",
    "tiles_in",
    "upper_tiles",
]
