"""Device, dtype and memory handling shared by every numerical kernel.

Everything here needs only numpy and torch, so the numerical core runs
wherever torch runs.
"""

from connscale._compute.device import (
    allow_tf32,
    resolve_device,
    synchronize,
)
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
from connscale._compute.transfer import DeviceToHost, HostToDevice, PinnedBufferPool
from connscale._validation import resolve_dtype

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
