"""planner_for: one planner per call, or the caller's."""

import pytest
import torch

from connscale._compute import MemoryPlanner, planner_for


def test_a_limit_gives_a_new_planner_and_a_planner_is_passed_through():
    cpu = torch.device("cpu")
    planner = planner_for(cpu, "64MB")
    assert isinstance(planner, MemoryPlanner)
    assert planner.device_budget <= 64 * 1024**2
    planner.reserve_host(1024)
    assert planner_for(cpu, planner) is planner
    assert planner_for(cpu, planner).host_bytes == 1024


def test_a_planner_of_another_device_is_refused():
    planner = MemoryPlanner(torch.device("cpu"), "64MB")
    with pytest.raises(ValueError, match="counts cpu; this call computes on meta"):
        planner_for(torch.device("meta"), planner)
