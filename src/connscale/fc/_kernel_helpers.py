"""Pieces shared by fc's kernels: tile tables, TF32 parts, bounds, epilogues, CSR placing.

The tile tables are those of every tiled Triton kernel; the Triton epilogues
are those of the degree kernels (:mod:`connscale.fc._tiles`,
:mod:`connscale.fc._exact_triton`); the placing kernel is that of their
compaction to CSR.

Every kernel module imports these from here, so that none imports another
kernel module for them.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from connscale._compute.device import HAS_TRITON

if HAS_TRITON:  # pragma: no cover - GPU, or the interpreter test in a subprocess
    import triton
    import triton.language as tl

#: Entries moved per step and row by :func:`place_kernel`. A row of a piece
#: holds ~2 kept entries of a column block at Table II's 2.8 % kept: its
#: permuted case's placing (H200, same call) took 45.3 ms over 108 windows
#: with 16, 32.2 with 8, 36.0 with 4.
PLACE_CHUNK = 8


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
    table = torch.from_numpy(np.concatenate(parts).astype(np.int32).reshape(-1))
    return table.pin_memory() if torch.cuda.is_available() else table


def tiles_on(n: int, block_m: int, block_n: int, device: torch.device) -> torch.Tensor:
    """Return :func:`upper_tiles`' table on ``device``, copied without a host sync.

    The cached table is pinned on a CUDA host and copied without blocking: a
    pageable copy waits for the device to drain its queue, which left the
    device idle while each window's next kernels were launched (one such
    wait a window: Table II 0.47 → 0.44 s on an H200).
    """
    return upper_tiles(n, block_m, block_n).to(device, non_blocking=True)


def tf32_round(x: torch.Tensor) -> torch.Tensor:
    """Round float32 ``x`` to TF32 by integer operations on its bits.

    ``x`` (float32) rounded to TF32: to nearest at 10 explicit mantissa bits,
    ties away from zero, by integer operations on the bits; NaN and ±inf kept
    (the result is float32).
    """
    if x.dtype != torch.float32:
        raise TypeError(f"tf32_round needs a float32 tensor; got {x.dtype}.")
    bits = x.contiguous().view(torch.int32)
    # Adding half of the 13 dropped bits rounds the magnitude (sign-magnitude
    # encoding: the carry runs into the exponent, never into the sign).
    rounded = ((bits + 0x1000) & -0x2000).view(torch.float32)
    return torch.where(torch.isfinite(x), rounded, x)


def split_tf32(u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(hi, lo): hi = tf32(u), lo = tf32(u − hi); hi + lo is u to about 2⁻²² |u|."""
    hi = tf32_round(u)
    return hi, tf32_round(u - hi)


# --- the bounds of the exact scheme (derived in connscale.fc._exact) --------------

_UNIT = 2.0**-11  # unit roundoff of TF32's 10 explicit mantissa bits
_ACCUMULATE = 2.0**-23  # 2 ulp of fp32 per addition


def accumulation_gamma(n_terms: int) -> float:
    """Return γ(T), the relative error bound of a sum of ``n_terms`` fp32 numbers.

    γ(T) = (T − 1)·2⁻²³ / (1 − (T − 1)·2⁻²³): the relative error bound of
    adding ``n_terms`` numbers in fp32 with up to 2 ulp per addition.
    """
    n = max(n_terms - 1, 0) * _ACCUMULATE
    if n >= 1:
        raise ValueError(f"No fp32 accumulation bound for {n_terms} terms.")
    return n / (1 - n)


def decision_margin_tensor(u: torch.Tensor) -> torch.Tensor:
    """Return :func:`decision_margin` as a device tensor, without a host sync.

    The margin is a float64 0-d tensor on ``u``'s device, computed without
    synchronising with the host.
    """
    norms = torch.nan_to_num(u.double().square().sum(-1), nan=0.0)
    s = norms.max() if norms.numel() else norms.new_zeros(())
    t = u.shape[-1]
    return s * (_UNIT * (2 + _UNIT) + accumulation_gamma(t) * (1 + _UNIT) ** 2)


def correction_margin_tensor(u: torch.Tensor, block_k: int | None = None) -> torch.Tensor:
    """Return :func:`correction_margin` as a device tensor, without a host sync.

    ε₃ with |r₃ − u_i·u_j| ≤ ε₃ for a corrected entry (derived in :mod:`connscale.fc._exact`),
    a float64 0-d tensor on ``u``'s device. ``block_k``: the K step of tiles
    that chain each step's three products before adding them to the sum
    (:mod:`connscale.fc._exact_triton`'s one pass); each sum's terms then pass
    through at most BK + S − 1 additions (hi·hiᵀ, added last in a step) and
    3·BK + S − 2 (the cross terms) over S = ⌈T / BK⌉ steps, so the bound takes
    the larger of those and T, 2T.
    """
    norms = torch.nan_to_num(u.double().square().sum(-1), nan=0.0)
    s = norms.max() if norms.numel() else norms.new_zeros(())
    t = u.shape[-1]
    hi_terms, cross_terms = t, 2 * t
    if block_k is not None:
        steps = -(-t // block_k)
        hi_terms = max(hi_terms, block_k + steps)
        cross_terms = max(cross_terms, 3 * block_k + steps - 1)
    grow = (1 + _UNIT) ** 2
    products = 3 * _UNIT**2 * (1 + 2 * _UNIT)
    sums = accumulation_gamma(hi_terms) * grow + accumulation_gamma(cross_terms) * 2 * _UNIT * grow
    return s * (products + sums + _ACCUMULATE)


if HAS_TRITON:  # pragma: no cover - GPU, or the interpreter test in a subprocess

    @triton.jit
    def degree_epilogue(
        acc,
        rows,
        cols,
        n,
        thr_ptr,
        count_ptr,
        sum_ptr,
        N_THRESH: tl.constexpr,
        ABSOLUTE: tl.constexpr,
        WEIGHTED: tl.constexpr,
    ):
        # Strict upper triangle, inside the matrix; NaN compares False.
        valid = (rows[:, None] < n) & (cols[None, :] < n) & (cols[None, :] > rows[:, None])
        if ABSOLUTE:
            value = tl.abs(acc)
        else:
            value = acc
        row_ok = rows < n
        col_ok = cols < n
        # The counts of four thresholds reduced at once, a byte each (a tile's
        # row or column holds at most 128 < 256): P = 204,492, T = 1,200,
        # weighted at two thresholds 0.401 → 0.386 s on an H200 (issue 26).
        # The int32 sums wrap (no overflow flags): a fourth byte of 128 sets
        # the sign bit, and the shift and mask read it back.
        tl.static_assert(rows.shape[0] < 256 and cols.shape[0] < 256)
        for g in tl.static_range(0, N_THRESH, 4):
            packed = tl.zeros(value.shape, dtype=tl.int32)
            for b in tl.static_range(4):
                if g + b < N_THRESH:
                    keep = valid & (value > tl.load(thr_ptr + g + b))
                    packed += keep.to(tl.int32) << (8 * b)
                    if WEIGHTED:
                        w = tl.where(keep, value, 0.0)
                        at = sum_ptr + (g + b) * n
                        row_w = tl.sum(w, axis=1).to(tl.float64)
                        tl.atomic_add(at + rows, row_w, mask=row_ok, sem="relaxed")
                        col_w = tl.sum(w, axis=0).to(tl.float64)
                        tl.atomic_add(at + cols, col_w, mask=col_ok, sem="relaxed")
            row_packed = tl.sum(packed, axis=1)
            col_packed = tl.sum(packed, axis=0)
            for b in tl.static_range(4):
                if g + b < N_THRESH:
                    at = count_ptr + (g + b) * n
                    row_c = (row_packed >> (8 * b)) & 255
                    tl.atomic_add(at + rows, row_c, mask=row_ok, sem="relaxed")
                    col_c = (col_packed >> (8 * b)) & 255
                    tl.atomic_add(at + cols, col_c, mask=col_ok, sem="relaxed")

    @triton.jit
    def place_kernel(  # noqa: PLR0913 - a Triton kernel: its tensors, strides and block sizes
        counts_ptr,
        inclusive_ptr,
        row_offsets_ptr,
        bases_ptr,
        staged_values_ptr,
        staged_columns_ptr,
        values_ptr,
        columns_ptr,
        n,
        n_cb,
        capacity,
        BM: tl.constexpr,
        CH: tl.constexpr,
    ):
        # The staged entries of piece (rows [pid0·BM, +BM), column block pid1)
        # to their CSR places: row offset + entries of the row's earlier blocks.
        rows = tl.program_id(0) * BM + tl.arange(0, BM)
        cb = tl.program_id(1)
        row_ok = rows < n
        table = rows.to(tl.int64) * n_cb + cb
        count = tl.load(counts_ptr + table, mask=row_ok, other=0)
        base = tl.load(bases_ptr + tl.program_id(0).to(tl.int64) * n_cb + cb)
        source = base + (tl.cumsum(count, axis=0) - count).to(tl.int64)
        earlier = tl.load(inclusive_ptr + table, mask=row_ok, other=0) - count
        target = tl.load(row_offsets_ptr + rows, mask=row_ok, other=0) + earlier.to(tl.int64)
        longest = tl.max(count, axis=0)
        for c in range(0, longest, CH):
            lanes = c + tl.arange(0, CH)
            src = source[:, None] + lanes[None, :]
            dst = target[:, None] + lanes[None, :]
            move = (lanes[None, :] < count[:, None]) & (src < capacity) & (dst < capacity)
            tl.store(values_ptr + dst, tl.load(staged_values_ptr + src, mask=move), mask=move)
            tl.store(columns_ptr + dst, tl.load(staged_columns_ptr + src, mask=move), mask=move)
