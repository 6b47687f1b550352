"""Run under TRITON_INTERPRET=1 by test_triton_fc_kernels.py: static FC's
triangle extraction and sparse DFC's two-read threshold + compaction kernels
(``connscale.fc._triton_kernels``), executed by Triton's interpreter on the
CPU, against their pure-torch equivalents. Prints 'ok' when every check passes."""

import numpy as np
import torch

from connscale.fc import _triton_kernels as kernels
from connscale.fc.normalize import normalize_series
from connscale.fc.sparse import compact_tile, keep_mask


def check_triu_extraction(rng):
    for n_rows, n_cols in ((1, 5), (7, 7), (13, 40), (33, 1100)):  # 1100: two column blocks
        block = torch.from_numpy(rng.standard_normal((n_rows, n_cols)).astype(np.float32))
        size = kernels.block_triu_size(n_rows, n_cols)
        expected = kernels.extract_triu_torch(block, torch.empty(size + 3))
        out = torch.full((size + 3,), -7.0)
        grid = (n_rows, -(-n_cols // 1024))
        kernels._triu_block_kernel[grid](block, out, n_cols, BLOCK=1024)
        assert torch.equal(out[:size], expected), (n_rows, n_cols)
        assert bool((out[size:] == -7.0).all()), "written past the triangle"


def check_sparse_compaction(rng):
    x = rng.standard_normal((30, 4)) @ rng.standard_normal((4, 1300)) + rng.standard_normal(
        (30, 1300)
    )
    x[:, 11] = 2.0  # a constant series: NaN row and column, never kept
    u, _ = normalize_series(torch.from_numpy(x), dtype=torch.float32)
    n = u.shape[0]
    for threshold, absolute, r0, rows in (
        (0.3, False, 0, 50),
        (0.3, True, 40, 64),
        (-0.1, False, 1200, 100),
        (0.45, True, 5, 1),
    ):
        tile = (u[r0 : r0 + rows] @ u[r0:].T).contiguous()
        ref_values, ref_columns, ref_counts = compact_tile(
            tile, keep_mask(tile, threshold, absolute=absolute), r0
        )
        nnz = ref_values.numel()
        assert nnz > 0
        for start, capacity in ((0, nnz + 5), (9, nnz + 9), (0, max(nnz // 2, 1))):
            values = torch.full((capacity,), -9.0)
            columns = torch.full((capacity,), -1, dtype=torch.int32)
            row_counts = torch.empty(tile.shape[0], dtype=torch.int64)
            cursor = torch.tensor([start], dtype=torch.int64)
            kernels.compact_upper_tile(
                tile, r0, threshold, absolute, values, columns, row_counts, cursor
            )
            assert int(cursor) == start + nnz  # counted even past the capacity
            assert torch.equal(row_counts, ref_counts)
            stop = min(start + nnz, capacity)
            assert torch.equal(values[start:stop], ref_values[: stop - start])
            assert torch.equal(columns[start:stop], ref_columns[: stop - start])
            assert bool((values[:start] == -9.0).all()) and bool((values[stop:] == -9.0).all())
        assert not bool((ref_columns == 11).any()) or r0 > 11
    del n


def main():
    rng = np.random.default_rng(5)
    assert kernels.HAS_TRITON, "triton is not importable"
    check_triu_extraction(rng)
    check_sparse_compaction(rng)
    print("ok")


if __name__ == "__main__":
    main()
