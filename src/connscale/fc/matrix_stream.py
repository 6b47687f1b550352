"""Stream a dense matrix of row products (rows x all series) to a writer in blocks.

The series are scaled once on the device (:func:`connscale.fc.row_products.scale_rows`)
and the matrix is formed block by block by GEMM, each block handed to a
:class:`MatrixWriter` (e.g. :class:`connscale.io.cifti.DconnWriter`) and
forgotten: the whole matrix is never in memory, and ``memory_limit`` bounds
the normalised series, the blocks and the copies together.

Two schedules, chosen per device:

* the CPU computes the symmetric matrix's upper triangle once - row block
  [i0, i1) against columns [i0, N) - which halves the arithmetic, the part
  that binds on a CPU (a dot product of T values per pair against ~4 bytes
  written). The lower triangle is the upper one mirrored, written one of two
  ways, chosen by the call's :class:`MemoryPlanner`:

  - *row assembly*, when the budget holds half the matrix (the strips below
    the blocks, kept until their rows come) besides two blocks of full rows:
    each upper block is computed into its rows' buffer, the part right of its
    diagonal block is kept transposed (one copy), the rows' left part is
    copied from the earlier strips, and each row block leaves complete, as
    one contiguous write (:meth:`MatrixWriter.write_rows`, by a thread while
    the next block is computed) - the disk's fastest;
  - *tiles*, otherwise (e.g. the 91k dconn, 16.7 GB of strips, under
    ``memory_limit='2GB'``): each block is written as it is and transposed
    into rows [i1, N) (:meth:`MatrixWriter.write_block`: one system call per
    row of a tile, ~N²/B small writes: about 1.8 s of the 7 s at N = 10,000);
* CUDA computes full row blocks (all N columns) and writes them as contiguous
  rows (:meth:`MatrixWriter.write_rows`), copied to pinned memory on a copy
  stream while the next block is computed: the GEMM is much faster than the
  disk there, so doubling it costs nothing, and one long sequential write per
  block is what the disk writes fastest.

Products go through :func:`connscale._compute.gemm.gemm_nt` (on the CPU,
the faster of torch's and numpy's BLAS). Rows of a subset (Workbench's
``-roi-override``) are full row blocks on both devices (their matrix is not
symmetric).
"""

from __future__ import annotations

import functools
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from connscale._compute import MemoryPlan, MemoryPlanner, synchronize
from connscale._compute.gemm import gemm_nt
from connscale.fc._sinks import Rows, Sender
from connscale.fc.normalize import warn_constant
from connscale.fc.row_products import RowMeasure, finish_block, scale_rows

logger = logging.getLogger(__name__)

# A block holds at most this many elements (CPU: one block and its transpose
# of 512 MB each in float32; CUDA: copies of a block overlap the next GEMM).
_MAX_BLOCK_ELEMENTS_CPU = 1 << 27
_MAX_BLOCK_ELEMENTS_CUDA = 1 << 28
# The triangle is cut into at least this many row blocks: a block of B rows
# computes columns from its first row on, so the GEMMs do 1/2 + B/(2N) of the
# full matrix's products (53% here; one block would compute it all).
_MIN_TRIANGLE_BLOCKS = 16


class MatrixWriter(Protocol):
    """Where the blocks go: rows, or tiles, of an (n_rows, N) matrix."""

    def write_rows(self, row0: int, block: np.ndarray) -> None:
        """Write ``block`` as rows ``row0 ..`` (all columns)."""

    def write_block(self, row0: int, col0: int, block: np.ndarray) -> None:
        """Write ``block`` at rows ``row0 ..``, columns ``col0 ..``."""


@dataclass(frozen=True)
class _Round:
    start: int  # first output row
    stop: int  # one past the last
    n_cols: int  # columns computed (N, or N - start for the triangle)


class _RowsSink:
    """A :class:`connscale.fc._sinks.Sender` sink that writes whole rows."""

    in_memory = False

    def __init__(self, writer: MatrixWriter) -> None:
        self.writer = writer

    def destination(self, target, size):
        return None

    def write(self, target: Rows, values) -> None:
        self.writer.write_rows(target.start, values.reshape(target.n_rows, target.n_cols))


def stream_matrix(
    timeseries: np.ndarray,
    writer: MatrixWriter,
    *,
    measure: RowMeasure,
    planner: MemoryPlanner,
    rows: np.ndarray | None = None,
    dtype: torch.dtype = torch.float32,
    mirror: bool | None = None,
    verbose: int = 0,
) -> tuple[MemoryPlan, int]:
    """Write the matrix of ``measure`` between ``rows`` and all series to ``writer``.

    Parameters
    ----------
    timeseries : ndarray of shape (n_timepoints, n_series)
        May be a memory map; read in column chunks.
    writer : MatrixWriter
        Receives the (len(rows), n_series) matrix (all rows when ``rows`` is
        None), each entry once.
    measure : RowMeasure
    planner : MemoryPlanner
        The call's planner (its device is the compute device).
    rows : ndarray of int or None
        The series of each output row, in order (None: all, in order).
    dtype : torch.dtype, default=torch.float32
        Working and output dtype.
    mirror : bool or None, default=None
        Compute the upper triangle and write it twice (True; all rows on the
        CPU only), or full row blocks (False); None: the device's schedule
        (module docstring).
    verbose : int, default=0
        Show a progress bar.

    Returns
    -------
    plan : MemoryPlan
    n_constant : int
        Series whose correlations are undefined (counted in one warning).
    """
    n_timepoints, n = timeseries.shape
    measure.check_length(n_timepoints)
    dev = planner.device
    if mirror is None:
        mirror = dev.type == "cpu"
    mirror = mirror and rows is None and dev.type == "cpu"
    n_out = n if rows is None else len(rows)
    with planner.transient():
        plan, rounds, columns, assemble = _plan(
            n, n_out, measure.n_terms(n_timepoints), dtype, planner,
            mirror=mirror, fisher=measure.fisher_z,
        )  # fmt: skip
        logger.debug("matrix plan: %s (mirror: %s, rows assembled: %s)", plan, mirror, assemble)
        with torch.no_grad():
            scaled, constant = _scale(timeseries, measure, dev, dtype, columns)
            n_constant = warn_constant(constant)
            del constant
            from tqdm.auto import tqdm  # the progress bar only (the numerical core imports none)

            progress = tqdm(total=n_out, unit="row", disable=not verbose, leave=False)
            if assemble:
                _run_assembled_triangle(scaled, rounds, writer, measure, progress)
            elif mirror:
                _run_triangle(scaled, rounds, writer, measure, progress)
            else:
                row_ids = torch.arange(n) if rows is None else torch.as_tensor(rows)
                _run_rows(scaled, row_ids.to(dev), rounds, writer, measure, progress)
            progress.close()
        del scaled
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    return plan, n_constant


def _plan(n, n_out, n_terms, dtype, planner, *, mirror, fisher):
    """Split the output rows into rounds that fit the planner's budgets.

    Counted: the scaled series (N x K), the float64 temporaries of scaling
    them (in column chunks), and per block element the block, its transpose
    (CPU tiles), a mask (Fisher z) and on CUDA the two copy scratch buffers
    on the device and two pinned staging buffers on the host. The CPU
    triangle assembles whole rows (module docstring) when the mirrored tiles
    kept for later rows (< N²/2 elements) fit besides two blocks of full
    rows: that buys one contiguous write per block instead of one per row
    of every transposed tile, for memory only.

    Returns the plan, the rounds, the columns scaled at a time and whether
    the triangle's rows are assembled.
    """
    item = torch.finfo(dtype).bits // 8
    dev = planner.device
    cuda = dev.type == "cuda"
    planner.reserve_device(n * n_terms * item)
    columns = planner.fit(
        n_terms * (8 + 4 * 8 + item),
        f"Not enough memory to scale {n} series of {n_terms} time points on {dev}",
        at_most=n,
    )
    mask = 1 if fisher else 0
    kept_tiles = item * (n * n // 2 + n)  # the transposed strips, < N²/2 elements
    # Assembled rows: two buffers of full rows (one being written), beside the strips;
    # tiles: a block and its transpose; CUDA: the block and two copy scratch buffers.
    per_element = item * (2 if mirror else 3 if cuda else 1) + mask
    assemble = mirror and planner.device_left - kept_tiles >= per_element * n * max(
        1, -(-n // _MIN_TRIANGLE_BLOCKS)
    )
    if assemble:
        planner.reserve_device(kept_tiles)
    rounds = _rounds(n, n_out, planner, per_element, item, mirror=mirror, full_rows=assemble)
    largest = max((n if assemble else r.n_cols) * (r.stop - r.start) for r in rounds)
    planner.reserve_device(largest * per_element)
    if cuda:
        planner.reserve_host(2 * item * largest)
    plan = planner.plan(block_rows=rounds[0].stop, n_rounds=len(rounds), out_of_core=True)
    return plan, rounds, int(columns), assemble


def _rounds(n, n_out, planner, per_element, item, *, mirror, full_rows):
    """Cut the output rows into blocks of at most the elements the budget leaves.

    A block of the triangle computes columns from its first row on (a block
    of assembled rows holds all N); CUDA's blocks are also capped by the
    pinned staging buffers in host memory.
    """
    dev = planner.device
    cap = _MAX_BLOCK_ELEMENTS_CUDA if dev.type == "cuda" else _MAX_BLOCK_ELEMENTS_CPU
    max_elements = min(cap, max(planner.device_left // per_element, 0))
    if dev.type == "cuda":
        max_elements = min(max_elements, max(planner.host_left // (2 * item), 0))
    most_rows = -(-n // _MIN_TRIANGLE_BLOCKS) if mirror else n_out
    rounds = []
    start = 0
    while start < n_out:
        n_cols = n - start if mirror else n
        width = n if full_rows else n_cols
        count = min(n_out - start, max_elements // width, most_rows)
        if count < 1:
            raise planner.error(
                f"Not enough memory for one row of the {n_out} x {n} matrix on {dev}",
                planner.device_bytes + per_element * width,
            )
        rounds.append(_Round(start, start + count, n_cols))
        start += count
    return rounds


def _scale(timeseries, measure, dev, dtype, columns):
    """Scale the series on ``dev``, ``columns`` at a time; return rows and constants."""
    n_timepoints, n = timeseries.shape
    scaled = torch.empty((n, measure.n_terms(n_timepoints)), dtype=dtype, device=dev)
    constant = torch.empty(n, dtype=torch.bool, device=dev)
    for c0 in range(0, n, columns):
        c1 = min(n, c0 + columns)
        chunk = np.array(timeseries[:, c0:c1], dtype=np.float64, order="C")  # one copy
        chunk = torch.from_numpy(chunk).to(dev)
        finite = torch.isfinite(chunk.sum(dim=0))  # all finite: so are the values (cheaper)
        if not bool(finite.all()):
            finite = torch.isfinite(chunk).all(dim=0)  # a sum may overflow: test each value
        if not bool(finite.all()):
            bad = c0 + int(torch.nonzero(~finite)[0])
            raise ValueError(f"Series {bad} holds NaN or infinite values; inputs must be finite.")
        scaled[c0:c1], constant[c0:c1] = scale_rows(chunk, measure, dtype=dtype)
        del chunk
    return scaled, constant


def _run_triangle(scaled, rounds, writer, measure, progress):
    """Write the symmetric matrix from its upper triangle, each block also transposed."""
    n = scaled.shape[0]
    largest = max(r.n_cols * (r.stop - r.start) for r in rounds)
    workspace = torch.empty(largest, dtype=scaled.dtype)
    transposed = torch.empty(largest, dtype=scaled.dtype)
    for rnd in rounds:
        i0, i1 = rnd.start, rnd.stop
        b = i1 - i0
        block = workspace[: b * rnd.n_cols].view(b, rnd.n_cols)
        gemm_nt(scaled[i0:i1], scaled[i0:], block)
        finish_block(block, measure, torch.arange(i0, i1), i0)
        _symmetrize(block[:, :b])
        writer.write_block(i0, i0, block.numpy())
        if i1 < n:
            lower = transposed[: (n - i1) * b].view(n - i1, b)
            lower.copy_(block[:, b:].T)
            writer.write_block(i1, i0, lower.numpy())
        progress.update(b)


def _run_assembled_triangle(scaled, rounds, writer, measure, progress):
    """Write the symmetric matrix in whole row blocks, from its upper triangle.

    Block k's upper part (columns [i0, N)) is computed into its rows' buffer
    and its part right of the diagonal block, transposed, is kept as strip k
    (rows [i1, N), one transposed copy into storage allocated once); the left
    part of the rows is then copied from the earlier strips, and the complete
    rows are written at once, by a thread, while the next block is computed
    into the other of two row buffers.
    """
    n = scaled.shape[0]
    most = max(r.stop - r.start for r in rounds) * n
    buffers = torch.empty(2, most, dtype=scaled.dtype)
    storage = torch.empty(_strip_elements(rounds, n), dtype=scaled.dtype)
    strips: list[np.ndarray] = []  # strip j: rows [stop_j, N) x columns [start_j, stop_j)
    pending = [None, None]  # the write of each buffer, in flight
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="connscale-rows") as pool:
        for k, rnd in enumerate(rounds):
            if pending[k % 2] is not None:
                pending[k % 2].result()  # its rows are on their way to disk: reuse it
            rows = buffers[k % 2, : (rnd.stop - rnd.start) * n].view(-1, n)
            _assemble_rows(scaled, rnd, rows, strips, rounds, measure)
            strip = storage[sum(s.size for s in strips) :][: (n - rnd.stop) * rows.shape[0]]
            strip = strip.view(n - rnd.stop, rows.shape[0]).numpy()
            np.copyto(strip, rows.numpy()[:, rnd.stop :].T)
            strips.append(strip)
            pending[k % 2] = pool.submit(writer.write_rows, rnd.start, rows.numpy())
            progress.update(rows.shape[0])
        for future in pending:
            if future is not None:
                future.result()


def _assemble_rows(scaled, rnd, rows, strips, rounds, measure):
    """Compute a block's upper part into ``rows`` and copy its left part from the strips."""
    i0, i1 = rnd.start, rnd.stop
    upper = rows[:, i0:]
    gemm_nt(scaled[i0:i1], scaled[i0:], upper)
    finish_block(upper, measure, torch.arange(i0, i1), i0)
    _symmetrize(upper[:, : i1 - i0])  # after: torch's vector and scalar atanh may differ by 1 ulp
    # numpy's copies (one thread): torch's strided copies ran 2-10x slower on 2 busy cores.
    values = rows.numpy()
    for done, strip in zip(rounds, strips):
        np.copyto(values[:, done.start : done.stop], strip[i0 - done.stop : i1 - done.stop])


def _strip_elements(rounds, n: int) -> int:
    """Return the elements of the transposed strips below the triangle's blocks (< N²/2)."""
    return sum((r.stop - r.start) * (n - r.stop) for r in rounds)


def _symmetrize(square: torch.Tensor) -> None:
    """Copy a square's upper triangle onto its lower one, in place (exactly symmetric)."""
    values = square.numpy()
    np.copyto(values, values.T, where=_below_diagonal(values.shape[0]))


@functools.lru_cache(maxsize=4)
def _below_diagonal(size: int) -> np.ndarray:
    """Return the mask of a square's entries below its diagonal (one per block size)."""
    return np.tri(size, size, -1, dtype=bool)


def _run_rows(scaled, row_ids, rounds, writer, measure, progress):
    """Write full row blocks (rows ``row_ids`` against all series) in order."""
    dev = scaled.device
    largest = max(r.n_cols * (r.stop - r.start) for r in rounds)
    workspace = torch.empty(largest, dtype=scaled.dtype, device=dev)
    sender = Sender(_RowsSink(writer), dev, largest)
    for rnd in rounds:
        ids = row_ids[rnd.start : rnd.stop]
        block = workspace[: ids.numel() * rnd.n_cols].view(ids.numel(), rnd.n_cols)
        gemm_nt(scaled[ids], scaled, block)
        finish_block(block, measure, ids, 0)
        sender.send_block(block.reshape(-1), Rows(rnd.start, ids.numel(), rnd.n_cols))
        progress.update(ids.numel())
    sender.flush()
    synchronize(dev)
