"""Triton kernels for CUDA: copy a block's strictly-upper triangle into an array.

The array is contiguous and written in one coalesced pass (Fast-GPU-PCC
Alg. 1-2).

Used only on CUDA when Triton imports; :func:`extract_triu_torch` is the
pure-torch equivalent that the CPU tests check against, and
``tests/fc/test_triton_fc_kernels.py`` runs these kernels on the CPU through
Triton's interpreter.
"""

from __future__ import annotations

import torch

from connscale._compute.device import HAS_TRITON, use_triton

if HAS_TRITON:  # pragma: no cover - exercised on GPU machines only
    import triton
    import triton.language as tl

    @triton.jit
    def _triu_block_kernel(src_ptr, dst_ptr, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        tile = tl.program_id(1)
        cols = tile * BLOCK + tl.arange(0, BLOCK)
        keep = (cols > row) & (cols < n_cols)
        row64 = row.to(tl.int64)
        # pairs of earlier rows in this block: row*n_cols - row*(row+1)/2
        offset = row64 * n_cols - (row64 * (row64 + 1)) // 2
        values = tl.load(src_ptr + row64 * n_cols + cols, mask=keep)
        tl.store(dst_ptr + offset + cols - row - 1, values, mask=keep)


def block_triu_size(n_rows: int, n_cols: int) -> int:
    """Return the number of strictly-upper elements of a block starting on the diagonal.

    The block is (n_rows, n_cols), its first row on the diagonal.
    """
    return n_rows * n_cols - n_rows * (n_rows + 1) // 2


def extract_triu_torch(block: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Copy the strictly-upper part of ``block`` into ``out[:size]`` with torch.

    Row b keeps columns > b, written row-major.
    """
    n_rows, n_cols = block.shape
    size = block_triu_size(n_rows, n_cols)
    if block.device.type == "cpu":
        src, dst = block.numpy(), out[:size].numpy()
        pos = 0
        for b in range(n_rows):
            length = n_cols - b - 1
            dst[pos : pos + length] = src[b, b + 1 :]
            pos += length
        return out[:size]
    mask = torch.ones(n_rows, n_cols, dtype=torch.bool, device=block.device).triu_(1)
    torch.masked_select(block, mask, out=out[:size])
    return out[:size]


def extract_triu(block: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """As :func:`extract_triu_torch`, with the Triton kernel on CUDA."""
    if use_triton(block, interpreted=False):  # pragma: no cover - GPU only
        n_rows, n_cols = block.shape
        size = block_triu_size(n_rows, n_cols)
        block = block.contiguous()
        grid = (n_rows, triton.cdiv(n_cols, 1024))
        _triu_block_kernel[grid](block, out, n_cols, BLOCK=1024)
        return out[:size]
    return extract_triu_torch(block, out)


# --- Sparse windows: fused triangle + threshold + compaction ---------------
#
# For a tile of rows [r0, r0 + R) against columns [r0, N), pass 1 counts the
# kept entries of each (row, column block); an exclusive scan of the counts
# (row-major) gives every block's output offset; pass 2 writes the kept
# values and their int32 global columns there. Two reads of the tile, no
# boolean mask, no int64 index arrays, no host synchronisation.

if HAS_TRITON:  # pragma: no cover - GPU only

    @triton.jit
    def _keep(values, cols, row, n_cols, threshold, ABSOLUTE: tl.constexpr):
        inside = (cols < n_cols) & (cols > row)
        if ABSOLUTE:
            keep = tl.abs(values) >= threshold
        else:
            keep = values >= threshold
        return keep & inside  # NaN compares False: constant series drop out

    @triton.jit
    def _load_kept(tile_ptr, n_cols, threshold, ABSOLUTE: tl.constexpr, BLOCK: tl.constexpr):
        # Row program_id(0), columns [program_id(1)·BLOCK, +BLOCK) of a tile:
        # its values and which of them are kept (upper triangle, past the threshold).
        row = tl.program_id(0)
        block = tl.program_id(1)
        cols = block * BLOCK + tl.arange(0, BLOCK)
        values = tl.load(
            tile_ptr + row.to(tl.int64) * n_cols + cols,
            mask=(cols < n_cols) & (cols > row),
            other=0.0,
        )
        keep = _keep(values, cols, row, n_cols, threshold, ABSOLUTE)
        return row, block, cols, values, keep

    @triton.jit
    def _sparse_count_kernel(
        tile_ptr,
        counts_ptr,
        n_cols,
        n_blocks,
        threshold,
        ABSOLUTE: tl.constexpr,
        BLOCK: tl.constexpr,
    ):
        row, block, cols, values, keep = _load_kept(tile_ptr, n_cols, threshold, ABSOLUTE, BLOCK)
        tl.store(
            counts_ptr + row.to(tl.int64) * n_blocks + block, tl.sum(keep.to(tl.int64), axis=0)
        )

    @triton.jit
    def _sparse_compact_kernel(
        tile_ptr,
        offsets_ptr,
        values_ptr,
        columns_ptr,
        n_cols,
        n_blocks,
        column_offset,
        capacity,
        threshold,
        ABSOLUTE: tl.constexpr,
        BLOCK: tl.constexpr,
    ):
        row, block, cols, values, keep = _load_kept(tile_ptr, n_cols, threshold, ABSOLUTE, BLOCK)
        position = tl.cumsum(keep.to(tl.int64), axis=0) - 1
        start = tl.load(offsets_ptr + row.to(tl.int64) * n_blocks + block)
        destination = start + position
        ok = keep & (destination < capacity)
        tl.store(values_ptr + destination, values, mask=ok)
        tl.store(columns_ptr + destination, (cols + column_offset).to(tl.int32), mask=ok)


def compact_upper_tile(
    tile: torch.Tensor,
    row_offset: int,
    threshold: float,
    absolute: bool,
    values: torch.Tensor,
    columns: torch.Tensor,
    row_counts: torch.Tensor,
    cursor: torch.Tensor,
) -> None:  # pragma: no cover - GPU only
    """Append a tile's kept upper-triangle entries to a window's CSR buffers.

    ``tile`` holds rows ``[row_offset, row_offset + R)`` against columns
    ``[row_offset, N)`` (contiguous). Kept entries go to ``values`` and
    ``columns`` (int32 global columns) from position ``cursor`` (a one-element
    int64 device tensor, advanced in place by the number kept), entries past
    the buffers' capacity are dropped (the caller checks ``cursor`` against
    the capacity and redoes the window with larger buffers); ``row_counts``
    (length R) receives the kept count of each row. Runs on the current
    stream without synchronising.
    """
    n_rows, n_cols = tile.shape
    block = 1024
    n_blocks = triton.cdiv(n_cols, block)
    counts = torch.empty((n_rows, n_blocks), dtype=torch.int64, device=tile.device)
    grid = (n_rows, n_blocks)
    _sparse_count_kernel[grid](
        tile, counts, n_cols, n_blocks, float(threshold), ABSOLUTE=bool(absolute), BLOCK=block
    )
    flat = counts.view(-1)
    offsets = torch.cumsum(flat, 0)
    offsets -= flat
    offsets += cursor
    _sparse_compact_kernel[grid](
        tile,
        offsets,
        values,
        columns,
        n_cols,
        n_blocks,
        int(row_offset),
        values.numel(),
        float(threshold),
        ABSOLUTE=bool(absolute),
        BLOCK=block,
    )
    torch.sum(counts, dim=1, out=row_counts)
    cursor += flat.sum()
