"""Series given as a tensor are checked and normalised where they lie (the BIDS-App keeps a
run's cleaned voxel series on the GPU): the same result as from an array, no host copy."""

import numpy as np
import pytest
import torch

from connscale.bidsapp.outputs import constant_columns
from connscale.fc.normalize import ConstantSeriesWarning
from connscale.maps import prepare
from connscale.maps.prepare import normalize_once


def _series() -> np.ndarray:
    x = np.random.default_rng(0).standard_normal((20, 30)).astype(np.float32)
    x[:, 3] = 1.5  # a constant series
    return x


@pytest.mark.parametrize("memory_limit", [None, 10_000])  # whole, or a few columns at a time
def test_a_tensor_is_normalised_without_a_host_copy(monkeypatch, memory_limit):
    x = _series()
    with pytest.warns(ConstantSeriesWarning):
        expected = normalize_once(x, device="cpu", memory_limit=memory_limit)

    def no_host_check(*args, **kwargs):
        raise AssertionError("the tensor was checked on the host")

    monkeypatch.setattr(prepare, "check_timeseries", no_host_check)
    with pytest.warns(ConstantSeriesWarning):
        got = normalize_once(torch.from_numpy(x), device="cpu", memory_limit=memory_limit)
    torch.testing.assert_close(got.u, expected.u, rtol=0, atol=0, equal_nan=True)
    assert got.constant.tolist() == expected.constant.tolist()
    assert got.constant.tolist() == [i == 3 for i in range(30)]


def test_a_faulty_tensor_is_named_as_an_array_is():
    x = torch.from_numpy(_series())
    x[2, 1] = float("nan")
    with pytest.raises(ValueError, match=r"contains 1 NaN and 0 infinite value\(s\) in 1 series"):
        normalize_once(x, device="cpu")
    with pytest.raises(ValueError, match="at least 3 time points"):
        normalize_once(torch.ones(2, 4), device="cpu")


def test_constant_columns_of_a_tensor_equal_those_of_its_array():
    x = _series()
    x[:, 7] = 0.0
    assert constant_columns(torch.from_numpy(x)).tolist() == constant_columns(x).tolist()
    assert constant_columns(x).nonzero()[0].tolist() == [3, 7]
    assert constant_columns(torch.empty(0, 4)).tolist() == [False] * 4
