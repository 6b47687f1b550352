"""Triton kernels for CUDA: copy a block's strictly-upper triangle into a
contiguous array in one coalesced pass (Fast-GPU-PCC Alg. 1-2).

Used only on CUDA when Triton imports; :func:`extract_triu_torch` is the
pure-torch equivalent that the CPU tests check against.
"""

from __future__ import annotations

import torch

try:  # pragma: no cover - exercised on GPU machines only
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

    HAS_TRITON = True
except ImportError:  # pragma: no cover - CPU machines without triton
    HAS_TRITON = False


def block_triu_size(n_rows: int, n_cols: int) -> int:
    """Number of strictly-upper elements of an (n_rows, n_cols) block whose
    first row sits on the diagonal."""
    return n_rows * n_cols - n_rows * (n_rows + 1) // 2


def extract_triu_torch(block: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Strictly-upper part of ``block`` (row b keeps columns > b), row-major,
    into ``out[:size]``; pure torch."""
    n_rows, n_cols = block.shape
    size = block_triu_size(n_rows, n_cols)
    if block.device.type == "cpu":
        src, dst = block.numpy(), out[:size].numpy()
        pos = 0
        for b in range(n_rows):
            length = n_cols - b - 1
            dst[pos:pos + length] = src[b, b + 1:]
            pos += length
        return out[:size]
    mask = torch.ones(n_rows, n_cols, dtype=torch.bool, device=block.device).triu_(1)
    torch.masked_select(block, mask, out=out[:size])
    return out[:size]


def extract_triu(block: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """As :func:`extract_triu_torch`, with the Triton kernel on CUDA."""
    if block.is_cuda and HAS_TRITON:  # pragma: no cover - GPU only
        n_rows, n_cols = block.shape
        size = block_triu_size(n_rows, n_cols)
        block = block.contiguous()
        grid = (n_rows, triton.cdiv(n_cols, 1024))
        _triu_block_kernel[grid](block, out, n_cols, BLOCK=1024)
        return out[:size]
    return extract_triu_torch(block, out)
