"""The one-read threshold + compaction of sparse FC/DFC and the Triton
sparsity passes: interpreted on the CPU, and on CUDA when present."""

from pathlib import Path

import numpy as np
import pytest
import torch
from numpy.testing import assert_allclose

from connscale.fc import _sparse_cuda, _tiles
from connscale.fc.dynamic import dynamic_correlation
from connscale.fc.normalize import normalize_series
from connscale.fc.sparse import csr_from_parts, dense_thresholded

from .._interpreted import run_interpreted

CUDA = pytest.mark.skipif(
    not (torch.cuda.is_available() and _tiles.HAS_TRITON), reason="CUDA + Triton"
)


def test_triton_compaction_and_sparsity_passes_interpreted_on_cpu():
    """The kernels themselves, run by Triton's interpreter, give the CSR and
    the histogram of the torch tiles over the same row blocks."""
    run_interpreted(Path(__file__).with_name("_triton_sparse_interpreted.py"), groups=("a", "b"))


def _series(n=1500, t=60, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((t, 5)) @ rng.standard_normal((5, n)) + rng.standard_normal((t, n))
    x[:, 11] = 3.0  # constant: left out
    return x


@CUDA
@pytest.mark.parametrize("threshold, absolute", [(0.4, False), (0.4, True), (-0.05, False)])
def test_compact_upper_triangle_on_cuda_equals_thresholded_corrcoef(threshold, absolute):
    x = _series()
    n = x.shape[1]
    u, _ = normalize_series(torch.from_numpy(x).cuda(), dtype=torch.float32)
    capacity = n * (n - 1) // 2
    values = torch.empty(capacity, device="cuda")
    columns = torch.empty(capacity, dtype=torch.int32, device="cuda")
    row_counts = torch.empty(n, dtype=torch.int64, device="cuda")
    staged = (torch.empty_like(values), torch.empty_like(columns))
    nnz = int(
        _tiles.compact_upper_triangle(
            u,
            threshold,
            absolute=absolute,
            block_rows=256,
            values=values,
            columns=columns,
            row_counts=row_counts,
            staged_values=staged[0],
            staged_columns=staged[1],
        )
    )
    csr = csr_from_parts(
        values[:nnz].cpu().numpy(), columns[:nnz].cpu().numpy(), row_counts.cpu().numpy(), n
    )
    assert csr.has_sorted_indices and csr.nnz == nnz
    with np.errstate(invalid="ignore"):
        ref = np.corrcoef(x.T)
    expected = np.triu(dense_thresholded(ref, threshold, absolute=absolute), 1)
    near = np.abs(np.abs(ref) - abs(threshold)) < 1e-5
    assert_allclose(csr.toarray()[~near], expected[~near], atol=2e-6)


@CUDA
@pytest.mark.parametrize("method", ["two-reads", "two-reads-side", "one-read", "lookback"])
def test_sparse_windows_on_cuda_overflow_and_equal_cpu(monkeypatch, method):
    """Windows that overflow the first capacity are redone: same CSR as the CPU."""
    monkeypatch.setattr(_sparse_cuda, "METHOD", method)
    monkeypatch.setattr(_sparse_cuda, "_BLOCK_ROWS", 320)
    x = _series(n=1500, t=40, seed=1)
    cuda = dynamic_correlation(x, 30, 5, kind="sparse", threshold=-1.0, device="cuda")
    cpu = dynamic_correlation(x, 30, 5, kind="sparse", threshold=-1.0, device="cpu")
    for i in range(len(cpu)):
        assert cuda[i].nnz == cpu[i].nnz == 1499 * 1498 // 2  # > the first capacity (2**20)
        assert (cuda[i].indptr == cpu[i].indptr).all()
        assert (cuda[i].indices == cpu[i].indices).all()
        assert_allclose(cuda[i].data, cpu[i].data, atol=2e-6)


@CUDA
@pytest.mark.parametrize("chunk, num_warps, look", [(4096, 4, 32), (256, 8, 4), (64, 4, 2)])
def test_lookback_compaction_on_cuda_equals_staged_compaction(chunk, num_warps, look):
    """Many more tiles than the GPU runs at once: the look-back walks back over
    tiles that have only published their own count."""
    x = _series(n=3000, t=50, seed=4)
    n = x.shape[1]
    u, _ = normalize_series(torch.from_numpy(x).cuda(), dtype=torch.float32)
    capacity = n * (n - 1) // 2
    got, expected = [], []
    for method in ("lookback", "staged"):
        values = torch.full((capacity,), -9.0, device="cuda")
        columns = torch.full((capacity,), -1, dtype=torch.int32, device="cuda")
        row_counts = torch.empty(n, dtype=torch.int64, device="cuda")
        if method == "lookback":
            result = _tiles.compact_upper_triangle_lookback(
                u,
                0.1,
                absolute=True,
                block_rows=512,
                values=values,
                columns=columns,
                row_counts=row_counts,
                chunk=chunk,
                look=look,
                num_warps=num_warps,
            )
            assert int(result[1]) == 0
            nnz = int(result[0])
        else:
            staged = (torch.empty_like(values), torch.empty_like(columns))
            nnz = int(
                _tiles.compact_upper_triangle(
                    u,
                    0.1,
                    absolute=True,
                    block_rows=512,
                    values=values,
                    columns=columns,
                    row_counts=row_counts,
                    staged_values=staged[0],
                    staged_columns=staged[1],
                )
            )
        (got if method == "lookback" else expected).append((nnz, values, columns, row_counts))
    (nnz, values, columns, row_counts), (ref_nnz, ref_values, ref_columns, ref_counts) = (
        got[0],
        expected[0],
    )
    assert nnz == ref_nnz and 0 < nnz < capacity
    assert torch.equal(row_counts, ref_counts)
    assert torch.equal(columns[:nnz], ref_columns[:nnz])
    assert torch.equal(values[:nnz], ref_values[:nnz])
    assert bool((values[nnz:] == -9.0).all())


@CUDA
@pytest.mark.parametrize("absolute", [False, True])
def test_triton_sparsity_passes_on_cuda_equal_torch(absolute):
    x = _series(n=900, seed=2)
    u, _ = normalize_series(torch.from_numpy(x).cuda(), dtype=torch.float32)
    kept = [1, 4000, 90_000]
    found = _tiles.top_threshold(u, kept, absolute=absolute, block_rows=200, use_triton=True)
    with np.errstate(invalid="ignore"):
        r = np.corrcoef(x.T)[np.triu_indices(900, 1)]
    r = np.sort(np.abs(r[~np.isnan(r)]) if absolute else r[~np.isnan(r)])[::-1]
    assert_allclose(found, [r[k - 1] for k in kept], atol=2e-6)
    hist = _tiles.histogram_triton(u, absolute=absolute, block_rows=200)
    assert int(hist.sum()) == r.size
