"""Device, dtype and memory handling shared by every numerical kernel.

Everything here needs only numpy and torch, so the numerical core runs
wherever torch runs. The memory planning imports no torch (only a CUDA
device's free memory asks it): the device and transfer helpers are imported
on first use, so that a process planning host memory only (a BIDS reader)
does not load torch.
"""

import importlib
from typing import TYPE_CHECKING

from connscale._compute.memory import (
    MemoryLimitError,
    MemoryMeter,
    MemoryPlan,
    MemoryPlanner,
    available_host_memory,
    format_bytes,
    free_device_memory,
    host_budget,
    limit_error,
    memory_budget,
    parse_memory,
    planner_for,
)
from connscale._validation import resolve_dtype

if TYPE_CHECKING:
    from connscale._compute.device import allow_tf32, resolve_device, synchronize
    from connscale._compute.transfer import DeviceToHost, HostToDevice, PinnedBufferPool

#: The names of the modules that import torch, and the module of each.
_TORCH_NAMES = {
    "allow_tf32": "device",
    "resolve_device": "device",
    "synchronize": "device",
    "DeviceToHost": "transfer",
    "HostToDevice": "transfer",
    "PinnedBufferPool": "transfer",
}

__all__ = [
    "MemoryLimitError",
    "MemoryMeter",
    "MemoryPlan",
    "MemoryPlanner",
    "DeviceToHost",
    "HostToDevice",
    "PinnedBufferPool",
    "allow_tf32",
    "available_host_memory",
    "format_bytes",
    "free_device_memory",
    "host_budget",
    "limit_error",
    "memory_budget",
    "parse_memory",
    "planner_for",
    "resolve_device",
    "resolve_dtype",
    "synchronize",
]


def __getattr__(name: str):
    """Return a device or transfer helper, importing its module (and torch) on first use."""
    if name not in _TORCH_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_TORCH_NAMES[name]}"), name)
    globals()[name] = value
    return value
