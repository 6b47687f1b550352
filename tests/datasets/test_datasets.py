import numpy as np
import pytest

from connscale.datasets import (
    load_nibabel_functional,
    load_nitime_fmri,
    simulate_timeseries,
)


def test_bundled_images():
    assert load_nitime_fmri(1).shape == (10, 10, 18, 40)
    assert load_nitime_fmri(2).shape == (10, 10, 18, 40)
    assert load_nibabel_functional().shape == (17, 21, 3, 20)
    with pytest.raises(ValueError, match="'run' must be 1 or 2"):
        load_nitime_fmri(3)


def test_simulated_blocks_have_planted_correlation():
    x, labels = simulate_timeseries(
        2000, 60, n_blocks=3, block_correlation=0.6, fraction_in_blocks=0.5, random_state=0
    )
    assert x.shape == (2000, 60) and x.dtype == np.float32
    r = np.corrcoef(x.T)
    same = (labels[:, None] == labels[None, :]) & (labels[:, None] >= 0)
    np.fill_diagonal(same, False)
    other = ~same
    np.fill_diagonal(other, False)
    assert abs(r[same].mean() - 0.6) < 0.05
    assert abs(r[other].mean()) < 0.02
    x2, _ = simulate_timeseries(2000, 60, n_blocks=3, random_state=0)
    np.testing.assert_array_equal(x, x2)


@pytest.mark.parametrize(
    "kwargs, match",
    [({"block_correlation": 1.0}, "block_correlation"), ({"n_blocks": 0}, "n_blocks")],
)
def test_simulator_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        simulate_timeseries(10, 10, **kwargs)
