"""Run under TRITON_INTERPRET=1 by test_exact_triton.py (and directly on CUDA):
the exact TF32 degree and compaction kernels against float64 references.
Prints 'ok' when every check passes."""

import math
import sys

import numpy as np
import torch

from connscale._compute.device import use_triton
from connscale.fc import _exact_triton
from connscale.fc._exact import decision_margin
from connscale.fc._kernel_helpers import split_tf32
from connscale.fc.normalize import normalize_series

try:
    from ._exact_cases import (
        assert_unbiased,
        check_degree,
        near_threshold_series,
        planted_flips,
        planted_pairs,
        reference_r,
        upper_mask,
    )
except ImportError:  # run as a script
    from _exact_cases import (
        assert_unbiased,
        check_degree,
        near_threshold_series,
        planted_flips,
        planted_pairs,
        reference_r,
        upper_mask,
    )


def csr_reference(r, threshold, upper, absolute):
    v = np.abs(r) if absolute else r
    keep = (v >= threshold) & (v < upper) & upper_mask(r.shape[0])
    rows, cols = np.nonzero(keep)
    return rows, cols, v[rows, cols]


def check_compact(u, r, threshold, *, absolute, upper=math.inf, overflow=False):
    n = u.shape[0]
    capacity = n * (n - 1) // 2
    dev = u.device
    values = torch.empty(capacity, device=dev)
    columns = torch.empty(capacity, dtype=torch.int32, device=dev)
    row_counts = torch.empty(n, dtype=torch.int64, device=dev)
    staged_v = torch.empty(capacity, device=dev)
    staged_c = torch.empty(capacity, dtype=torch.int32, device=dev)
    stats = torch.zeros(3, dtype=torch.int64, device=dev)
    cursor = _exact_triton.compact_exact_triton(
        u,
        threshold,
        absolute=absolute,
        values=values,
        columns=columns,
        row_counts=row_counts,
        staged_values=staged_v,
        staged_columns=staged_c,
        stats=stats,
        upper=upper,
    )
    nnz = int(cursor)
    assert nnz == int(row_counts.sum())
    rows = np.repeat(np.arange(n), row_counts.cpu().numpy())
    cols = columns[:nnz].cpu().numpy()
    vals = values[:nnz].cpu().numpy()
    ref_rows, ref_cols, ref_vals = csr_reference(r, threshold, upper, absolute)
    v = np.abs(r) if absolute else r
    with np.errstate(invalid="ignore"):
        near = (np.abs(v - threshold) <= 1e-6) | (np.abs(v - upper) <= 1e-6)
    got = set(zip(rows.tolist(), cols.tolist()))
    want = set(zip(ref_rows.tolist(), ref_cols.tolist()))
    for i, j in got ^ want:
        assert near[i, j], f"pair ({i}, {j}) r={r[i, j]!r} decided wrongly"
    for a, b in zip(rows, cols):
        assert b > a
    order = np.lexsort((cols, rows))
    assert np.array_equal(order, np.arange(nnz)), "not row-major"
    np.testing.assert_allclose(vals, r[rows, cols], rtol=0, atol=2e-6)  # signed values
    if overflow:
        check_overflow(u, threshold, absolute=absolute, upper=upper, nnz=nnz)
    return stats.cpu().numpy(), len(got ^ want), int(near[upper_mask(n)].sum())


def check_overflow(u, threshold, *, absolute, upper, nnz):
    """Buffers for half the kept entries: the count is still returned, nothing written past them."""
    n, dev = u.shape[0], u.device
    capacity, guard = nnz // 2, 64
    staged_v = torch.full((capacity + guard,), 7.0, device=dev)
    staged_c = torch.full((capacity + guard,), -7, dtype=torch.int32, device=dev)
    values = torch.full((capacity + guard,), 7.0, device=dev)
    columns = torch.full((capacity + guard,), -7, dtype=torch.int32, device=dev)
    cursor = _exact_triton.compact_exact_triton(
        u,
        threshold,
        absolute=absolute,
        values=values[:capacity],
        columns=columns[:capacity],
        row_counts=torch.empty(n, dtype=torch.int64, device=dev),
        staged_values=staged_v[:capacity],
        staged_columns=staged_c[:capacity],
        stats=torch.zeros(3, dtype=torch.int64, device=dev),
        upper=upper,
    )
    assert int(cursor) == nnz
    for buffer, fill in ((staged_v, 7.0), (values, 7.0), (staged_c, -7), (columns, -7)):
        assert bool((buffer[capacity:] == fill).all()), "written past the capacity"


def main(device):
    theta = 0.5
    x = near_threshold_series(120, 75, theta, n_free=50, seed=3)  # T not a multiple of 32
    x[:, 7] = 4.0  # a constant series: NaN row
    u, constant = normalize_series(torch.from_numpy(x), dtype=torch.float32)
    u = u.to(device)
    assert use_triton(u, float32=True), "neither CUDA nor the interpreter"
    keep = ~constant.numpy()
    r = np.full((x.shape[1],) * 2, np.nan)
    r[np.ix_(keep, keep)] = reference_r(x[:, keep])
    margin = decision_margin(u)
    # the bound: every r̃ = hi·hiᵀ within ε of float64 r
    hi, lo = split_tf32(u)
    n, t = u.shape
    approx = (hi.double() @ hi.double().T).cpu().numpy()
    finite = np.isfinite(r)
    assert np.max(np.abs(approx - r)[finite]) <= margin
    # the fp16 operands hold hi and lo exactly, scaled by 2¹⁵
    ops = _exact_triton.padded_split(u)
    k = ops.k_half
    for part, half in ((hi, ops.a[:n, k : k + t]), (lo, ops.a[:n, :t])):
        torch.testing.assert_close(half.float(), part * 2.0**15, rtol=0, atol=0, equal_nan=True)
    # the pairs within 1e-6 of θ: recomputed from their rows whatever the margin
    must = int((np.abs(r - theta) <= 1e-6)[finite & upper_mask(n)].sum())
    for absolute in (False, True):
        thresholds = [theta, 0.2] if not absolute else [theta]
        stats = torch.zeros(3, dtype=torch.int64, device=u.device)
        counts, sums = _exact_triton.degree_exact_triton(
            u,
            torch.tensor(thresholds),
            absolute=absolute,
            weighted=True,
            margin=margin,
            stats=stats,
        )
        assert counts.shape == (len(thresholds), n)
        assert int(counts[:, 7].sum()) == 0
        rk = np.where(finite, r, -np.inf if not absolute else 0.0)
        for i, t in enumerate(thresholds):
            check_degree(counts[i].cpu().numpy(), sums[i].cpu().numpy(), rk, t, absolute=absolute)
        assert int(stats[0]) >= must, "the planted pairs were not confirmed"
        # a Triton without host tensor descriptors: the weighted tiles in two passes
        descriptor, _exact_triton.TensorDescriptor = _exact_triton.TensorDescriptor, None
        try:
            two_pass = _exact_triton.degree_exact_triton(
                u,
                torch.tensor(thresholds),
                absolute=absolute,
                weighted=True,
                margin=margin,
                stats=torch.zeros(3, dtype=torch.int64, device=u.device),
            )
        finally:
            _exact_triton.TensorDescriptor = descriptor
        assert torch.equal(two_pass[0], counts)
        torch.testing.assert_close(two_pass[1], sums, rtol=1e-6, atol=1e-6)
        binary, _ = _exact_triton.degree_exact_triton(
            u,
            torch.tensor(thresholds),
            absolute=absolute,
            weighted=False,
            margin=margin,
            stats=torch.zeros(3, dtype=torch.int64, device=u.device),
        )
        assert torch.equal(binary, counts)
        # an entry within ε of two thresholds is confirmed once
        counted = []
        for pair in ([theta], [theta, theta + 1e-6]):
            stats = torch.zeros(3, dtype=torch.int64, device=u.device)
            _exact_triton.degree_exact_triton(
                u, torch.tensor(pair), absolute=absolute, weighted=False, margin=margin, stats=stats
            )
            counted.append(int(stats[0]))
        assert counted[0] >= 100 and counted[0] <= counted[1] <= counted[0] + 5, counted
        rk = np.where(finite, r, -np.inf)
        stats, wrong, near = check_compact(u, rk, theta, absolute=absolute)
        assert stats[0] >= must
        check_compact(u, rk, 0.3, absolute=absolute, upper=0.5005, overflow=not absolute)
    check_planted(device)
    # the other tiles: one pass (r₃ at once) where the default is two (r̃ first, the
    # correction where a tile holds kept values), and two where it is one
    one_pass = _exact_triton.DEGREE_ONE_PASS, _exact_triton.COMPACT_ONE_PASS
    _exact_triton.DEGREE_ONE_PASS = not one_pass[0]
    _exact_triton.COMPACT_ONE_PASS = not one_pass[1]
    try:
        check_planted(device)
    finally:
        _exact_triton.DEGREE_ONE_PASS, _exact_triton.COMPACT_ONE_PASS = one_pass
    print("ok")


def check_planted(device):
    """Pairs planted at θ ± 5e-7 over the index: kept above θ, dropped below (issue 26).

    300 rows: the compaction's 64 × 128 tiles include tiles wholly inside the
    upper triangle (their own copy of the epilogue), some holding planted pairs.
    """
    theta = 0.25
    u, first, second, r = planted_pairs(150, 300, theta, seed=4)
    bm, bn = _exact_triton.COMPACT_BLOCK_M, _exact_triton.BLOCK_N
    i, j = np.minimum(first, second), np.maximum(first, second)
    interior = (j // bn * bn >= (i // bm + 1) * bm) & ((j // bn + 1) * bn <= len(u))
    assert interior.sum() >= 20 and (~interior).sum() >= 20, interior.sum()
    u = torch.from_numpy(u).to(device)
    n = u.shape[0]
    stats = torch.zeros(3, dtype=torch.int64, device=device)
    counts, _ = _exact_triton.degree_exact_triton(
        u,
        torch.tensor([theta]),
        absolute=False,
        weighted=False,
        margin=decision_margin(u),
        stats=stats,
    )
    kept = counts[0].cpu().numpy()[first] == 1
    assert_unbiased(*planted_flips(kept, r, theta, inclusive=False), 150)
    assert int(stats[0]) >= 150  # every planted pair is within ε of θ: recomputed
    rk = (u.double() @ u.double().T).cpu().numpy()
    _, wrong, _ = check_compact(u, rk, theta, absolute=False)
    assert wrong == 0, wrong
    assert n == 300


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "cpu")
