"""Run under TRITON_INTERPRET=1 by test_kmeans.py (and imported by its CUDA
test): the fused k-means kernels, executed by Triton's interpreter on the
CPU, against their pure-torch equivalents. Prints 'ok' when every check
passes."""

import torch

from connscale.states import _kmeans as km
from connscale.states import _triton_kmeans as kernels


def clustered(n, e, k, seed=0, device="cpu"):
    """Rows around k random centres, float32."""
    gen = torch.Generator().manual_seed(seed)
    centres = torch.randn(k, e, generator=gen)
    labels = torch.randint(0, k, (n,), generator=gen)
    return (centres[labels] + 1.5 * torch.randn(n, e, generator=gen)).to(device)


def check_kernels(device="cpu"):
    n, e, k = 301, 203, 5  # not multiples of the blocks
    x = clustered(n, e, k, device=device)
    assert km.Prepared(x, "l1").x.stride(0) == 208  # rows aligned for the kernels
    gen = torch.Generator().manual_seed(1)
    for metric in km.METRICS:
        prepared = km.Prepared(x, metric)
        centres = prepared.x[torch.randperm(n, generator=gen)[:k].to(device)].to(torch.float64)
        ref_labels, ref_dist = km.assign_torch(prepared, centres)
        state = km._FusedState(n, x.device)
        old = torch.full((n,), -1, dtype=torch.int64, device=device)
        labels, dist, changed = state.assign(prepared, centres, old)
        assert torch.equal(labels, ref_labels), metric
        assert torch.allclose(dist, ref_dist, rtol=1e-4, atol=1e-3), metric
        assert int(changed) == n
        old = ref_labels.clone()
        moved = torch.arange(0, n, 7, device=device)
        old[moved] = (old[moved] + 1) % k
        labels, _, changed = state.assign(prepared, centres, old)
        assert int(changed) == moved.numel()
        # The sums of the old labels, moved, are the sums of the new ones.
        sums = km.sums_torch(prepared.x, old, k)
        kernels.move_rows(prepared.x, moved, labels, old, sums)
        assert torch.allclose(sums, km.sums_torch(prepared.x, labels, k), atol=1e-9)
        assert torch.allclose(kernels.centre_sums(prepared.x, labels, k),
                              km.sums_torch(prepared.x, labels, k), atol=1e-9)


def check_lloyd(device="cpu"):
    """Whole runs, fused and torch, from the same seeds: same labels and centres."""
    x = clustered(400, 150, 4, seed=2, device=device)
    saved = km._INCREMENTAL_FRACTION
    km._INCREMENTAL_FRACTION = 1.0  # every iteration after the first incremental
    try:
        for metric in km.METRICS:
            prepared = km.Prepared(x, metric)
            seeds = prepared.x[[0, 1, 2, 3]].to(torch.float64)
            a = km.lloyd(prepared, seeds, max_iter=30, use_triton=False)
            b = km.lloyd(prepared, seeds, max_iter=30, use_triton=True)
            assert torch.equal(a.labels, b.labels), metric
            assert torch.allclose(a.centres, b.centres, atol=1e-9), metric
            assert abs(a.inertia - b.inertia) <= 1e-9 * abs(a.inertia), metric
            assert a.n_iter == b.n_iter
    finally:
        km._INCREMENTAL_FRACTION = saved


def check_both_products(device="cpu"):
    """The dot-product metrics through tl.dot and through per-centre sums."""
    saved = kernels.USE_DOT
    try:
        for use_dot in (True, False):
            kernels.USE_DOT = use_dot
            check_kernels(device)
    finally:
        kernels.USE_DOT = saved


def main():
    assert kernels.usable(torch.zeros(2, 2), 5), "the interpreter is not active"
    check_both_products()
    check_lloyd()
    print("ok")


if __name__ == "__main__":
    main()
