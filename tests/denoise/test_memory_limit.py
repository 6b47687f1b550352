"""Denoising plans through one planner per call: the cleaning operator and
the cleaned series fail up front under a too-small limit, and count into a
task's planner."""

import numpy as np
import pytest
import torch

from connscale import MemoryLimitError
from connscale._compute import MemoryPlanner
from connscale.denoise import clean_regions, clean_signals, cleaning_operator, region_signals

T, V = 50, 400


@pytest.fixture(scope="module")
def operator():
    return cleaning_operator(T, confounds=np.random.default_rng(1).standard_normal((T, 3)))


def _series():
    return np.random.default_rng(0).standard_normal((T, V)).astype(np.float32) + 100


def test_the_operator_needs_room_for_nilearn_copies():
    with pytest.raises(MemoryLimitError, match="The cleaning operator of 50 volumes"):
        cleaning_operator(T, memory_limit=10_000)
    assert cleaning_operator(T, memory_limit="1MB").matrix.shape == (T, T)


def test_a_too_small_limit_fails_before_cleaning(operator, monkeypatch):
    from connscale import denoise

    def no_projection(*args, **kwargs):
        raise AssertionError("the projection ran")

    monkeypatch.setattr(denoise, "_project", no_projection)
    with pytest.raises(MemoryLimitError, match=r"The cleaned series \(50 volumes x 400 series\)"):
        clean_signals(_series(), operator, device="cpu", memory_limit=100_000)


def test_a_sufficient_limit_changes_nothing(operator):
    free = clean_signals(_series(), operator, device="cpu")
    np.testing.assert_array_equal(
        clean_signals(_series(), operator, device="cpu", memory_limit="1MB"), free
    )
    labels = np.repeat(np.arange(1, 5), V // 4)
    np.testing.assert_array_equal(
        clean_regions(_series(), labels, operator, device="cpu", memory_limit="1MB"),
        clean_regions(_series(), labels, operator, device="cpu"),
    )
    with pytest.raises(MemoryLimitError, match="The mean series of 4 regions"):
        region_signals(_series(), labels, device="cpu", memory_limit=1000)


def test_a_planner_passed_in_keeps_the_cleaned_series_counted(operator):
    planner = MemoryPlanner(torch.device("cpu"), "64MB")
    out = clean_signals(_series(), operator, device="cpu", memory_limit=planner)
    assert planner.host_bytes == out.nbytes
    assert planner.device_bytes == out.nbytes  # the work is released, the result kept
