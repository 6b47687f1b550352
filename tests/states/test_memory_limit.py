"""DFCStates plans its memory through one planner: a limit too small fails
before anything is allocated, a sufficient one changes nothing."""

import numpy as np
import pytest
import torch
from numpy.testing import assert_array_equal

from connscale import DFCStates, MemoryLimitError
from connscale._compute import MemoryPlanner
from connscale.states import _budget
from connscale.states import estimator as estimator_module


def _windows():
    rng = np.random.default_rng(0)
    return [rng.standard_normal((40, 66)) for _ in range(3)]


def _fit(**params):
    return DFCStates(3, n_init=2, random_state=0, device="cpu", **params).fit(_windows())


def test_a_too_small_limit_fails_before_allocating(monkeypatch):
    def no_copy(*args, **kwargs):
        raise AssertionError("the windows were copied to the device")

    monkeypatch.setattr(estimator_module, "_device_copy", no_copy)
    with pytest.raises(MemoryLimitError, match="DFC states of 120 windows x 66 edges"):
        _fit(memory_limit="10KB")


def test_a_sufficient_limit_gives_the_same_labels():
    free = _fit()
    small = _fit(memory_limit="300KB")  # blocks of fewer windows than without a limit
    for a, b in zip(free.labels_, small.labels_):
        assert_array_equal(a, b)
    np.testing.assert_allclose(small.cluster_centers_, free.cluster_centers_, rtol=1e-12)


def test_a_planner_passed_in_bounds_the_fit_and_gets_its_work_back():
    planner = MemoryPlanner(torch.device("cpu"), "64MB")
    planner.reserve_host(1000)
    fitted = _fit(memory_limit=planner)
    assert_array_equal(np.concatenate(fitted.labels_), np.concatenate(_fit().labels_))
    assert (planner.device_bytes, planner.host_bytes) == (1000, 1000)
    planner.reserve_device(planner.device_left - 1000)
    with pytest.raises(MemoryLimitError):
        _fit(memory_limit=planner)


def test_the_copies_are_bounded_by_the_fit_planner(monkeypatch):
    device = torch.device("cpu")
    monkeypatch.setattr(_budget, "free_budget", lambda device: 5_000_000)
    assert _budget.memory_budget(device) == 5_000_000
    with _budget.planning(MemoryPlanner(device, "1MB")):
        assert _budget.memory_budget(device) == 1_000_000
    assert _budget.memory_budget(device) == 5_000_000


def test_predict_and_elbow_plan_their_memory_too(monkeypatch):
    from connscale.states import elbow

    fitted = _fit()
    small = DFCStates(3, n_init=2, random_state=0, device="cpu", memory_limit="10KB")
    small.set_params(memory_limit="10KB")
    for name in ("cluster_centers_", "n_features_in_", "labels_"):
        setattr(small, name, getattr(fitted, name))

    def no_copy(*args, **kwargs):
        raise AssertionError("the windows were copied to the device")

    monkeypatch.setattr(estimator_module, "_device_copy", no_copy)
    with pytest.raises(MemoryLimitError, match="DFC states of 40 windows x 66 edges"):
        small.predict(_windows()[0])
    with pytest.raises(MemoryLimitError, match="DFC states of 120 windows x 66 edges"):
        elbow(_windows(), range(2, 5), exemplars=False, device="cpu", memory_limit="10KB")
