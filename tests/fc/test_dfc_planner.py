"""A task's memory planner, passed to the sliding-window engines as ``memory_limit``.

A runner that counts a whole task against one budget validates its own
parameters and passes its :class:`MemoryPlanner` down (inside
``skip_nested_validation``, as an entry that validated already): the
engines count into it instead of building a planner of their own.
"""

import numpy as np
import pytest
import torch

from connscale._compute import MemoryPlanner
from connscale._compute.memory import MemoryLimitError
from connscale._validation import skip_nested_validation
from connscale.fc.dynamic import dynamic_correlation
from connscale.fc.pairs import pairwise_dfc

rng = np.random.default_rng(0)
X = rng.standard_normal((60, 30))
SCANS = rng.standard_normal((3, 40, 12))
CPU = torch.device("cpu")


def _spent(limit: str, left: int) -> MemoryPlanner:
    """A planner whose task holds all but ``left`` bytes of its host budget."""
    planner = MemoryPlanner(CPU, limit)
    planner.reserve_host(planner.host_budget - left)
    return planner


def test_dynamic_correlation_counts_into_the_planner_passed_down():
    planner = MemoryPlanner(CPU, "256MB")
    with skip_nested_validation():
        result = dynamic_correlation(X, 10, 5, device="cpu", memory_limit=planner)
    assert planner.host_bytes >= result.nbytes > 0
    assert result.plan.host_bytes == planner.host_bytes
    assert result.plan.device_bytes == planner.device_bytes


@pytest.mark.parametrize("kind, extra", [("triu", {}), ("factor", {"rank": 4})])
def test_dynamic_correlation_refuses_a_result_the_task_has_no_room_for(kind, extra):
    with skip_nested_validation(), pytest.raises(MemoryLimitError, match="Keeping all 11 windows"):
        dynamic_correlation(
            X, 10, 5, kind=kind, device="cpu", memory_limit=_spent("64MB", 1000), **extra
        )
    # The same limit, unspent, holds them.
    assert (
        len(dynamic_correlation(X, 10, 5, kind=kind, device="cpu", memory_limit="64MB", **extra))
        == 11
    )


def test_pairwise_dfc_counts_into_the_planner_passed_down():
    planner = MemoryPlanner(CPU, "256MB")
    with skip_nested_validation():
        result = pairwise_dfc(SCANS, 10, 2, device="cpu", memory_limit=planner)
    assert planner.host_bytes >= result.courses.nbytes > 0


def test_pairwise_dfc_refuses_courses_the_task_has_no_room_for():
    with skip_nested_validation(), pytest.raises(MemoryLimitError, match="correlation courses"):
        pairwise_dfc(SCANS, 10, 2, device="cpu", memory_limit=_spent("64MB", 1000))
    assert pairwise_dfc(SCANS, 10, 2, device="cpu", memory_limit="64MB").courses.shape[0] == 3
