"""Sparse windows on CUDA: fused threshold + compaction, one sync per window,
deferred so that the device never waits for the host.

Window k's upper triangle is multiplied by row blocks (cuBLAS) and each block
is thresholded and compacted in one read (Triton, see
:func:`connscale.fc._tiles.compact_upper_triangle`) into device buffers of a
planned capacity; its entry count goes to pinned host memory behind an
event. Only after window k + 1 has been queued does the host wait for that
event, read the count and hand window k's ``values[:nnz]``, ``columns[:nnz]``
and row counts to the copy stream. A window that overflows its capacity is
redone with larger buffers, and the capacity grows for the windows after.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from connscale.fc._tiles import COMPACT_BLOCK_M, compact_table_bytes, compact_upper_triangle

# First capacity: this fraction of a window's pairs (grows on overflow).
_INITIAL_FRACTION = 1 / 16
# Rows per GEMM block at most: the diagonal blocks' lower halves are computed
# for nothing (about block rows / N of the GEMM), fewer rows mean more launches.
_BLOCK_ROWS = 2048


class SparseWindowsCUDA:
    """Queue sparse windows; submit each to ``copier`` one window later.

    Parameters
    ----------
    n : int
        Number of series.
    tile_rows : int
        Rows per GEMM block at most (from the memory plan; capped at
        ``_BLOCK_ROWS``).
    threshold, absolute
        Keep r >= threshold (|r| >= threshold when absolute).
    submit : callable
        ``submit(index, values, columns, row_counts, constant)`` with device
        tensors sized to the window's entries; it queues the host copy.
    """

    def __init__(self, n: int, tile_rows: int, threshold: float, absolute: bool,
                 submit: Callable) -> None:
        self.n = n
        # The plan gave tile_rows × N × 14 bytes (two tiles, masks and indices
        # of the unfused path); here two float blocks and the tables use them.
        planned = tile_rows * n * 14 - compact_table_bytes(n)
        self.block_rows = max(COMPACT_BLOCK_M, min(tile_rows, _BLOCK_ROWS, planned // (8 * n)))
        self.threshold = threshold
        self.absolute = absolute
        self.submit = submit
        pairs = n * (n - 1) // 2
        self.capacity = max(1 << 20, int(pairs * _INITIAL_FRACTION))
        self.capacity = min(self.capacity, max(pairs, 1))
        self.pending = None
        self.staging = None  # work buffers of the compaction, reused by every window

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
        if self.staging is None or self.staging[0].numel() < capacity:
            self.staging = (torch.empty(capacity, dtype=u.dtype, device=device),
                            torch.empty(capacity, dtype=torch.int32, device=device))
        cursor = compact_upper_triangle(u, self.threshold, absolute=self.absolute,
                                        block_rows=self.block_rows, values=values,
                                        columns=columns, row_counts=row_counts,
                                        staged_values=self.staging[0],
                                        staged_columns=self.staging[1])
        nnz_host = torch.empty(1, dtype=torch.int64, pin_memory=True)
        nnz_host.copy_(cursor, non_blocking=True)
        ready = torch.cuda.Event()
        ready.record(torch.cuda.current_stream(device))
        return values, columns, row_counts, nnz_host, ready

    def _finish(self, index, u, constant, values, columns, row_counts, nnz_host, ready):
        ready.synchronize()
        nnz = int(nnz_host[0])
        if nnz > values.numel():
            # Overflow: redo this window with room for it, grow the plan.
            self.capacity = max(self.capacity, int(nnz * 1.25))
            values, columns, row_counts, nnz_host, ready = self._queue(u, nnz)
            ready.synchronize()
        self.submit(index, values[:nnz], columns[:nnz], row_counts, constant)
