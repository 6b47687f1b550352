"""Run under TRITON_INTERPRET=1 by test_tiles.py: the fused degree kernel,
executed by Triton's interpreter on the CPU, against the torch tiles and the
float64 numpy reference. Prints 'ok' when every check passes."""

import numpy as np
import torch

from connscale._compute.device import use_triton
from connscale.fc import _tiles
from connscale.fc.normalize import normalize_series

try:
    from ._reference import check_counts, check_sums, reference_degree, simulated
except ImportError:  # run as a script
    from _reference import check_counts, check_sums, reference_degree, simulated


def main():
    x = simulated(n_timepoints=40, n_series=150, seed=5)
    x[:, 9] = 2.0  # a constant series: NaN row, never counted
    u, constant = normalize_series(torch.from_numpy(x), dtype=torch.float32)
    assert use_triton(u, float32=True), "the interpreter is not active"
    keep = ~constant.numpy()
    for absolute in (False, True):
        # five thresholds: the counts are reduced four a group (a byte each)
        thresholds = [0.1, 0.4] if absolute else [-0.2, -0.05, 0.1, 0.25, 0.4]
        thr = torch.tensor(thresholds)
        counts, sums = _tiles.degree_triton(
            u, thr, absolute=absolute, weighted=True, block=32, block_k=16
        )
        torch_counts, torch_sums = _tiles.degree_torch(
            u, thr, absolute=absolute, weighted=True, block_rows=64
        )
        assert counts.shape == (len(thresholds), 150) and counts.dtype == torch.int64
        assert int(counts[:, 9].abs().sum()) == 0 and float(sums[:, 9].abs().sum()) == 0
        for i, theta in enumerate(thresholds):
            ref_counts, ref_sums, near = reference_degree(x[:, keep], theta, absolute=absolute)
            assert ref_counts.sum() > 0
            check_counts(counts[i].numpy()[keep], ref_counts, near)
            check_sums(sums[i].numpy()[keep], ref_sums, near, theta)
            check_counts(counts[i].numpy()[keep], torch_counts[i].numpy()[keep], near)
            assert np.allclose(sums[i].numpy(), torch_sums[i].numpy(), rtol=1e-4, atol=1.0)
        blocks_counts, blocks_sums = _tiles.degree_blocks_triton(
            u, thr, absolute=absolute, weighted=True, block_rows=64, block_m=32, block_n=16
        )
        assert torch.equal(blocks_counts, torch_counts)
        assert torch.allclose(blocks_sums, torch_sums, rtol=1e-5)
        binary, none = _tiles.degree_triton(
            u, thr, absolute=absolute, weighted=False, block=32, block_k=16
        )
        assert none is None and torch.equal(binary, counts)
    print("ok")


if __name__ == "__main__":
    main()
