"""Triton kernels of the k-means Lloyd iteration on CUDA.

* :func:`assign`: one pass over the windows X (n × E, row-major) per
  iteration. Each program takes a block of rows and, column chunk by column
  chunk, accumulates their dot products with the k centres (or their L1
  distances), then picks each row's nearest centre (ties to the lowest
  index, as ``torch.argmin`` and scikit-learn) and its distance, and counts
  the labels that changed.
* :func:`move_rows`: once few labels change, the centre sums follow them:
  only the rows whose label changed are read, added to their new centre's
  float64 sum and subtracted from their old one's (atomics), so such an
  iteration reads X once.
* :func:`centre_sums`: the per-centre float64 sums of the rows from scratch,
  column-stationary (each program owns a column chunk and a slab of rows,
  so no atomics), for the first iterations when most labels change.

Their pure-torch equivalents (``connscale.states._kmeans``: chunked GEMM or
``cdist`` + ``argmin``; ``index_add_`` in float64) run elsewhere and are
checked against these kernels in the tests (on CUDA, and under
``TRITON_INTERPRET=1`` on the CPU).
"""

from __future__ import annotations

import os

import torch

try:  # pragma: no cover - depends on the machine
    import triton
    import triton.language as tl

    HAS_TRITON = True
except ImportError:  # pragma: no cover - CPU machines without triton
    HAS_TRITON = False

_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"

#: Most centres the kernels take (centres are unrolled at compile time).
MAX_CENTRES = 32

#: Dot-product metrics through ``tl.dot`` (exact fp32 FMAs, no TF32) on
#: (BLOCK_M × BLOCK_E) @ (BLOCK_E × 16) tiles; False (faster on an H100,
#: 2026-11-22): one broadcast product and row sum per centre, as for L1.
USE_DOT = False
#: Launch configurations (BLOCK_M, BLOCK_E, num_warps, num_stages), measured
#: on an H100 by benchmarks/bench_states.py.
CONFIG = {"dot": (128, 64, 8, 4), "sums": (32, 64, 4, 3), "centre_sums": (8, 128, 4, 1),
          "move": (16, 128, 4, 1)}


def usable(x: torch.Tensor, n_centres: int) -> bool:
    """Whether the kernels run on ``x`` (CUDA or the interpreter, float32, rows contiguous)."""
    return (HAS_TRITON and x.dtype == torch.float32 and (x.is_cuda or _INTERPRET)
            and x.stride(1) == 1 and n_centres <= MAX_CENTRES)


def runs_here(x: torch.Tensor) -> bool:
    """Whether the kernels could run on ``x``'s device (CUDA or the interpreter)."""
    return HAS_TRITON and (x.is_cuda or _INTERPRET)


def _pad(k: int) -> int:
    return max(2, 1 << (k - 1).bit_length())


if HAS_TRITON:

    @triton.jit
    def _assign_kernel(x_ptr, c_ptr, alpha_ptr, beta_ptr, row_ptr, old_ptr, labels_ptr,
                       dist_ptr, changed_ptr, n_rows, n_cols, stride_x, k,
                       L1: tl.constexpr, DOT: tl.constexpr, K_PAD: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_E: tl.constexpr):
        pid = tl.program_id(0)
        rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < n_rows
        base = rows.to(tl.int64) * stride_x
        kk = tl.arange(0, K_PAD)
        acc = tl.zeros((BLOCK_M, K_PAD), dtype=tl.float32)
        for e0 in range(0, n_cols, BLOCK_E):
            cols = e0 + tl.arange(0, BLOCK_E)
            col_ok = cols < n_cols
            x = tl.load(x_ptr + base[:, None] + cols[None, :],
                        mask=row_ok[:, None] & col_ok[None, :], other=0.0)
            if DOT:
                c = tl.load(c_ptr + kk[:, None] * stride_x + cols[None, :],
                            mask=col_ok[None, :], other=0.0)
                acc += tl.dot(x, tl.trans(c), input_precision="ieee")
            else:
                for j in tl.static_range(K_PAD):
                    c = tl.load(c_ptr + j * stride_x + cols, mask=col_ok, other=0.0)
                    if L1:
                        part = tl.sum(tl.abs(x - c[None, :]), axis=1)
                    else:
                        part = tl.sum(x * c[None, :], axis=1)
                    acc = tl.where(kk[None, :] == j, acc + part[:, None], acc)
        # Score minimised: L1 distance, or beta + alpha * dot (the row's own
        # term, constant across centres, is added to the distance only).
        if L1:
            score = acc
        else:
            alpha = tl.load(alpha_ptr + kk, mask=kk < k, other=0.0)
            beta = tl.load(beta_ptr + kk, mask=kk < k, other=0.0)
            score = beta[None, :] + alpha[None, :] * acc
        score = tl.where(kk[None, :] < k, score, float("inf"))
        best = tl.argmin(score, axis=1)
        smin = tl.min(score, axis=1)
        if not L1:
            smin = smin + tl.load(row_ptr + rows, mask=row_ok, other=0.0)
        tl.store(labels_ptr + rows, best.to(tl.int64), mask=row_ok)
        tl.store(dist_ptr + rows, smin, mask=row_ok)
        old = tl.load(old_ptr + rows, mask=row_ok, other=-1)
        changed = (best.to(tl.int64) != old) & row_ok
        tl.atomic_add(changed_ptr, tl.sum(changed.to(tl.int32), axis=0))

    @triton.jit
    def _move_kernel(x_ptr, rows_ptr, new_ptr, old_ptr, sums_ptr, n_moved, n_cols, stride_x,
                     K_PAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_E: tl.constexpr):
        pid_m = tl.program_id(0)
        pid_e = tl.program_id(1)
        index = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        ok = index < n_moved
        rows = tl.load(rows_ptr + index, mask=ok, other=0)
        new = tl.load(new_ptr + rows, mask=ok, other=-1)
        old = tl.load(old_ptr + rows, mask=ok, other=-1)
        cols = pid_e * BLOCK_E + tl.arange(0, BLOCK_E)
        col_ok = cols < n_cols
        x = tl.load(x_ptr + rows.to(tl.int64)[:, None] * stride_x + cols[None, :],
                    mask=ok[:, None] & col_ok[None, :], other=0.0).to(tl.float64)
        for j in tl.static_range(K_PAD):
            weight = (new == j).to(tl.float64) - (old == j).to(tl.float64)
            delta = tl.sum(x * weight[:, None], axis=0)
            tl.atomic_add(sums_ptr + j * n_cols + cols, delta, mask=col_ok)

    @triton.jit
    def _sums_kernel(x_ptr, labels_ptr, out_ptr, n_rows, n_cols, stride_x, rows_per_slab,
                     K_PAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_E: tl.constexpr):
        pid_e = tl.program_id(0)
        slab = tl.program_id(1)
        cols = pid_e * BLOCK_E + tl.arange(0, BLOCK_E)
        col_ok = cols < n_cols
        kk = tl.arange(0, K_PAD)
        start = slab * rows_per_slab
        stop = tl.minimum(n_rows, start + rows_per_slab)
        acc = tl.zeros((K_PAD, BLOCK_E), dtype=tl.float64)
        for r0 in range(start, stop, BLOCK_M):
            rows = r0 + tl.arange(0, BLOCK_M)
            ok = rows < stop
            x = tl.load(x_ptr + rows.to(tl.int64)[:, None] * stride_x + cols[None, :],
                        mask=ok[:, None] & col_ok[None, :], other=0.0).to(tl.float64)
            lab = tl.load(labels_ptr + rows, mask=ok, other=-1)
            onehot = (lab[:, None] == kk[None, :]).to(tl.float64)  # (BLOCK_M, K_PAD)
            acc += tl.sum(onehot[:, :, None] * x[:, None, :], axis=0)
        out = out_ptr + slab.to(tl.int64) * K_PAD * n_cols
        tl.store(out + kk[:, None] * n_cols + cols[None, :], acc, mask=col_ok[None, :])


def assign(x: torch.Tensor, centres: torch.Tensor, *, l1: bool, alpha: torch.Tensor | None,
           beta: torch.Tensor | None, row_term: torch.Tensor | None, old: torch.Tensor,
           labels: torch.Tensor, dist: torch.Tensor, changed: torch.Tensor) -> None:
    """Nearest centre of every row of ``x`` into ``labels`` (int64) and the
    distance into ``dist`` (float32); the number of labels that differ from
    ``old`` is added to ``changed`` (int32, one element).

    For the dot-product metrics the score minimised is
    ``beta[j] + alpha[j] * <x, c_j>`` and the distance adds ``row_term``.
    ``centres`` are float32 (k × E).
    """
    n, e = x.shape
    k = centres.shape[0]
    dot = USE_DOT and not l1
    k_pad = max(16, _pad(k)) if dot else _pad(k)
    block_m, block_e, warps, stages = CONFIG["dot" if dot else "sums"]
    padded = torch.zeros((k_pad, x.stride(0)), dtype=torch.float32, device=x.device)
    padded[:k, :e] = centres
    dummy = dist  # never read when not needed
    grid = (triton.cdiv(n, block_m),)
    _assign_kernel[grid](
        x, padded, dummy if l1 else alpha, dummy if l1 else beta, dummy if l1 else row_term,
        old, labels, dist, changed, n, e, x.stride(0), k, L1=l1, DOT=dot, K_PAD=k_pad,
        BLOCK_M=block_m, BLOCK_E=block_e, num_warps=warps, num_stages=stages,
    )


def move_rows(x: torch.Tensor, rows: torch.Tensor, new: torch.Tensor, old: torch.Tensor,
              sums: torch.Tensor) -> None:
    """``sums[new[r]] += x[r]`` and ``sums[old[r]] -= x[r]`` for every r in
    ``rows`` (float64 sums, k × E, updated in place)."""
    n_moved = rows.numel()
    if n_moved == 0:
        return
    e = x.shape[1]
    block_m, block_e, warps, stages = CONFIG["move"]
    grid = (triton.cdiv(n_moved, block_m), triton.cdiv(e, block_e))
    _move_kernel[grid](x, rows, new, old, sums, n_moved, e, x.stride(0),
                       K_PAD=_pad(sums.shape[0]), BLOCK_M=block_m, BLOCK_E=block_e,
                       num_warps=warps, num_stages=stages)


def centre_sums(x: torch.Tensor, labels: torch.Tensor, k: int) -> torch.Tensor:
    """Per-centre float64 sums of the rows of ``x`` (k × E) for ``labels``."""
    n, e = x.shape
    k_pad = _pad(k)
    block_m, block_e, warps, stages = CONFIG["centre_sums"]
    col_blocks = triton.cdiv(e, block_e)
    if x.is_cuda:
        programs = 4 * torch.cuda.get_device_properties(x.device).multi_processor_count
    else:
        programs = col_blocks
    slabs = max(1, min(triton.cdiv(programs, col_blocks), triton.cdiv(n, 4 * block_m)))
    rows_per_slab = triton.cdiv(triton.cdiv(n, slabs), block_m) * block_m
    slabs = triton.cdiv(n, rows_per_slab)
    out = torch.empty((slabs, k_pad, e), dtype=torch.float64, device=x.device)
    _sums_kernel[(col_blocks, slabs)](x, labels, out, n, e, x.stride(0), rows_per_slab,
                                      K_PAD=k_pad, BLOCK_M=block_m, BLOCK_E=block_e,
                                      num_warps=warps, num_stages=stages)
    return out.sum(dim=0)[:k]
