"""float64 numpy references of the maps, and the tolerance rule for pairs
that sit within rounding of a threshold (shared with the interpreter script)."""

import numpy as np

NEAR = 1e-6


def simulated(n_timepoints=60, n_series=300, seed=0, dtype=np.float64):
    """Series with a factor structure, so that r spreads over [-0.5, 0.9]."""
    rng = np.random.default_rng(seed)
    factors = rng.standard_normal((n_timepoints, 6))
    loadings = rng.standard_normal((6, n_series)) * rng.uniform(0, 1, n_series)
    return (factors @ loadings + rng.standard_normal((n_timepoints, n_series))).astype(dtype)


def reference_degree(x, threshold, *, absolute=False):
    """counts, sums, near: per series, r > θ (|r|), their sum, pairs within NEAR of θ."""
    r = np.corrcoef(x.T)
    np.fill_diagonal(r, np.nan)
    v = np.abs(r) if absolute else r
    with np.errstate(invalid="ignore"):
        keep = v > threshold
        near = np.abs(v - threshold) < NEAR
    return keep.sum(1), np.where(keep, v, 0).sum(1), near.sum(1)


def check_counts(counts, ref, near):
    """Counts equal the reference except by the pairs within NEAR of θ."""
    diff = np.abs(np.asarray(counts) - ref)
    assert np.all(diff <= near), (diff.max(), near.sum())


def check_sums(sums, ref, near, threshold):
    """Weighted sums within 1e-4 relative, plus θ for each pair at the edge."""
    bound = 1e-4 * np.abs(ref) + near * (abs(threshold) + NEAR) + 1e-9
    assert np.all(np.abs(np.asarray(sums) - ref) <= bound)
