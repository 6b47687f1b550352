"""Triton kernels of the k-means Lloyd iteration on CUDA.

* :func:`assign`: one pass over the windows X (n × E, row-major) per
  iteration. Each program takes a block of rows and streams their columns in
  chunks, keeping one (rows × chunk) accumulator per centre (products, or
  absolute differences for L1) that is reduced over the columns only once,
  at the end; it then picks each row's nearest centre (ties to the lowest
  index, as ``torch.argmin`` and scikit-learn), its score, and counts the
  labels that changed. The column bound is the row length rounded up to 16
  (the rows of :class:`~connscale.states._kmeans.Prepared` are zero-padded
  to a multiple of 16), so every load is a 16-byte vector.
* :func:`moved_sums`: the change of the per-centre float64 sums when the
  rows listed in an index (those whose label changed; all rows the first
  time) leave their old centre for their new one. Only those rows are read.
  The kernel is column-stationary: each program owns a column chunk and a
  slab of the listed rows and writes its own float64 partial sums, and the
  partials are added in a fixed order, so the result does not depend on
  scheduling (no atomics).

The number of listed rows is read on the device, so an iteration needs no
host synchronisation. The pure-torch equivalents (``connscale.states._kmeans``:
chunked GEMM or ``cdist`` + ``min``; a float64 one-hot product for the sums)
run elsewhere and are checked against these kernels in the tests (on CUDA,
and under ``TRITON_INTERPRET=1`` on the CPU).
"""

from __future__ import annotations

import torch

from connscale._compute.device import HAS_TRITON, use_triton

if HAS_TRITON:  # pragma: no cover - depends on the machine
    import triton
    import triton.language as tl

#: Most centres the kernels take (one named accumulator each).
MAX_CENTRES = 16
#: Launch configurations (BLOCK_M, BLOCK_E, num_warps, num_stages), measured
#: on an H100 by ``benchmarks/bench_states.py --tune`` (2026-11-22).
CONFIG = {"assign": (32, 64, 4, 1), "sums": (16, 128, 8, 1)}


def usable(x: torch.Tensor, n_centres: int) -> bool:
    """Whether the kernels run on ``x`` (CUDA or the interpreter, float32, rows contiguous)."""
    return use_triton(x, float32=True) and x.stride(1) == 1 and n_centres <= MAX_CENTRES


def runs_here(x: torch.Tensor) -> bool:
    """Whether the kernels could run on ``x``'s device (CUDA or the interpreter)."""
    return use_triton(x)


def read_width(x: torch.Tensor) -> int:
    """Return the columns the kernels read per row.

    The row length rounded up to 16 when the row stride leaves room (the
    padding must hold zeros, as Prepared's does).
    """
    e = x.shape[1]
    rounded = -(-e // 16) * 16
    return rounded if x.stride(0) >= rounded else e


if HAS_TRITON:

    @triton.jit
    def _acc_init(
        j: tl.constexpr,
        K: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_E: tl.constexpr,
        DTYPE: tl.constexpr,
    ):
        if j < K:
            acc = tl.zeros((BLOCK_M, BLOCK_E), dtype=DTYPE)
        else:  # an unused centre: a 1 × 1 placeholder the compiler drops
            acc = tl.zeros((1, 1), dtype=DTYPE)
        return acc

    @triton.jit
    def _acc_centre(
        acc, x, c_ptr, j: tl.constexpr, K: tl.constexpr, stride_c, cols, col_ok, L1: tl.constexpr
    ):
        if j < K:
            c = tl.load(c_ptr + j * stride_c + cols, mask=col_ok, other=0.0)
            if L1:
                acc = acc + tl.abs(x - c[None, :])
            else:
                acc = acc + x * c[None, :]
        return acc

    @triton.jit
    def _score_centre(
        score, acc, alpha_ptr, beta_ptr, kk, j: tl.constexpr, K: tl.constexpr, L1: tl.constexpr
    ):
        if j < K:
            part = tl.sum(acc, axis=1)
            if not L1:
                part = tl.load(beta_ptr + j) + tl.load(alpha_ptr + j) * part
            score = tl.where(kk[None, :] == j, part[:, None], score)
        return score

    @triton.jit
    def _assign_kernel(  # noqa: PLR0913, PLR0915 - a Triton kernel: its tensors, strides and block sizes
        x_ptr,
        c_ptr,
        alpha_ptr,
        beta_ptr,
        old_ptr,
        labels_ptr,
        score_ptr,
        changed_ptr,
        index_ptr,
        count_ptr,
        n_rows,
        width,
        stride_x,
        stride_c,
        K: tl.constexpr,
        K_PAD: tl.constexpr,
        L1: tl.constexpr,
        INDEXED: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_E: tl.constexpr,
    ):
        pid = tl.program_id(0)
        if INDEXED:  # the rows index_ptr[:count]; programs past the count read nothing
            i = pid * BLOCK_M + tl.arange(0, BLOCK_M)
            count = tl.load(count_ptr)
            row_ok = i < count
            rows = tl.load(index_ptr + i, mask=row_ok, other=0)
            stop = tl.where(pid * BLOCK_M < count, width, 0)
        else:
            rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
            row_ok = rows < n_rows
            stop = width
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
        for e0 in range(0, stop, BLOCK_E):
            cols = e0 + tl.arange(0, BLOCK_E)
            col_ok = cols < width
            x = tl.load(
                x_ptr + base[:, None] + cols[None, :],
                mask=row_ok[:, None] & col_ok[None, :],
                other=0.0,
            )
            a0 = _acc_centre(a0, x, c_ptr, 0, K, stride_c, cols, col_ok, L1)
            a1 = _acc_centre(a1, x, c_ptr, 1, K, stride_c, cols, col_ok, L1)
            a2 = _acc_centre(a2, x, c_ptr, 2, K, stride_c, cols, col_ok, L1)
            a3 = _acc_centre(a3, x, c_ptr, 3, K, stride_c, cols, col_ok, L1)
            a4 = _acc_centre(a4, x, c_ptr, 4, K, stride_c, cols, col_ok, L1)
            a5 = _acc_centre(a5, x, c_ptr, 5, K, stride_c, cols, col_ok, L1)
            a6 = _acc_centre(a6, x, c_ptr, 6, K, stride_c, cols, col_ok, L1)
            a7 = _acc_centre(a7, x, c_ptr, 7, K, stride_c, cols, col_ok, L1)
            a8 = _acc_centre(a8, x, c_ptr, 8, K, stride_c, cols, col_ok, L1)
            a9 = _acc_centre(a9, x, c_ptr, 9, K, stride_c, cols, col_ok, L1)
            a10 = _acc_centre(a10, x, c_ptr, 10, K, stride_c, cols, col_ok, L1)
            a11 = _acc_centre(a11, x, c_ptr, 11, K, stride_c, cols, col_ok, L1)
            a12 = _acc_centre(a12, x, c_ptr, 12, K, stride_c, cols, col_ok, L1)
            a13 = _acc_centre(a13, x, c_ptr, 13, K, stride_c, cols, col_ok, L1)
            a14 = _acc_centre(a14, x, c_ptr, 14, K, stride_c, cols, col_ok, L1)
            a15 = _acc_centre(a15, x, c_ptr, 15, K, stride_c, cols, col_ok, L1)
        # Score minimised: the L1 distance, or beta + alpha * <x, c> (the
        # row's own term, the same for every centre, is left out).
        kk = tl.arange(0, K_PAD)
        score = tl.full((BLOCK_M, K_PAD), float("inf"), dtype=tl.float32)
        score = _score_centre(score, a0, alpha_ptr, beta_ptr, kk, 0, K, L1)
        score = _score_centre(score, a1, alpha_ptr, beta_ptr, kk, 1, K, L1)
        score = _score_centre(score, a2, alpha_ptr, beta_ptr, kk, 2, K, L1)
        score = _score_centre(score, a3, alpha_ptr, beta_ptr, kk, 3, K, L1)
        score = _score_centre(score, a4, alpha_ptr, beta_ptr, kk, 4, K, L1)
        score = _score_centre(score, a5, alpha_ptr, beta_ptr, kk, 5, K, L1)
        score = _score_centre(score, a6, alpha_ptr, beta_ptr, kk, 6, K, L1)
        score = _score_centre(score, a7, alpha_ptr, beta_ptr, kk, 7, K, L1)
        score = _score_centre(score, a8, alpha_ptr, beta_ptr, kk, 8, K, L1)
        score = _score_centre(score, a9, alpha_ptr, beta_ptr, kk, 9, K, L1)
        score = _score_centre(score, a10, alpha_ptr, beta_ptr, kk, 10, K, L1)
        score = _score_centre(score, a11, alpha_ptr, beta_ptr, kk, 11, K, L1)
        score = _score_centre(score, a12, alpha_ptr, beta_ptr, kk, 12, K, L1)
        score = _score_centre(score, a13, alpha_ptr, beta_ptr, kk, 13, K, L1)
        score = _score_centre(score, a14, alpha_ptr, beta_ptr, kk, 14, K, L1)
        score = _score_centre(score, a15, alpha_ptr, beta_ptr, kk, 15, K, L1)
        best = tl.argmin(score, axis=1).to(tl.int64)
        tl.store(labels_ptr + rows, best, mask=row_ok)
        tl.store(score_ptr + rows, tl.min(score, axis=1), mask=row_ok)
        old = tl.load(old_ptr + rows, mask=row_ok, other=-1)
        changed = (best != old) & row_ok
        tl.atomic_add(changed_ptr, tl.sum(changed.to(tl.int32), axis=0))

    @triton.jit
    def _acc_moved(acc, x, new, old, j: tl.constexpr, K: tl.constexpr):
        if j < K:
            weight = (new == j).to(tl.float64) - (old == j).to(tl.float64)
            acc = acc + x * weight[:, None]
        return acc

    @triton.jit
    def _store_centre(out_ptr, acc, j: tl.constexpr, K: tl.constexpr, n_cols, cols, col_ok):
        if j < K:
            tl.store(out_ptr + j * n_cols + cols, tl.sum(acc, axis=0), mask=col_ok)

    @triton.jit
    def _moved_kernel(  # noqa: PLR0913, PLR0915 - a Triton kernel: its tensors, strides and block sizes
        x_ptr,
        index_ptr,
        count_ptr,
        new_ptr,
        old_ptr,
        out_ptr,
        n_cols,
        width,
        stride_x,
        n_slabs,
        K: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_E: tl.constexpr,
    ):
        pid_e = tl.program_id(0)
        slab = tl.program_id(1)
        cols = pid_e * BLOCK_E + tl.arange(0, BLOCK_E)
        read_ok = cols < width
        count = tl.load(count_ptr)
        per_slab = tl.cdiv(tl.cdiv(count, n_slabs), BLOCK_M) * BLOCK_M
        start = slab * per_slab
        stop = tl.minimum(count, start + per_slab)
        a0 = _acc_init(0, K, BLOCK_M, BLOCK_E, tl.float64)
        a1 = _acc_init(1, K, BLOCK_M, BLOCK_E, tl.float64)
        a2 = _acc_init(2, K, BLOCK_M, BLOCK_E, tl.float64)
        a3 = _acc_init(3, K, BLOCK_M, BLOCK_E, tl.float64)
        a4 = _acc_init(4, K, BLOCK_M, BLOCK_E, tl.float64)
        a5 = _acc_init(5, K, BLOCK_M, BLOCK_E, tl.float64)
        a6 = _acc_init(6, K, BLOCK_M, BLOCK_E, tl.float64)
        a7 = _acc_init(7, K, BLOCK_M, BLOCK_E, tl.float64)
        a8 = _acc_init(8, K, BLOCK_M, BLOCK_E, tl.float64)
        a9 = _acc_init(9, K, BLOCK_M, BLOCK_E, tl.float64)
        a10 = _acc_init(10, K, BLOCK_M, BLOCK_E, tl.float64)
        a11 = _acc_init(11, K, BLOCK_M, BLOCK_E, tl.float64)
        a12 = _acc_init(12, K, BLOCK_M, BLOCK_E, tl.float64)
        a13 = _acc_init(13, K, BLOCK_M, BLOCK_E, tl.float64)
        a14 = _acc_init(14, K, BLOCK_M, BLOCK_E, tl.float64)
        a15 = _acc_init(15, K, BLOCK_M, BLOCK_E, tl.float64)
        for r0 in range(start, stop, BLOCK_M):
            i = r0 + tl.arange(0, BLOCK_M)
            ok = i < stop
            rows = tl.load(index_ptr + i, mask=ok, other=0)
            new = tl.load(new_ptr + rows, mask=ok, other=-1)
            old = tl.load(old_ptr + rows, mask=ok, other=-1)
            x = tl.load(
                x_ptr + rows.to(tl.int64)[:, None] * stride_x + cols[None, :],
                mask=ok[:, None] & read_ok[None, :],
                other=0.0,
            ).to(tl.float64)
            a0 = _acc_moved(a0, x, new, old, 0, K)
            a1 = _acc_moved(a1, x, new, old, 1, K)
            a2 = _acc_moved(a2, x, new, old, 2, K)
            a3 = _acc_moved(a3, x, new, old, 3, K)
            a4 = _acc_moved(a4, x, new, old, 4, K)
            a5 = _acc_moved(a5, x, new, old, 5, K)
            a6 = _acc_moved(a6, x, new, old, 6, K)
            a7 = _acc_moved(a7, x, new, old, 7, K)
            a8 = _acc_moved(a8, x, new, old, 8, K)
            a9 = _acc_moved(a9, x, new, old, 9, K)
            a10 = _acc_moved(a10, x, new, old, 10, K)
            a11 = _acc_moved(a11, x, new, old, 11, K)
            a12 = _acc_moved(a12, x, new, old, 12, K)
            a13 = _acc_moved(a13, x, new, old, 13, K)
            a14 = _acc_moved(a14, x, new, old, 14, K)
            a15 = _acc_moved(a15, x, new, old, 15, K)
        out = out_ptr + slab.to(tl.int64) * K * n_cols
        col_ok = cols < n_cols
        _store_centre(out, a0, 0, K, n_cols, cols, col_ok)
        _store_centre(out, a1, 1, K, n_cols, cols, col_ok)
        _store_centre(out, a2, 2, K, n_cols, cols, col_ok)
        _store_centre(out, a3, 3, K, n_cols, cols, col_ok)
        _store_centre(out, a4, 4, K, n_cols, cols, col_ok)
        _store_centre(out, a5, 5, K, n_cols, cols, col_ok)
        _store_centre(out, a6, 6, K, n_cols, cols, col_ok)
        _store_centre(out, a7, 7, K, n_cols, cols, col_ok)
        _store_centre(out, a8, 8, K, n_cols, cols, col_ok)
        _store_centre(out, a9, 9, K, n_cols, cols, col_ok)
        _store_centre(out, a10, 10, K, n_cols, cols, col_ok)
        _store_centre(out, a11, 11, K, n_cols, cols, col_ok)
        _store_centre(out, a12, 12, K, n_cols, cols, col_ok)
        _store_centre(out, a13, 13, K, n_cols, cols, col_ok)
        _store_centre(out, a14, 14, K, n_cols, cols, col_ok)
        _store_centre(out, a15, 15, K, n_cols, cols, col_ok)


def assign(
    x: torch.Tensor,
    centres: torch.Tensor,
    *,
    l1: bool,
    alpha: torch.Tensor | None,
    beta: torch.Tensor | None,
    old: torch.Tensor,
    labels: torch.Tensor,
    score: torch.Tensor,
    changed: torch.Tensor,
    rows: torch.Tensor | None = None,
    count: torch.Tensor | None = None,
) -> None:
    """Assign every row of ``x`` its nearest centre and score.

    Nearest centre of every row of ``x`` into ``labels`` (int64) and its
    score into ``score`` (float32); the number of labels that differ from
    ``old`` is added to ``changed`` (int32, one element).

    The score is the L1 distance, or for the dot-product metrics
    ``beta[j] + alpha[j] * <x, c_j>`` (float32 ``alpha``, ``beta``).
    ``centres`` are float32 (k × E). Columns of ``x`` from E up to
    :func:`read_width` are read and must be zero.

    With ``rows`` (int32) and ``count`` (a one-element int32 device tensor),
    only the rows ``rows[:count]`` are assigned (the other entries of
    ``labels`` and ``score`` are left as they are), with the same arithmetic
    per row as the full pass: the same program and launch configuration,
    the rows' addresses read from the list.
    """
    n, e = x.shape
    k = centres.shape[0]
    width = read_width(x)
    padded = torch.zeros((k, width), dtype=torch.float32, device=x.device)
    padded[:, :e] = centres
    block_m, block_e, warps, stages = CONFIG["assign"]
    grid = (triton.cdiv(n, block_m),)
    indexed = rows is not None
    _assign_kernel[grid](
        x,
        padded,
        score if l1 else alpha,
        score if l1 else beta,
        old,
        labels,
        score,
        changed,
        rows if indexed else labels,
        count if indexed else changed,
        n,
        width,
        x.stride(0),
        width,
        K=k,
        K_PAD=max(2, 1 << (k - 1).bit_length()),
        L1=l1,
        INDEXED=indexed,
        BLOCK_M=block_m,
        BLOCK_E=block_e,
        num_warps=warps,
        num_stages=stages,
    )


def moved_sums(
    x: torch.Tensor,
    index: torch.Tensor,
    count: torch.Tensor,
    new: torch.Tensor,
    old: torch.Tensor,
    k: int,
) -> torch.Tensor:
    """Compute the change of the per-centre sums when rows move between centres.

    Change of the per-centre float64 sums (k × E) when the rows
    ``index[:count]`` (int32, ``count`` a one-element int32 device tensor)
    move from centre ``old[r]`` to ``new[r]`` (an old label of -1: no
    centre, so the first call gives the sums themselves).
    """
    e = x.shape[1]
    block_m, block_e, warps, stages = CONFIG["sums"]
    col_blocks = triton.cdiv(e, block_e)
    programs = (
        4 * torch.cuda.get_device_properties(x.device).multi_processor_count
        if x.is_cuda
        else col_blocks
    )
    slabs = max(1, triton.cdiv(programs, col_blocks))
    out = torch.empty((slabs, k, e), dtype=torch.float64, device=x.device)
    _moved_kernel[(col_blocks, slabs)](
        x,
        index,
        count,
        new,
        old,
        out,
        e,
        read_width(x),
        x.stride(0),
        slabs,
        K=k,
        BLOCK_M=block_m,
        BLOCK_E=block_e,
        num_warps=warps,
        num_stages=stages,
    )
    return out.sum(dim=0)
