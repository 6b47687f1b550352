"""Exact thresholded correlation tiles on tensor cores (CUDA, Triton).

The scheme and its error bounds are those of :mod:`connscale.fc._exact`:
U (N×T, float32, unit rows) is split into hi = tf32(U) and lo = tf32(U − hi)
(11 significant bits each). Both are exact in IEEE half precision once scaled
by 2¹⁵ (only values below 2⁻²⁹ fall to fp16's subnormals; their error is in
the bounds), so the products run on the fp16 tensor cores, twice TF32's rate,
with every product exact and fp32 accumulation. The operands are one fp16
matrix A = 2¹⁵·[lo | hi] (:func:`padded_split`).

Each upper-triangle tile of R is formed as r̃ = hi·hiᵀ and decided there: an
entry farther than the margin ε from every threshold is on the side r̃ says.
Tensor cores round the sums of their accumulator toward zero: chained over
the K steps, r̃ drifts toward zero by ~1 ulp a step (−2.7e-6 at T = 1,200 on
an H100, every entry low), which made entries just above θ fall below it.
Here each K step's product is added to the running sum with a
round-to-nearest add (``add.rn.f32``), which leaves the error two-sided. A
tile that holds kept values (weighted degree, sparse output) is *corrected*
in the same program: r₃ = r̃ + (lo·hiᵀ + hi·loᵀ) (an error about fp32's,
bounded by ε₃). The jobs that return kept values form r₃ in one pass
instead: each K step chains lo·hiᵀ, hi·loᵀ and then hi·hiᵀ in one
accumulator, added to the sum rounding to nearest (ε₃ counts the additions
each term passes through). What is decided is then confirmed *entry by entry*:

- degree (:func:`degree_exact_triton`): the entries within ε of a threshold
  (ε₃ in a corrected tile) are left out of the tile's counts and compacted,
  (i, j), into a list; a second kernel recomputes each from its two rows of U
  in float64 (exact products of float32 numbers) and counts it;
- compaction (:func:`compact_exact_triton`): a tile with an entry within ε₃
  of a bound recomputes those entries in place from U in float64, a row of
  the tile at a time, and decides them there (their value kept as its
  nearest float32), then stages its kept entries by an atomic cursor with a
  (row, column tile) count table, each entry's place in its row counted
  from the row's flags packed into 32-bit words; they are placed by
  :func:`connscale.fc._kernel_helpers.place_kernel`.

Nothing of R reaches device memory except the kept entries (and the short
list of entries to confirm). The kernels' atomics are relaxed: what they add
up is read after the kernel, and acquire-release ones fenced every add (an L1
invalidation and an error barrier each, 5 % of the degree kernel's stall
samples on an H200). ``stats`` (int64, (3,), on the device;
:func:`connscale.fc._exact.new_stats`) accumulates in place the entries
recomputed, the corrected tiles and the tiles in all (:func:`tiles_in`),
without synchronising.

The kernels are checked on the CPU through Triton's interpreter, whose fp16
products are exact in fp32 as on the tensor cores (the round-to-nearest add
is a plain add there: numpy's sums round to nearest).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from connscale._compute.device import HAS_TRITON
from connscale.fc._kernel_helpers import (
    PLACE_CHUNK,
    correction_margin_tensor,
    decision_margin_tensor,
    split_tf32,
    tiles_on,
    upper_tiles,
)

if HAS_TRITON:  # pragma: no cover - GPU, or the interpreter test in a subprocess
    import triton
    import triton.language as tl

    try:
        from triton.tools.tensor_descriptor import TensorDescriptor
    except ImportError:  # an older Triton: the tiles that need it take two passes
        TensorDescriptor = None

    from connscale.fc._kernel_helpers import degree_epilogue, place_kernel

# Tile shape of the kernels (rows × columns).
BLOCK_M = 128
BLOCK_N = 128
NUM_WARPS = 8
# K step of the fp16 products: 64 for long series, 32 for short ones (a
# window of 150 pads to 160, not 192). On an H100 (issue 26's diagnosis, N =
# 32,768 full grid): T = 1,200 hi·hiᵀ 7.47 ms with 64 (14.1 ms for the former
# TF32 tiles), T = 160: 1.94 ms with 64 and 2.07 ms with 32.
LONG_K = 64
SHORT_K = 32
SHORT_SERIES = 256
# K step of the float64 recomputation of a compaction tile's row: its
# [BLOCK_N, FP64_K] loads set the kernel's registers (255, spilling), though
# ~1 % of the tiles take that branch. Table II's permuted case (H200, same
# call): compaction kernel 355 ms over 108 windows with 32, 327 with 16, 300
# with 8 or 4.
FP64_K = 8
# Pipeline stages of the degree and compaction kernels (one fewer in one pass:
# its four operands a stage would not fit in shared memory at 4).
DEGREE_STAGES = 4
COMPACT_STAGES = 4
# Rows of a compaction tile, and its warps. Table II's permuted case on an H100
# (issue 26, same call): 64 rows and 4 warps 0.637 s; 128 and 8 (the degree
# kernel's) 0.688 s; 64 and 8 0.741 s; 32 and 4 0.774 s; 64 and 2 2.10 s.
COMPACT_BLOCK_M = 64
COMPACT_WARPS = 4
# Warps of the placing kernel.
PLACE_WARPS = 4
# Entries a program of the confirming kernel recomputes, and its step along T.
CONFIRM_ENTRIES = 64
CONFIRM_K = 64
#: Add each K step's product rounding to nearest on CUDA (False: chained in the
#: tensor cores' accumulator, which rounds toward zero; for measurements only).
ROUND_NEAREST_ON_CUDA = True
#: Form every tile's r₃ in one loop (three products a K step) for the jobs that
#: return kept values, instead of r̃ first and the correction where a tile holds
#: one. Chosen from the rates measured on realistic (permuted) order
#: (benchmarks/RESULTS.md, issue 26): weighted degree, P = 204,492, T = 1,200,
#: one pass 0.436 s, two passes 0.470 s (H100); GPU-DFC's Table II (w = 150)
#: once a step's three products were chained in one accumulator, one pass
#: 0.577 / 0.607 s, two passes 0.589 / 0.620 s (H200, two calls of one host).
DEGREE_ONE_PASS = True
COMPACT_ONE_PASS = True
#: log2 of the scale of A (hi and lo times 2¹⁵ stay below fp16's 65,504 for |u| <= 1).
SCALE_BITS = 15


@dataclass(frozen=True)
class Operands:
    """The fp16 operands of the kernels for one U.

    Attributes
    ----------
    a : torch.Tensor of shape (rows, 2 * k_half), float16
        2¹⁵·[lo | hi], rows padded with zeros to whole tiles, each half's
        columns to a multiple of ``block_k``.
    k_half : int
        Columns of each half.
    block_k : int
        K step of the products.
    """

    a: torch.Tensor
    k_half: int
    block_k: int

    @property
    def inverse_scale(self) -> float:
        """Return the factor that brings a product of two operands back to r (2⁻³⁰)."""
        return 2.0 ** (-2 * SCALE_BITS)


def padded_split(u: torch.Tensor) -> Operands:
    """Return the fp16 operands 2¹⁵·[lo | hi] of ``u``, zero-padded to whole tiles.

    ``u`` holds unit rows (|u| <= 1; NaN rows stay NaN). hi = tf32(u) and
    lo = tf32(u − hi) (:func:`connscale.fc._kernel_helpers.split_tf32`) have
    11 significant bits, so 2¹⁵·hi and 2¹⁵·lo are exact in fp16 but for values
    below 2⁻²⁹ (fp16's subnormals; their error is part of the bounds).
    """
    n, t = u.shape
    block_k = LONG_K if t > SHORT_SERIES else SHORT_K
    block = max(BLOCK_M, BLOCK_N)
    rows = -(-n // block) * block
    k_half = -(-t // block_k) * block_k
    a = torch.zeros((rows, 2 * k_half), dtype=torch.float16, device=u.device)
    hi, lo = split_tf32(u.float())
    scale = 2.0**SCALE_BITS
    a[:n, :t] = (lo * scale).half()
    a[:n, k_half : k_half + t] = (hi * scale).half()
    return Operands(a, k_half, block_k)


def fp16_margin(n_timepoints: int) -> float:
    """Return the bound of the error that fp16's subnormals add to a product of rows.

    A scaled value below fp16's smallest normal (2⁻¹⁴) is off by at most
    2⁻²⁵ (scaled), 2⁻⁴⁰ of U; over T terms of rows of norm <= 1 the product
    of two rows moves by at most 2·2⁻⁴⁰·√T for hi·hiᵀ and as much for each
    correction term: 2⁻³⁷·√T covers them all.
    """
    return 2.0**-37 * math.sqrt(max(n_timepoints, 1))


def tiles_in(n: int, block_m: int = BLOCK_M) -> int:
    """Tiles of ``block_m`` rows over the upper triangle of N series (the compaction's: 64)."""
    return upper_tiles(n, block_m, BLOCK_N).numel() // 2


if HAS_TRITON:  # pragma: no cover - GPU, or the interpreter test in a subprocess

    @triton.jit
    def _add_rn(acc, part, ROUND_NEAREST: tl.constexpr):
        # acc + part rounded to nearest, never fused into the tensor cores'
        # truncating accumulation (on CUDA); a plain add in the interpreter.
        if ROUND_NEAREST:
            total = tl.inline_asm_elementwise(
                "add.rn.f32 $0, $1, $2;",
                "=f,f,f",
                [acc, part],
                dtype=tl.float32,
                is_pure=True,
                pack=1,
            )
        else:
            total = acc + part
        return total

    @triton.jit
    def _tile_hi(
        a_ptr,
        rows,
        cols,
        k_half,
        ROUND_NEAREST: tl.constexpr,
        BM: tl.constexpr,
        BN: tl.constexpr,
        BK: tl.constexpr,
    ):
        # 2³⁰·hi[rows]·hi[cols]ᵀ: the hi halves of A, each K step's product
        # added to the sum rounding to nearest.
        ks = tl.arange(0, BK)
        width = 2 * k_half
        a_off = rows.to(tl.int64)[:, None] * width + k_half + ks[None, :]
        b_off = cols.to(tl.int64)[:, None] * width + k_half + ks[None, :]
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for _ in range(0, k_half, BK):
            part = tl.dot(tl.load(a_ptr + a_off), tl.trans(tl.load(a_ptr + b_off)))
            acc = _add_rn(acc, part, ROUND_NEAREST)
            a_off += BK
            b_off += BK
        return acc

    @triton.jit
    def _tile_product(a_ptr, rows, cols, a_start, b_start, k_half, acc, BK: tl.constexpr):
        # acc + A[rows, a_start:a_start + k]·A[cols, b_start:b_start + k]ᵀ, chained.
        ks = tl.arange(0, BK)
        width = 2 * k_half
        a_off = rows.to(tl.int64)[:, None] * width + a_start + ks[None, :]
        b_off = cols.to(tl.int64)[:, None] * width + b_start + ks[None, :]
        for _ in range(0, k_half, BK):
            acc = tl.dot(tl.load(a_ptr + a_off), tl.trans(tl.load(a_ptr + b_off)), acc)
            a_off += BK
            b_off += BK
        return acc

    @triton.jit
    def _tile_cross(
        a_ptr, rows, cols, k_half, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr
    ):
        # 2³⁰·(lo·hiᵀ + hi·loᵀ): two loops of two operands each (A's lo half
        # against its hi half, then the other way), so that the pipeline's
        # shared memory stays that of r̃'s. The terms are ~2⁻¹¹ of r: their
        # own rounding is far below fp32's at r.
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        acc = _tile_product(a_ptr, rows, cols, 0, k_half, k_half, acc, BK)
        return _tile_product(a_ptr, rows, cols, k_half, 0, k_half, acc, BK)

    @triton.jit
    def _tile_r3(
        a_desc,
        b_desc,
        row0,
        col0,
        k_half,
        ROUND_NEAREST: tl.constexpr,
        BM: tl.constexpr,
        BN: tl.constexpr,
        BK: tl.constexpr,
    ):
        # 2³⁰·r₃ in one loop: each K step loads lo and hi of the rows (``row0``
        # on, A's descriptor of BM × BK blocks) and of the columns (``col0``
        # on, its BN × BK one; TMA on Hopper) and chains the step's three
        # products in one accumulator, the small cross terms first, then adds
        # it to the sum rounding to nearest. One [BM, BN] accumulator fewer
        # than a separate chain of the cross terms.
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, k_half, BK):
            lo_a = a_desc.load([row0, k])
            hi_a = a_desc.load([row0, k + k_half])
            lo_b = tl.trans(b_desc.load([col0, k]))
            hi_b = tl.trans(b_desc.load([col0, k + k_half]))
            part = tl.dot(lo_a, hi_b)
            part = tl.dot(hi_a, lo_b, part)
            part = tl.dot(hi_a, hi_b, part)
            acc = _add_rn(acc, part, ROUND_NEAREST)
        return acc

    @triton.jit
    def _row_fp64(u_ptr, stride, row, cols, n, t, BN: tl.constexpr, BKF: tl.constexpr):
        # U[row]·U[cols]ᵀ in float64 from U itself, one row of a tile: the
        # products of float32 numbers are exact there, the sums round at 2⁻⁵³.
        ks = tl.arange(0, BKF)
        col_ok = (cols < n)[:, None]
        a_base = u_ptr + row.to(tl.int64) * stride
        b_base = u_ptr + cols.to(tl.int64)[:, None] * stride
        acc = tl.zeros((BN,), dtype=tl.float64)
        for k0 in range(0, t, BKF):
            k_ok = k0 + ks < t
            a = tl.load(a_base + k0 + ks, mask=k_ok, other=0.0).to(tl.float64)
            b = tl.load(b_base + k0 + ks[None, :], mask=col_ok & k_ok[None, :], other=0.0)
            acc += tl.sum(a[None, :] * b.to(tl.float64), axis=1)
        return acc

    @triton.jit
    def _magnitude(acc, ABSOLUTE: tl.constexpr):
        if ABSOLUTE:
            value = tl.abs(acc)
        else:
            value = acc
        return value

    @triton.jit
    def _any(mask):
        return tl.max(tl.max(mask.to(tl.int32), axis=1), axis=0) > 0

    @triton.jit
    def _tile_start(
        a_ptr,
        b_ptr,
        pairs_ptr,
        n,
        k_half,
        inverse_scale,
        ABSOLUTE: tl.constexpr,
        ROUND_NEAREST: tl.constexpr,
        ONE_PASS: tl.constexpr,
        BM: tl.constexpr,
        BN: tl.constexpr,
        BK: tl.constexpr,
    ):
        # This program's tile of the upper triangle: its block indices, rows,
        # columns, r̃ = hi·hiᵀ (r₃ with ONE_PASS, where ``a_ptr`` is A's tensor
        # descriptors: :func:`_operands`), the strict-upper mask and the value
        # compared (|r| with ABSOLUTE).
        pid = tl.program_id(0)
        bi = tl.load(pairs_ptr + 2 * pid)
        bj = tl.load(pairs_ptr + 2 * pid + 1)
        rows = bi * BM + tl.arange(0, BM)
        cols = bj * BN + tl.arange(0, BN)
        if ONE_PASS:
            acc = _tile_r3(a_ptr, b_ptr, bi * BM, bj * BN, k_half, ROUND_NEAREST, BM, BN, BK)
            acc = acc * inverse_scale
        else:
            acc = _tile_hi(a_ptr, rows, cols, k_half, ROUND_NEAREST, BM, BN, BK) * inverse_scale
        valid = (rows[:, None] < n) & (cols[None, :] < n) & (cols[None, :] > rows[:, None])
        value = _magnitude(acc, ABSOLUTE)
        return bi, bj, rows, cols, acc, valid, value

    @triton.jit
    def _near_any(value, valid, thr_ptr, bound, N_THRESH: tl.constexpr):
        near = valid & (tl.abs(value - tl.load(thr_ptr)) <= bound)
        for i in tl.static_range(1, N_THRESH):
            near = near | (valid & (tl.abs(value - tl.load(thr_ptr + i)) <= bound))
        return near

    @triton.jit
    def _append_pairs(near, rows, cols, list_ptrs):
        # Append the (row, column) of the ``near`` entries to the list at an
        # atomic cursor, a row of the tile at a time (a tile holds ~10⁻⁴ of
        # them on real data: a scan of the whole tile spilled 266 registers a
        # thread in every tile); entries past the capacity are counted, not stored.
        rows_ptr, cols_ptr, cursor_ptr, capacity = list_ptrs
        flags = near.to(tl.int32)
        row_counts = tl.sum(flags, axis=1)
        waiting = row_counts > 0
        while tl.max(waiting.to(tl.int32), axis=0) > 0:
            row = tl.min(tl.where(waiting, rows, 2147483647), axis=0)
            here = tl.sum(tl.where((rows == row)[:, None], flags, 0), axis=0)
            base = tl.atomic_add(cursor_ptr, tl.sum(here, axis=0).to(tl.int64), sem="relaxed")
            position = base + (tl.cumsum(here, axis=0) - here).to(tl.int64)
            ok = (here > 0) & (position < capacity)
            tl.store(rows_ptr + position, tl.zeros_like(here) + row, mask=ok)
            tl.store(cols_ptr + position, cols, mask=ok)
            waiting = waiting & (rows != row)
        return tl.sum(row_counts, axis=0)

    @triton.jit
    def _exact_degree_kernel(  # noqa: PLR0913 - a Triton kernel: its tensors, strides and block sizes
        a_ptr,
        b_ptr,
        pairs_ptr,
        thr_ptr,
        count_ptr,
        sum_ptr,
        stats_ptr,
        near_rows_ptr,
        near_cols_ptr,
        cursor_ptr,
        capacity,
        n,
        k_half,
        inverse_scale,
        margin_ptr,
        theta_min,
        N_THRESH: tl.constexpr,
        ABSOLUTE: tl.constexpr,
        WEIGHTED: tl.constexpr,
        ROUND_NEAREST: tl.constexpr,
        ONE_PASS: tl.constexpr,
        BM: tl.constexpr,
        BN: tl.constexpr,
        BK: tl.constexpr,
    ):
        margin = tl.load(margin_ptr)
        bi, bj, rows, cols, acc, valid, value = _tile_start(
            a_ptr,
            b_ptr,
            pairs_ptr,
            n,
            k_half,
            inverse_scale,
            ABSOLUTE,
            ROUND_NEAREST,
            ONE_PASS,
            BM,
            BN,
            BK,
        )
        bound = margin
        if ONE_PASS:  # every tile corrected
            bound = tl.load(margin_ptr + 1)
            tl.atomic_add(stats_ptr + 1, 1, sem="relaxed")
        elif WEIGHTED:  # kept values are summed: correct tiles with any r̃ >= θ_min − ε
            if _any(valid & (value >= theta_min - margin)):
                acc = acc + _tile_cross(a_ptr, rows, cols, k_half, BM, BN, BK) * inverse_scale
                value = _magnitude(acc, ABSOLUTE)
                bound = tl.load(margin_ptr + 1)
                tl.atomic_add(stats_ptr + 1, 1, sem="relaxed")
        near = _near_any(value, valid, thr_ptr, bound, N_THRESH)
        if _any(near):  # confirmed by _confirm_degree_kernel, not counted here
            total = _append_pairs(
                near, rows, cols, (near_rows_ptr, near_cols_ptr, cursor_ptr, capacity)
            )
            tl.atomic_add(stats_ptr, total.to(tl.int64), sem="relaxed")
            acc = tl.where(near, float("nan"), acc)
        degree_epilogue(
            acc, rows, cols, n, thr_ptr, count_ptr, sum_ptr, N_THRESH, ABSOLUTE, WEIGHTED
        )

    @triton.jit
    def _confirm_degree_kernel(  # noqa: PLR0913 - a Triton kernel: its tensors, strides and block sizes
        u_ptr,
        stride,
        near_rows_ptr,
        near_cols_ptr,
        n_near,
        thr_ptr,
        count_ptr,
        sum_ptr,
        n,
        t,
        N_THRESH: tl.constexpr,
        ABSOLUTE: tl.constexpr,
        WEIGHTED: tl.constexpr,
        BE: tl.constexpr,
        BT: tl.constexpr,
    ):
        # Each listed (i, j): r = U[i]·U[j] in float64 (exact products of
        # float32 numbers), decided with the fp32 path's comparison r > θ.
        entries = tl.program_id(0) * BE + tl.arange(0, BE)
        ok = entries < n_near
        i = tl.load(near_rows_ptr + entries, mask=ok, other=0)
        j = tl.load(near_cols_ptr + entries, mask=ok, other=0)
        ts = tl.arange(0, BT)
        a_base = u_ptr + i.to(tl.int64)[:, None] * stride
        b_base = u_ptr + j.to(tl.int64)[:, None] * stride
        acc = tl.zeros((BE,), dtype=tl.float64)
        for t0 in range(0, t, BT):
            mask = ok[:, None] & (t0 + ts < t)[None, :]
            a = tl.load(a_base + t0 + ts[None, :], mask=mask, other=0.0).to(tl.float64)
            b = tl.load(b_base + t0 + ts[None, :], mask=mask, other=0.0).to(tl.float64)
            acc += tl.sum(a * b, axis=1)
        value = _magnitude(acc, ABSOLUTE)
        for k in tl.static_range(N_THRESH):
            keep = ok & (value > tl.load(thr_ptr + k).to(tl.float64))
            tl.atomic_add(count_ptr + k * n + i, keep.to(tl.int32), mask=ok, sem="relaxed")
            tl.atomic_add(count_ptr + k * n + j, keep.to(tl.int32), mask=ok, sem="relaxed")
            if WEIGHTED:
                kept = tl.where(keep, value, 0.0)
                tl.atomic_add(sum_ptr + k * n + i, kept, mask=ok, sem="relaxed")
                tl.atomic_add(sum_ptr + k * n + j, kept, mask=ok, sem="relaxed")

    @triton.jit
    def _popcount(x, NATIVE: tl.constexpr):
        # The set bits of each uint32: the GPU's popc, else a SWAR count.
        if NATIVE:
            count = tl.inline_asm_elementwise(
                "popc.b32 $0, $1;", "=r,r", [x], dtype=tl.int32, is_pure=True, pack=1
            )
        else:
            x = x - ((x >> 1) & 0x55555555)
            x = (x & 0x33333333) + ((x >> 2) & 0x33333333)
            x = (x + (x >> 4)) & 0x0F0F0F0F
            count = ((x * 0x01010101) >> 24).to(tl.int32)
        return count

    @triton.jit
    def _kept_before(keep, BN: tl.constexpr, NATIVE: tl.constexpr):
        # The entries kept before each one in its row, and each row's count:
        # the row's flags packed into 32-bit words (a row reduction each),
        # then a popcount of the word's lower bits plus the earlier words'.
        # Cheaper than a scan along the rows (tl.cumsum): Table II's
        # compaction kernel 448 → 423 ms over 108 windows on an H100.
        tl.static_assert(BN % 32 == 0)
        lane = tl.arange(0, BN)
        bit = (lane % 32).to(tl.uint32)
        flags = keep.to(tl.uint32) << bit[None, :]
        below = (tl.full((BN,), 1, tl.uint32) << bit) - 1
        word = tl.zeros(keep.shape, dtype=tl.uint32)
        earlier = tl.zeros(keep.shape, dtype=tl.int32)
        count = tl.zeros((keep.shape[0],), dtype=tl.int32)
        for w in tl.static_range(BN // 32):
            in_word = (lane // 32 == w)[None, :]
            bits = tl.sum(tl.where(in_word, flags, 0), axis=1)  # distinct bits: a sum is an or
            word = tl.where(in_word, bits[:, None], word)
            earlier = tl.where(in_word, count[:, None], earlier)
            count += _popcount(bits, NATIVE)
        return earlier + _popcount(word & below[None, :], NATIVE), count

    @triton.jit
    def _stage_kept(  # noqa: PLR0913 - a Triton function: the tile and its outputs
        keep,
        acc,
        rows,
        cols,
        bi,
        bj,
        n,
        n_cb,
        capacity,
        out_ptrs,
        BM: tl.constexpr,
        BN: tl.constexpr,
        NATIVE: tl.constexpr,
    ):
        # Stage a tile's kept entries at an atomic cursor, row-major, with its
        # (row, column tile) counts and its base for the placing kernel.
        counts_ptr, bases_ptr, staged_values_ptr, staged_columns_ptr, cursor_ptr = out_ptrs
        within, row_counts = _kept_before(keep, BN, NATIVE)
        total = tl.sum(row_counts, axis=0)
        if total > 0:
            base = tl.atomic_add(cursor_ptr, total.to(tl.int64), sem="relaxed")
            # Places from the tile's base in int32 (int64 places held two
            # registers an entry of the tile).
            row_start = tl.cumsum(row_counts, axis=0) - row_counts
            place = row_start[:, None] + within
            room = tl.maximum(tl.minimum(capacity - base, BM * BN), 0).to(tl.int32)
            ok = keep & (place < room)
            tl.store(staged_values_ptr + base + place, acc, mask=ok)  # signed r
            tl.store(
                staged_columns_ptr + base + place,
                tl.broadcast_to(cols[None, :], (BM, BN)),
                mask=ok,
            )
            tl.store(counts_ptr + rows.to(tl.int64) * n_cb + bj, row_counts, mask=rows < n)
            tl.store(bases_ptr + bi.to(tl.int64) * n_cb + bj, base)

    @triton.jit
    def _decide_and_stage(  # noqa: PLR0913 - a Triton function: the tile and its outputs
        acc,
        value,
        valid,
        rows,
        cols,
        bi,
        bj,
        bounds,
        geometry,
        out_ptrs,
        ABSOLUTE: tl.constexpr,
        BOUNDED: tl.constexpr,
        NATIVE: tl.constexpr,
        BM: tl.constexpr,
        BN: tl.constexpr,
        BKF: tl.constexpr,
    ):
        # A corrected tile: its entries within ε₃ of a bound recomputed from U
        # in float64 and decided there, then its kept entries staged.
        threshold, upper, bound = bounds
        u_ptr, stride, n, t, n_cb, capacity, stats_ptr = geometry
        keep = valid & (value >= threshold)  # NaN compares False
        if BOUNDED:
            keep = keep & (value < upper)
        near = valid & (tl.abs(value - threshold) <= bound)
        if BOUNDED:
            near = near | (valid & (tl.abs(value - upper) <= bound))
        if _any(near):
            # Row by row (a tile holds ~0.02 such entries on real data): a
            # float64 tile's registers held every tile to one block an SM.
            lane = tl.arange(0, BM)
            waiting = tl.max(near.to(tl.int32), axis=1) > 0
            while tl.max(waiting.to(tl.int32), axis=0) > 0:
                i = tl.min(tl.where(waiting, lane, BM), axis=0)
                exact = _row_fp64(u_ptr, stride, bi * BM + i, cols, n, t, BN, BKF)
                magnitude = _magnitude(exact, ABSOLUTE)
                decided = magnitude >= threshold
                if BOUNDED:
                    decided = decided & (magnitude < upper)
                here = near & (lane == i)[:, None]
                keep = tl.where(here, decided[None, :], keep)
                acc = tl.where(here, exact.to(tl.float32)[None, :], acc)
                waiting = waiting & (lane != i)
            n_near = tl.sum(tl.sum(near.to(tl.int32), axis=1), axis=0)
            tl.atomic_add(stats_ptr, n_near.to(tl.int64), sem="relaxed")
        _stage_kept(keep, acc, rows, cols, bi, bj, n, n_cb, capacity, out_ptrs, BM, BN, NATIVE)

    @triton.jit
    def _exact_compact_kernel(  # noqa: PLR0913 - a Triton kernel: its tensors, strides and block sizes
        a_ptr,
        b_ptr,
        u_ptr,
        stride,
        pairs_ptr,
        counts_ptr,
        bases_ptr,
        staged_values_ptr,
        staged_columns_ptr,
        cursor_ptr,
        stats_ptr,
        n,
        t,
        k_half,
        inverse_scale,
        n_cb,
        capacity,
        threshold,
        upper,
        margin_ptr,
        ABSOLUTE: tl.constexpr,
        BOUNDED: tl.constexpr,
        ROUND_NEAREST: tl.constexpr,
        ONE_PASS: tl.constexpr,
        NATIVE: tl.constexpr,
        BM: tl.constexpr,
        BN: tl.constexpr,
        BK: tl.constexpr,
        BKF: tl.constexpr,
    ):
        margin = tl.load(margin_ptr)
        bi, bj, rows, cols, acc, valid, value = _tile_start(
            a_ptr,
            b_ptr,
            pairs_ptr,
            n,
            k_half,
            inverse_scale,
            ABSOLUTE,
            ROUND_NEAREST,
            ONE_PASS,
            BM,
            BN,
            BK,
        )
        bounds = (threshold, upper, tl.load(margin_ptr + 1))
        geometry = (u_ptr, stride, n, t, n_cb, capacity, stats_ptr)
        out_ptrs = (counts_ptr, bases_ptr, staged_values_ptr, staged_columns_ptr, cursor_ptr)
        if ONE_PASS:
            tl.atomic_add(stats_ptr + 1, 1, sem="relaxed")
            # A tile wholly above the diagonal and inside the matrix has every
            # entry valid: a second copy of the epilogue, compiled without the
            # mask's logic, serves it (a phi of the mask would not fold; Table
            # II on an H200: the kernel 301 -> 271 ms over 108 windows).
            if (bj * BN >= (bi + 1) * BM) & ((bj + 1) * BN <= n):
                all_valid = tl.full((BM, BN), True, tl.int1)
                _decide_and_stage(
                    acc, value, all_valid, rows, cols, bi, bj, bounds, geometry, out_ptrs,
                    ABSOLUTE, BOUNDED, NATIVE, BM, BN, BKF,
                )  # fmt: skip
            else:
                _decide_and_stage(
                    acc, value, valid, rows, cols, bi, bj, bounds, geometry, out_ptrs,
                    ABSOLUTE, BOUNDED, NATIVE, BM, BN, BKF,
                )  # fmt: skip
        else:
            high = valid & (value >= threshold - margin)
            if BOUNDED:
                high = high & (value < upper + margin)
            if _any(high):
                acc = acc + _tile_cross(a_ptr, rows, cols, k_half, BM, BN, BK) * inverse_scale
                tl.atomic_add(stats_ptr + 1, 1, sem="relaxed")
                value = _magnitude(acc, ABSOLUTE)
                _decide_and_stage(
                    acc,
                    value,
                    valid,
                    rows,
                    cols,
                    bi,
                    bj,
                    bounds,
                    geometry,
                    out_ptrs,
                    ABSOLUTE,
                    BOUNDED,
                    NATIVE,
                    BM,
                    BN,
                    BKF,
                )


def _margins(u: torch.Tensor, margin, chain_k: int | None = None) -> torch.Tensor:
    """Return [ε, ε₃] as a two-element float32 device tensor, rounded up.

    ``margin`` (ε of r̃) is a float, or a device tensor computed without
    synchronising; ε₃ (of a corrected tile) is computed here from ``u``
    (``chain_k``: the K step of one-pass tiles, which chain a step's three
    products: :func:`connscale.fc._kernel_helpers.correction_margin_tensor`).
    Both get fp16's subnormal term and are rounded up so that neither is
    ever smaller.
    """
    extra = fp16_margin(u.shape[-1])
    eps = torch.as_tensor(margin, dtype=torch.float64, device=u.device).reshape(1)
    both = torch.cat([eps, correction_margin_tensor(u, chain_k).reshape(1)]) + extra
    # 2⁻¹⁶ more: the kernels compare fl(r − θ) with the bound, which rounds.
    both = both * (1 + 2.0**-16)
    b32 = both.float()
    return torch.where(b32.double() < both, torch.nextafter(b32, b32 + 1), b32)


def _one_pass(asked: bool) -> bool:
    """Return whether a job forms its tiles in one pass: when asked and Triton has descriptors."""
    return asked and TensorDescriptor is not None


def _operands(ops: Operands, one_pass: bool, block_m: int) -> tuple:
    """Return what the kernels read A's rows and columns through.

    In one pass, A's tensor descriptors of ``block_m`` × BK and BLOCK_N × BK
    blocks; else A itself, twice. The one-pass tiles load four blocks a K
    step; through descriptors (TMA on Hopper) the weighted degree of
    P = 204,492, T = 1,200 took 0.446 s against 0.458 s with pointer loads,
    the same bits (H100, issue 26).
    """
    if not one_pass:
        return ops.a, ops.a
    rows = TensorDescriptor.from_tensor(ops.a, [block_m, ops.block_k])
    cols = (
        rows if block_m == BLOCK_N else TensorDescriptor.from_tensor(ops.a, [BLOCK_N, ops.block_k])
    )
    return rows, cols


def _launch_options(u: torch.Tensor, stages: int, warps: int = NUM_WARPS) -> dict:
    return {"num_warps": warps, "num_stages": stages} if u.is_cuda else {}


def confirm_capacity(n: int) -> int:
    """Return the first size of the degree kernel's list of entries to confirm.

    2.4·10⁻⁴ of the pairs, at least 2²⁰ entries (8 MB): issue 26 measured
    1.5·10⁻⁴ of the pairs within ε of a threshold on realistic data; a run
    with more is redone once with the list sized to its count.
    """
    return max(1 << 20, n * (n - 1) // 2 // 4096)


def degree_exact_triton(
    u: torch.Tensor,
    thresholds: torch.Tensor,
    *,
    absolute: bool,
    weighted: bool,
    margin: float,
    stats: torch.Tensor,
    split: Operands | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Count the degree of every series at every threshold by the exact Triton kernels.

    Degree of every series at every threshold (r > θ, |r| > θ with
    ``absolute``), decided on the tensor cores, the entries within the
    margins of a threshold recomputed in float64 (see the module docstring).

    Parameters
    ----------
    u : torch.Tensor of shape (N, T), float32
        Normalised series (rows of constant series all NaN: never counted).
    thresholds : torch.Tensor of shape (K,)
    absolute, weighted : bool
        ``weighted`` also sums the kept r (|r|), from corrected or recomputed values.
    margin : float or torch.Tensor
        ε of :func:`connscale.fc._exact.decision_margin` (a 0-d or 1-element
        device tensor is read by the kernel, without a host round trip).
    stats : torch.Tensor of shape (3,), int64, on the device
        Recomputed entries, corrected tiles and tiles are added to it.
    split : Operands, optional
        :func:`padded_split` of ``u`` when the caller has it.

    Returns
    -------
    counts : torch.Tensor of shape (K, N), int64
    sums : torch.Tensor of shape (K, N), float64, or None
    """
    u = u if u.stride(-1) == 1 else u.contiguous()
    n, t = u.shape
    ops = padded_split(u) if split is None else split
    k = thresholds.numel()
    thr = thresholds.to(device=u.device, dtype=torch.float32).contiguous()
    pairs = tiles_on(n, BLOCK_M, BLOCK_N, u.device)
    capacity = confirm_capacity(n)
    one_pass = _one_pass(bool(weighted) and DEGREE_ONE_PASS)
    margins = _margins(u, margin, ops.block_k if one_pass else None)
    a, b = _operands(ops, one_pass, BLOCK_M)
    before = stats.clone()
    while True:
        counts = torch.zeros((k, n), dtype=torch.int32, device=u.device)
        sums = torch.zeros((k, n) if weighted else (1,), dtype=torch.float64, device=u.device)
        near = torch.empty((2, capacity), dtype=torch.int32, device=u.device)
        cursor = torch.zeros(1, dtype=torch.int64, device=u.device)
        _exact_degree_kernel[(pairs.numel() // 2,)](
            a,
            b,
            pairs,
            thr,
            counts,
            sums,
            stats,
            near[0],
            near[1],
            cursor,
            capacity,
            n,
            ops.k_half,
            ops.inverse_scale,
            margins,
            float(thr.min()) if k else 0.0,
            N_THRESH=k,
            ABSOLUTE=bool(absolute),
            WEIGHTED=bool(weighted),
            ROUND_NEAREST=u.is_cuda and ROUND_NEAREST_ON_CUDA,
            ONE_PASS=one_pass,
            BM=BLOCK_M,
            BN=BLOCK_N,
            BK=ops.block_k,
            **_launch_options(u, DEGREE_STAGES - one_pass),
        )
        n_near = int(cursor)  # synchronises: the second kernel's grid
        if n_near <= capacity:
            break
        stats.copy_(before)  # the retry counts again
        capacity = n_near
    if n_near:
        _confirm_degree_kernel[(-(-n_near // CONFIRM_ENTRIES),)](
            u,
            u.stride(0),
            near[0],
            near[1],
            n_near,
            thr,
            counts,
            sums,
            n,
            t,
            N_THRESH=k,
            ABSOLUTE=bool(absolute),
            WEIGHTED=bool(weighted),
            BE=CONFIRM_ENTRIES,
            BT=CONFIRM_K,
            **({"num_warps": 4} if u.is_cuda else {}),
        )
    stats[2] += tiles_in(n)
    return counts.to(torch.int64), (sums if weighted else None)


def compact_exact_triton(
    u: torch.Tensor,
    threshold: float,
    *,
    absolute: bool,
    values: torch.Tensor,
    columns: torch.Tensor,
    row_counts: torch.Tensor,
    staged_values: torch.Tensor,
    staged_columns: torch.Tensor,
    stats: torch.Tensor,
    upper: float = math.inf,
    split: Operands | None = None,
) -> torch.Tensor:
    """Compact the kept upper-triangle entries to CSR parts by the exact Triton kernels.

    The strict upper triangle's ``threshold`` <= r < ``upper`` (|r| with
    ``absolute``) as CSR parts, decided on the tensor cores and confirmed
    where within the margins; kept values from corrected tiles, the entries
    within ε₃ of a bound recomputed in float64.

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
    u = u if u.stride(-1) == 1 else u.contiguous()
    n, t = u.shape
    ops = padded_split(u) if split is None else split
    n_rb, n_cb = -(-n // COMPACT_BLOCK_M), -(-n // BLOCK_N)
    capacity = values.numel()
    counts = torch.zeros((n, n_cb), dtype=torch.int32, device=u.device)
    bases = torch.zeros((n_rb, n_cb), dtype=torch.int64, device=u.device)
    cursor = torch.zeros(1, dtype=torch.int64, device=u.device)
    pairs = tiles_on(n, COMPACT_BLOCK_M, BLOCK_N, u.device)
    bounded = math.isfinite(upper)
    one_pass = _one_pass(COMPACT_ONE_PASS)
    # ε (of r̃) is read by the two-pass tiles only: one pass decides from r₃ (ε₃).
    margin = 0.0 if one_pass else decision_margin_tensor(u)
    _exact_compact_kernel[(pairs.numel() // 2,)](
        *_operands(ops, one_pass, COMPACT_BLOCK_M),
        u,
        u.stride(0),
        pairs,
        counts,
        bases,
        staged_values,
        staged_columns,
        cursor,
        stats,
        n,
        t,
        ops.k_half,
        ops.inverse_scale,
        n_cb,
        capacity,
        float(threshold),
        float(upper) if bounded else 0.0,
        _margins(u, margin, ops.block_k if one_pass else None),
        ABSOLUTE=bool(absolute),
        BOUNDED=bounded,
        ROUND_NEAREST=u.is_cuda and ROUND_NEAREST_ON_CUDA,
        ONE_PASS=one_pass,
        NATIVE=u.is_cuda,
        BM=COMPACT_BLOCK_M,
        BN=BLOCK_N,
        BK=ops.block_k,
        BKF=FP64_K,
        **_launch_options(u, COMPACT_STAGES - one_pass, COMPACT_WARPS),
    )
    stats[2] += tiles_in(n, COMPACT_BLOCK_M)
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
        BM=COMPACT_BLOCK_M,
        CH=PLACE_CHUNK,
        **({"num_warps": PLACE_WARPS} if u.is_cuda else {}),
    )
    return cursor


__all__ = [
    "BLOCK_M",
    "BLOCK_N",
    "Operands",
    "confirm_capacity",
    "compact_exact_triton",
    "degree_exact_triton",
    "padded_split",
    "tiles_in",
]
