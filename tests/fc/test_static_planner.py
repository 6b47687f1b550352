"""correlation(): one memory planner per call, parsed once or passed in."""

import numpy as np
import pytest
import torch

import connscale
from connscale._compute import MemoryLimitError, MemoryPlanner
from connscale._compute import memory as memory_module
from connscale._validation import parse_memory


def _series(n=40, t=60):
    return np.random.default_rng(0).standard_normal((t, n))


@pytest.mark.parametrize("kind", ["dense", "triu", "sparse"])
def test_the_limit_is_parsed_once_per_call(monkeypatch, kind):
    calls = []

    def counting(limit):
        calls.append(limit)
        return parse_memory(limit)

    monkeypatch.setattr(memory_module, "parse_memory", counting)
    threshold = 0.2 if kind == "sparse" else None
    connscale.correlation(
        _series(), kind=kind, threshold=threshold, device="cpu", memory_limit="64MB"
    )
    assert calls == ["64MB"]


def test_a_planner_passed_in_is_counted_into():
    planner = MemoryPlanner(torch.device("cpu"), "64MB")
    n = 40
    r = connscale.correlation(_series(n), kind="triu", device="cpu", memory_limit=planner)
    assert r.shape == (n * (n - 1) // 2,)
    # The kept result is counted (host, and on the CPU the device too); the
    # work buffers are not, once the call is done.
    assert planner.host_bytes == r.nbytes
    assert planner.device_bytes == r.nbytes
    np.testing.assert_allclose(
        r, connscale.correlation(_series(n), kind="triu", device="cpu"), rtol=0, atol=1e-6
    )


def test_a_planner_passed_in_bounds_the_call():
    planner = MemoryPlanner(torch.device("cpu"), "64MB")
    planner.reserve_host(64 * 1024**2 - 1000)  # what the task has counted already
    with pytest.raises(MemoryLimitError, match="The dense result of 40 series"):
        connscale.correlation(_series(), device="cpu", memory_limit=planner)
