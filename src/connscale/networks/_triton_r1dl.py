"""Triton kernels for the resident r1DL update on CUDA (float32).

* :func:`gemv`: ``y = Sᵀu`` in one pass over Sᵀ (P x T, row-major, rows
  padded to 16 bytes so loads vectorise);
* :func:`csr_deflate`: ``y -= Vᵀc`` from a voxel-major CSR of the previous
  atoms' loadings, each voxel's entries subtracted in atom order (so the
  result is deterministic, unlike a scatter with atomics);
* :func:`radix_top_r`: exact top-r of ``y`` by a four-pass radix select on
  the order keys of :mod:`connscale.networks._select` (8 bits a pass:
  per-program 256-bin histograms, summed by one program that picks the
  digit), then a count and a write pass that compact the kept entries in
  index order, ties to the lowest indices. No host
  synchronisation anywhere, so the whole update can be captured in a CUDA
  graph;
* :func:`gather_gemv`: ``Σⱼ vⱼ Sᵀ[idxⱼ]`` reading only the r chosen rows
  (per-program partial sums, added in a fixed order by :func:`column_sum`);
* :func:`atom_dots` and :func:`finish`: ``V v`` for the learned atoms
  (their number read from the device, so one graph serves every atom), then
  ``Sv - U(Vv)``, its norm, the new u and the convergence statistics.

Each has a pure-torch equivalent (``torch.mv`` + ``index_add_``,
:func:`connscale.networks._select.top_r_sorted_torch`, ``index_select`` +
``mv``, a reshape-and-sum) used on the CPU and checked against these
kernels in the tests (on CUDA, and under ``TRITON_INTERPRET=1`` on the CPU).
"""

from __future__ import annotations

import torch

from connscale._compute.device import HAS_TRITON, use_triton

if HAS_TRITON:  # pragma: no cover - depends on the machine
    import triton
    import triton.language as tl

_MAX_PARTS = 128  # programs per counting pass (their partials are summed by one)


def usable(y: torch.Tensor) -> bool:
    """Whether the Triton kernels run on ``y`` (CUDA or the interpreter, float32)."""
    return use_triton(y, float32=True)


if HAS_TRITON:

    @triton.jit
    def _order_key(y, SIGNED: tl.constexpr):
        bits = y.to(tl.int32, bitcast=True)
        if SIGNED:
            return bits ^ ((bits >> 31) & 0x7FFFFFFF)
        return bits & 0x7FFFFFFF

    @triton.jit
    def _gemv_kernel(
        st_ptr, u_ptr, y_ptr, n_rows, n_cols, stride, BLOCK_P: tl.constexpr, BLOCK_T: tl.constexpr
    ):
        pid = tl.program_id(0)
        rows = pid * BLOCK_P + tl.arange(0, BLOCK_P)
        row_ok = rows < n_rows
        base = rows.to(tl.int64) * stride
        acc = tl.zeros((BLOCK_P, BLOCK_T), dtype=tl.float32)
        for t0 in range(0, n_cols, BLOCK_T):
            cols = t0 + tl.arange(0, BLOCK_T)
            col_ok = cols < n_cols
            tile = tl.load(
                st_ptr + base[:, None] + cols[None, :],
                mask=row_ok[:, None] & col_ok[None, :],
                other=0.0,
            )
            u = tl.load(u_ptr + cols, mask=col_ok, other=0.0)
            acc += tile * u[None, :]
        tl.store(y_ptr + rows, tl.sum(acc, axis=1), mask=row_ok)

    @triton.jit
    def _csr_deflate_kernel(
        y_ptr, rowptr_ptr, atom_ptr, weight_ptr, c_ptr, n_rows, BLOCK: tl.constexpr
    ):
        pid = tl.program_id(0)
        rows = pid * BLOCK + tl.arange(0, BLOCK)
        row_ok = rows < n_rows
        start = tl.load(rowptr_ptr + rows, mask=row_ok, other=0)
        stop = tl.load(rowptr_ptr + rows + 1, mask=row_ok, other=0)
        y = tl.load(y_ptr + rows, mask=row_ok, other=0.0)
        longest = tl.max(stop - start, axis=0)
        for j in range(longest):
            entry = start + j
            ok = entry < stop
            atom = tl.load(atom_ptr + entry, mask=ok, other=0)
            weight = tl.load(weight_ptr + entry, mask=ok, other=0.0)
            y -= tl.load(c_ptr + atom, mask=ok, other=0.0) * weight
        tl.store(y_ptr + rows, y, mask=row_ok)

    @triton.jit
    def _radix_count_kernel(
        y_ptr,
        state_ptr,
        partial_ptr,
        n,
        PASS: tl.constexpr,
        SIGNED: tl.constexpr,
        BLOCK: tl.constexpr,
    ):
        # partial[pid, d] = how many keys of this block, among those whose
        # higher digits equal the prefix found so far, have next digit d.
        pid = tl.program_id(0)
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        ok = offs < n
        key = _order_key(tl.load(y_ptr + offs, mask=ok, other=0.0), SIGNED)
        shift: tl.constexpr = 24 - 8 * PASS
        if PASS == 0:
            digit = (key >> 24) + 128
        else:
            digit = (key >> shift) & 255
            ok = ok & ((key >> (shift + 8)) == tl.load(state_ptr))
        tl.store(partial_ptr + pid * 256 + tl.arange(0, 256), tl.histogram(digit, 256, mask=ok))

    @triton.jit
    def _radix_find_kernel(
        partial_ptr, state_ptr, n_parts, r, PASS: tl.constexpr, MAX_PARTS: tl.constexpr
    ):
        digits = tl.arange(0, 256)
        parts = tl.arange(0, MAX_PARTS)
        tile = tl.load(
            partial_ptr + parts[:, None] * 256 + digits[None, :],
            mask=(parts < n_parts)[:, None],
            other=0,
        )
        hist = tl.sum(tile, axis=0)
        count_ge = tl.sum(hist, axis=0) - tl.cumsum(hist, axis=0) + hist
        if PASS == 0:
            need = r
            prefix = 0
        else:
            need = tl.load(state_ptr + 1)
            prefix = tl.load(state_ptr)
        # The digit of the need-th largest key: the last d whose count_ge
        # still reaches need (count_ge falls as d grows).
        b = tl.sum((count_ge >= need).to(tl.int32), axis=0) - 1
        above = tl.sum(tl.where(digits == b + 1, count_ge, 0), axis=0)
        if PASS == 0:
            prefix = b - 128
        else:
            prefix = (prefix << 8) | b
        tl.store(state_ptr, prefix)
        tl.store(state_ptr + 1, need - above)

    @triton.jit
    def _select_count_kernel(
        y_ptr, state_ptr, counts_ptr, n, SIGNED: tl.constexpr, BLOCK: tl.constexpr
    ):
        pid = tl.program_id(0)
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        ok = offs < n
        key = _order_key(tl.load(y_ptr + offs, mask=ok, other=0.0), SIGNED)
        threshold = tl.load(state_ptr)
        tl.store(counts_ptr + 2 * pid, tl.sum((ok & (key > threshold)).to(tl.int32), axis=0))
        tl.store(counts_ptr + 2 * pid + 1, tl.sum((ok & (key == threshold)).to(tl.int32), axis=0))

    @triton.jit
    def _select_write_kernel(  # noqa: PLR0913 - a Triton kernel: its tensors, strides and block sizes
        y_ptr,
        state_ptr,
        counts_ptr,
        idx_ptr,
        val_ptr,
        dense_ptr,
        squares_ptr,
        n,
        n_blocks,
        SIGNED: tl.constexpr,
        DENSE: tl.constexpr,
        BLOCK: tl.constexpr,
        NBLK: tl.constexpr,
    ):
        pid = tl.program_id(0)
        threshold = tl.load(state_ptr)
        need_ties = tl.load(state_ptr + 1)
        blocks = tl.arange(0, NBLK)
        before = blocks < pid
        above_before = tl.sum(tl.load(counts_ptr + 2 * blocks, mask=before, other=0), axis=0)
        ties_before = tl.sum(tl.load(counts_ptr + 2 * blocks + 1, mask=before, other=0), axis=0)
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        ok = offs < n
        y = tl.load(y_ptr + offs, mask=ok, other=0.0)
        key = _order_key(y, SIGNED)
        above = ok & (key > threshold)
        tie = (ok & (key == threshold)).to(tl.int32)
        tie_rank = ties_before + tl.cumsum(tie, axis=0) - tie
        take = above | ((tie == 1) & (tie_rank < need_ties))
        take_i = take.to(tl.int32)
        pos = above_before + tl.minimum(ties_before, need_ties) + tl.cumsum(take_i, axis=0) - take_i
        if SIGNED:
            y = tl.maximum(y, 0.0)
        tl.store(idx_ptr + pos, offs, mask=take)
        tl.store(val_ptr + pos, y, mask=take)
        tl.store(squares_ptr + pid, tl.sum(tl.where(take, y * y, 0.0), axis=0))
        if DENSE:
            tl.store(dense_ptr + offs, y, mask=take)

    @triton.jit
    def _gather_gemv_kernel(
        st_ptr,
        idx_ptr,
        val_ptr,
        partial_ptr,
        n_sel,
        n_cols,
        stride,
        BLOCK_J: tl.constexpr,
        BLOCK_T: tl.constexpr,
    ):
        pid = tl.program_id(0)
        j = pid * BLOCK_J + tl.arange(0, BLOCK_J)
        j_ok = j < n_sel
        base = tl.load(idx_ptr + j, mask=j_ok, other=0).to(tl.int64) * stride
        w = tl.load(val_ptr + j, mask=j_ok, other=0.0)
        for t0 in range(0, n_cols, BLOCK_T):
            cols = t0 + tl.arange(0, BLOCK_T)
            col_ok = cols < n_cols
            tile = tl.load(
                st_ptr + base[:, None] + cols[None, :],
                mask=j_ok[:, None] & col_ok[None, :],
                other=0.0,
            )
            tl.store(
                partial_ptr + pid * n_cols + cols, tl.sum(tile * w[:, None], axis=0), mask=col_ok
            )

    @triton.jit
    def _atom_dot_kernel(
        dense_ptr,
        idx_ptr,
        val_ptr,
        partial_ptr,
        count_ptr,
        r,
        SPLITS: tl.constexpr,
        BLOCK: tl.constexpr,
    ):
        # partial[k, s] = Σ val[k, j] * dense[idx[k, j]] over split s of atom k,
        # for the atoms learned so far (count_ptr: how many; a graph is
        # captured once for all of them, later atoms read as 0).
        k = tl.program_id(0)
        split = tl.program_id(1)
        per = tl.cdiv(r, SPLITS)
        stop = tl.minimum(r, (split + 1) * per)
        stop = tl.where(k < tl.load(count_ptr), stop, 0)
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
        row = k.to(tl.int64) * r
        for j0 in range(split * per, stop, BLOCK):
            j = j0 + tl.arange(0, BLOCK)
            ok = j < stop
            vox = tl.load(idx_ptr + row + j, mask=ok, other=0)
            acc += tl.load(val_ptr + row + j, mask=ok, other=0.0) * tl.load(
                dense_ptr + vox, mask=ok, other=0.0
            )
        tl.store(partial_ptr + k * SPLITS + split, tl.sum(acc, axis=0))

    @triton.jit
    def _column_sum_kernel(
        partial_ptr, out_ptr, n_rows, n_cols, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr
    ):
        cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
        col_ok = cols < n_cols
        acc = tl.zeros((BLOCK_R, BLOCK_C), dtype=tl.float32)
        for r0 in range(0, n_rows, BLOCK_R):
            rows = r0 + tl.arange(0, BLOCK_R)
            acc += tl.load(
                partial_ptr + rows[:, None] * n_cols + cols[None, :],
                mask=(rows < n_rows)[:, None] & col_ok[None, :],
                other=0.0,
            )
        tl.store(out_ptr + cols, tl.sum(acc, axis=0), mask=col_ok)

    @triton.jit
    def _finish_kernel(  # noqa: PLR0913 - a Triton kernel: its tensors, strides and block sizes
        su_ptr,
        u_mat_ptr,
        ld_u,
        dots_ptr,
        n_atoms,
        u_ptr,
        u_prev_ptr,
        squares_ptr,
        n_squares,
        stats_ptr,
        n_cols,
        SPLITS: tl.constexpr,
        BLOCK_T: tl.constexpr,
        BLOCK_K: tl.constexpr,
        BLOCK_S: tl.constexpr,
    ):
        # su -= U[:, :k] (V v); u <- su / ‖su‖; stats = (‖su‖, ‖u_new - u‖, ‖v‖).
        t = tl.arange(0, BLOCK_T)
        t_ok = t < n_cols
        su = tl.load(su_ptr + t, mask=t_ok, other=0.0)
        splits = tl.arange(0, SPLITS)
        for k0 in range(0, n_atoms, BLOCK_K):
            ks = k0 + tl.arange(0, BLOCK_K)
            k_ok = ks < n_atoms
            vv = tl.sum(
                tl.load(
                    dots_ptr + ks[:, None] * SPLITS + splits[None, :],
                    mask=k_ok[:, None],
                    other=0.0,
                ),
                axis=1,
            )
            u_tile = tl.load(
                u_mat_ptr + t[:, None] * ld_u + ks[None, :],
                mask=t_ok[:, None] & k_ok[None, :],
                other=0.0,
            )
            su -= tl.sum(u_tile * vv[None, :], axis=1)
        norm = tl.sqrt(tl.sum(su * su, axis=0))
        u_new = su / norm
        u_old = tl.load(u_ptr + t, mask=t_ok, other=0.0)
        delta = tl.sqrt(tl.sum((u_new - u_old) * (u_new - u_old), axis=0))
        s = tl.arange(0, BLOCK_S)
        v_norm = tl.sqrt(tl.sum(tl.load(squares_ptr + s, mask=s < n_squares, other=0.0), axis=0))
        tl.store(u_prev_ptr + t, u_old, mask=t_ok)
        tl.store(u_ptr + t, u_new, mask=t_ok)
        tl.store(stats_ptr, norm)
        tl.store(stats_ptr + 1, delta)
        tl.store(stats_ptr + 2, v_norm)


def _next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def gemv(St, u, y):
    """``y = St @ u`` for a row-major (P, T) ``St`` (row stride may exceed T)."""
    n_rows, n_cols = St.shape
    # Measured on an H200 (T = 176, 405, 1200): within 2-10 % of one read of St.
    block_t = min(64 if n_cols <= 256 else 128, _next_pow2(n_cols))
    block_p = 32 if n_cols <= 256 else 16
    _gemv_kernel[(triton.cdiv(n_rows, block_p),)](
        St, u, y, n_rows, n_cols, St.stride(0), BLOCK_P=block_p, BLOCK_T=block_t, num_warps=4
    )
    return y


def csr_deflate(y, rowptr, atoms, weights, c):
    """``y[p] -= Σ c[atom] * weight`` over row p's entries, in entry order."""
    n_rows = y.numel()
    block = 256
    _csr_deflate_kernel[(triton.cdiv(n_rows, block),)](
        y, rowptr, atoms, weights, c, n_rows, BLOCK=block, num_warps=4
    )
    return y


class RadixWorkspace:
    """Scratch buffers of :func:`radix_top_r` for vectors of length n."""

    def __init__(self, n: int, device) -> None:
        self.n = n
        self.block = max(1024, _next_pow2(-(-n // _MAX_PARTS)))
        self.n_parts = -(-n // self.block)
        self.partial = torch.empty(self.n_parts * 256, dtype=torch.int32, device=device)
        self.state = torch.zeros(2, dtype=torch.int32, device=device)
        self.counts = torch.empty(2 * self.n_parts, dtype=torch.int32, device=device)
        # Per-program Σ v² of the kept values (‖v‖ without another pass).
        self.squares = torch.empty(self.n_parts, dtype=torch.float32, device=device)


def radix_top_r(
    y, r: int, selection: str, *, out=None, workspace: RadixWorkspace | None = None, dense=None
):
    """Exact top-r of float32 ``y`` on the device: (indices ascending, values).

    ``dense``, when given, receives the kept values at their indices (the
    sparse v scattered into a zero vector of length n).

    Four passes find the r-th largest order key 8 bits at a time (each
    program histograms its block's next digit among the keys that match
    the prefix found so far; one program sums the histograms and picks the
    digit); two more count and write the kept entries.
    """
    n = y.numel()
    signed = selection == "signed"
    if workspace is None or workspace.n != n:
        workspace = RadixWorkspace(n, y.device)
    if out is None:
        out = (
            torch.empty(r, dtype=torch.int64, device=y.device),
            torch.empty(r, dtype=y.dtype, device=y.device),
        )
    ws = workspace
    grid = (ws.n_parts,)
    for pass_ in range(4):
        _radix_count_kernel[grid](
            y, ws.state, ws.partial, n, PASS=pass_, SIGNED=signed, BLOCK=ws.block, num_warps=8
        )
        _radix_find_kernel[(1,)](
            ws.partial, ws.state, ws.n_parts, r, PASS=pass_, MAX_PARTS=_MAX_PARTS, num_warps=8
        )
    _select_count_kernel[grid](
        y, ws.state, ws.counts, n, SIGNED=signed, BLOCK=ws.block, num_warps=8
    )
    _select_write_kernel[grid](
        y,
        ws.state,
        ws.counts,
        out[0],
        out[1],
        y if dense is None else dense,
        ws.squares,
        n,
        ws.n_parts,
        SIGNED=signed,
        DENSE=dense is not None,
        BLOCK=ws.block,
        NBLK=_next_pow2(ws.n_parts),
        num_warps=8,
    )
    return out


def gather_block(n_cols: int) -> int:
    """Rows per program of :func:`gather_gemv` (fewer for long rows)."""
    return 64 if n_cols <= 512 else 32


def gather_gemv(St, idx, values, partial, block_j: int | None = None):
    """Compute partial sums (n_parts, T) of ``values @ St[idx]`` (sum them over rows).

    Only the chosen rows are read; ``partial`` is a float32 scratch of at least
    ``ceil(r / gather_block(T)) * T`` elements.
    """
    n_sel = idx.numel()
    n_cols = St.shape[1]
    block_j = gather_block(n_cols) if block_j is None else block_j
    n_j = triton.cdiv(n_sel, block_j)
    part = partial[: n_j * n_cols].view(n_j, n_cols)
    _gather_gemv_kernel[(n_j,)](
        St,
        idx,
        values,
        part,
        n_sel,
        n_cols,
        St.stride(0),
        BLOCK_J=block_j,
        BLOCK_T=min(64, _next_pow2(n_cols)),
        num_warps=4,
    )
    return part


DOT_SPLITS = 8


def atom_dots(dense, atom_idx, atom_val, partial, count):
    """Compute ``partial[k, s]``: split s of ``Σⱼ atom_val[k, j] * dense[atom_idx[k, j]]``.

    This is done for the rows k < ``count`` (a one-element int32 device tensor) of
    ``atom_idx`` ((K, r)); 0 for the others. Sum over s for V v.
    """
    n_atoms, r = atom_idx.shape
    _atom_dot_kernel[(n_atoms, DOT_SPLITS)](
        dense, atom_idx, atom_val, partial, count, r, SPLITS=DOT_SPLITS, BLOCK=1024, num_warps=4
    )
    return partial


def column_sum(partial, out):
    """``out = partial.sum(dim=0)`` for a (rows, T) float32 tensor, in a fixed order."""
    n_rows, n_cols = partial.shape
    _column_sum_kernel[(triton.cdiv(n_cols, 16),)](
        partial, out, n_rows, n_cols, BLOCK_R=64, BLOCK_C=16, num_warps=4
    )
    return out


def finish(su, U, n_atoms, dots, u, u_prev, workspace, stats):
    """Close an update on the device.

    ``su -= U[:, :n_atoms] (V v)`` (``V v`` summed from :func:`atom_dots`' splits),
    ``u_prev <- u``, ``u <- su / ‖su‖``, ``stats = (‖su‖, ‖u_new - u‖, ‖v‖)`` (‖v‖
    from the last :func:`radix_top_r` on ``workspace``).
    """
    n_cols = u.numel()
    block_t = _next_pow2(n_cols)
    _finish_kernel[(1,)](
        su,
        U,
        U.stride(0),
        dots,
        n_atoms,
        u,
        u_prev,
        workspace.squares,
        workspace.n_parts,
        stats,
        n_cols,
        SPLITS=DOT_SPLITS,
        BLOCK_T=block_t,
        BLOCK_K=max(4, min(32, 8192 // block_t)),
        BLOCK_S=_next_pow2(workspace.n_parts),
        num_warps=8,
    )
