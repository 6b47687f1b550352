"""Run under TRITON_INTERPRET=1 by test_sparse_tiles.py: the one-read
threshold + compaction to CSR parts (staged and placed, with several piece
sizes, and by decoupled look-back) and the sparsity passes (histogram,
collect), executed by Triton's interpreter on the CPU, against the torch
tiles computed from the same row blocks. Prints 'ok' when every check passes."""

import sys

import numpy as np
import torch

from connscale._compute.device import use_triton
from connscale.fc import _tiles
from connscale.fc.normalize import normalize_series
from connscale.fc.sparse import compact_tile, keep_mask


def torch_csr(u, threshold, absolute, block_rows):
    """Today's unfused path over the same row blocks (same GEMM shapes)."""
    values, columns, counts = [], [], []
    for r0 in range(0, u.shape[0], block_rows):
        tile = u[r0 : r0 + block_rows] @ u[r0:].T
        v, c, k = compact_tile(tile, keep_mask(tile, threshold, absolute=absolute), r0)
        values.append(v)
        columns.append(c)
        counts.append(k)
    return torch.cat(values), torch.cat(columns), torch.cat(counts)


def fused_csr(u, threshold, absolute, block_rows, capacity, block_m=64):
    n = u.shape[0]
    values = torch.full((capacity,), -9.0)
    columns = torch.full((capacity,), -1, dtype=torch.int32)
    row_counts = torch.empty(n, dtype=torch.int64)
    staged = (torch.empty(capacity), torch.empty(capacity, dtype=torch.int32))
    cursor = _tiles.compact_upper_triangle(
        u,
        threshold,
        absolute=absolute,
        block_rows=block_rows,
        values=values,
        columns=columns,
        row_counts=row_counts,
        staged_values=staged[0],
        staged_columns=staged[1],
        block_m=block_m,
    )
    return int(cursor), values, columns, row_counts


def lookback_csr(u, threshold, absolute, block_rows, capacity, chunk):
    n = u.shape[0]
    values = torch.full((capacity,), -9.0)
    columns = torch.full((capacity,), -1, dtype=torch.int32)
    row_counts = torch.full((n,), 5, dtype=torch.int64)  # overwritten
    result = _tiles.compact_upper_triangle_lookback(
        u,
        threshold,
        absolute=absolute,
        block_rows=block_rows,
        values=values,
        columns=columns,
        row_counts=row_counts,
        chunk=chunk,
        look=8,
    )
    assert int(result[1]) == 0
    return int(result[0]), values, columns, row_counts


#: The (threshold, absolute, block_rows) cases, in two shares run side by side by
#: test_sparse_tiles.py.
GROUPS = {
    "a": ((0.3, False, 64), (0.3, True, 128)),
    "b": ((-0.2, False, 100), (0.5, True, 64)),
}

#: Series: 136 = two 64-row pieces and 8 rows, two 128-column pieces (the second partial).
N = 136


def main(groups=tuple(GROUPS)):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((40, 6)) @ rng.standard_normal((6, N)) + rng.standard_normal((40, N))
    x[:, 17] = 1.5  # a constant series: NaN row and column, never kept
    u, _ = normalize_series(torch.from_numpy(x), dtype=torch.float32)
    assert use_triton(u, float32=True), "the interpreter is not active"
    pairs = N * (N - 1) // 2
    for threshold, absolute, block_rows in [case for group in groups for case in GROUPS[group]]:
        # The compaction aligns its row blocks on its 64-row pieces (100 -> 64).
        aligned = block_rows // _tiles.COMPACT_BLOCK_M * _tiles.COMPACT_BLOCK_M
        ref_values, ref_columns, ref_counts = torch_csr(u, threshold, absolute, aligned)
        nnz = ref_values.numel()
        assert 0 < nnz < pairs
        got, values, columns, row_counts = fused_csr(u, threshold, absolute, block_rows, pairs)
        assert got == nnz, (got, nnz)
        assert torch.equal(row_counts, ref_counts)
        assert torch.equal(columns[:nnz], ref_columns)
        assert torch.equal(values[:nnz], ref_values)
        assert int(row_counts[17]) == 0 and not bool((columns[:nnz] == 17).any())
        assert bool((values[nnz:] == -9.0).all()) and bool((columns[nnz:] == -1).all())
        # Too small a capacity: the count says so and nothing is written past it.
        got, values, columns, _ = fused_csr(u, threshold, absolute, block_rows, nnz // 3)
        assert got == nnz
        # Smaller pieces, and the look-back kernel (its blocks need no alignment;
        # the same GEMM shapes as the reference where block_rows is aligned), its
        # tiles of 128 columns (two to a row of the first block, one past 128 columns)
        # and, with too small a capacity, of 64.
        for variant in ("pieces", "lookback"):
            if variant == "pieces":
                got, values, columns, row_counts = fused_csr(
                    u, threshold, absolute, block_rows, pairs, block_m=16
                )
            else:
                got, values, columns, row_counts = lookback_csr(
                    u, threshold, absolute, aligned, pairs, chunk=128
                )
            assert got == nnz, (variant, got, nnz)
            assert torch.equal(row_counts, ref_counts), variant
            assert torch.equal(columns[:nnz], ref_columns), variant
            assert torch.equal(values[:nnz], ref_values), variant
            assert bool((values[nnz:] == -9.0).all()), variant
        got, values, _, _ = lookback_csr(u, threshold, absolute, aligned, nnz // 3, chunk=64)
        assert got == nnz and bool(torch.equal(values[: nnz // 3], ref_values[: nnz // 3]))
        # The sparsity passes: same histogram, same exact thresholds.
        hist = _tiles.histogram_triton(u, absolute=absolute, block_rows=block_rows)
        assert torch.equal(
            hist, _tiles.histogram_torch(u, absolute=absolute, block_rows=block_rows)
        )
        b = int(torch.argmax(hist))
        collected = torch.sort(
            _tiles.collect_bin_triton(u, b, int(hist[b]), absolute=absolute, block_rows=block_rows)
        ).values
        assert torch.equal(
            collected,
            torch.sort(
                _tiles.collect_bin_torch(u, b, absolute=absolute, block_rows=block_rows)
            ).values,
        )
        kept = [1, 37, pairs // 3, (N - 1) * (N - 2) // 2]
        assert _tiles.top_threshold(
            u, kept, absolute=absolute, block_rows=block_rows, use_triton=True
        ) == _tiles.top_threshold(u, kept, absolute=absolute, block_rows=block_rows)
    print("ok")


if __name__ == "__main__":
    main(sys.argv[1:] or tuple(GROUPS))
