"""Memory planning: how much may a computation use on the device and host.

Blocks are sized from free device memory (``torch.cuda.mem_get_info``),
available host memory (``/proc/meminfo`` or ``os.sysconf``) and an optional
user ``memory_limit``, before anything large is allocated.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import torch

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}


def parse_memory(memory_limit: int | float | str | None) -> int | None:
    """Parse a memory size given as bytes or as a string such as ``"8GB"``.

    Parameters
    ----------
    memory_limit : int, float, str or None
        A number of bytes, or a number followed by a unit (``B``, ``KB``,
        ``MB``, ``GB``, ``TB`` in powers of 1000; ``KiB``, ``MiB``, ``GiB``,
        ``TiB`` in powers of 1024). None means no limit.

    Returns
    -------
    int or None
        The size in bytes.
    """
    if memory_limit is None:
        return None
    if isinstance(memory_limit, bool):
        raise ValueError(f"'memory_limit' must be bytes or a size like '8GB'; got {memory_limit!r}.")
    if isinstance(memory_limit, (int, float)):
        value = int(memory_limit)
    else:
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(memory_limit))
        if match is None or match.group(2).lower() not in _UNITS:
            raise ValueError(
                "'memory_limit' must be a number of bytes or a size such as "
                f"'512MB', '8GB' or '2GiB'; got {memory_limit!r}."
            )
        value = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    if value <= 0:
        raise ValueError(f"'memory_limit' must be positive; got {memory_limit!r}.")
    return value


def format_bytes(n_bytes: float) -> str:
    """Human-readable size in powers of 1000 ('1.5 GB')."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n_bytes) < 1000 or unit == "TB":
            return f"{n_bytes:.0f} {unit}" if unit == "B" else f"{n_bytes:.1f} {unit}"
        n_bytes /= 1000
    return f"{n_bytes:.1f} TB"  # pragma: no cover


def available_host_memory() -> int:
    """Bytes of host memory available to a new allocation (MemAvailable)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - exotic OS
        return 4 * 1000**3


def free_device_memory(device: torch.device) -> int:
    """Bytes free on ``device``: CUDA free memory plus torch's cached blocks,
    or available host memory for the CPU."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return int(free + cached)
    return available_host_memory()


def memory_budget(
    device: torch.device,
    memory_limit: int | str | None = None,
    *,
    fraction: float = 0.8,
) -> int:
    """Bytes a computation may allocate on ``device``.

    The smaller of ``fraction`` of the free memory and the user's
    ``memory_limit`` (which applies to host and device alike).
    """
    budget = int(free_device_memory(device) * fraction)
    limit = parse_memory(memory_limit)
    if limit is not None:
        budget = min(budget, limit)
    return budget


def host_budget(memory_limit: int | str | None = None, *, fraction: float = 0.9) -> int:
    """Bytes a computation may allocate in host memory: the smaller of
    ``fraction`` of the available host memory and ``memory_limit``."""
    budget = int(available_host_memory() * fraction)
    limit = parse_memory(memory_limit)
    return budget if limit is None else min(budget, limit)


class MemoryLimitError(ValueError, MemoryError):
    """A computation needs more memory than its budget allows.

    Raised before the memory is allocated: up front when the size is known,
    or as a result that grows (sparse) reaches the budget. It is both a
    ``MemoryError`` and a ``ValueError`` (a bad combination of input and
    ``memory_limit``).
    """


def limit_error(what: str, needed: int, budget: int, memory_limit, hint: str) -> MemoryLimitError:
    """A :class:`MemoryLimitError` naming what needs ``needed`` bytes, the
    budget, the ``memory_limit`` it comes from, and what to do (``hint``)."""
    source = ("memory_limit=None: a share of the free memory" if memory_limit is None
              else f"memory_limit={memory_limit!r}")
    return MemoryLimitError(
        f"{what} needs {format_bytes(needed)} ({int(needed)} bytes), more than the budget of "
        f"{format_bytes(max(budget, 0))} ({source}). {hint}"
    )


class MemoryMeter:
    """Counts the bytes of a result that grows as it is computed (sparse).

    Parameters
    ----------
    budget : int
        Bytes the result may reach.
    memory_limit : int, str or None
        The user's limit, for the message.
    what : str
        What grows, for the message ('The sparse result').
    hint : str
        What to do instead, for the message.
    """

    def __init__(self, budget: int, memory_limit, what: str, hint: str) -> None:
        self.budget = int(budget)
        self.memory_limit = memory_limit
        self.what = what
        self.hint = hint
        self.used = 0

    def fits(self, nbytes: int) -> bool:
        """Whether ``nbytes`` more stay within the budget."""
        return self.used + nbytes <= self.budget

    def add(self, nbytes: int) -> None:
        """Count ``nbytes`` more; raise :class:`MemoryLimitError` (before they
        are kept) when the total would exceed the budget."""
        if not self.fits(nbytes):
            raise limit_error(f"{self.what} (so far)", self.used + nbytes, self.budget,
                              self.memory_limit, self.hint)
        self.used += int(nbytes)


@dataclass(frozen=True)
class MemoryPlan:
    """How a computation will be split, for logs and reports.

    Attributes
    ----------
    device_budget : int
        Bytes the computation may use on the device.
    host_budget : int
        Bytes the result may use in host memory.
    block_rows : int
        Rows per round (B in Fast-GPU-PCC).
    n_rounds : int
        Number of rounds.
    out_of_core : bool
        True when the result is streamed to disk rather than kept in memory.
    """

    device_budget: int
    host_budget: int
    block_rows: int
    n_rounds: int
    out_of_core: bool

    def as_dict(self) -> dict:
        return {
            "device_budget_bytes": self.device_budget,
            "host_budget_bytes": self.host_budget,
            "block_rows": self.block_rows,
            "n_rounds": self.n_rounds,
            "out_of_core": self.out_of_core,
        }
