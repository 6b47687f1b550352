import numpy as np
import pytest
from numpy.testing import assert_allclose

from connscale.datasets import simulate_networks


def test_simulate_networks_structure():
    S, tc, maps = simulate_networks(120, 900, 6, sparsity=0.05, noise=0.3, random_state=1)
    assert S.shape == (120, 900) and tc.shape == (120, 6) and maps.shape == (6, 900)
    sizes = (maps != 0).sum(axis=1)
    np.testing.assert_array_equal(sizes, 45)
    # Disjoint supports when they fit, weights in [0.5, 1.5].
    assert ((maps != 0).sum(axis=0) <= 1).all()
    assert maps[maps != 0].min() >= 0.5 and maps.max() <= 1.5
    assert_allclose(tc.mean(axis=0), 0, atol=1e-12)
    assert_allclose(tc.std(axis=0), 1)
    assert_allclose(np.corrcoef(tc.T), np.eye(6), atol=1e-10)
    # Noise only outside the networks.
    residual = S - tc @ maps
    assert residual.std() == pytest.approx(0.3, rel=0.05)
    S2, _, _ = simulate_networks(120, 900, 6, sparsity=0.05, noise=0.3, random_state=1)
    np.testing.assert_array_equal(S, S2)


def test_simulate_networks_overlapping_and_dtype():
    S, _, maps = simulate_networks(
        20, 30, 5, sparsity=0.5, noise=0.0, random_state=0, dtype="float32"
    )
    assert S.dtype == np.float32
    assert ((maps != 0).sum(axis=1) == 15).all()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(sparsity=0), "'sparsity' must be a number in"),
        (dict(sparsity=2.0), "'sparsity' must be a number in"),
        (dict(noise=-1), "'noise' must be a number >= 0"),
        (dict(dtype="int32"), "'dtype' must be"),
    ],
)
def test_simulate_networks_bad_inputs(kwargs, match):
    with pytest.raises(ValueError, match=match):
        simulate_networks(20, 30, 2, **kwargs)
    with pytest.raises(ValueError, match="'n_networks' must be >= 1"):
        simulate_networks(20, 30, 0)
