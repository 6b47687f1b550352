"""Run under TRITON_INTERPRET=1 by test_kmeans.py (and imported by its CUDA
test): the fused k-means kernels, executed by Triton's interpreter on the
CPU, against their pure-torch equivalents. Prints 'ok' when every check
passes."""

from contextlib import contextmanager

import torch

from connscale.states import _half as kernels_half
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


# --------------------------------------------------------------------------
# The half-precision assignment (float16 copy decides, float32 confirms)
# --------------------------------------------------------------------------


def grid_near_ties(n_pairs=64, e=100, seed=3, device="cpu"):
    """Rows with exact ties and near ties between two centres, on a grid where
    every float32 product and sum is exact (so the float32 pass, in any
    order, and the torch GEMM agree), and rows far from a tie.

    x = A·2⁻¹⁰ with odd |A| in [2049, 2847] (12 significant bits: not
    float16 numbers), centres B/16 with |B| ≤ 15, E = 100: every dot
    product is a multiple of 2⁻¹⁴ below 2¹⁰. Centres c0, c1 = c0 + Δ
    (Δ ∈ {−1, 0, 1}/16) and their opposites; rows come with their opposite
    (the column means are exactly 0, so Prepared leaves them as they are).
    The score gap d1 − d0 of a row is set to G·2⁻¹⁴ (G even): 0 or ±2 to
    ±40 for the first half of the rows (ties up to ~1e-7 relative), about
    ±1.8 for the others. Returns (x, centres float64, G, near)."""
    gen = torch.Generator().manual_seed(seed)
    b0 = torch.randint(-14, 15, (e,), generator=gen)
    delta = torch.randint(-1, 2, (e,), generator=gen)
    delta[b0 + delta > 15] = 0
    delta[b0 + delta < -15] = 0
    b1 = b0 + delta
    sign = torch.where(b0 >= 0, 1, -1)
    a = sign * (2049 + 2 * torch.randint(0, 400, (n_pairs, e), generator=gen))
    near = torch.arange(n_pairs) < n_pairs // 2
    target = torch.where(
        near,
        2 * torch.randint(-20, 21, (n_pairs,), generator=gen),
        torch.where(torch.rand(n_pairs, generator=gen) < 0.5, -1, 1) * 30000,
    )
    g = 64 * ((b1**2).sum() - (b0**2).sum()) - 2 * (a * delta).sum(dim=1)
    need = (g - target) // 2  # G falls by 2 for each unit added to sum(A·Δ)
    moved = torch.nonzero(delta).squeeze(1)
    m = moved.numel()
    share = need[:, None] // m + (torch.arange(m)[None, :] < (need % m)[:, None]).long()
    a[:, moved] += share * delta[moved]
    g = 64 * ((b1**2).sum() - (b0**2).sum()) - 2 * (a * delta).sum(dim=1)
    assert torch.equal(g, target), (g - target).abs().max()
    assert int(a.abs().max()) < 4096, int(a.abs().max())
    rows = torch.cat([a, -a]).to(torch.float64) * 2.0**-10
    centres = torch.stack([b0, b1, -b0, -b1]).to(torch.float64) / 16
    return (
        rows.to(torch.float32).to(device),
        centres.to(device),
        torch.cat([target, target]).to(device),
        torch.cat([near, near]).to(device),
    )


def _half_run(prepared, centres):
    return km._Run(prepared, centres, use_triton=True, half=prepared.half())


@contextmanager
def half_kernel(kernel):
    """The half pass runs ``kernel`` ('fma' or 'dot') inside the block."""
    saved = kernels_half.KERNEL
    kernels_half.KERNEL = kernel
    try:
        yield
    finally:
        kernels_half.KERNEL = saved


def _margins(alpha, beta, centres, width):
    depth, unit = kernels_half.accumulation(width)
    return kernels_half.margin_terms(alpha, beta, centres, width, depth=depth, split_unit=unit)


def check_half_near_ties(device="cpu", kernel="fma"):
    with half_kernel(kernel):
        return _check_half_near_ties(device)


def _check_half_near_ties(device):
    """Exact and near ties: the half pass's labels are the float32 pass's and
    the torch path's, the ties are confirmed, the rows far from a tie are not."""
    x, centres, gap, near = grid_near_ties(device=device)
    prepared = km.Prepared(x, "euclidean")
    assert torch.equal(prepared.x, x)
    assert float((prepared.half().x.double() != x.double()).double().mean()) > 0.5
    ref, _ = km.assign_torch(prepared, centres)
    fp32, _ = km._Run(prepared, centres, use_triton=True).assign(
        centres, torch.zeros(1, dtype=torch.int32, device=device)
    )
    run = _half_run(prepared, centres)
    changed = torch.zeros(1, dtype=torch.int32, device=device)
    labels, dist = run.assign(centres, changed, distances=False)
    assert dist is None
    assert torch.equal(labels, fp32) and torch.equal(labels, ref)
    assert bool((labels[gap == 0] % 2 == 0).all())  # exact ties: the lower index
    assert int(changed) == x.shape[0]
    # Premise of the counts: near gaps are far below the margin, far ones above.
    alpha, beta = (t.to(torch.float32) for t in km._score_terms(prepared, centres))
    a, b = _margins(alpha, beta, centres.float(), 112)
    eps = (a.double()[None, :] * prepared.half().norms.double()[:, None] + b.double()).amax(1)
    step = 2.0**-14 * gap.abs().double()
    assert bool((step[near] < eps[near] / 10).all()) and bool((step[~near] > 10 * eps[~near]).all())
    assert int(run.confirmed) == int(near.sum())
    assert torch.equal(
        run.pending[: int(near.sum())].sort().values.long(), torch.nonzero(near)[:, 0]
    )
    # A second pass from the same labels: nothing changes, the ties are confirmed again.
    run.labels = labels
    changed.zero_()
    again, _ = run.assign(centres, changed, distances=False)
    assert torch.equal(again, labels) and int(changed) == 0
    assert int(run.confirmed) == 2 * int(near.sum()) and run.half_passes == 2


def near_tie_correlation(n=120, e=203, seed=4, device="cpu"):
    """Rows whose correlations with two centres differ by up to 1e-6 (relative
    to 1 − r) and more, plus random rows; float32, and the centres (float64)."""
    gen = torch.Generator().manual_seed(seed)
    u, w, z = torch.randn(3, e, generator=gen, dtype=torch.float64)
    w -= (w @ u) / (u @ u) * u
    centres = torch.stack([u + w, u - w, torch.randn(e, generator=gen, dtype=torch.float64)])
    noise = torch.randn(n, e, generator=gen, dtype=torch.float64)
    noise -= (noise @ w)[:, None] / (w @ w) * w  # equally correlated with u ± w
    t = torch.logspace(-8, -2, n, dtype=torch.float64) * torch.where(
        torch.arange(n) % 2 == 0, 1, -1
    )
    rows = 0.5 * noise + u + t[:, None] * w * (1 + (u @ u) / (w @ w)) ** 0.5
    rows[::10] = torch.randn(rows[::10].shape, generator=gen, dtype=torch.float64)
    return rows.to(torch.float32).to(device), centres.to(device)


def check_half_correlation_ties(device="cpu", kernel="fma"):
    with half_kernel(kernel):
        return _check_half_correlation_ties(device)


def _check_half_correlation_ties(device):
    x, centres = near_tie_correlation(device=device)
    prepared = km.Prepared(x, "correlation")
    centres = prepared.to_prepared(centres)
    fp32, _ = km._Run(prepared, centres, use_triton=True).assign(
        centres, torch.zeros(1, dtype=torch.int32, device=device)
    )
    run = _half_run(prepared, centres)
    labels, _ = run.assign(
        centres, torch.zeros(1, dtype=torch.int32, device=device), distances=False
    )
    assert torch.equal(labels, fp32)
    confirmed = int(run.confirmed)
    assert 10 < confirmed < x.shape[0]
    # Confirmed rows get the float32 pass's own scores, bit for bit.
    full = km._Run(prepared, centres, use_triton=True)
    full.assign(centres, torch.zeros(1, dtype=torch.int32, device=device))
    listed = run.pending[:confirmed].long()
    assert torch.equal(run.score[listed], full.score[listed])
    # The torch GEMM sums in another order: it agrees wherever the float64
    # gap is clear of float32's own rounding (γ_E ‖x‖‖c‖/‖c‖ per score, E
    # roundings per product at 2⁻²³).
    ref, _ = km.assign_torch(prepared, centres)
    x64 = prepared.x.double()
    scores = 1 - x64 @ centres.T / torch.linalg.vector_norm(centres, dim=1)
    top = scores.topk(2, dim=1, largest=False).values
    clear = (top[:, 1] - top[:, 0]) > 4 * x.shape[1] * 2.0**-23
    assert int(clear.sum()) > x.shape[0] // 2
    assert torch.equal(labels[clear], ref[clear])


def adversarial_rows(e=1037, device="cpu"):
    """Rows of mixed magnitudes (1e-7 to 1e3 in one row), rows entirely in
    float16's subnormal range, rows of random signs; E not a multiple of the
    kernels' blocks."""
    gen = torch.Generator().manual_seed(5)
    mags = 10.0 ** torch.empty(4, e).uniform_(-7, 3, generator=gen)
    rows = [
        mags[0] * torch.randn(e, generator=gen).sign(),
        mags[1] * torch.randn(e, generator=gen),
        torch.empty(e).uniform_(-6e-5, 6e-5, generator=gen),  # subnormal in float16
        torch.empty(e).uniform_(1e-8, 5e-7, generator=gen),
        torch.randn(e, generator=gen) * 1e-3,
        torch.randn(e, generator=gen) * 300,
    ]
    x = torch.stack(rows + [-r for r in rows])  # column means 0: Prepared keeps them
    return x.to(device)


def check_half_bound(device="cpu", kernel="fma"):
    with half_kernel(kernel):
        return _check_half_bound(device)


def _check_half_bound(device):
    """|d̃_j − d_j| ≤ ε_j for every row and centre, d̃ and d the scores of the
    half and float32 kernels themselves (one centre at a time), on adversarial
    rows and centres: centres aligned with each row's float16 rounding error
    (every error adds up), large, tiny and random ones. Returns the largest
    |d̃ − d| / ε of each metric."""
    x = adversarial_rows(device=device)
    worst_ratio = {}
    for metric in ("euclidean", "correlation"):
        prepared = km.Prepared(x, metric)
        half = prepared.half()
        px = prepared.x.double()
        err_sign = (half.x.double() - px).sign()
        # Centres whose TF32 residual c − h is nearly half h's spacing
        # (h = 2^e(1 + 2⁻¹⁰)), its sign set so that a 'dot' pass dropping
        # the low part would add that error to the float16 one.
        hx = half.x.double()[:4]
        base = torch.exp2(torch.floor(torch.log2(px[:4].abs().clamp(min=2.0**-60))))
        side = torch.where(err_sign[:4] == 0, hx.sign(), err_sign[:4])
        rest = -hx.sign() * side * 2.0**-11 * (1 - 2.0**-8)
        gen = torch.Generator().manual_seed(6)
        centres = torch.cat(
            [
                side * base * (1 + 2.0**-10 + rest),
                err_sign[:4] * px[:4].abs(),
                err_sign[2:3] * 1e4,  # subnormal rows against a large centre
                err_sign[3:4] * 1e-30,
                torch.randn(2, x.shape[1], generator=gen, dtype=torch.float64).to(device),
            ]
        )
        worst = 0.0
        for c in centres:
            c = c[None, :]
            alpha, beta = (t.to(torch.float32) for t in km._score_terms(prepared, c))
            c32 = c.to(torch.float32)
            n = x.shape[0]
            kw = dict(alpha=alpha, beta=beta, old=torch.full((n,), -1, device=device))
            d, d_half = (torch.empty(n, device=device) for _ in range(2))
            kernels.assign(
                prepared.x,
                c32,
                l1=False,
                labels=torch.empty(n, dtype=torch.int64, device=device),
                score=d,
                changed=torch.zeros(1, dtype=torch.int32, device=device),
                **kw,
            )
            count = torch.zeros(1, dtype=torch.int32, device=device)
            kernels_half.assign(
                prepared.x,
                half,
                c32,
                labels=torch.empty(n, dtype=torch.int64, device=device),
                score=d_half,
                changed=torch.zeros(1, dtype=torch.int32, device=device),
                pending=torch.empty(n, dtype=torch.int32, device=device),
                count=count,
                **kw,
            )
            assert int(count) == 0  # one centre: every row decided
            a, b = _margins(alpha, beta, c32, kernels.read_width(prepared.x))
            eps = a.double() * half.norms.double() + b.double()
            ratio = ((d_half.double() - d.double()).abs() / eps).max()
            assert float(ratio) <= 1.0, (metric, float(ratio))
            worst = max(worst, float(ratio))
        # The aligned centres make the float16 errors add up: the bound is approached.
        assert worst > 0.2, (metric, worst)
        worst_ratio[metric] = worst
    return worst_ratio


def check_half_lloyd(device="cpu", kernel="fma"):
    with half_kernel(kernel):
        return _check_half_lloyd(device)


def _check_half_lloyd(device):
    """Whole runs: the half pass's runs are the float32 pass's, bit for bit
    (same labels at every iteration), and the confirmations are counted."""
    near_x, _, _, _ = grid_near_ties(device=device)
    for x in (clustered(160, 60, 4, seed=2, device=device), near_x):
        for metric in ("euclidean", "correlation"):
            prepared = km.Prepared(x, metric)
            seeds = prepared.x[[0, 1, 2, 3]].to(torch.float64)
            for max_iter, tol in ((30, 0.0), (3, 0.0)):
                a = km.lloyd(
                    prepared, seeds, max_iter=max_iter, tol=tol, use_triton=True, assign="fp32"
                )
                b = km.lloyd(
                    prepared, seeds, max_iter=max_iter, tol=tol, use_triton=True, assign="half"
                )
                assert torch.equal(a.labels, b.labels), metric
                assert torch.equal(a.centres, b.centres), metric
                assert a.inertia == b.inertia and (a.n_iter, a.converged) == (b.n_iter, b.converged)
                assert a.confirmed is None and b.confirmed is not None and b.half_passes >= 1


def check_split_centres(device="cpu"):
    """The 'dot' kernel's TF32 parts: both have 10 fraction bits (the low 13
    bits of float32 are 0), h is c rounded to the nearest TF32 number (ties
    to even; a float64 reference), and |c − h − l| ≤ 2⁻²²|c| + 2⁻¹³⁶ over
    normal, tiny, subnormal, large and halfway values."""
    import numpy as np

    gen = torch.Generator().manual_seed(9)
    mags = 10.0 ** torch.empty(4000).uniform_(-44, 4.8, generator=gen)
    halfway = (torch.arange(1, 200, dtype=torch.int32) * 0x2000 + 0x3F801000).view(torch.float32)
    c = torch.cat([mags * torch.randn(4000, generator=gen).sign(), halfway, -halfway])
    c = torch.cat([c, torch.tensor([0.0, -0.0, 65504.0, -65504.0, 1e-45, 2.0**-126])])
    c = c.to(torch.float32).to(device)
    hi, lo = kernels_half.split_centres(c)
    for part in (hi, lo):
        assert int((part.view(torch.int32) & 0x1FFF).abs().max()) == 0
    c_np = c.cpu().numpy().astype(np.float64)
    spacing = np.ldexp(1.0, np.maximum(np.frexp(c_np)[1] - 11, -136))
    assert np.array_equal(hi.cpu().numpy(), np.round(c_np / spacing) * spacing)
    c64 = c.double()
    residual = (c64 - hi.double() - lo.double()).abs()
    assert bool((residual <= 2.0**-22 * c64.abs() + 2.0**-136).all())
    assert float((residual / c64.abs().clamp(min=2.0**-100)).max()) > 2.0**-26  # not lossless


def check_half_fallback(device="cpu"):
    """No float16 copy when it does not fit in memory or beyond float16's range
    (the float32 pass runs), nor for L1 or off the Triton path."""
    x = clustered(60, 40, 3, device=device)
    seeds = x[:3].to(torch.float64)
    budget = kernels_half.memory_budget
    kernels_half.memory_budget = lambda device: 60 * 48 * 2 + 60 * 12 - 1
    try:
        prepared = km.Prepared(x, "euclidean")
        assert prepared.half() is None
        result = km.lloyd(prepared, prepared.to_prepared(seeds), assign="half", use_triton=True)
        assert result.confirmed is None and result.half_passes == 0
    finally:
        kernels_half.memory_budget = budget
    assert km.Prepared(x, "euclidean").half() is not None  # the same size fits otherwise
    big = x.clone()
    big[5, 7] = 7e4
    assert km.Prepared(big, "euclidean").half() is None
    assert km.Prepared(x, "l1").half() is None
    assert km.Prepared(x.double(), "euclidean").half() is None


def check_half_estimator(device="cpu"):
    """With ``ASSIGN = 'half'`` the estimator fits the float32 path's states
    and logs the confirmations of each run."""
    import logging

    import numpy as np

    from connscale import DFCStates

    x = clustered(90, 45, 3, seed=8).numpy()
    params = dict(n_states=3, metric="euclidean", exemplars=False, n_init=2, random_state=0)
    fp32 = DFCStates(**params, device=device).fit([x])
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    log = logging.getLogger("connscale")
    log.addHandler(handler)
    level = log.level
    log.setLevel(logging.INFO)
    km.ASSIGN = "half"
    try:
        half = DFCStates(**params, device=device).fit([x])
    finally:
        km.ASSIGN = "fp32"
        log.removeHandler(handler)
        log.setLevel(level)
    assert np.array_equal(half.labels_[0], fp32.labels_[0])
    assert half.inertia_ == fp32.inertia_
    messages = [r.getMessage() for r in records if "confirmed in float32" in r.getMessage()]
    assert len(messages) == 2, messages


def main():
    assert kernels.usable(torch.zeros(2, 2), 5), "the interpreter is not active"
    check_kernels()
    check_lloyd()
    check_split_centres()
    for kernel in kernels_half.KERNELS:
        check_half_near_ties(kernel=kernel)
        check_half_correlation_ties(kernel=kernel)
        worst = check_half_bound(kernel=kernel)
        print(f"{kernel}: largest |half - fp32 score| / bound: {worst}")
        check_half_lloyd(kernel=kernel)
    check_half_fallback()
    check_half_estimator()
    print("ok")


if __name__ == "__main__":
    main()
