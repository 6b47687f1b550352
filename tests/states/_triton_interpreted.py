"""Run under TRITON_INTERPRET=1 by test_kmeans.py (and imported by its CUDA
test): the fused k-means kernels, executed by Triton's interpreter on the
CPU, against their pure-torch equivalents. Prints 'ok' when every check
passes."""

import sys
from contextlib import contextmanager

import torch

from connscale.states import _half as kernels_half
from connscale.states import _int8 as kernels_int8
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
    x = clustered(100, 150, 4, seed=2, device=device)  # 100 rows: 3 blocks of 32 and 4
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
    return km._Run(prepared, centres, use_triton=True, coarse=("half", prepared.half()))


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
    assert int(run.confirmed) == 2 * int(near.sum()) and run.coarse_passes == 2


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
    for a, b in _runs_against_fp32("half", device):
        assert a.confirmed is None and b.confirmed is not None and b.coarse_passes >= 1


#: The float32 pass's runs of :func:`_fp32_runs`, by device.
_FP32_RUNS: dict = {}


def _fp32_runs(device):
    """The float32 pass's whole runs that :func:`_runs_against_fp32` compares with,
    made once per device (the same for every coarse pass):
    ``[(metric, prepared, seeds, max_iter, tol, run)]``.

    One metric a data set (the pass is the same for both, whose scores the
    checks above compare): the clusters by correlation, the near ties by
    distance (their grid is exact for it)."""
    if device not in _FP32_RUNS:
        near_x, _, _, _ = grid_near_ties(device=device)
        runs = []
        for x, metric in (
            (clustered(160, 60, 4, seed=2, device=device), "correlation"),
            (near_x, "euclidean"),
        ):
            prepared = km.Prepared(x, metric)
            seeds = prepared.x[[0, 1, 2, 3]].to(torch.float64)
            for max_iter, tol in ((30, 0.0), (3, 0.0)):
                run = km.lloyd(
                    prepared, seeds, max_iter=max_iter, tol=tol, use_triton=True, assign="fp32"
                )
                runs.append((metric, prepared, seeds, max_iter, tol, run))
        _FP32_RUNS[device] = runs
    return _FP32_RUNS[device]


def _runs_against_fp32(assign, device):
    """Yield whole runs of the float32 pass and of the ``assign`` pass, after
    checking they are the same, bit for bit (:func:`_fp32_runs`)."""
    for metric, prepared, seeds, max_iter, tol, a in _fp32_runs(device):
        b = km.lloyd(prepared, seeds, max_iter=max_iter, tol=tol, use_triton=True, assign=assign)
        assert torch.equal(a.labels, b.labels), metric
        assert torch.equal(a.centres, b.centres), metric
        assert a.inertia == b.inertia and (a.n_iter, a.converged) == (b.n_iter, b.converged)
        yield a, b


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
        assert result.confirmed is None and result.coarse_passes == 0
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


# --------------------------------------------------------------------------
# The int8 assignment (int8 copy with a scale per row decides, float32 confirms)
# --------------------------------------------------------------------------


def _int8_run(prepared, centres):
    return km._Run(prepared, centres, use_triton=True, coarse=("int8", prepared.int8()))


def _int8_margins(prepared, centres):
    """(A, B, M) float64 of the int8 decision test for float64 ``centres``."""
    alpha, beta = (t.to(torch.float32) for t in km._score_terms(prepared, centres))
    c32 = centres.to(torch.float32)
    copy = prepared.int8()
    split = kernels_int8.split_centres(c32, copy.q.shape[1])
    width = kernels.read_width(prepared.x)
    depth = kernels_half._depth(width, kernels.CONFIG["assign"][1])
    terms = kernels_int8.margin_terms(alpha, beta, c32, split, width, depth=depth)
    return tuple(t.double() for t in terms)


def check_int8_copy(device="cpu"):
    """The copy: |q| ≤ 127, s = max|x|/127, a residual that bounds ‖x − s·q‖
    (float64 reference) within 2⁻²⁰, zero rows, tiny rows, zero padding."""
    x = adversarial_rows(device=device)
    x = torch.cat([x, torch.zeros(1, x.shape[1], device=device)])
    x[-1, 3] = 1e-44  # a subnormal row: s underflows to 0, then 1
    prepared = km.Prepared(x, "euclidean")
    copy = prepared.int8()
    e = x.shape[1]
    assert copy.q.dtype == torch.int8 and copy.q.shape[1] % kernels_int8.CONFIG[1] == 0
    assert int(copy.q[:, e:].abs().max()) == 0 and int(copy.q.abs().max()) == 127
    px = prepared.x[:, :e].double()
    exact = torch.linalg.vector_norm(
        px - copy.scale.double()[:, None] * copy.q[:, :e].double(), dim=1
    )
    residual = copy.residual.double()
    assert bool((residual >= exact).all()) and bool(
        (residual <= exact * (1 + 2.0**-20) + 1e-300).all()
    )
    top = px.abs().amax(dim=1)
    # Rows of uniform or normal values lose well under 1 % of their norm.
    plain = [2, 3, 4, 5, 8, 9, 10, 11]
    assert bool((residual[plain] <= 0.01 * torch.linalg.vector_norm(px[plain], dim=1)).all())
    zero = top == 0
    if bool(zero.any()):
        assert bool((copy.scale[zero] == 1).all()) and float(residual[zero].max()) == 0
    assert torch.allclose(copy.norms.double(), torch.linalg.vector_norm(px, dim=1), rtol=1e-7)


def check_int8_split(device="cpu"):
    """The centres' two int8 parts: within [−127, 127], zero-padded, scale 1
    for the padding; δ bounds ‖c − c̃‖ and is ~10⁻⁴‖c‖ or less."""
    gen = torch.Generator().manual_seed(12)
    mags = 10.0 ** torch.empty(3, 301).uniform_(-30, 4, generator=gen)
    c = torch.cat([mags * torch.randn(3, 301, generator=gen), torch.zeros(1, 301)])
    c[3, 5] = 1e-40
    c = c.to(torch.float32).to(device)
    split = kernels_int8.split_centres(c, 512)
    parts = split.parts.reshape(512, 16, 2)
    assert parts.dtype == torch.int8 and int(parts[301:].abs().max()) == 0
    assert int(parts[:, 4:].abs().max()) == 0 and bool((split.scales.reshape(16, 2)[4:] == 1).all())
    t = split.scales.reshape(16, 2)[:4].double()
    approx = (
        t[:, 0, None] * parts[:301, :4, 0].T.double()
        + t[:, 1, None] * parts[:301, :4, 1].T.double()
    )
    c64 = c.double()
    exact = torch.linalg.vector_norm(c64 - approx, dim=1)
    norm = torch.linalg.vector_norm(c64, dim=1)
    assert bool((split.error >= exact).all())
    assert bool((split.error[:3] <= 1e-4 * norm[:3]).all())  # normal-range centres


def check_int8_near_ties(device="cpu"):
    """Exact and near ties: the int8 pass's labels are the float32 pass's and
    the torch path's; the ties are confirmed, the rows far from a tie are not."""
    x, centres, gap, near = grid_near_ties(device=device)
    prepared = km.Prepared(x, "euclidean")
    ref, _ = km.assign_torch(prepared, centres)
    fp32, _ = km._Run(prepared, centres, use_triton=True).assign(
        centres, torch.zeros(1, dtype=torch.int32, device=device)
    )
    run = _int8_run(prepared, centres)
    changed = torch.zeros(1, dtype=torch.int32, device=device)
    labels, dist = run.assign(centres, changed, distances=False)
    assert dist is None
    assert torch.equal(labels, fp32) and torch.equal(labels, ref)
    assert bool((labels[gap == 0] % 2 == 0).all())  # exact ties: the lower index
    assert int(changed) == x.shape[0]
    # Premise of the counts: near gaps are far below the threshold, far ones above.
    a, b, m = _int8_margins(prepared, centres)
    copy = prepared.int8()
    r, norm = copy.residual.double(), copy.norms.double()
    best = torch.where(gap > 0, 0, 1) + 2 * (
        torch.arange(x.shape[0], device=device) >= x.shape[0] // 2
    )
    other = best ^ 1
    thr = r * m[best, other] + (a[best] + a[other]) * (norm + r) + b[best] + b[other]
    step = 2.0**-14 * gap.abs().double()
    assert bool((step[near] < thr[near] / 10).all()) and bool((step[~near] > 10 * thr[~near]).all())
    assert int(run.confirmed) == int(near.sum())
    assert torch.equal(
        run.pending[: int(near.sum())].sort().values.long(), torch.nonzero(near)[:, 0]
    )


def check_int8_bound(device="cpu"):
    """|d̃ − d| ≤ r‖w‖ + A(‖x‖ + r) + B for every row, d̃ and d the one-centre
    scores of the int8 and float32 kernels themselves, on adversarial rows
    and centres, among them each row's own quantisation error (which makes
    the Cauchy–Schwarz step tight). Returns the largest ratio of each metric."""
    x = adversarial_rows(device=device)
    worst_ratio = {}
    for metric in ("euclidean", "correlation"):
        prepared = km.Prepared(x, metric)
        copy = prepared.int8()
        e = x.shape[1]
        px = prepared.x[:, :e].double()
        error = px - copy.scale.double()[:, None] * copy.q[:, :e].double()
        gen = torch.Generator().manual_seed(13)
        centres = torch.cat(
            [
                error[:6] / error[:6].abs().amax(dim=1, keepdim=True).clamp(min=1e-300),
                error[:2] * 1e6,
                px[:3],
                error[2:3].sign() * 1e4,
                torch.randn(2, e, generator=gen, dtype=torch.float64).to(device),
            ]
        )
        worst = 0.0
        for c in centres:
            c = c[None, :]
            alpha, beta = (t.to(torch.float32) for t in km._score_terms(prepared, c))
            c32 = c.to(torch.float32)
            n = x.shape[0]
            kw = dict(alpha=alpha, beta=beta, old=torch.full((n,), -1, device=device))
            d, d_int8 = (torch.empty(n, device=device) for _ in range(2))
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
            kernels_int8.assign(
                prepared.x,
                copy,
                c32,
                labels=torch.empty(n, dtype=torch.int64, device=device),
                score=d_int8,
                changed=torch.zeros(1, dtype=torch.int32, device=device),
                pending=torch.empty(n, dtype=torch.int32, device=device),
                count=count,
                **kw,
            )
            assert int(count) == 0  # one centre: every row decided
            a, b, _ = _int8_margins(prepared, c)
            w = float(alpha.double().abs()[0]) * torch.linalg.vector_norm(c32.double())
            r, norm = copy.residual.double(), copy.norms.double()
            bound = r * w + a[0] * (norm + r) + b[0]
            ratio = ((d_int8.double() - d.double()).abs() / bound).max()
            assert float(ratio) <= 1.0, (metric, float(ratio))
            worst = max(worst, float(ratio))
        # A centre along a row's own quantisation error: the bound is approached.
        assert worst > 0.5, (metric, worst)
        worst_ratio[metric] = worst
    return worst_ratio


def check_int8_lloyd(device="cpu"):
    """Whole runs: the int8 pass's runs are the float32 pass's, bit for bit."""
    for a, b in _runs_against_fp32("int8", device):
        assert a.coarse is None and b.coarse == "int8" and b.coarse_passes >= 1


def check_int8_fallback(device="cpu"):
    """No int8 copy for rows too long for int32 sums, values beyond its range
    or not enough memory: the float16 copy runs instead (then float32)."""
    x = clustered(60, 40, 3, device=device)
    seeds = x[:3].to(torch.float64)
    longest = kernels_int8.MAX_WIDTH
    kernels_int8.MAX_WIDTH = 255
    try:
        prepared = km.Prepared(x, "euclidean")
        assert prepared.int8() is None
        result = km.lloyd(prepared, prepared.to_prepared(seeds), assign="int8", use_triton=True)
        assert result.coarse == "half" and result.coarse_passes >= 1
    finally:
        kernels_int8.MAX_WIDTH = longest
    budget = kernels_int8.memory_budget
    kernels_int8.memory_budget = lambda device: 1000
    try:
        assert km.Prepared(x, "euclidean").int8() is None
    finally:
        kernels_int8.memory_budget = budget
    big = x.clone()
    big[5, 7] = 2.0**61
    assert km.Prepared(big, "euclidean").int8() is None
    assert km.Prepared(x, "euclidean").int8() is not None
    assert km.Prepared(x, "l1").int8() is None


def check_fp32_and_fma():
    """The float32 pass, and the half pass with its first kernel."""
    check_kernels()
    check_lloyd()
    check_split_centres()
    check_half(kernels_half.KERNELS[0])


def check_half(kernel):
    """The half pass with ``kernel``: near ties, the bound, whole runs."""
    check_half_near_ties(kernel=kernel)
    check_half_correlation_ties(kernel=kernel)
    worst = check_half_bound(kernel=kernel)
    print(f"{kernel}: largest |half - fp32 score| / bound: {worst}")
    check_half_lloyd(kernel=kernel)


def check_other_kernels_and_int8():
    """The half pass with its other kernels, its fallbacks, and the int8 pass."""
    for kernel in kernels_half.KERNELS[1:]:
        check_half(kernel)
    check_half_fallback()
    check_half_estimator()
    check_int8_copy()
    check_int8_split()
    check_int8_near_ties()
    print(f"int8: largest |int8 - fp32 score| / bound: {check_int8_bound()}")
    check_int8_lloyd()
    check_int8_fallback()


#: The checks in two shares of similar cost, run side by side by test_kmeans.py.
GROUPS = {"fp32": check_fp32_and_fma, "int8": check_other_kernels_and_int8}


def main(groups=tuple(GROUPS)):
    assert kernels.usable(torch.zeros(2, 2), 5), "the interpreter is not active"
    for group in groups:
        GROUPS[group]()
    print("ok")


if __name__ == "__main__":
    main(sys.argv[1:] or tuple(GROUPS))
