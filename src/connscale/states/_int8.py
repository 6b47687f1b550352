"""k-means assignment from an int8 copy of the windows, confirmed in fp32.

The scheme of :mod:`._half` with a quarter of the float32 bytes: each row
x (float32, length W) is stored once as q = rn(x/s) ∈ [−127, 127]^W (int8)
with one float32 scale s = max|x|/127 per row, and the exact residual
norm r ≥ ‖x − s·q‖ (float64, rounded up). Each iteration splits every
centre c_j (float32) into two int8 parts with a scale each,
c̃_j = t_j h_j + t'_j l_j (h = rn(c/t), t = max|c|/127; l the same of the
remainder c − t h), with δ_j ≥ ‖c_j − c̃_j‖ (float64, rounded up). The
assignment pass then reads only q: the tensor cores give the integer dot
products I_j = q·h_j and J_j = q·l_j **exactly** (int32 accumulation,
|I_j| ≤ W·127² < 2³¹ for W ≤ :data:`MAX_WIDTH`), and the row's coarse
score is d̃_j = β_j + α_j s (t_j I_j + t'_j J_j) in float32. A row is
decided where its best coarse centre is certain to be the float32 pass's;
the others are listed and confirmed by the float32 pass itself, so the
labels are the float32 pass's, row for row (as :mod:`._half`).

The bound
---------
Both passes minimise d_j = β_j + α_j⟨x, c_j⟩ (float32 α, β, c; see
:mod:`._half`). Write w_j = α_j c_j (exact reals) and
D_j = β_j + α_j s(t_j I_j + t'_j J_j) = β_j + ⟨x̃, w̃_j⟩, x̃ = s q,
w̃_j = α_j c̃_j. For two centres j and b, exactly::

    (β_j + ⟨x, w_j⟩) − (β_b + ⟨x, w_b⟩) − (D_j − D_b)
        = ⟨x − x̃, w_j − w_b⟩ + ⟨x̃, (w_j − w̃_j) − (w_b − w̃_b)⟩,

whose magnitude is at most r·M_bj + ‖x̃‖(|α_j|δ_j + |α_b|δ_b), with
M_bj ≥ ‖w_j − w_b‖ (Cauchy–Schwarz; ‖x̃‖ ≤ ‖x‖ + r). The quantisation
of x enters only through the **pair's difference** w_j − w_b: a row is as
hard to decide as the gap between its two nearest centres makes it, not
as large as the centres are. Then the roundings:

* the float32 pass (:mod:`._half`'s analysis, D its accumulation depth,
  η = 2⁻²² for 2 ulp an operation, γ = Dη/(1 − Dη)):
  |d_j − (β_j + ⟨x, w_j⟩)| ≤ |α_j|‖c_j‖‖x‖(γ + η(2 + η)(1 + γ)) + η|β_j|
  + 2⁻¹²⁶(5W + 4)(|α_j| + 1);
* the int8 pass: I_j and J_j are exact; their conversion to float32 and
  the five operations of the score round at most 7 times, each within η
  of a term bounded by |α_j|(s t_j|I_j| + s t'_j|J_j|) + |β_j| ≤
  |α_j|‖x̃‖(‖t_j h_j‖ + ‖t'_j l_j‖) + |β_j|, so
  |d̃_j − D_j| ≤ 8η|α_j|(‖x‖ + r)(‖t_j h_j‖ + ‖t'_j l_j‖) + η|β_j|
  + 6·2⁻¹²⁶(|α_j| + 1) (flushed subnormals).

Collected: the row is decided for its coarse best b when, for every other
centre j, d̃_j − d̃_b > r·M_bj + (A_j + A_b)(‖x‖ + r) + B_j + B_b with::

    A_j = |α_j| (δ_j + 8η(‖t_j h_j‖ + ‖t'_j l_j‖) + ‖c_j‖(γ + η(2 + η)(1 + γ))),
    B_j = 2η|β_j| + 2⁻¹²⁶(5W + 10)(|α_j| + 1)

(:func:`margin_terms`); then d_j − d_b > 0 for the float32 scores, ties
included. The kernel evaluates the test in float32 (at most 8 roundings
of 2⁻²⁴); A, B and M are enlarged by 1 + 2⁻¹⁶ to cover them. For
well-separated states (the benchmark's planted data) r·M is a few
percent of the gap and almost every row is decided; rows at near ties
(unclustered windows) are confirmed in float32.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from connscale._compute.device import HAS_TRITON
from connscale.states import _half
from connscale.states import _triton_kmeans as fused
from connscale.states._budget import memory_budget

if HAS_TRITON:  # pragma: no cover - depends on the machine
    import triton
    import triton.language as tl

    from connscale.states._half import _settle

logger = logging.getLogger(__name__)

#: Launch configuration (BLOCK_M, BLOCK_K, num_warps, num_stages): the
#: fastest integer-dot pass of a sweep on an H100 (45,000 × 19,904 int8:
#: 0.332 ms, 2.70 TB/s; (128, 512, 8, 3) 0.335 ms, (64, 256, 4, 4) 0.343 ms).
CONFIG = (128, 256, 8, 2)
#: Longest rows (columns read) whose int8 dot products fit in int32.
MAX_WIDTH = (2**31 - 1) // (127 * 127)
#: Largest |x| copied (the float32 scores of the largest rows stay finite).
LARGEST = 2.0**60
_ETA = 2.0**-22
_TEST_SLACK = 1.0 + 2.0**-16
#: Centres the kernel takes (padded): the tensor cores' N is 2 × 16.
_K_PAD = 16


@dataclass
class Int8Copy:
    """The int8 copy of prepared windows and what the decision needs."""

    q: torch.Tensor  # (n, W) int8, zero-padded to a multiple of BLOCK_K
    scale: torch.Tensor  # (n,) float32 s: x ≈ s·q
    residual: torch.Tensor  # (n,) float32, ≥ ‖x − s·q‖
    norms: torch.Tensor  # (n,) float32: ‖x‖ (float64, rounded)


def padded_width(e: int) -> int:
    """Columns of the int8 copy: ``e`` rounded up to the kernel's BLOCK_K."""
    block_k = CONFIG[1]
    return -(-e // block_k) * block_k


def _round_up(values: torch.Tensor) -> torch.Tensor:
    """Return non-negative float64 ``values`` as float32 upper bounds.

    Non-negative float64 ``values`` as float32 upper bounds (a float64
    norm of at most 2²⁰ terms is within 2⁻³⁰ of the true value; then
    rounded to float32 and up).
    """
    return (values * (1 + 2.0**-30)).to(torch.float32) * (1 + 2.0**-22)


def _quantise(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise rows to a float32 scale and integers in [−127, 127].

    (scale (rows,) float32, q (rows, E), integers in [−127, 127] as float
    values) of rows: s = max|x|/127 in float32 (1 where that is 0),
    q = rn(x/s) clamped. Any rounding here is harmless: the error of s·q is
    measured afterwards.
    """
    scale = (x.abs().amax(dim=1) / 127).to(torch.float32)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(x / scale.to(x.dtype)[:, None]).clamp_(-127, 127)
    return scale, q


def int8_copy(x: torch.Tensor, row_sq_norms: torch.Tensor | None) -> Int8Copy | None:
    """Return the int8 copy of prepared rows ``x``, or None when it cannot stand in.

    The int8 copy of prepared rows ``x`` (float32, zero beyond E), or None
    when it cannot stand in for them: rows too long for int32 dot products,
    values beyond :data:`LARGEST`, or not enough free device memory
    (logged). ``row_sq_norms``: the rows' squared norms in float64 when
    known.
    """
    n, e = x.shape
    width = padded_width(e)
    if width > MAX_WIDTH:
        logger.info("no int8 copy of the windows: rows of %d columns (at most %d)", e, MAX_WIDTH)
        return None
    needed = n * width + n * 12 + (1 << 25) * 24
    budget = memory_budget(x.device)
    if needed > budget:
        logger.info(
            "no int8 copy of the windows: needs %.3g GB, %.3g GB free", needed / 1e9, budget / 1e9
        )
        return None
    low, high = torch.aminmax(x)
    largest = max(-float(low), float(high))
    if not largest <= LARGEST:  # also catches NaN
        logger.info("no int8 copy of the windows: |x| up to %.6g", largest)
        return None
    q = torch.zeros((n, width), dtype=torch.int8, device=x.device)
    scale = torch.empty(n, dtype=torch.float32, device=x.device)
    residual = torch.empty(n, dtype=torch.float64, device=x.device)
    norms = row_sq_norms.sqrt() if row_sq_norms is not None else torch.empty_like(residual)
    rows = max(1, (1 << 25) // max(e, 1))
    for start in range(0, n, rows):
        block = x[start : start + rows]
        s, qb = _quantise(block)
        scale[start : start + rows] = s
        q[start : start + rows, :e] = qb.to(torch.int8)
        block64 = block.to(torch.float64)
        # s·q is exact in float64 (24 + 8 bits), so is its difference with x
        # up to one rounding of 2⁻⁵³.
        residual[start : start + rows] = torch.linalg.vector_norm(
            block64 - s.to(torch.float64)[:, None] * qb.to(torch.float64), dim=1
        )
        if row_sq_norms is None:
            norms[start : start + rows] = torch.linalg.vector_norm(block64, dim=1)
    return Int8Copy(q=q, scale=scale, residual=_round_up(residual), norms=norms.to(torch.float32))


@dataclass
class SplitCentres:
    """Centres in two int8 parts for the int8 pass (see the module's docstring)."""

    parts: torch.Tensor  # (W, 32) int8: column 2j is h_j, 2j + 1 is l_j (zero-padded)
    scales: torch.Tensor  # (32,) float32: t_j at 2j, t'_j at 2j + 1 (1 for padding)
    error: torch.Tensor  # (k,) float64: δ_j ≥ ‖c_j − c̃_j‖
    part_norms: torch.Tensor  # (k,) float64: ‖t_j h_j‖ + ‖t'_j l_j‖


def split_centres(centres: torch.Tensor, width: int) -> SplitCentres:
    """Split float32 ``centres`` into int8 parts, padded to ``width`` columns.

    The int8 parts of float32 ``centres`` (k × E, k ≤ 16), padded to
    ``width`` columns.

    Both remainders are exact in float64: c − t·h has at most 32
    significant bits where h ≠ 0 (|c| ≥ t/2 there, t·h has 24 + 8 bits),
    and is c itself where h = 0; the same holds for (c − t·h) − t'·l. So δ
    is a float64 norm of the exact error, enlarged by 2⁻³⁰ for its rounding.
    """
    k, e = centres.shape
    c = centres.to(torch.float64)
    t, h = _quantise(c)
    t64 = t.to(torch.float64)
    rest = torch.addcmul(c, t64[:, None], h, value=-1)
    t2, l_part = _quantise(rest)
    t2_64 = t2.to(torch.float64)
    error = torch.linalg.vector_norm(torch.addcmul(rest, t2_64[:, None], l_part, value=-1), dim=1)
    part_norms = t64 * torch.linalg.vector_norm(h, dim=1) + t2_64 * torch.linalg.vector_norm(
        l_part, dim=1
    )
    parts = torch.zeros((width, _K_PAD, 2), dtype=torch.int8, device=centres.device)
    parts[:e, :k] = torch.stack((h, l_part), dim=2).transpose(0, 1)
    scales = torch.ones((_K_PAD, 2), dtype=torch.float32, device=centres.device)
    scales[:k] = torch.stack((t, t2), dim=1)
    return SplitCentres(
        parts=parts.reshape(width, 2 * _K_PAD),
        scales=scales.reshape(-1),
        error=error * (1 + 2.0**-30),
        part_norms=part_norms * (1 + 2.0**-30),
    )


def margin_terms(
    alpha: torch.Tensor,
    beta: torch.Tensor,
    centres: torch.Tensor,
    split: SplitCentres,
    width: int,
    *,
    depth: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return (A, B, M), float32, of the int8 pass's decision test.

    (A (16,), B (16,), M (16 × 16)), float32, of the decision test (see
    the module's docstring), enlarged for its float32 evaluation and
    zero-padded to 16 centres. ``alpha``, ``beta`` (k,) and ``centres``
    (k × E): the float32 values both passes use; ``width``: the columns the
    float32 pass reads; ``depth``: its accumulation depth.
    """
    k = centres.shape[0]
    gamma = depth * _ETA / (1 - depth * _ETA)
    c = centres.to(torch.float64)
    alpha64 = alpha.to(torch.float64)
    abs_alpha = alpha64.abs()
    fp32_pass = torch.linalg.vector_norm(c, dim=1) * (gamma + _ETA * (2 + _ETA) * (1 + gamma))
    # Rows 0-15: M; row 16: A; row 17: B (one buffer, one conversion).
    out = torch.zeros((_K_PAD + 2, _K_PAD), dtype=torch.float64, device=centres.device)
    w = alpha64[:, None] * c  # exact: float32 × float32
    out[:k, :k] = torch.linalg.vector_norm(w[:, None, :] - w[None, :, :], dim=2)
    out[_K_PAD, :k] = abs_alpha * (split.error + 8 * _ETA * split.part_norms + fp32_pass)
    out[_K_PAD + 1, :k] = 2 * _ETA * beta.to(torch.float64).abs() + 2.0**-126 * (5 * width + 10) * (
        abs_alpha + 1
    )
    out = (out * (_TEST_SLACK * (1 + 2.0**-30))).to(torch.float32)
    return out[_K_PAD], out[_K_PAD + 1], out[:_K_PAD]


if HAS_TRITON:

    @triton.jit
    def _int8_kernel(  # noqa: PLR0913 - a Triton kernel: its tensors, strides and block sizes
        q_ptr,
        parts_ptr,
        scales_ptr,
        alpha_ptr,
        beta_ptr,
        a_ptr,
        b_ptr,
        m_ptr,
        row_scale_ptr,
        residual_ptr,
        norm_ptr,
        old_ptr,
        labels_ptr,
        score_ptr,
        changed_ptr,
        pending_ptr,
        count_ptr,
        n_rows,
        width,
        stride_q,
        K: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_K: tl.constexpr,
    ):
        pid = tl.program_id(0)
        rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < n_rows
        base = rows.to(tl.int64) * stride_q
        nn = tl.arange(0, 32)
        acc = tl.zeros((BLOCK_M, 32), dtype=tl.int32)
        for e0 in range(0, width, BLOCK_K):
            cols = e0 + tl.arange(0, BLOCK_K)
            x = tl.load(q_ptr + base[:, None] + cols[None, :], mask=row_ok[:, None], other=0)
            c = tl.load(parts_ptr + cols[:, None] * 32 + nn[None, :])
            acc = tl.dot(x, c, acc, out_dtype=tl.int32)  # exact
        ints, lows = tl.split(tl.reshape(acc, (BLOCK_M, 16, 2)))
        kk = tl.arange(0, 16)
        k_ok = kk < K
        t = tl.load(scales_ptr + 2 * kk)
        t2 = tl.load(scales_ptr + 2 * kk + 1)
        alpha = tl.load(alpha_ptr + kk, mask=k_ok, other=0.0)
        beta = tl.load(beta_ptr + kk, mask=k_ok, other=0.0)
        s = tl.load(row_scale_ptr + rows, mask=row_ok, other=0.0)
        dots = ints.to(tl.float32) * t[None, :] + lows.to(tl.float32) * t2[None, :]
        score = beta[None, :] + alpha[None, :] * (s[:, None] * dots)
        score = tl.where(k_ok[None, :], score, float("inf"))
        # thr[r, j] = r·M[b, j] + (A_j + A_b)(‖x‖ + r) + B_j + B_b
        best = tl.argmin(score, axis=1)
        is_best = kk[None, :] == best[:, None]
        a = tl.load(a_ptr + kk)
        b = tl.load(b_ptr + kk)
        a_best = tl.sum(tl.where(is_best, a[None, :], 0.0), axis=1)
        b_best = tl.sum(tl.where(is_best, b[None, :], 0.0), axis=1)
        pair = tl.load(m_ptr + best[:, None] * 16 + kk[None, :])
        r = tl.load(residual_ptr + rows, mask=row_ok, other=0.0)
        norm = tl.load(norm_ptr + rows, mask=row_ok, other=0.0)
        thr = (
            r[:, None] * pair
            + (a[None, :] + a_best[:, None]) * (norm + r)[:, None]
            + (b[None, :] + b_best[:, None])
        )
        _settle(
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
        )


def assign(
    x: torch.Tensor,
    copy: Int8Copy,
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
    """Assign every row of ``x`` from the int8 copy, confirming the uncertain ones.

    Labels of every row of ``x`` into ``labels``, equal to the float32
    pass's: decided from the int8 ``copy`` where the bound allows, the other
    rows listed in ``pending`` (``count`` of them, set here) and assigned
    again by the float32 pass. Arguments as :func:`connscale.states._half.assign`.
    """
    n, _ = x.shape
    k = centres.shape[0]
    if k > _K_PAD:
        raise ValueError(f"the int8 pass takes at most {_K_PAD} centres; got {k}.")
    width = copy.q.shape[1]
    split = split_centres(centres, width)
    read = fused.read_width(x)
    depth = _half._depth(read, fused.CONFIG["assign"][1])
    a, b, m = margin_terms(alpha, beta, centres, split, read, depth=depth)
    count.zero_()
    block_m, block_k, warps, stages = CONFIG
    _int8_kernel[(triton.cdiv(n, block_m),)](
        copy.q,
        split.parts,
        split.scales,
        alpha,
        beta,
        a,
        b,
        m,
        copy.scale,
        copy.residual,
        copy.norms,
        old,
        labels,
        score,
        changed,
        pending,
        count,
        n,
        width,
        copy.q.stride(0),
        K=k,
        BLOCK_M=block_m,
        BLOCK_K=block_k,
        num_warps=warps,
        num_stages=stages,
    )
    _half.confirm(
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
