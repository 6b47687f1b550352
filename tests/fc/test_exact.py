"""The exact scheme (connscale.fc._exact): TF32 rounding, the bound ε, and
decisions equal to a float64 reference on data built to sit next to θ.

The torch exact functions run on the CPU only when forced (``FORCE_ON_CPU``):
the CPU computes precision='exact' in fp32. The Triton dispatch is checked
against a stand-in module with the agreed signatures.
"""

import math
import sys
import types
import warnings

import numpy as np
import pytest
import torch

import connscale
from connscale._validation import InvalidParameterError
from connscale.fc import _exact
from connscale.fc.normalize import normalize_series
from connscale.maps.degree import compute_degree


@pytest.fixture
def forced(monkeypatch):
    monkeypatch.setattr(_exact, "FORCE_ON_CPU", True)


def _tf32_reference(x: np.ndarray) -> np.ndarray:
    """Round to nearest at 10 explicit mantissa bits, ties away from zero, in
    float64 (subnormals on float32's fixed grid), then as float32."""
    xd = x.astype(np.float64)
    _, e = np.frexp(np.abs(xd))  # |x| = m 2^e, m in [0.5, 1)
    quantum = np.maximum(np.ldexp(1.0, e - 11), 2.0**-136)
    with np.errstate(over="ignore", invalid="ignore"):
        rounded = np.sign(xd) * np.floor(np.abs(xd) / quantum + 0.5) * quantum
        rounded = np.where(np.isfinite(xd), rounded, xd).astype(np.float32)
    return rounded


def test_tf32_round_equals_a_float64_reference():
    rng = np.random.default_rng(0)
    magnitudes = np.exp(rng.uniform(-80, 80, 20000))
    x = (rng.standard_normal(20000) * magnitudes).astype(np.float32)
    one = np.float32(1.0)
    ties = np.array([1 + 2.0**-11, 1 + 3 * 2.0**-11, -(1 + 2.0**-11)], dtype=np.float32)
    special = np.array(
        [0.0, -0.0, np.inf, -np.inf, np.nan, 3.4028235e38, 1e-40, -3e-42, one], dtype=np.float32
    )
    x = np.concatenate([x, ties, special])
    got = _exact.tf32_round(torch.from_numpy(x)).numpy()
    np.testing.assert_array_equal(got, _tf32_reference(x))
    # ties go away from zero
    assert got[-len(special) - 3] == np.float32(1 + 2.0**-10)
    assert got[-len(special) - 1] == -np.float32(1 + 2.0**-10)
    with pytest.raises(TypeError, match="float32"):
        _exact.tf32_round(torch.zeros(2, dtype=torch.float64))


def test_split_parts_are_tf32_and_add_up():
    u = torch.from_numpy(np.random.default_rng(1).standard_normal((30, 70)).astype(np.float32))
    hi, lo = _exact.split_tf32(u)
    for part in (hi, lo):
        assert not (part.view(torch.int32) & 0x1FFF).any()  # 13 low bits clear
    assert ((hi.double() + lo.double() - u.double()).abs() <= 2.0**-22 * u.double().abs()).all()


def _adversarial(case: str) -> np.ndarray:
    """(T, N) series meant to stress the bound."""
    rng = np.random.default_rng(abs(hash(case)) % 2**32)
    if case == "long":
        return rng.standard_normal((5000, 40))
    if case == "mixed-magnitudes":
        x = rng.standard_normal((1001, 40)) * np.exp(rng.uniform(-20, 20, 40))
        x[rng.integers(0, 1001, 4), :5] *= 1e6  # a few huge values
        return x
    if case == "odd-length":
        return rng.standard_normal((997, 40)) + 1e3  # T not a multiple of 32, large offset
    if case == "near-duplicates":
        base = rng.standard_normal((1200, 1))
        return base + 1e-4 * rng.standard_normal((1200, 40))
    base = rng.standard_normal((777, 1))  # r close to +1 and -1
    signs = np.where(np.arange(40) % 2, 1.0, -1.0)
    return base * signs + 1e-3 * rng.standard_normal((777, 40))


@pytest.mark.parametrize(
    "case", ["long", "mixed-magnitudes", "odd-length", "near-duplicates", "plus-minus-one"]
)
def test_margin_bounds_the_tf32_products(case):
    x = _adversarial(case)
    u, _ = normalize_series(torch.from_numpy(x), dtype=torch.float32)
    hi, lo = _exact.split_tf32(u)
    margin = _exact.decision_margin(u)
    approximate = (hi @ hi.T).double().numpy()
    ud = u.double().numpy()
    reference = np.corrcoef(x.T)
    # The proven statement (against the real products of U), and against float64.
    assert np.abs(approximate - ud @ ud.T).max() <= margin
    assert np.abs(approximate - reference).max() <= margin
    corrected = (hi @ hi.T + lo @ hi.T + hi @ lo.T).double().numpy()
    fp32 = (u @ u.T).double().numpy()
    error, fp32_error = np.abs(corrected - reference).max(), np.abs(fp32 - reference).max()
    assert error <= max(2e-6, 2 * fp32_error), (error, fp32_error)


def test_margin_formula():
    u = torch.nn.functional.normalize(torch.randn(5, 1200), dim=1)
    u[2] = float("nan")
    gamma = 1199 * 2.0**-23 / (1 - 1199 * 2.0**-23)
    s = float(u[~torch.isnan(u[:, 0])].double().square().sum(1).max())
    expected = s * (2.0**-11 * (2 + 2.0**-11) + gamma * (1 + 2.0**-11) ** 2)
    assert _exact.decision_margin(u) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize("t", [20, 40, 150, 1200])
def test_correction_margin_counts_chained_additions(t):
    from connscale.fc._kernel_helpers import accumulation_gamma, correction_margin_tensor

    u = torch.nn.functional.normalize(torch.randn(4, t, dtype=torch.float64), dim=1)
    block_k = 32
    steps = -(-t // block_k)
    hi_terms, cross_terms = max(t, block_k + steps), max(2 * t, 3 * block_k + steps - 1)
    s = float(u.square().sum(1).max())
    grow = (1 + 2.0**-11) ** 2
    expected = s * (
        3 * 2.0**-22 * (1 + 2.0**-10)
        + accumulation_gamma(hi_terms) * grow
        + accumulation_gamma(cross_terms) * 2.0**-10 * grow
        + 2.0**-23
    )
    chained = float(correction_margin_tensor(u, block_k))
    assert chained == pytest.approx(expected, rel=1e-12)
    # never below the separate chains' bound; above it only for short series
    plain = float(correction_margin_tensor(u))
    assert chained >= plain
    assert (chained > plain) == (t < 48)


# --- data next to θ ------------------------------------------------------------


def _near_threshold_series(thetas, n_pairs=120, t=240, seed=0, spread=1e-4):
    """(T, 2·P) series: pair p = (2p, 2p + 1) has correlation θ + δ (θ cycling
    through ``thetas``, δ uniform in ±``spread``; a few δ within ±1e-7)."""
    rng = np.random.default_rng(seed)
    x = np.empty((t, 2 * n_pairs))
    for p in range(n_pairs):
        theta = thetas[p % len(thetas)]
        delta = rng.uniform(-spread, spread) if p % 10 else rng.uniform(-1e-7, 1e-7)
        c = theta + delta
        a = rng.standard_normal(t)
        a -= a.mean()
        a /= np.linalg.norm(a)
        z = rng.standard_normal(t)
        z -= z.mean()
        z -= (z @ a) * a
        z /= np.linalg.norm(z)
        scale = np.exp(rng.uniform(-3, 3))
        x[:, 2 * p] = 10 + scale * a
        x[:, 2 * p + 1] = -5 + 0.1 * scale * (c * a + math.sqrt(1 - c * c) * z)
    return x


def _upper(reference: np.ndarray) -> np.ndarray:
    return np.triu(np.ones(reference.shape, dtype=bool), 1)


def test_near_threshold_data_is_near_threshold():
    x = _near_threshold_series([0.5])
    r = np.corrcoef(x.T)
    pairs = r[np.arange(0, 240, 2), np.arange(1, 240, 2)]
    assert (np.abs(pairs - 0.5) < 1e-4).all() and (np.abs(pairs - 0.5) < 1e-6).sum() >= 10


@pytest.mark.parametrize("absolute", [False, True])
def test_exact_sparse_matches_float64_except_ambiguous_pairs(forced, monkeypatch, absolute):
    theta = 0.5
    x = _near_threshold_series([theta, -theta] if absolute else [theta])
    reference = np.corrcoef(x.T)
    upper = _upper(reference)
    value = np.abs(reference) if absolute else reference
    expected = upper & (value >= theta)
    ambiguous = upper & (np.abs(value - theta) <= 1e-6)
    result, (_, _, confirmation) = connscale.fc.static.compute_correlation(
        x, kind="sparse", threshold=theta, absolute=absolute, device="cpu", memory_limit="2MB"
    )
    got = result.toarray() != 0
    differ = got != expected
    assert not (differ & ~ambiguous).any()
    assert differ.sum() <= ambiguous.sum()
    kept = got & expected
    np.testing.assert_allclose(result.toarray()[kept], reference[kept], atol=2e-6, rtol=0)
    # Every pair within 1e-6 of θ was recomputed from its rows, and nothing far from θ
    # (issue 26: entries are confirmed, not tiles).
    near = upper & (np.abs(value - theta) <= 1e-4)
    assert ambiguous.sum() <= confirmation.n_confirmed <= near.sum()
    assert confirmation.n_entries == upper.sum() and confirmation.n_corrected_tiles >= 1
    # The same decisions as the fp32 path, up to the ambiguous pairs.
    monkeypatch.setattr(_exact, "FORCE_ON_CPU", False)
    fp32 = connscale.correlation(x, kind="sparse", threshold=theta, absolute=absolute, device="cpu")
    assert not (((fp32.toarray() != 0) != got) & ~ambiguous).any()


def test_tf32_products_disagree_with_float64():
    """What precision='tf32' computes on CUDA (TF32 products), measured here
    on the CPU: it flips pairs near θ that the exact scheme decides right."""
    theta = 0.5
    x = _near_threshold_series([theta])
    reference = np.corrcoef(x.T)
    upper = _upper(reference)
    u, _ = normalize_series(torch.from_numpy(x), dtype=torch.float32)
    hi = _exact.tf32_round(u)
    tf32 = upper & ((hi @ hi.T).double().numpy() >= theta)
    expected = upper & (reference >= theta)
    ambiguous = upper & (np.abs(reference - theta) <= 1e-6)
    flipped = int(((tf32 != expected) & ~ambiguous).sum())
    built = int((upper & (np.abs(reference - theta) <= 1e-4)).sum())
    assert flipped > 0, f"TF32 products flipped {flipped} of {built} pairs within 1e-4 of θ"
    print(f"TF32 products flipped {flipped} of {built} pairs within 1e-4 of θ")


def _reference_degree(reference, thetas, absolute):
    value = np.abs(reference) if absolute else reference
    off = ~np.eye(reference.shape[0], dtype=bool)
    counts = np.array([((value > t) & off).sum(1) for t in thetas])
    sums = np.array([np.where((value > t) & off, value, 0).sum(1) for t in thetas])
    ambiguous = np.array([((np.abs(value - t) <= 1e-6) & off).sum(1) for t in thetas])
    return counts, sums, ambiguous


@pytest.mark.parametrize("absolute", [False, True])
def test_exact_degree_matches_float64_except_ambiguous_pairs(forced, absolute):
    thetas = [0.3, 0.6]
    x = _near_threshold_series([0.3, -0.6, 0.6] if absolute else thetas, n_pairs=150, seed=3)
    reference = np.corrcoef(x.T)
    counts, sums, ambiguous = _reference_degree(reference, thetas, absolute)
    (binary, weighted), info = compute_degree(
        x, thetas, absolute=absolute, device="cpu", both=True, memory_limit="1MB"
    )
    assert info["method"] == "exact-torch" and info["precision"] == "exact"
    assert info["confirmation"]["n_confirmed"] >= ambiguous.sum() // 2
    assert info["confirmation"]["n_tiles"] > 1  # several row blocks
    # Binary degree alone corrects only the tiles with entries near θ.
    alone, alone_info = compute_degree(x, thetas, absolute=absolute, device="cpu")
    assert alone_info["confirmation"]["n_confirmed"] >= ambiguous.sum() // 2
    assert alone_info["confirmation"]["n_corrected_tiles"] <= info["confirmation"]["n_tiles"]
    for found in (binary, alone):
        difference = np.abs(found - counts)
        assert (difference <= ambiguous).all()
        assert difference.sum() <= ambiguous.sum()
    same = np.abs(binary - counts) == 0
    np.testing.assert_allclose(weighted[same], sums[same], atol=1e-5, rtol=1e-6)


def test_exact_sparsity_threshold_is_the_exact_quantile(forced, monkeypatch):
    x = _near_threshold_series([0.5], n_pairs=100, seed=5)
    reference = np.corrcoef(x.T)
    values = np.sort(reference[_upper(reference)])[::-1]
    fractions = [0.002, 0.01]
    binary, info = compute_degree(x, None, sparsity=fractions, device="cpu", memory_limit="1MB")
    assert info["method"] == "exact-torch"
    for fraction, found, degree in zip(fractions, info["thresholds"], binary):
        k = round(fraction * values.size)
        assert abs(found - values[k - 1]) <= 2e-6
        # r >= the k-th value: k pairs, and the float32 ties with it
        assert 2 * k <= degree.sum() <= 2 * (values >= found - 1e-6).sum()
    monkeypatch.setattr(_exact, "FORCE_ON_CPU", False)
    fp32_binary, fp32 = compute_degree(x, None, sparsity=fractions, device="cpu")
    np.testing.assert_allclose(info["thresholds"], fp32["thresholds"], atol=2e-6, rtol=0)
    for found, exact_degree, fp32_degree in zip(info["thresholds"], binary, fp32_binary):
        ambiguous = (np.abs(values - found) <= 1e-6).sum()
        assert abs(exact_degree.sum() - fp32_degree.sum()) <= 2 * ambiguous


def test_exact_dynamic_sparse_matches_fp32(forced, monkeypatch):
    x = _near_threshold_series([0.4], n_pairs=30, t=200, seed=7)
    kwargs = {"kind": "sparse", "threshold": 0.4, "device": "cpu"}
    exact = connscale.dynamic_correlation(x, 200, 1, **kwargs)
    reference = np.corrcoef(x.T)
    ambiguous = _upper(reference) & (np.abs(reference - 0.4) <= 1e-6)
    assert exact.confirmation.n_confirmed >= ambiguous.sum()
    assert exact.parameters["precision"] == "exact"
    expected = _upper(reference) & (reference >= 0.4)
    got = exact[0].toarray() != 0
    assert not ((got != expected) & ~ambiguous).any()
    windows = connscale.dynamic_correlation(x[:120], 40, 20, absolute=True, **kwargs)
    monkeypatch.setattr(_exact, "FORCE_ON_CPU", False)
    plain = connscale.dynamic_correlation(x[:120], 40, 20, absolute=True, **kwargs)
    assert plain.confirmation is None
    for i in range(len(plain)):
        assert (windows[i] != 0).toarray().sum() == (plain[i] != 0).toarray().sum()
        np.testing.assert_allclose(windows[i].toarray(), plain[i].toarray(), atol=2e-6)


# --- choice and dispatch --------------------------------------------------------


def test_exact_method_choice(monkeypatch):
    u = torch.zeros(3, 4)
    assert _exact.exact_method(u, "exact") is None  # the CPU runs fp32
    monkeypatch.setattr(_exact, "FORCE_ON_CPU", True)
    assert _exact.exact_method(u, "exact") in ("torch", "triton")
    assert _exact.exact_method(u, "fp32") is None
    assert _exact.exact_method(u.double(), "exact") is None
    monkeypatch.setattr(_exact, "use_triton", lambda *a, **k: True)
    assert _exact.exact_method(u, "exact") == "triton"


@pytest.fixture
def fake_triton(monkeypatch):
    """A stand-in connscale.fc._exact_triton with the agreed signatures,
    computed by the torch exact functions; records its calls."""
    calls = []
    module = types.ModuleType("connscale.fc._exact_triton")

    def degree_exact_triton(u, thresholds, *, absolute, weighted, margin, stats):
        calls.append(("degree", margin))
        assert margin == _exact.decision_margin(u)
        return _exact.degree_exact_torch(
            u, thresholds, absolute=absolute, weighted=weighted, block_rows=16, stats=stats
        )

    def compact_exact_triton(
        u,
        threshold,
        *,
        absolute,
        values,
        columns,
        row_counts,
        staged_values,
        staged_columns,
        stats,
        upper=math.inf,
    ):
        calls.append(("compact", values.numel()))
        assert staged_values.numel() >= values.numel() and staged_columns.dtype == torch.int32
        kept, cols, counts = _exact.compact_exact_torch(
            u, threshold, absolute=absolute, block_rows=16, stats=stats, upper=upper
        )
        room = min(kept.numel(), values.numel())
        values[:room], columns[:room] = kept[:room], cols[:room]
        row_counts.copy_(counts)
        return torch.tensor([kept.numel()], dtype=torch.int64)

    module.degree_exact_triton = degree_exact_triton
    module.compact_exact_triton = compact_exact_triton
    monkeypatch.setitem(sys.modules, "connscale.fc._exact_triton", module)
    monkeypatch.setattr(_exact, "FORCE_ON_CPU", True)
    monkeypatch.setattr(_exact, "use_triton", lambda *a, **k: True)
    return calls


def test_triton_dispatch_degree_and_sparsity(fake_triton):
    x = _near_threshold_series([0.5], n_pairs=40, seed=9)
    (binary, weighted), info = compute_degree(x, [0.5], device="cpu", both=True)
    assert info["method"] == "exact-triton"
    reference = np.corrcoef(x.T)
    counts, _, ambiguous = _reference_degree(reference, [0.5], False)
    assert (np.abs(binary - counts[0]) <= ambiguous[0]).all()
    _, info = compute_degree(x, None, sparsity=0.01, device="cpu")
    values = np.sort(reference[_upper(reference)])[::-1]
    assert abs(info["thresholds"][0] - values[round(0.01 * values.size) - 1]) <= 2e-6
    assert {kind for kind, _ in fake_triton} == {"degree", "compact"}


def test_triton_dispatch_static_sparse_grows_its_buffers(fake_triton, monkeypatch):
    x = _near_threshold_series([0.2], n_pairs=40, seed=11)
    result, (_, _, confirmation) = connscale.fc.static.compute_correlation(
        x, kind="sparse", threshold=-0.5, device="cpu"
    )
    capacities = [size for kind, size in fake_triton if kind == "compact"]
    assert len(capacities) == 1 or capacities[-1] > capacities[0]
    monkeypatch.setattr(_exact, "FORCE_ON_CPU", False)
    plain = connscale.correlation(x, kind="sparse", threshold=-0.5, device="cpu")
    assert result.nnz == plain.nnz
    np.testing.assert_allclose(result.toarray(), plain.toarray(), atol=2e-6)
    assert confirmation.n_entries == 80 * 79 // 2


def test_compact_exact_redoes_an_overflow(fake_triton):
    u = torch.nn.functional.normalize(torch.randn(50, 30), dim=1)
    stats = _exact.new_stats("cpu")
    values, columns, counts = _exact.compact_exact(
        u, -1.0, absolute=False, block_rows=16, stats=stats, method="triton", capacity=10
    )
    assert values.numel() == 50 * 49 // 2 == int(counts.sum())
    assert [size for _, size in fake_triton] == [10, values.numel()]
    assert int(stats[2]) == 4  # the first try's counts were undone
    assert (
        _exact.compact_exact(
            u,
            -1.0,
            absolute=False,
            block_rows=16,
            stats=stats,
            method="triton",
            capacity=10,
            max_capacity=100,
        )
        is None
    )


# --- parameters -------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda x: connscale.correlation(x, kind="sparse", threshold=0.5, precision="fp16"),
        lambda x: connscale.dynamic_correlation(x, 10, precision="float32"),
        lambda x: connscale.degree_centrality(x, 0.5, precision="TF32"),
    ],
)
def test_precision_is_validated(call):
    x = np.random.default_rng(0).standard_normal((30, 5))
    with pytest.raises(InvalidParameterError, match="precision"):
        call(x)


def test_precision_tf32_warns_nothing():
    x = np.random.default_rng(0).standard_normal((30, 5))
    result = connscale.dynamic_correlation(x, 10, device="cpu", precision="tf32")
    assert result.parameters["precision"] == "tf32"
    result = connscale.dynamic_correlation(x, 10, device="cpu")
    assert result.parameters["precision"] == "exact"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dense = connscale.correlation(x, device="cpu", precision="tf32")
    np.testing.assert_allclose(dense, np.corrcoef(x.T), atol=1e-6)
    assert not torch.backends.cuda.matmul.allow_tf32  # restored


def test_confirmation_as_dict():
    stats = _exact.new_stats("cpu")
    stats += torch.tensor([3, 1, 4])
    confirmation = _exact.Confirmation.from_stats(stats, 300)
    assert confirmation.as_dict() == {
        "n_entries": 300,
        "n_confirmed": 3,
        "fraction_confirmed": 0.01,
        "n_tiles": 4,
        "n_corrected_tiles": 1,
        "fraction_corrected_tiles": 0.25,
    }
    assert _exact.Confirmation(0, 0, 0, 0).fraction_confirmed == 0.0


# --- CUDA (the GPU machine) ---------------------------------------------------

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@cuda
@pytest.mark.parametrize("absolute", [False, True])
def test_cuda_exact_equals_float64_except_ambiguous_pairs(absolute):
    theta = 0.5
    x = _near_threshold_series([theta, -theta] if absolute else [theta], n_pairs=300, seed=13)
    reference = np.corrcoef(x.T)
    upper = _upper(reference)
    value = np.abs(reference) if absolute else reference
    ambiguous = upper & (np.abs(value - theta) <= 1e-6)
    result, (_, _, confirmation) = connscale.fc.static.compute_correlation(
        x, kind="sparse", threshold=theta, absolute=absolute, device="cuda"
    )
    assert confirmation is not None and confirmation.n_confirmed >= ambiguous.sum()
    assert not (((result.toarray() != 0) != (upper & (value >= theta))) & ~ambiguous).any()
    windows = connscale.dynamic_correlation(
        x, x.shape[0], kind="sparse", threshold=theta, absolute=absolute, device="cuda"
    )
    assert windows.confirmation.n_confirmed >= ambiguous.sum()
    assert not (((windows[0].toarray() != 0) != (upper & (value >= theta))) & ~ambiguous).any()
    counts, sums, degree_ambiguous = _reference_degree(reference, [theta], absolute)
    (binary, weighted), info = compute_degree(
        x, [theta], absolute=absolute, device="cuda", both=True
    )
    assert info["method"] == "exact-triton"
    assert info["confirmation"]["n_confirmed"] >= ambiguous.sum()
    assert (np.abs(binary - counts) <= degree_ambiguous).all()
    fp32, _ = compute_degree(x, [theta], absolute=absolute, device="cuda", precision="fp32")
    assert (np.abs(binary[0] - fp32[0]) <= degree_ambiguous[0]).all()
