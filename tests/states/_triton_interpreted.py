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
        run = km._Run(prepared, centres, use_triton=True)
        changed = torch.zeros(1, dtype=torch.int32, device=device)
        labels, dist = run.assign(centres, changed)
        assert torch.equal(labels, ref_labels), metric
        assert torch.allclose(dist, ref_dist, rtol=1e-4, atol=1e-3), metric
        assert int(changed) == n
        # The first move gives the sums; moving some rows on updates them.
        run.move(labels)
        assert torch.equal(run.counts, torch.bincount(labels, minlength=k))
        if metric == "l1":
            continue
        assert torch.allclose(run.sums, km.sums_torch(prepared.x, labels, k), atol=1e-9)
        moved = torch.arange(0, n, 7, device=device)
        relabelled = labels.clone()
        relabelled[moved] = (relabelled[moved] + 1) % k
        changed.zero_()
        again, _ = run.assign(centres, changed)
        assert torch.equal(again, labels) and int(changed) == 0
        run.move(relabelled)
        assert torch.allclose(run.sums, km.sums_torch(prepared.x, relabelled, k), atol=1e-9)
        run.move(relabelled)  # nothing moves
        assert torch.allclose(run.sums, km.sums_torch(prepared.x, relabelled, k), atol=1e-9)


def check_lloyd(device="cpu"):
    """Whole runs, fused and torch, from the same seeds: same labels, centres and
    inertia, stopped on unchanged labels, on tol and at max_iter."""
    x = clustered(400, 150, 4, seed=2, device=device)
    for metric in km.METRICS:
        prepared = km.Prepared(x, metric)
        seeds = prepared.x[[0, 1, 2, 3]].to(torch.float64)
        for max_iter, tol in ((30, 0.0), (3, 0.0), (30, 1e-3)):
            a = km.lloyd(prepared, seeds, max_iter=max_iter, tol=tol, use_triton=False)
            b = km.lloyd(prepared, seeds, max_iter=max_iter, tol=tol, use_triton=True)
            assert torch.equal(a.labels, b.labels), metric
            assert torch.allclose(a.centres, b.centres, atol=1e-9), metric
            assert abs(a.inertia - b.inertia) <= 1e-9 * abs(a.inertia), metric
            assert (a.n_iter, a.converged) == (b.n_iter, b.converged)
            exact = float(km.exact_distances(prepared, b.centres, b.labels).sum())
            assert abs(b.inertia - exact) <= 1e-9 * exact, metric


def main():
    assert kernels.usable(torch.zeros(2, 2), 5), "the interpreter is not active"
    check_kernels()
    check_lloyd()
    print("ok")


if __name__ == "__main__":
    main()
