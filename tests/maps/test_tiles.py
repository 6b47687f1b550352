"""The fused Triton degree kernel (interpreted on the CPU, and on CUDA when
present) and the tile planner."""

from pathlib import Path

import numpy as np
import pytest
import torch

from connscale.fc import _tiles
from connscale.fc._kernel_helpers import upper_tiles
from connscale.fc.normalize import normalize_series

from .._interpreted import run_interpreted
from ._reference import check_counts, check_sums, reference_degree, simulated


def test_triton_degree_kernel_interpreted_on_cpu():
    """The kernel itself, run by Triton's interpreter, equals the references."""
    run_interpreted(Path(__file__).with_name("_triton_tiles_interpreted.py"))


@pytest.mark.skipif(not (torch.cuda.is_available() and _tiles.HAS_TRITON), reason="CUDA + Triton")
@pytest.mark.parametrize("method", ["fused", "blocks"])
@pytest.mark.parametrize("absolute", [False, True])
def test_triton_degree_kernels_on_cuda(absolute, method):
    x = simulated(n_timepoints=300, n_series=3000, seed=6)
    u, _ = normalize_series(torch.from_numpy(x).cuda(), dtype=torch.float32)
    thresholds = [0.2, 0.5]
    thr = torch.tensor(thresholds)
    if method == "fused":
        counts, sums = _tiles.degree_triton(u, thr, absolute=absolute, weighted=True)
    else:
        counts, sums = _tiles.degree_blocks_triton(
            u, thr, absolute=absolute, weighted=True, block_rows=1000
        )
    for i, theta in enumerate(thresholds):
        ref_counts, ref_sums, near = reference_degree(x, theta, absolute=absolute)
        check_counts(counts[i].cpu().numpy(), ref_counts, near)
        check_sums(sums[i].cpu().numpy(), ref_sums, near, theta)


def test_tile_pairs_cover_the_upper_triangle_once():
    for n_tiles in (1, 5, 17):
        pairs = upper_tiles(n_tiles * 16, 16, 16, group=4).reshape(-1, 2).numpy()
        assert np.all(pairs[:, 0] <= pairs[:, 1])
        assert len({tuple(p) for p in pairs}) == len(pairs) == n_tiles * (n_tiles + 1) // 2


def test_plan_block_rows_follows_the_budget():
    cpu = torch.device("cpu")
    assert _tiles.plan_block_rows(1000, 0, 10**9, item=4, device=cpu).block_rows == 1000
    plan = _tiles.plan_block_rows(1000, 10**5, 10**5 + 13_000 * 10, item=4, device=cpu)
    assert plan.block_rows == 10
    with pytest.raises(ValueError, match="at least"):
        _tiles.plan_block_rows(1000, 10**5, 10**5 + 100, item=4, device=cpu)


def test_exact_top_threshold_and_below():
    x = simulated(n_series=120, seed=7)
    u, _ = normalize_series(torch.from_numpy(x))
    r = np.sort(np.corrcoef(x.T)[np.triu_indices(120, 1)])[::-1]
    found = _tiles.top_threshold(u, [1, 50, r.size], absolute=False, block_rows=16)
    np.testing.assert_allclose(found, [r[0], r[49], r[-1]], atol=1e-12)
    assert _tiles.below(0.5, torch.float32) < 0.5
    assert np.float32(_tiles.below(0.5, torch.float32)) == np.nextafter(
        np.float32(0.5), np.float32(-1)
    )
