"""connscale.despike against a plain numpy transcription of AFNI's 3dDespike -NEW."""

import numpy as np
import pytest

from connscale.despike import despike

pytestmark = pytest.mark.filterwarnings("error")


def _reference(v: np.ndarray) -> np.ndarray:
    """3dDespike -NEW -nomask of one series, transcribed loop by loop from 3dDespike.c."""
    n = v.size
    # DES_despike9: local median and MAD of 9 values, threshold 6.789 x median of the MADs.
    med = np.empty(n)
    mad = np.empty(n)
    for i in range(n):
        j = min(max(i - 4, 0), n - 9)
        window = v[j : j + 9]
        med[i] = np.median(window)
        mad[i] = np.median(np.abs(window - med[i]))
    threshold = 6.789 * np.median(mad)
    z = v.copy()
    if threshold > 0:
        spikes = np.abs(v - med) > threshold
        z[spikes] = med[spikes]
    # The reference functions: 1, u, u^2, sin/cos(2 pi k t / n), k = 1 .. rint(n / 30).
    t = np.arange(n)
    u = (t - 0.5 * (n - 1)) * 2.0 / n
    refs = [np.ones(n), u, u * u]
    for k in range(1, int(np.rint(n / 30.0)) + 1):
        refs += [np.sin(2 * np.pi * k * t / n), np.cos(2 * np.pi * k * t / n)]
    ref = np.array(refs).T
    coef = np.linalg.lstsq(ref, z, rcond=None)[0]
    fit = ref @ coef
    resid = v - fit
    sigma = np.sqrt(np.pi / 2) * np.median(np.abs(resid))
    out = v.copy()
    if sigma <= 0:
        return out
    c1, c2 = 2.5, 4.0
    for i in range(n):
        s = resid[i] / sigma
        if s > c1:
            x = (s - c1) / (c2 - c1)
            out[i] = fit[i] + sigma * (c1 + (c2 - c1) * (1.0 if x > 7 else np.tanh(x)))
        elif s < -c1:
            x = (s + c1) / (c2 - c1)
            out[i] = fit[i] + sigma * (-c1 + (c2 - c1) * (-1.0 if x < -7 else np.tanh(x)))
    return out


def _series(n_timepoints=120, n_series=6, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(n_timepoints)
    drift = 100 + 0.02 * t[:, None] + 2 * np.sin(2 * np.pi * t[:, None] / 40)
    return drift + rng.standard_normal((n_timepoints, n_series))


@pytest.mark.parametrize(("dtype", "rtol"), [("float64", 1e-10), ("float32", 1e-5)])
@pytest.mark.parametrize("n_timepoints", [15, 64, 121])
def test_despike_equals_the_numpy_transcription(dtype, rtol, n_timepoints):
    x = _series(n_timepoints)
    x[7, 1] += 30.0
    x[n_timepoints // 2, 3] -= 25.0
    got = despike(x, device="cpu", dtype=dtype)
    expected = np.stack([_reference(x[:, j]) for j in range(x.shape[1])], axis=1)
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=0)


def test_planted_spikes_are_squashed_below_c2_sigmas():
    # Bounded noise: no value but the planted ones is beyond 2.5 sigmas.
    t = np.arange(200)[:, None]
    x = 100 + 2 * np.sin(2 * np.pi * t / 50) + np.random.default_rng(1).uniform(-1, 1, (200, 4))
    x[[30, 150], 0] += 50.0
    x[90, 2] -= 60.0
    got = despike(x, device="cpu", dtype="float64")
    sigma = np.sqrt(np.pi / 2) * 0.5  # the MAD of uniform(-1, 1) noise is 0.5
    for row, col in ((30, 0), (150, 0), (90, 2)):
        assert abs(got[row, col] - (100 + 2 * np.sin(2 * np.pi * row / 50))) < 4.5 * sigma
    spiked = np.zeros(x.shape, bool)
    spiked[[30, 150], 0] = spiked[90, 2] = True
    np.testing.assert_array_equal(got[~spiked], x[~spiked])


def test_series_without_spikes_are_unchanged():
    t = np.arange(90)
    smooth = 50 + 3 * np.sin(2 * np.pi * t / 90)[:, None] + np.zeros((1, 3))
    # The curve fits it exactly: what moves is rounding (sigma is rounding too).
    np.testing.assert_allclose(despike(smooth, device="cpu", dtype="float64"), smooth, rtol=1e-12)
    # Bounded noise (uniform) never reaches 2.5 sigmas of its own MAD estimate.
    rng = np.random.default_rng(2)
    noisy = smooth + rng.uniform(-1, 1, smooth.shape)
    got = despike(noisy, device="cpu", dtype="float64")
    expected = np.stack([_reference(noisy[:, j]) for j in range(3)], axis=1)
    np.testing.assert_allclose(got, expected, rtol=1e-10)


def test_constant_series_are_returned_as_they_are():
    x = np.full((40, 2), 7.0)
    np.testing.assert_array_equal(despike(x, device="cpu"), x)


def test_blocks_under_a_memory_limit_give_the_same_result():
    x = _series(100, 40, seed=3)
    x[10, ::3] += 20
    whole = despike(x, device="cpu", dtype="float64")
    blocked = despike(x, device="cpu", dtype="float64", memory_limit=200_000)
    np.testing.assert_array_equal(blocked, whole)


def test_fewer_than_15_time_points_is_refused():
    with pytest.raises(ValueError, match="15"):
        despike(np.zeros((14, 2)), device="cpu")
