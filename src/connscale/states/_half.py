"""k-means assignment from a half-precision copy of the windows, confirmed in fp32.

One Lloyd iteration on CUDA is bound by one read of the windows X (n × E,
float32; :func:`connscale.states._triton_kmeans.assign`). Here the
assignment reads X̃ = fp16(X) instead (half the bytes): every row whose
nearest centre is certain from X̃ is **decided**; the others (near ties) go
to a short list on the device and are **confirmed**: assigned again from
their float32 rows by the float32 kernel itself, the same program and launch
configuration (so with the same arithmetic per row). The labels are those of
the float32 pass, row for row (the same "decide + confirm" scheme as
:mod:`connscale.fc._exact`). Only the Euclidean and correlation metrics (dot
products; L1 has no such bound here).

The bound
---------
Both passes minimise the score d_j = β_j + α_j⟨x, c_j⟩ over the centres j
(float32 α, β, c: Euclidean α = −2, β = ‖c‖²; correlation α = −1/‖c‖, β = 1).
The float32 pass computes d_j = fl(β_j + fl(α_j ŝ_j)) with ŝ_j the float32
sum of the products x_i c_ji; the half pass d̃_j the same way with s̃_j, a
float32 sum of products of x̃_i. With S_j = Σ x_i c_ji and S̃_j = Σ x̃_i c_ji
(exact reals):

* fp16 rounding (round to nearest; :func:`half_copy` checks |x| ≤ 65504, so
  nothing overflows): |x̃ − x| ≤ 2⁻¹¹|x| in the normal range and ≤ 2⁻²⁵
  (half the subnormal spacing 2⁻²⁴) below it, so everywhere
  |x̃ − x| ≤ 2⁻¹¹|x| + 2⁻²⁵ and::

      |S̃_j − S_j| ≤ 2⁻¹¹ Σ|x||c_j| + 2⁻²⁵‖c_j‖₁ ≤ 2⁻¹¹ P_j + 2⁻²⁵‖c_j‖₁,

  P_j = ‖x‖‖c_j‖ (Cauchy–Schwarz; ‖x‖ per row computed once in float64),
  and Σ|x̃||c_j| ≤ P̃_j = (1 + 2⁻¹¹)P_j + 2⁻²⁵‖c_j‖₁.
* the centres as the half kernel multiplies them. ``KERNEL = 'fma'``
  (:func:`_half_kernel`, CUDA cores): c itself, x̃ upcast in registers
  (exact); every product is exact or rounded once. ``KERNEL = 'dot'``
  (:func:`_dot_kernel`, tensor cores, TF32 inputs): x̃ upcast to float32 is
  a TF32 number (11 significant bits, float32's exponent range), and each
  centre is split on the host into TF32 parts h = rn(c), l = rn(c − h)
  (:func:`split_centres`; c − h is exact in float32). With u = 2⁻¹¹, TF32's
  unit roundoff: |c − h − l| ≤ u|c − h| ≤ u²|c| = 2⁻²²|c| and
  |h| + |l| ≤ g|c|, g = (1 + u)² (u = 0, g = 1 for 'fma'). TF32 × TF32
  products have 22 bits: exact in float32. A part below float32's normal
  range (2⁻¹²⁶) may be flushed to 0 by the hardware, and the host's
  rounding of a subnormal is to 2⁻¹³⁶: at most 2⁻¹²⁶ per element, so the
  products the kernel adds sum exactly to S̃'_j with
  |S̃'_j − S̃_j| ≤ u² P̃_j + 2⁻¹²⁶‖x̃‖₁ ≤ u² P̃_j + 2⁻¹²⁶√W‖x̃‖ ≤
  u² P̃_j + 2⁻¹²⁵√W‖x‖ + 2⁻¹⁵¹W (W the row length read;
  ‖x̃‖ ≤ (1 + 2⁻¹¹)‖x‖ + 2⁻²⁵√W).
* float32 accumulation, allowing 2 ulp per operation (η = 2⁻²², twice
  round-to-nearest's bound) and counting D, the operations a product goes
  through on its way to the sum; Higham's bound gives
  |ŝ_j − S_j| ≤ γ Σ|x||c_j| ≤ γ P_j and |s̃_j − S̃'_j| ≤ γ g P̃_j with
  γ = Dη/(1 − Dη), D the larger of the two kernels' (:func:`accumulation`):

  - the float32 pass and 'fma' (BLOCK_E = B): each product goes into its
    lane sequentially over ⌈W/B⌉ column chunks, then the B lanes are
    reduced by a tree of depth ≤ B − 1: D = ⌈W/B⌉ + B + 1.
  - 'dot' (BLOCK_K = B): each chunk of B columns gives a (rows × 16) tile
    p = x̃ hᵀ + x̃ lᵀ, two ``tl.dot`` from a zero accumulator (2B products),
    and p is added to the running sum acc on the CUDA cores (one float32
    addition a chunk, ⌈W/B⌉ in all). The tensor cores add groups of n
    products (n = 4 to 16, by generation and type) and the accumulator in
    one multi-term adder that aligns the terms to the largest and truncates
    (Fasi, Higham, Mikaitis & Pranesh 2021, PeerJ CS 7:e330; the same model
    for Hopper: Khattak & Mikaitis 2024): at most 1 ulp of the largest term
    lost per aligned term and 1 ulp in the normalisation, ≤ (n + 1)·2⁻²³ of
    the sum of the group's magnitudes, within n·η. We count each product
    in the tile as one operation whatever the hardware's grouping and
    order: D = 2B + ⌈W/B⌉ + 1 (B = 128, W = 19,904: 413, against 285 for
    'fma' and 376 for the float32 pass; not W: the chunk sums restart from
    zero, so the tensor-core chain is 2B products long).
* the score's two roundings: |fl(β + fl(αs)) − (β + αs)| ≤
  η(2 + η)|α||s| + η|β|, with |ŝ_j| ≤ (1 + γ)P_j,
  |s̃_j| ≤ g(1 + γ)P̃_j + 2⁻¹²⁵√W‖x‖.
* fp32 underflow (products or sums below 2⁻¹²⁶, flushed or not): at most
  2⁻¹²⁶ per operation, at most 5W + 4 operations per score.

Summing, with t = gγ + u² + 3ηg(1 + γ) (for 'fma': γ + 3η(1 + γ))::

    |d̃_j − d_j| ≤ ε_j = a_j ‖x‖ + b_j,
    a_j = |α_j|‖c_j‖ · (2⁻¹¹ + t(2 + 2⁻¹¹)) + [u > 0] |α_j| 2⁻¹²⁴√W,
    b_j = |α_j| 2⁻²⁵‖c_j‖₁ (1 + t) + 2η|β_j| + 2⁻¹²⁶(5W + 4)(|α_j| + 1)
          + [u > 0] |α_j| 2⁻¹⁴⁸W

(:func:`margin_terms`; a_j ≈ 6.7e-4 |α_j|‖c_j‖ for 'fma', ≈ 6.9e-4 for
'dot' with W = 19,904, B = 128). A row with best b = argmin d̃ is decided
when d̃_j − d̃_b > ε_j + ε_b for every other centre j: then
d_j − d_b ≥ d̃_j − d̃_b − ε_j − ε_b > 0, so the float32 pass picks b too,
ties included. The kernels evaluate the test in float32 (‖x‖ rounded to
float32, a·‖x‖ + b, ε_j + ε_b and the difference of scores: at most 6
roundings of 2⁻²⁴ each); a_j and b_j are enlarged by the factor 1 + 2⁻¹⁶
to cover them. The bound is far from tight (it needs every rounding the
worst way and |x| ∝ |c_j|): rows clearly nearer one centre are decided,
near ties are confirmed.

Counts: the number of confirmed rows of each pass is added, on the device,
to a running total (:attr:`connscale.states._kmeans.LloydResult.confirmed`).
Nothing is read by the host during an iteration. The scores of the half
pass are not the float32 ones for decided rows; Lloyd uses this pass only
where the scores are not needed (every iteration but those that re-seed an
empty cluster, which use the float32 pass).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import torch

from connscale._compute.device import HAS_TRITON
from connscale.states import _triton_kmeans as fused
from connscale.states._budget import memory_budget

if HAS_TRITON:  # pragma: no cover - depends on the machine
    import triton
    import triton.language as tl

    from connscale.states._triton_kmeans import _acc_centre, _acc_init, _score_centre

logger = logging.getLogger(__name__)

#: Largest finite float16 value: rows beyond it are not copied (float32 pass).
HALF_MAX = 65504.0
#: Launch configurations (BLOCK_M, BLOCK_E or BLOCK_K, num_warps, num_stages)
#: of the half pass's kernels. 'half' (the 'fma' kernel): the fastest of
#: ``benchmarks/bench_states.py --tune`` on an H100 (1.36 ms a pass in the
#: sweep; (32, 128, 8, 1) 2.23 ms, (16, 128, 4, 1) 2.62 ms). 'dot': the
#: fastest of 12 in the same sweep (1.26 ms; (64, 128, 4, 3) 1.30 ms,
#: (128, 64, 8, 3) 1.32 ms).
CONFIG = {"half": (64, 128, 8, 1), "dot": (64, 128, 4, 4)}
#: The half pass's kernel: ``'fma'`` (products on the CUDA cores, one
#: accumulator tile per centre) or ``'dot'`` (TF32 tensor cores on the
#: centres split in two TF32 parts); the same labels (see the bound). On an
#: H100 (45,000 × 19,900, k = 5, 100 iterations) 'fma' took 1.27 ms an
#: iteration (planted) and 1.47 ms (noise), 'dot' 1.34 and 1.86 ms: the
#: pass is bound by reading the float16 rows either way.
KERNEL = "fma"
KERNELS = ("fma", "dot")
#: Relative error allowed per float32 operation (2 ulp).
_ETA = 2.0**-22
#: Enlargement of the margin for the float32 evaluation of the test.
_TEST_SLACK = 1.0 + 2.0**-16


@dataclass
class HalfCopy:
    """The float16 copy of prepared windows and what the decision needs."""

    x: torch.Tensor  # (n, E) float16 view of a zero-padded (n, W) buffer
    norms: torch.Tensor  # (n,) float32: ‖x‖ of the float32 rows (float64, rounded)


def half_copy(x: torch.Tensor, row_sq_norms: torch.Tensor | None) -> HalfCopy | None:
    """Return the float16 copy of prepared rows ``x``, or None when it cannot stand in.

    The float16 copy of prepared rows ``x`` (float32, padded as the fused
    kernels read them), or None when it cannot stand in for them: a value
    beyond float16's range, or not enough free memory on the device (logged).

    ``row_sq_norms``: the rows' squared norms in float64 when known
    (computed here otherwise).
    """
    n, e = x.shape
    width = fused.read_width(x)
    needed = n * width * 2 + n * (4 + 8)
    budget = memory_budget(x.device)
    if needed > budget:
        logger.info(
            "no float16 copy of the windows: needs %.3g GB, %.3g GB free; float32 pass",
            needed / 1e9,
            budget / 1e9,
        )
        return None
    low, high = torch.aminmax(x)
    largest = max(-float(low), float(high))
    if not largest <= HALF_MAX:  # also catches NaN
        logger.info("no float16 copy of the windows: |x| up to %.6g > %g", largest, HALF_MAX)
        return None
    buffer = torch.zeros((n, width), dtype=torch.float16, device=x.device)
    buffer[:, :e].copy_(x)
    if row_sq_norms is None:
        row_sq_norms = torch.zeros(n, dtype=torch.float64, device=x.device)
        rows = max(1, (1 << 25) // max(e, 1))
        for start in range(0, n, rows):
            block = x[start : start + rows].to(torch.float64)
            row_sq_norms[start : start + rows] = (block * block).sum(dim=1)
    return HalfCopy(x=buffer[:, :e], norms=row_sq_norms.sqrt().to(torch.float32))


def _depth(width: int, block_e: int) -> int:
    """Return the roundings of a product in a lane-wise kernel's float32 dot product.

    The lane-wise kernel is the float32 pass, 'fma'.
    """
    return math.ceil(width / block_e) + block_e + 1


def _depth_dot(width: int, block_k: int) -> int:
    """Return the operations a product goes through in the 'dot' kernel.

    2·BLOCK_K in a chunk's tensor-core sum, one addition per chunk into the
    running sum.
    """
    return 2 * block_k + math.ceil(width / block_k) + 1


def accumulation(width: int, kernel: str | None = None) -> tuple[int, float]:
    """Return (depth, split_unit) of :func:`margin_terms` for rows of ``width``.

    (depth, split_unit) of :func:`margin_terms` for rows of ``width``
    read by ``kernel`` (``KERNEL`` when None) and the float32 pass: the
    larger accumulation depth of the two, and the unit roundoff of the
    centres' split (2⁻¹¹ for the TF32 parts of 'dot', 0 for 'fma').
    """
    kernel = KERNEL if kernel is None else kernel
    fp32 = _depth(width, fused.CONFIG["assign"][1])
    if kernel == "dot":
        return max(fp32, _depth_dot(width, CONFIG["dot"][1])), 2.0**-11
    return max(fp32, _depth(width, CONFIG["half"][1])), 0.0


def margin_terms(
    alpha: torch.Tensor,
    beta: torch.Tensor,
    centres: torch.Tensor,
    width: int,
    *,
    depth: int,
    split_unit: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (a, b) of the bound on the half-pass and float32-pass score difference.

    (a, b), float32 (k,), of the bound ε_j = a_j‖x‖ + b_j on the
    difference between a row's half-pass and float32-pass scores (see the
    module's docstring), enlarged for the float32 evaluation of the test.

    ``alpha``, ``beta`` (k,) and ``centres`` (k × E) are the float32 values
    both passes use; ``width`` is the row length the kernels read;
    ``depth`` the operations a product goes through in the deeper of the
    two kernels' sums and ``split_unit`` the unit roundoff u of the half
    kernel's split of the centres (0: no split), as :func:`accumulation`
    gives them.
    """
    u = split_unit
    g = (1 + u) ** 2
    gamma = depth * _ETA / (1 - depth * _ETA)
    t = g * gamma + u * u + 3 * _ETA * g * (1 + gamma)
    c = centres.to(torch.float64)
    abs_alpha = alpha.to(torch.float64).abs()
    abs_beta = beta.to(torch.float64).abs()
    a = abs_alpha * torch.linalg.vector_norm(c, dim=1) * (2.0**-11 + t * (2 + 2.0**-11))
    b = (
        abs_alpha * 2.0**-25 * c.abs().sum(dim=1) * (1 + t)
        + 2 * _ETA * abs_beta
        + 2.0**-126 * (5 * width + 4) * (abs_alpha + 1)
    )
    if u > 0:  # parts of the split flushed below float32's normal range
        a = a + abs_alpha * 2.0**-124 * math.sqrt(width)
        b = b + abs_alpha * 2.0**-148 * width
    return (a * _TEST_SLACK).to(torch.float32), (b * _TEST_SLACK).to(torch.float32)


def _tf32(x: torch.Tensor) -> torch.Tensor:
    """Round float32 ``x`` to the nearest TF32 number, as float32.

    TF32 has 10 fraction bits and float32's exponent range; ties go to even.
    """
    bits = x.view(torch.int32)
    bias = ((bits >> 13) & 1) + 0xFFF
    return ((bits + bias) & -0x2000).view(torch.float32)


def split_centres(centres: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Split float32 ``centres`` into TF32 parts (h, l).

    TF32 parts (h, l) of float32 ``centres`` (|c| ≤ 65504): h = rn(c),
    l = rn(c − h), so |c − h − l| ≤ 2⁻²²|c| (+ 2⁻¹³⁶ for subnormal c − h).
    """
    hi = _tf32(centres.contiguous())
    return hi, _tf32(centres - hi)


if HAS_TRITON:

    @triton.jit
    def _settle(
        score,
        thr,
        rows,
        row_ok,
        kk,
        old_ptr,
        labels_ptr,
        score_ptr,
        changed_ptr,
        pending_ptr,
        count_ptr,
    ):
        """Return the labels of the rows whose best centre is certain from ``score``.

        Labels of the rows whose best centre b is certain from the
        (rows × centres) coarse ``score``: d̃_j − d̃_b > ``thr``[r, j] for
        every other centre j. The others are appended to the list the
        float32 pass confirms. Shared with :mod:`._int8`.
        """
        best = tl.argmin(score, axis=1)
        low = tl.min(score, axis=1)
        is_best = kk[None, :] == best[:, None]
        clear = is_best | ((score - low[:, None]) > thr)
        unsure = tl.min(clear.to(tl.int32), axis=1) == 0
        decided = row_ok & (unsure == 0)
        best = best.to(tl.int64)
        tl.store(labels_ptr + rows, best, mask=decided)
        tl.store(score_ptr + rows, low, mask=decided)
        old = tl.load(old_ptr + rows, mask=row_ok, other=-1)
        changed = (best != old) & decided
        tl.atomic_add(changed_ptr, tl.sum(changed.to(tl.int32), axis=0))
        # Rows not decided: appended to the list the float32 pass confirms.
        pending = (row_ok & unsure).to(tl.int32)
        start = tl.atomic_add(count_ptr, tl.sum(pending, axis=0))
        slot = start + tl.cumsum(pending, axis=0) - 1
        tl.store(pending_ptr + slot, rows, mask=pending == 1)

    @triton.jit
    def _decide(  # noqa: PLR0913 - a Triton kernel: its tensors, strides and block sizes
        score,
        rows,
        row_ok,
        kk,
        K: tl.constexpr,
        a_ptr,
        b_ptr,
        norm_ptr,
        old_ptr,
        labels_ptr,
        score_ptr,
        changed_ptr,
        pending_ptr,
        count_ptr,
    ):
        """:func:`_settle` with the half pass's thresholds ε_j + ε_b."""
        best = tl.argmin(score, axis=1)
        # eps[r, j] = a_j ‖x_r‖ + b_j (0 for the padding centres, whose score is inf)
        k_ok = kk < K
        a = tl.load(a_ptr + kk, mask=k_ok, other=0.0)
        b = tl.load(b_ptr + kk, mask=k_ok, other=0.0)
        norm = tl.load(norm_ptr + rows, mask=row_ok, other=0.0)
        eps = a[None, :] * norm[:, None] + b[None, :]
        is_best = kk[None, :] == best[:, None]
        eps_best = tl.sum(tl.where(is_best, eps, 0.0), axis=1)
        _settle(
            score,
            eps + eps_best[:, None],
            rows,
            row_ok,
            kk,
            old_ptr,
            labels_ptr,
            score_ptr,
            changed_ptr,
            pending_ptr,
            count_ptr,
        )

    @triton.jit
    def _half_kernel(  # noqa: PLR0913 - a Triton kernel: its tensors, strides and block sizes
        xh_ptr,
        c_ptr,
        alpha_ptr,
        beta_ptr,
        a_ptr,
        b_ptr,
        norm_ptr,
        old_ptr,
        labels_ptr,
        score_ptr,
        changed_ptr,
        pending_ptr,
        count_ptr,
        n_rows,
        width,
        stride_x,
        stride_c,
        K: tl.constexpr,
        K_PAD: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_E: tl.constexpr,
    ):
        pid = tl.program_id(0)
        rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < n_rows
        base = rows.to(tl.int64) * stride_x
        a0 = _acc_init(0, K, BLOCK_M, BLOCK_E, tl.float32)
        a1 = _acc_init(1, K, BLOCK_M, BLOCK_E, tl.float32)
        a2 = _acc_init(2, K, BLOCK_M, BLOCK_E, tl.float32)
        a3 = _acc_init(3, K, BLOCK_M, BLOCK_E, tl.float32)
        a4 = _acc_init(4, K, BLOCK_M, BLOCK_E, tl.float32)
        a5 = _acc_init(5, K, BLOCK_M, BLOCK_E, tl.float32)
        a6 = _acc_init(6, K, BLOCK_M, BLOCK_E, tl.float32)
        a7 = _acc_init(7, K, BLOCK_M, BLOCK_E, tl.float32)
        a8 = _acc_init(8, K, BLOCK_M, BLOCK_E, tl.float32)
        a9 = _acc_init(9, K, BLOCK_M, BLOCK_E, tl.float32)
        a10 = _acc_init(10, K, BLOCK_M, BLOCK_E, tl.float32)
        a11 = _acc_init(11, K, BLOCK_M, BLOCK_E, tl.float32)
        a12 = _acc_init(12, K, BLOCK_M, BLOCK_E, tl.float32)
        a13 = _acc_init(13, K, BLOCK_M, BLOCK_E, tl.float32)
        a14 = _acc_init(14, K, BLOCK_M, BLOCK_E, tl.float32)
        a15 = _acc_init(15, K, BLOCK_M, BLOCK_E, tl.float32)
        for e0 in range(0, width, BLOCK_E):
            cols = e0 + tl.arange(0, BLOCK_E)
            col_ok = cols < width
            x = tl.load(
                xh_ptr + base[:, None] + cols[None, :],
                mask=row_ok[:, None] & col_ok[None, :],
                other=0.0,
            ).to(tl.float32)
            a0 = _acc_centre(a0, x, c_ptr, 0, K, stride_c, cols, col_ok, False)
            a1 = _acc_centre(a1, x, c_ptr, 1, K, stride_c, cols, col_ok, False)
            a2 = _acc_centre(a2, x, c_ptr, 2, K, stride_c, cols, col_ok, False)
            a3 = _acc_centre(a3, x, c_ptr, 3, K, stride_c, cols, col_ok, False)
            a4 = _acc_centre(a4, x, c_ptr, 4, K, stride_c, cols, col_ok, False)
            a5 = _acc_centre(a5, x, c_ptr, 5, K, stride_c, cols, col_ok, False)
            a6 = _acc_centre(a6, x, c_ptr, 6, K, stride_c, cols, col_ok, False)
            a7 = _acc_centre(a7, x, c_ptr, 7, K, stride_c, cols, col_ok, False)
            a8 = _acc_centre(a8, x, c_ptr, 8, K, stride_c, cols, col_ok, False)
            a9 = _acc_centre(a9, x, c_ptr, 9, K, stride_c, cols, col_ok, False)
            a10 = _acc_centre(a10, x, c_ptr, 10, K, stride_c, cols, col_ok, False)
            a11 = _acc_centre(a11, x, c_ptr, 11, K, stride_c, cols, col_ok, False)
            a12 = _acc_centre(a12, x, c_ptr, 12, K, stride_c, cols, col_ok, False)
            a13 = _acc_centre(a13, x, c_ptr, 13, K, stride_c, cols, col_ok, False)
            a14 = _acc_centre(a14, x, c_ptr, 14, K, stride_c, cols, col_ok, False)
            a15 = _acc_centre(a15, x, c_ptr, 15, K, stride_c, cols, col_ok, False)
        kk = tl.arange(0, K_PAD)
        score = tl.full((BLOCK_M, K_PAD), float("inf"), dtype=tl.float32)
        score = _score_centre(score, a0, alpha_ptr, beta_ptr, kk, 0, K, False)
        score = _score_centre(score, a1, alpha_ptr, beta_ptr, kk, 1, K, False)
        score = _score_centre(score, a2, alpha_ptr, beta_ptr, kk, 2, K, False)
        score = _score_centre(score, a3, alpha_ptr, beta_ptr, kk, 3, K, False)
        score = _score_centre(score, a4, alpha_ptr, beta_ptr, kk, 4, K, False)
        score = _score_centre(score, a5, alpha_ptr, beta_ptr, kk, 5, K, False)
        score = _score_centre(score, a6, alpha_ptr, beta_ptr, kk, 6, K, False)
        score = _score_centre(score, a7, alpha_ptr, beta_ptr, kk, 7, K, False)
        score = _score_centre(score, a8, alpha_ptr, beta_ptr, kk, 8, K, False)
        score = _score_centre(score, a9, alpha_ptr, beta_ptr, kk, 9, K, False)
        score = _score_centre(score, a10, alpha_ptr, beta_ptr, kk, 10, K, False)
        score = _score_centre(score, a11, alpha_ptr, beta_ptr, kk, 11, K, False)
        score = _score_centre(score, a12, alpha_ptr, beta_ptr, kk, 12, K, False)
        score = _score_centre(score, a13, alpha_ptr, beta_ptr, kk, 13, K, False)
        score = _score_centre(score, a14, alpha_ptr, beta_ptr, kk, 14, K, False)
        score = _score_centre(score, a15, alpha_ptr, beta_ptr, kk, 15, K, False)
        _decide(
            score,
            rows,
            row_ok,
            kk,
            K,
            a_ptr,
            b_ptr,
            norm_ptr,
            old_ptr,
            labels_ptr,
            score_ptr,
            changed_ptr,
            pending_ptr,
            count_ptr,
        )

    @triton.jit
    def _dot_kernel(  # noqa: PLR0913 - a Triton kernel: its tensors, strides and block sizes
        xh_ptr,
        hi_ptr,
        lo_ptr,
        alpha_ptr,
        beta_ptr,
        a_ptr,
        b_ptr,
        norm_ptr,
        old_ptr,
        labels_ptr,
        score_ptr,
        changed_ptr,
        pending_ptr,
        count_ptr,
        n_rows,
        width,
        stride_x,
        stride_c,
        K: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_K: tl.constexpr,
    ):
        pid = tl.program_id(0)
        rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < n_rows
        base = rows.to(tl.int64) * stride_x
        kk = tl.arange(0, 16)  # the centres, zero-padded to 16 (the tensor cores' N)
        acc = tl.zeros((BLOCK_M, 16), dtype=tl.float32)
        for e0 in range(0, width, BLOCK_K):
            cols = e0 + tl.arange(0, BLOCK_K)
            col_ok = cols < width
            # float16 values: exact in float32 and in TF32
            x = tl.load(
                xh_ptr + base[:, None] + cols[None, :],
                mask=row_ok[:, None] & col_ok[None, :],
                other=0.0,
            ).to(tl.float32)
            at = kk[None, :] * stride_c + cols[:, None]  # (BLOCK_K, 16): the parts transposed
            hi = tl.load(hi_ptr + at, mask=col_ok[:, None], other=0.0)
            lo = tl.load(lo_ptr + at, mask=col_ok[:, None], other=0.0)
            # The chunk's sum from zero (2·BLOCK_K products), then one addition
            # (the second dot takes the first's result, so Triton's rewrite of
            # dot(a, b, 0) + acc into dot(a, b, acc) cannot lengthen the chain).
            part = tl.dot(x, hi, input_precision="tf32")
            part = tl.dot(x, lo, part, input_precision="tf32")
            acc += part
        k_ok = kk < K
        alpha = tl.load(alpha_ptr + kk, mask=k_ok, other=0.0)
        beta = tl.load(beta_ptr + kk, mask=k_ok, other=0.0)
        score = tl.where(k_ok[None, :], beta[None, :] + alpha[None, :] * acc, float("inf"))
        _decide(
            score,
            rows,
            row_ok,
            kk,
            K,
            a_ptr,
            b_ptr,
            norm_ptr,
            old_ptr,
            labels_ptr,
            score_ptr,
            changed_ptr,
            pending_ptr,
            count_ptr,
        )


def assign(
    x: torch.Tensor,
    half: HalfCopy,
    centres: torch.Tensor,
    *,
    alpha: torch.Tensor,
    beta: torch.Tensor,
    old: torch.Tensor,
    labels: torch.Tensor,
    score: torch.Tensor,
    changed: torch.Tensor,
    pending: torch.Tensor,
    count: torch.Tensor,
) -> None:
    """Assign every row of ``x`` from the float16 copy, confirming the uncertain ones.

    Labels of every row of ``x`` into ``labels`` (int64), equal to
    :func:`connscale.states._triton_kmeans.assign`'s: decided from the
    float16 copy ``half`` where the bound allows, the other rows listed in
    ``pending`` (int32, n) and counted in ``count`` (one int32 element, set
    to 0 here) and assigned again from ``x`` by the float32 pass. The number
    of labels that differ from ``old`` is added to ``changed``. ``score``
    (float32) gets the float32 pass's score for confirmed rows and the half
    pass's for the others. ``centres``, ``alpha``, ``beta``: float32, as the
    float32 pass takes them.
    """
    n, e = x.shape
    k = centres.shape[0]
    width = fused.read_width(half.x)
    if KERNEL not in KERNELS:
        raise ValueError(f"_half.KERNEL must be one of {KERNELS}; got {KERNEL!r}.")
    dot = KERNEL == "dot"
    padded = torch.zeros((16 if dot else k, width), dtype=torch.float32, device=x.device)
    padded[:k, :e] = centres
    read = max(width, fused.read_width(x))
    depth, split_unit = accumulation(read)
    a, b = margin_terms(alpha, beta, centres, read, depth=depth, split_unit=split_unit)
    count.zero_()
    outputs = (alpha, beta, a, b, half.norms, old, labels, score, changed, pending, count)
    if dot:
        hi, lo = split_centres(padded)
        block_m, block_k, warps, stages = CONFIG["dot"]
        _dot_kernel[(triton.cdiv(n, block_m),)](
            half.x,
            hi,
            lo,
            *outputs,
            n,
            width,
            half.x.stride(0),
            width,
            K=k,
            BLOCK_M=block_m,
            BLOCK_K=block_k,
            num_warps=warps,
            num_stages=stages,
        )
    else:
        block_m, block_e, warps, stages = CONFIG["half"]
        _half_kernel[(triton.cdiv(n, block_m),)](
            half.x,
            padded,
            *outputs,
            n,
            width,
            half.x.stride(0),
            width,
            K=k,
            K_PAD=max(2, 1 << (k - 1).bit_length()),
            BLOCK_M=block_m,
            BLOCK_E=block_e,
            num_warps=warps,
            num_stages=stages,
        )
    confirm(
        x,
        centres,
        alpha=alpha,
        beta=beta,
        old=old,
        labels=labels,
        score=score,
        changed=changed,
        pending=pending,
        count=count,
    )


def confirm(
    x: torch.Tensor,
    centres: torch.Tensor,
    *,
    alpha: torch.Tensor,
    beta: torch.Tensor,
    old: torch.Tensor,
    labels: torch.Tensor,
    score: torch.Tensor,
    changed: torch.Tensor,
    pending: torch.Tensor,
    count: torch.Tensor,
) -> None:
    """Assign the rows a coarse pass listed again by the float32 pass.

    The rows a coarse pass listed (``pending[:count]``, on the device)
    assigned again by the float32 pass itself, into ``labels`` and
    ``score``; shared by the float16 and int8 passes.
    """
    fused.assign(
        x,
        centres,
        l1=False,
        alpha=alpha,
        beta=beta,
        old=old,
        labels=labels,
        score=score,
        changed=changed,
        rows=pending,
        count=count,
    )
