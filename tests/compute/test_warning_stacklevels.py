"""Every warning of a public entry points at the user's line (this file),
whatever wrappers (validate_params) and helpers lie in between."""

import numpy as np
import pytest

import connscale
from connscale._validation import user_stacklevel
from connscale.fc.normalize import ConstantSeriesWarning
from connscale.networks._r1dl import ConvergenceWarning


def _constant_series():
    x = np.random.default_rng(0).standard_normal((30, 5))
    x[:, 1] = 2.0
    return x


CALLS = [
    (
        "correlation",
        ConstantSeriesWarning,
        lambda: connscale.correlation(_constant_series(), device="cpu"),
    ),
    (
        "dynamic_correlation",
        ConstantSeriesWarning,
        lambda: connscale.dynamic_correlation(_constant_series(), 8, 4, device="cpu"),
    ),
    (
        "dynamic_correlation rank",
        UserWarning,
        lambda: connscale.dynamic_correlation(
            np.random.default_rng(1).standard_normal((30, 12)),
            8,
            4,
            kind="lowrank",
            rank=8,
            device="cpu",
        ),
    ),
    (
        "pairwise_dfc",
        ConstantSeriesWarning,
        lambda: connscale.pairwise_dfc(_constant_series()[None], 8, 4, device="cpu"),
    ),
    (
        "degree_centrality",
        ConstantSeriesWarning,
        lambda: connscale.degree_centrality(_constant_series(), 0.1, device="cpu"),
    ),
    (
        "global_correlation",
        ConstantSeriesWarning,
        lambda: connscale.global_correlation(_constant_series(), device="cpu"),
    ),
    (
        "eigenvector_centrality",
        RuntimeWarning,
        lambda: connscale.eigenvector_centrality(
            np.random.default_rng(2).standard_normal((30, 6)), max_iter=1, tol=1e-12, device="cpu"
        ),
    ),
    (
        "r1dl",
        ConvergenceWarning,
        lambda: connscale.r1dl(
            np.random.default_rng(3).standard_normal((20, 15)),
            2,
            3,
            max_iter=1,
            tol=1e-12,
            random_state=0,
            device="cpu",
        ),
    ),
    (
        "r1dl empty atoms",
        UserWarning,
        lambda: connscale.r1dl(np.zeros((20, 10)), 2, 3, random_state=0, device="cpu"),
    ),
    (
        "R1DL.fit",
        ConvergenceWarning,
        lambda: connscale.R1DL(2, 3, max_iter=1, tol=1e-12, random_state=0, device="cpu").fit(
            np.random.default_rng(5).standard_normal((20, 15))
        ),
    ),
    (
        "DFCStates.fit exemplars",
        RuntimeWarning,
        lambda: connscale.DFCStates(4, random_state=0, device="cpu", n_init=1).fit(
            np.random.default_rng(6).standard_normal((4, 6))
        ),
    ),
]


@pytest.mark.parametrize("category, call", [c[1:] for c in CALLS], ids=[c[0] for c in CALLS])
def test_warning_points_at_the_callers_line(category, call):
    with pytest.warns(category) as record:
        call()
    ours = [w for w in record if issubclass(w.category, category)]
    assert ours and all(w.filename == __file__ for w in ours), [
        (w.filename, w.lineno, str(w.message)) for w in ours
    ]


def test_user_stacklevel_is_one_outside_the_package():
    assert user_stacklevel() == 1
