"""The maps' declared parameter constraints: one message naming the entry,
what was expected and what was got, before any work."""

import numpy as np
import pytest

import connscale
from connscale.maps.degree import compute_degree

X = np.random.default_rng(0).standard_normal((30, 6))


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda: connscale.degree_centrality(X, [0.1, 1.5], device="cpu"),
            r"The 'threshold' parameter of degree_centrality must be a float in the "
            r"range \[-1, 1\], "
            r"a non-empty sequence, each a float in the range \[-1, 1\], a str among \{'auto'\} "
            r"or None. Got \[0.1, 1.5\]",
        ),
        (
            lambda: connscale.degree_centrality(X, None, sparsity=(0.1, 0.0), device="cpu"),
            r"The 'sparsity' parameter of degree_centrality must be a float in the range \(0, 1\]",
        ),
        (
            lambda: connscale.degree_centrality(X, 0.2, absolute=1, device="cpu"),
            "The 'absolute' parameter of degree_centrality must be a bool. Got 1 instead.",
        ),
        (
            lambda: connscale.degree_centrality(X, 0.2, memory_limit="lots", device="cpu"),
            "The 'memory_limit' parameter of degree_centrality must be a number of bytes",
        ),
        (
            lambda: compute_degree(X, [0.2], both="yes", device="cpu"),
            "The 'both' parameter of compute_degree must be a bool. Got 'yes' instead.",
        ),
        (
            lambda: connscale.eigenvector_centrality(X, tol=0, device="cpu"),
            r"The 'tol' parameter of eigenvector_centrality must be a float in the "
            r"range \(0, inf\). "
            "Got 0 instead.",
        ),
        (
            lambda: connscale.eigenvector_centrality(X, max_iter=0.5, device="cpu"),
            r"The 'max_iter' parameter of eigenvector_centrality must be an int in the range "
            r"\[1, inf\). Got 0.5 instead.",
        ),
        (
            lambda: connscale.global_correlation(X, device="tpu"),
            "The 'device' parameter of global_correlation must be 'auto', 'cpu', 'cuda'",
        ),
        (
            lambda: connscale.seed_correlation(X, X[:, 0], radius=-2.0, device="cpu"),
            r"The 'radius' parameter of seed_correlation must be a float in the range \(0, inf\) "
            "or None. Got -2.0 instead.",
        ),
        (
            lambda: connscale.seed_correlation(X, X[:, 0], fisher_z="no", device="cpu"),
            "The 'fisher_z' parameter of seed_correlation must be a bool",
        ),
    ],
)
def test_bad_parameter_named_with_its_entry(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_several_thresholds_and_fractions_still_accepted():
    maps = connscale.degree_centrality(X, np.array([0.1, 0.2]), device="cpu")
    assert maps.shape == (2, 6)
    maps = connscale.degree_centrality(X, sparsity=(0.2, 1), device="cpu")
    assert maps.shape == (2, 6)
