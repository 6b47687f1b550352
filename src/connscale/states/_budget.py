"""The device budget of the k-means' optional copies, under the fit's planner.

:meth:`connscale.states.DFCStates.fit` plans its memory with one
:class:`connscale._compute.MemoryPlanner` and runs under :func:`planning`;
the coarse copies of the windows (float16, int8), made on first use deep in
the k-means, are then made only when they fit its budget as well as the
free device memory.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch

from connscale._compute.memory import memory_budget as free_budget

if TYPE_CHECKING:
    from connscale._compute.memory import MemoryPlanner

_planner: contextvars.ContextVar[MemoryPlanner | None] = contextvars.ContextVar(
    "states_planner", default=None
)


@contextmanager
def planning(planner: MemoryPlanner) -> Iterator[None]:
    """Bound the copies made in this context by ``planner``'s device budget."""
    token = _planner.set(planner)
    try:
        yield
    finally:
        _planner.reset(token)


def memory_budget(device: torch.device) -> int:
    """Return the bytes a copy may take on ``device``.

    A share of the free memory, at most the device budget of the planner in
    context (:func:`planning`).
    """
    budget = free_budget(device)
    planner = _planner.get()
    return budget if planner is None else min(budget, planner.device_budget)
