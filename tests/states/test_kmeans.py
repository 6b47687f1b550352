"""k-means on the device against scikit-learn (Euclidean) and numpy references
(L1 with medians, correlation distance), the fused Triton kernels against the
torch path (interpreted on the CPU, compiled on CUDA)."""

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.cluster import KMeans

from connscale.states import _kmeans as km

from .._interpreted import run_interpreted
from ..conftest import DEVICES

N_ROWS, N_EDGES, K = 600, 120, 4


def _clustered(seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-0.5, 0.5, (K, N_EDGES))
    labels = rng.integers(0, K, N_ROWS)
    x = centres[labels] + 0.4 * rng.standard_normal((N_ROWS, N_EDGES))
    return x.astype(dtype), x[rng.choice(N_ROWS, K, replace=False)].astype(dtype)


def _lloyd(x, init, metric, device, max_iter=50, use_triton=False):
    prepared = km.Prepared(torch.as_tensor(x, device=device), metric)
    result = km.lloyd(
        prepared,
        prepared.to_prepared(torch.as_tensor(init, device=device)),
        max_iter=max_iter,
        use_triton=use_triton,
    )
    centres = prepared.from_prepared(result.centres).cpu().numpy()
    return result.labels.cpu().numpy(), centres, result


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("max_iter", [1, 3, 50])
def test_euclidean_equals_sklearn(device, dtype, max_iter):
    x, init = _clustered(dtype=dtype)
    # Start far from the solution so that labels change over several iterations.
    init = init + np.float32(0.3)
    sk = KMeans(K, init=init, n_init=1, max_iter=max_iter, tol=0.0, algorithm="lloyd").fit(x)
    labels, centres, result = _lloyd(x, init, "euclidean", device, max_iter)
    assert_array_equal(labels, sk.labels_)
    assert_allclose(centres, sk.cluster_centers_, atol=1e-5)
    assert result.inertia == pytest.approx(sk.inertia_, rel=1e-5)
    assert result.n_iter == sk.n_iter_


@pytest.mark.parametrize("device", DEVICES)
def test_stop_on_tol_equals_sklearn(device):
    """A stop on the centre shift inside a span of unchecked iterations is undone."""
    x = np.random.default_rng(0).standard_normal((N_ROWS, N_EDGES)).astype(np.float32)
    init = x[:K].copy()  # unclustered rows: labels keep changing, the shift stops the run
    sk = KMeans(K, init=init, n_init=1, max_iter=50, tol=0.3, algorithm="lloyd").fit(x)
    tol = float(np.mean(np.var(x.astype(np.float64), axis=0))) * 0.3
    prepared = km.Prepared(torch.as_tensor(x, device=device), "euclidean")
    result = km.lloyd(
        prepared, prepared.to_prepared(torch.as_tensor(init, device=device)), max_iter=50, tol=tol
    )
    assert not result.converged and 1 < result.n_iter == sk.n_iter_ < km._CHECK_EVERY
    assert_array_equal(result.labels.cpu().numpy(), sk.labels_)
    assert_allclose(
        prepared.from_prepared(result.centres).cpu().numpy(), sk.cluster_centers_, atol=1e-5
    )
    assert result.inertia == pytest.approx(sk.inertia_, rel=1e-5)


def test_progress_hears_the_iterations_at_each_read():
    x = np.random.default_rng(1).standard_normal((N_ROWS, N_EDGES)).astype(np.float32)
    prepared = km.Prepared(torch.as_tensor(x), "euclidean")
    start = prepared.to_prepared(torch.as_tensor(x[:K].copy()))  # unclustered: many iterations
    seen = []
    result = km.lloyd(prepared, start, max_iter=50, progress=seen.append)
    assert result.converged and result.n_iter > km._CHECK_EVERY
    assert seen[:-1] == [km._CHECK_EVERY * (i + 1) for i in range(len(seen) - 1)]
    assert seen[-1] == result.n_iter
    capped = []
    km.lloyd(prepared, start, max_iter=3, progress=capped.append)
    assert capped == [3]


def _numpy_lloyd(x, init, metric, max_iter=50):
    """MATLAB kmeans' definitions, in float64 numpy."""
    x = x.astype(np.float64)
    if metric == "correlation":
        x = x - x.mean(axis=1, keepdims=True)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        centres = init - init.mean(axis=1, keepdims=True)
        centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    else:
        centres = init.astype(np.float64)
    labels = None
    for _ in range(max_iter):
        if metric == "l1":
            d = np.abs(x[:, None, :] - centres[None, :, :]).sum(axis=2)
        else:
            c = centres / np.linalg.norm(centres, axis=1, keepdims=True)
            d = 1.0 - x @ c.T
        new = d.argmin(axis=1)
        if labels is not None and np.array_equal(new, labels):
            break
        labels = new
        reduce = np.median if metric == "l1" else np.mean
        centres = np.stack([reduce(x[labels == j], axis=0) for j in range(len(centres))])
    return labels, centres


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("metric", ["l1", "correlation"])
def test_other_metrics_equal_numpy(device, metric):
    x, init = _clustered(seed=3, dtype=np.float64)
    init = init + 0.3
    ref_labels, ref_centres = _numpy_lloyd(x, init, metric)
    labels, centres, _ = _lloyd(x, init, metric, device)
    assert_array_equal(labels, ref_labels)
    assert_allclose(centres, ref_centres, atol=1e-10)


def test_even_counts_take_the_mean_of_the_middle_values():
    x = torch.tensor([[0.0], [1.0], [5.0], [9.0]], dtype=torch.float64)
    centres = km.medians(x, torch.zeros(4, dtype=torch.int64), 1, torch.zeros(1, 1))
    assert float(centres[0, 0]) == 3.0


def test_empty_cluster_takes_the_farthest_row():
    x = np.array([[0.0], [0.1], [0.2], [10.0]])
    init = np.array([[0.1], [10.0], [100.0]])  # the third centre gets no row
    sk = KMeans(3, init=init, n_init=1, max_iter=5, tol=0.0, algorithm="lloyd").fit(x)
    labels, centres, _ = _lloyd(x, init, "euclidean", "cpu", max_iter=5)
    assert_array_equal(labels, sk.labels_)
    assert_allclose(centres, sk.cluster_centers_, atol=1e-12)


@pytest.mark.parametrize("metric", km.METRICS)
def test_kmeans_plusplus_seeds_one_row_per_cluster(metric):
    rng = np.random.default_rng(5)
    centres = rng.uniform(-1, 1, (K, N_EDGES))
    truth = rng.integers(0, K, N_ROWS)
    x = centres[truth] + 0.1 * rng.standard_normal((N_ROWS, N_EDGES))
    prepared = km.Prepared(torch.as_tensor(x), metric)
    seeds = km.kmeans_plusplus(prepared, K, torch.Generator().manual_seed(0))
    rows = prepared.x.to(torch.float64)
    picked = [int(torch.nonzero((rows == s).all(dim=1))[0]) for s in seeds]
    assert sorted(truth[picked].tolist()) == list(range(K))


def test_correlation_rejects_constant_windows():
    x = np.ones((5, 10))
    with pytest.raises(ValueError, match="constant window"):
        km.Prepared(torch.as_tensor(x), "correlation")


def test_triton_kernels_interpreted_on_cpu():
    """The Triton kernels themselves, run by Triton's interpreter, equal the torch path."""
    run_interpreted(Path(__file__).with_name("_triton_interpreted.py"), groups=("fp32", "int8"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_triton_kernels_on_cuda():
    pytest.importorskip("triton")
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        import _triton_interpreted as checks
    finally:
        sys.path.pop(0)
    checks.check_kernels("cuda")
    checks.check_lloyd("cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_half_assignment_on_cuda():
    """The half-precision pass compiled, both kernels: labels of the float32
    pass at near ties, the bound on adversarial rows, whole runs bit for
    bit, fallbacks."""
    pytest.importorskip("triton")
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        import _triton_interpreted as checks
    finally:
        sys.path.pop(0)
    checks.check_split_centres("cuda")
    for kernel in km._half.KERNELS:
        checks.check_half_near_ties("cuda", kernel)
        checks.check_half_correlation_ties("cuda", kernel)
        checks.check_half_bound("cuda", kernel)
        checks.check_half_lloyd("cuda", kernel)
    checks.check_half_fallback("cuda")
    checks.check_half_estimator("cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_int8_assignment_on_cuda():
    """The int8 pass compiled (integer tensor cores): the copy, the centres'
    parts, labels of the float32 pass at near ties, the bound on adversarial
    rows, whole runs bit for bit, fallbacks."""
    pytest.importorskip("triton")
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        import _triton_interpreted as checks
    finally:
        sys.path.pop(0)
    checks.check_int8_copy("cuda")
    checks.check_int8_split("cuda")
    checks.check_int8_near_ties("cuda")
    checks.check_int8_bound("cuda")
    checks.check_int8_lloyd("cuda")
    checks.check_int8_fallback("cuda")


def _empty_at_second_iteration(e=40, seed=0):
    """Windows whose third seed loses all its rows at the second iteration:
    two large groups at (0, 0) and (10, 0), two rows at (2, 0) and (8, 0),
    seeds (−5, 0), (15, 0), (5, 3); the first iteration moves the two
    outer seeds onto their groups, which then take the middle rows."""
    rng = np.random.default_rng(seed)
    x = 0.05 * rng.standard_normal((102, e))
    x[50:100, 0] += 10
    x[100, 0] += 2
    x[101, 0] += 8
    init = np.zeros((3, e))
    init[:, 0] = (-5, 15, 5)
    init[2, 1] = 3
    return x.astype(np.float32), init.astype(np.float32)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("assign", km.ASSIGNS)
def test_cuda_graph_iterations_equal_eager(assign, monkeypatch):
    """Lloyd replayed from a CUDA graph of one iteration equals the eager
    loop bit for bit: runs to convergence, stopped on tol, checked only at
    the end, and a run whose third centre empties at the second iteration
    (inside the graph's span: the span is undone and re-run with
    re-seeding)."""
    pytest.importorskip("triton")
    x, init = _clustered(seed=3)
    empty_x, empty_init = _empty_at_second_iteration()
    cases = [
        (x, init, "euclidean", dict(max_iter=50)),
        (x, init, "correlation", dict(max_iter=50)),
        (x, init, "euclidean", dict(max_iter=40, tol=1e-4)),
        (x, init, "euclidean", dict(max_iter=21, check_convergence=False)),
        (empty_x, empty_init, "euclidean", dict(max_iter=30)),
    ]
    for data, seeds, metric, options in cases:
        prepared = km.Prepared(torch.as_tensor(data, device="cuda"), metric)
        start = prepared.to_prepared(torch.as_tensor(seeds, device="cuda"))
        runs = {}
        for graphs in (False, True):
            monkeypatch.setattr(km, "GRAPHS", graphs)
            runs[graphs] = km.lloyd(prepared, start, use_triton=True, assign=assign, **options)
        a, b = runs[False], runs[True]
        assert torch.equal(a.labels, b.labels) and torch.equal(a.centres, b.centres)
        assert a.inertia == b.inertia and (a.n_iter, a.converged) == (b.n_iter, b.converged)
        assert (a.confirmed, a.coarse_passes) == (b.confirmed, b.coarse_passes)
    if torch.cuda.device_count() > 1:  # a run on another device than the current one
        prepared = km.Prepared(torch.as_tensor(x, device="cuda:1"), "euclidean")
        start = prepared.to_prepared(torch.as_tensor(init, device="cuda:1"))
        other = km.lloyd(prepared, start, use_triton=True, assign=assign, max_iter=50)
        monkeypatch.setattr(km, "GRAPHS", False)
        eager = km.lloyd(prepared, start, use_triton=True, assign=assign, max_iter=50)
        assert torch.equal(other.labels, eager.labels) and other.inertia == eager.inertia
        from connscale import DFCStates

        fits = [
            DFCStates(n_states=K, exemplars=False, n_init=2, random_state=0, device=d).fit([x])
            for d in ("cuda:0", "cuda:1")
        ]
        assert_array_equal(fits[0].labels_[0], fits[1].labels_[0])
    # The empty centre was re-seeded (as scikit-learn does), graphs or not.
    assert int(torch.bincount(b.labels, minlength=3).min()) > 0
    sk = KMeans(3, init=empty_init, n_init=1, max_iter=30, tol=0.0, algorithm="lloyd")
    assert_array_equal(b.labels.cpu().numpy(), sk.fit(empty_x).labels_)


def test_half_assignment_off_triton_is_the_torch_path():
    """Off CUDA (no interpreter) assign='half' runs the torch path: no copy, no count."""
    x, init = _clustered()
    prepared = km.Prepared(torch.as_tensor(x), "euclidean")
    init = prepared.to_prepared(torch.as_tensor(init))
    a = km.lloyd(prepared, init, max_iter=5, use_triton=False)
    b = km.lloyd(prepared, init, max_iter=5, use_triton=False, assign="half")
    assert torch.equal(a.labels, b.labels) and a.inertia == b.inertia
    assert b.confirmed is None and b.coarse_passes == 0
    with pytest.raises(ValueError, match="assign must be one of"):
        km.lloyd(prepared, init, assign="fp16")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("metric", km.METRICS)
def test_fused_lloyd_equals_sklearn_and_torch_on_cuda(metric):
    pytest.importorskip("triton")
    x, init = _clustered(seed=7)
    init = init + np.float32(0.3)
    labels, centres, _ = _lloyd(x, init, metric, "cuda", use_triton=True)
    ref_labels, ref_centres, _ = _lloyd(x, init, metric, "cuda", use_triton=False)
    assert_array_equal(labels, ref_labels)
    assert_allclose(centres, ref_centres, atol=1e-6)
    if metric == "euclidean":
        sk = KMeans(K, init=init, n_init=1, max_iter=50, tol=0.0, algorithm="lloyd").fit(x)
        assert_array_equal(labels, sk.labels_)
        assert_allclose(centres, sk.cluster_centers_, atol=1e-5)
