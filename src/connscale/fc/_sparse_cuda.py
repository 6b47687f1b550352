"""Sparse windows on CUDA: fused threshold + compaction, one deferred sync per window.

The sync is deferred so that the device never waits for the host.

Window k's upper triangle is multiplied by row blocks (cuBLAS) and each block
is thresholded and compacted by Triton kernels (``METHOD``) into device
buffers of a planned capacity; its entry count goes to pinned host memory behind an
event. Only after window k + 1 has been queued does the host wait for that
event, read the count and hand window k's ``values[:nnz]``, ``columns[:nnz]``
and row counts to the copy stream. A window that overflows its capacity is
redone with larger buffers, and the capacity grows for the windows after.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from connscale.fc import _exact_triton
from connscale.fc._exact import new_stats
from connscale.fc._tiles import (
    COMPACT_BLOCK_M,
    aligned_block_rows,
    block_buffers,
    compact_table_bytes,
    compact_upper_triangle,
    compact_upper_triangle_lookback,
    walk_row_blocks,
)
from connscale.fc._triton_kernels import compact_upper_tile

# First capacity: this fraction of a window's pairs (grows on overflow).
_INITIAL_FRACTION = 1 / 16
# How each row block is thresholded and compacted: "two-reads" (a count
# kernel, a scan, a compaction kernel, on the GEMM's stream:
# :func:`connscale.fc._triton_kernels.compact_upper_tile`), "two-reads-side"
# (the same kernels on a second stream, overlapping the next block's GEMM),
# "one-read" (:func:`connscale.fc._tiles.compact_upper_triangle`: one read of
# each block on a second stream, entries staged by an atomic cursor, then
# placed) or "lookback" (:func:`connscale.fc._tiles.compact_upper_triangle_lookback`:
# one read on a second stream, each entry written once at its place).
# ``OPTIONS[method]``: keyword arguments of that method's function. On an
# H100 (Table II, N = 30,697, w = 150, θ = 0.5; benchmarks/RESULTS.md §9,
# benchmarks/sweep_sparse_dfc.py) per window over a 4.1 ms GEMM: one read
# with 16×128 pieces 6.45 ms (0.738 s in all), two reads 7.2 ms (0.824 s),
# on the side stream 7.06 ms (0.828 s), look-back 7.48 ms at best (0.846 s),
# one read with 64×128 pieces 11.5 ms (1.276 s); the same CSR from each.
METHOD = "one-read"
OPTIONS = {"one-read": {"block_m": 16}, "lookback": {"chunk": 2048}}
# Rows per GEMM block of the one-read method at most: the diagonal blocks'
# lower halves are computed for nothing (about block rows / N of the GEMM).
_BLOCK_ROWS = 2048


class SparseWindowsCUDA:
    """Queue sparse windows; submit each to ``copier`` one window later.

    Parameters
    ----------
    n : int
        Number of series.
    tile_rows : int
        Rows per GEMM block (from the memory plan; at most ``_BLOCK_ROWS``
        with the one-read method).
    threshold, absolute
        Keep r >= threshold (|r| >= threshold when absolute).
    submit : callable
        ``submit(index, values, columns, row_counts, constant)`` with device
        tensors sized to the window's entries; it queues the host copy.
    precision : {"exact", "fp32", "tf32"}, default="fp32"
        "exact": each window's tiles decided on TF32 tensor cores and
        confirmed near θ in one fused kernel
        (:func:`connscale.fc._exact_triton.compact_exact_triton`); else the
        row blocks by cuBLAS (TF32 there when the caller enabled it) and
        ``METHOD``'s compaction.
    stats : torch.Tensor, optional
        The counts of :func:`connscale.fc._exact.new_stats`: with "exact",
        every window's confirmed entries, corrected tiles and tiles are added
        to it (a redone window is counted again).
    """

    def __init__(
        self,
        n: int,
        tile_rows: int,
        threshold: float,
        absolute: bool,
        submit: Callable,
        *,
        precision: str = "fp32",
        stats: torch.Tensor | None = None,
    ) -> None:
        self.n = n
        self.tile_rows = tile_rows
        # The plan gave tile_rows × N × 14 bytes (two tiles, masks and indices
        # of the torch path); the one-read method uses them for two float
        # blocks and its tables.
        planned = tile_rows * n * 14 - compact_table_bytes(
            n, OPTIONS["one-read"].get("block_m", COMPACT_BLOCK_M)
        )
        self.block_rows = aligned_block_rows(min(tile_rows, _BLOCK_ROWS, planned // (8 * n)))
        self.threshold = threshold
        self.absolute = absolute
        self.submit = submit
        self.precision = precision
        self.stats = stats
        pairs = n * (n - 1) // 2
        self.capacity = max(1 << 20, int(pairs * _INITIAL_FRACTION))
        self.capacity = min(self.capacity, max(pairs, 1))
        self.pending = None
        # Work buffers of the compaction and the second stream, reused by every window.
        self.staging = None
        self.buffers = None
        self.side = None

    def add(self, u: torch.Tensor, constant: torch.Tensor, index: int) -> None:
        """Queue window ``index`` (``u``: N×w normalised, NaN rows if constant)."""
        queued = self._queue(u, self.capacity)
        previous, self.pending = self.pending, (index, u, constant, *queued)
        if previous is not None:
            self._finish(*previous)

    def flush(self) -> None:
        """Finish the last queued window."""
        if self.pending is not None:
            previous, self.pending = self.pending, None
            self._finish(*previous)

    def _queue(self, u, capacity):
        device = u.device
        values = torch.empty(capacity, dtype=u.dtype, device=device)
        columns = torch.empty(capacity, dtype=torch.int32, device=device)
        row_counts = torch.empty(self.n, dtype=torch.int64, device=device)
        if self.precision == "exact":
            cursor = self._compact_exact(u, values, columns, row_counts, capacity)
        elif METHOD in ("two-reads", "two-reads-side"):
            cursor = torch.zeros(1, dtype=torch.int64, device=device)

            def epilogue(tile, r0, r1):
                compact_upper_tile(
                    tile,
                    r0,
                    self.threshold,
                    self.absolute,
                    values,
                    columns,
                    row_counts[r0:r1],
                    cursor,
                )

            if METHOD == "two-reads":
                for r0 in range(0, self.n, self.tile_rows):
                    r1 = min(self.n, r0 + self.tile_rows)
                    epilogue(torch.mm(u[r0:r1], u[r0:].T), r0, r1)
            else:
                self._block_buffers(u)
                walk_row_blocks(u, self.block_rows, epilogue, buffers=self.buffers, side=self.side)
        elif METHOD == "lookback":
            self._block_buffers(u)
            cursor = compact_upper_triangle_lookback(
                u,
                self.threshold,
                absolute=self.absolute,
                block_rows=self.block_rows,
                values=values,
                columns=columns,
                row_counts=row_counts,
                buffers=self.buffers,
                side=self.side,
                **OPTIONS["lookback"],
            )
        else:
            cursor = self._compact_one_read(u, values, columns, row_counts, capacity)
        # The count, and for "lookback" a failure flag.
        nnz_host = torch.zeros(2, dtype=torch.int64, pin_memory=True)
        nnz_host[: cursor.numel()].copy_(cursor, non_blocking=True)
        ready = torch.cuda.Event()
        ready.record(torch.cuda.current_stream(device))
        return values, columns, row_counts, nnz_host, ready

    def _block_buffers(self, u):
        if self.buffers is None:
            self.buffers = block_buffers(self.n, self.block_rows, dtype=u.dtype, device=u.device)
            self.side = torch.cuda.Stream(u.device)

    def _compact_one_read(self, u, values, columns, row_counts, capacity):
        self._block_buffers(u)
        self._staging(u, capacity)
        return compact_upper_triangle(
            u,
            self.threshold,
            absolute=self.absolute,
            block_rows=self.block_rows,
            values=values,
            columns=columns,
            row_counts=row_counts,
            staged_values=self.staging[0],
            staged_columns=self.staging[1],
            buffers=self.buffers,
            side=self.side,
            **OPTIONS["one-read"],
        )

    def _compact_exact(self, u, values, columns, row_counts, capacity):
        self._staging(u, capacity)
        if self.stats is None:
            self.stats = new_stats(u.device)
        return _exact_triton.compact_exact_triton(
            u,
            self.threshold,
            absolute=self.absolute,
            values=values,
            columns=columns,
            row_counts=row_counts,
            staged_values=self.staging[0],
            staged_columns=self.staging[1],
            stats=self.stats,
        )

    def _staging(self, u, capacity):
        if self.staging is None or self.staging[0].numel() < capacity:
            self.staging = (
                torch.empty(capacity, dtype=u.dtype, device=u.device),
                torch.empty(capacity, dtype=torch.int32, device=u.device),
            )

    def _finish(self, index, u, constant, values, columns, row_counts, nnz_host, ready):
        ready.synchronize()
        nnz = int(nnz_host[0])
        if int(nnz_host[1]):
            raise RuntimeError(
                "the look-back compaction gave up waiting for earlier tiles; "
                "set connscale.fc._sparse_cuda.METHOD = 'two-reads'."
            )
        if nnz > values.numel():
            # Overflow: redo this window with room for it, grow the plan.
            self.capacity = max(self.capacity, int(nnz * 1.25))
            values, columns, row_counts, nnz_host, ready = self._queue(u, nnz)
            ready.synchronize()
        self.submit(index, values[:nnz], columns[:nnz], row_counts, constant)
