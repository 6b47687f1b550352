"""Memory planning: how much may a computation use on the device and host.

Blocks are sized from free device memory (``torch.cuda.mem_get_info``),
available host memory (``/proc/meminfo`` or ``os.sysconf``) and an optional
user ``memory_limit``, before anything large is allocated.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from connscale._validation import parse_memory

if TYPE_CHECKING:
    import torch

#: Shares of the free device memory and of the available host memory a
#: computation may use when no ``memory_limit`` is smaller.
DEVICE_FRACTION = 0.8
HOST_FRACTION = 0.9


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
    """Return the bytes free on ``device``.

    CUDA free memory plus torch's cached blocks, or available host memory for
    the CPU.
    """
    if device.type == "cuda":
        import torch  # loaded already where a CUDA device is named; the host needs none

        free, _ = torch.cuda.mem_get_info(device)
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return int(free + cached)
    return available_host_memory()


def memory_budget(
    device: torch.device,
    memory_limit: int | str | None = None,
    *,
    fraction: float = DEVICE_FRACTION,
) -> int:
    """Bytes a computation may allocate on ``device``.

    The smaller of ``fraction`` of the free memory and the user's
    ``memory_limit`` (which applies to host and device alike).
    """
    return _capped(int(free_device_memory(device) * fraction), parse_memory(memory_limit))


def host_budget(memory_limit: int | str | None = None, *, fraction: float = HOST_FRACTION) -> int:
    """Return the bytes a computation may allocate in host memory.

    The smaller of ``fraction`` of the available host memory and
    ``memory_limit``.
    """
    return _capped(int(available_host_memory() * fraction), parse_memory(memory_limit))


def _capped(budget: int, limit: int | None) -> int:
    """``budget``, or the parsed ``limit`` when it is smaller."""
    return budget if limit is None else min(budget, limit)


class MemoryLimitError(ValueError, MemoryError):
    """A computation needs more memory than its budget allows.

    Raised before the memory is allocated: up front when the size is known,
    or as a result that grows (sparse) reaches the budget. It is both a
    ``MemoryError`` and a ``ValueError`` (a bad combination of input and
    ``memory_limit``).
    """


def limit_error(what: str, needed: int, budget: int, memory_limit, hint: str) -> MemoryLimitError:
    """Build a :class:`MemoryLimitError` for ``what`` needing ``needed`` bytes.

    The error names what needs ``needed`` bytes, the budget, the
    ``memory_limit`` it comes from, and what to do (``hint``).
    """
    source = (
        "memory_limit=None: a share of the free memory"
        if memory_limit is None
        else f"memory_limit={memory_limit!r}"
    )
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
        """Count ``nbytes`` more.

        Raise :class:`MemoryLimitError` (before they are kept) when the total
        would exceed the budget.
        """
        if not self.fits(nbytes):
            raise limit_error(
                f"{self.what} (so far)",
                self.used + nbytes,
                self.budget,
                self.memory_limit,
                self.hint,
            )
        self.used += int(nbytes)


@dataclass(frozen=True)
class MemoryPlan:
    """How a computation will be split.

    The one plan type of every planner (static rounds, dynamic window
    batches, pair chunks, r1DL's operator, the maps' row blocks), for the
    run, logs and reports.

    Attributes
    ----------
    device_budget : int
        Bytes the computation may use on the device.
    host_budget : int
        Bytes the result may use in host memory.
    block_rows : int
        Rows per round or tile (B in Fast-GPU-PCC; voxels per block for r1DL).
    n_rounds : int
        Number of rounds (row blocks, or batches of windows or scans).
    out_of_core : bool
        True when the result is streamed to disk rather than kept in memory.
    batch : int, default=1
        Windows (dynamic) or scans (pairs) per batched GEMM.
    windows_per_batch : int or None
        Pairs: windows of each scan per batch.
    storage : str or None
        r1DL: where S is kept between passes ('device', 'host' or 'file').
    device_bytes : int, default=0
        Bytes counted as staying on the device (the normalised series, ...).
    host_bytes : int, default=0
        Bytes counted in host memory: the in-memory result, pinned buffers.
    """

    device_budget: int
    host_budget: int
    block_rows: int
    n_rounds: int
    out_of_core: bool
    batch: int = 1
    windows_per_batch: int | None = None
    storage: str | None = None
    device_bytes: int = 0
    host_bytes: int = 0

    def as_dict(self) -> dict:
        """Return the plan as JSON-ready values (the keys of the run logs)."""
        return {
            "device_budget_bytes": self.device_budget,
            "host_budget_bytes": self.host_budget,
            "block_rows": self.block_rows,
            "n_rounds": self.n_rounds,
            "out_of_core": self.out_of_core,
            "batch": self.batch,
            "windows_per_batch": self.windows_per_batch,
            "storage": self.storage,
            "device_bytes": self.device_bytes,
            "host_bytes": self.host_bytes,
        }


class MemoryPlanner:
    """The one memory planner of connscale.

    It counts what a computation will allocate -
    on the device, in host memory (the result, pinned staging) - against
    the budgets that ``memory_limit`` gives, before it is allocated, and
    returns the :class:`MemoryPlan` it followed.

    On the CPU the device *is* host memory: bytes counted on the host are
    taken from the device budget too.

    Parameters
    ----------
    device : torch.device
    memory_limit : int, str or None
        The user's limit (for both budgets and for messages).
    hint : str
        What to do when something does not fit (for messages).
    device_budget, host_budget : int, optional
        Budgets to use instead of :func:`memory_budget` and :func:`host_budget`.
    """

    def __init__(
        self,
        device,
        memory_limit=None,
        *,
        hint: str = "Raise memory_limit.",
        device_budget: int | None = None,
        host_budget: int | None = None,
    ) -> None:
        self.device = device
        self.memory_limit = memory_limit
        self.hint = hint
        limit = parse_memory(memory_limit) if device_budget is None or host_budget is None else None
        self.device_budget = int(
            _capped(int(free_device_memory(device) * DEVICE_FRACTION), limit)
            if device_budget is None
            else device_budget
        )
        self.host_budget = int(
            _capped(int(available_host_memory() * HOST_FRACTION), limit)
            if host_budget is None
            else host_budget
        )
        self.device_bytes = 0
        self.host_bytes = 0

    @property
    def shared(self) -> bool:
        """Whether device and host memory are the same (the CPU)."""
        return self.device.type == "cpu"

    @property
    def device_left(self) -> int:
        """Device bytes not yet counted."""
        return self.device_budget - self.device_bytes

    @property
    def host_left(self) -> int:
        """Host bytes not yet counted."""
        return self.host_budget - self.host_bytes

    def reserve_device(self, nbytes: int) -> None:
        """Count ``nbytes`` that stay on the device.

        They are checked by :meth:`require` and :meth:`fit`.
        """
        self.device_bytes += int(nbytes)

    def reserve_host(self, nbytes: int) -> None:
        """Count ``nbytes`` of host memory (the result, pinned buffers).

        On the CPU they come out of the device budget as well.
        """
        self.host_bytes += int(nbytes)
        if self.shared:
            self.device_bytes += int(nbytes)

    def error(
        self, what: str, needed: int, *, budget: int | None = None, hint: str | None = None
    ) -> MemoryLimitError:
        """Build a :class:`MemoryLimitError` for ``what`` needing ``needed`` bytes.

        The bytes are counted against the device budget (or ``budget``).
        """
        return limit_error(
            what,
            needed,
            self.device_budget if budget is None else budget,
            self.memory_limit,
            self.hint if hint is None else hint,
        )

    def require(
        self, nbytes: int, what: str, *, on: str = "device", hint: str | None = None
    ) -> None:
        """Raise :class:`MemoryLimitError` unless ``nbytes`` more fits the budget.

        Raise unless what is counted plus ``nbytes`` fits the device
        (``on='device'``) or host (``on='host'``) budget (the message ends
        with ``hint``, else the planner's).
        """
        used, budget = (
            (self.device_bytes, self.device_budget)
            if on == "device"
            else (self.host_bytes, self.host_budget)
        )
        if used + nbytes > budget:
            raise self.error(what, used + nbytes, budget=budget, hint=hint)

    @contextlib.contextmanager
    def transient(self) -> Iterator[MemoryPlanner]:
        """Count, inside the block, allocations freed when it ends.

        A call's work buffers (blocks, temporaries, copies of its input) are
        counted inside; on exit the counts return to what they were before,
        so that the next call of a task sharing this planner does not count
        them again. What the call keeps (its result) is counted outside.
        """
        saved = self.device_bytes, self.host_bytes
        try:
            yield self
        finally:
            self.device_bytes, self.host_bytes = saved

    def reserve_result(
        self,
        nbytes: int | None,
        what: str,
        *,
        kept: int = 0,
        preallocated: int | None = None,
        hint: str | None = None,
    ) -> int:
        """Count an in-memory result in host memory and return the bytes counted.

        ``nbytes`` are its values (None: not known in advance, a result that
        grows, counted by a :class:`MemoryMeter` instead) and ``kept`` the
        bookkeeping stored beside them. Raise :class:`MemoryLimitError`
        (naming ``what``, with ``hint``) when the whole does not fit the host
        budget, unless it fits the ``preallocated`` bytes the caller gave
        (then only ``kept`` is counted).
        """
        if nbytes is None:
            counted = kept
        else:
            needed = nbytes + kept
            if preallocated is not None and needed <= preallocated:
                counted = kept
            else:
                if self.host_bytes + needed > self.host_budget:
                    raise self.error(
                        what, self.host_bytes + needed, budget=self.host_budget, hint=hint
                    )
                counted = needed
        self.reserve_host(counted)
        return counted

    def fit(
        self, per_item: int, what: str, *, at_most: int | None = None, left: int | None = None
    ) -> int:
        """Return how many items of ``per_item`` bytes fit in what is left.

        Items fit in what is left of the device budget (or in ``left``
        bytes), at most ``at_most``; raise :class:`MemoryLimitError` naming
        ``what`` when not even one does.
        """
        room = self.device_left if left is None else left
        count = max(room, 0) // max(int(per_item), 1)
        if at_most is not None:
            count = min(count, at_most)
        if count < 1:
            raise self.error(what, self.device_bytes + per_item)
        return int(count)

    def plan(
        self,
        *,
        block_rows: int,
        n_rounds: int,
        out_of_core: bool = False,
        host_budget: int | None = None,
        **fields,
    ) -> MemoryPlan:
        """Return the :class:`MemoryPlan` of this planner's budgets and counts."""
        return MemoryPlan(
            device_budget=int(self.device_budget),
            host_budget=int(self.host_budget if host_budget is None else host_budget),
            block_rows=int(block_rows),
            n_rounds=int(n_rounds),
            out_of_core=bool(out_of_core),
            device_bytes=int(self.device_bytes),
            host_bytes=int(self.host_bytes),
            **fields,
        )


def planner_for(device, memory_limit=None, *, hint: str = "Raise memory_limit.") -> MemoryPlanner:
    """Return the one :class:`MemoryPlanner` of a call.

    A caller that counts a whole task against one budget (a cohort scan, a
    BIDS run) passes its planner down as ``memory_limit``; the call then
    counts what it allocates into that planner. Any other ``memory_limit``
    (bytes, a string such as ``'4GB'``, or None) gives the call a planner of
    its own, built here once.

    Parameters
    ----------
    device : torch.device
        The device the call computes on.
    memory_limit : MemoryPlanner, int, str or None, default=None
        The caller's planner, or the user's limit.
    hint : str, default="Raise memory_limit."
        What to do when something does not fit (for messages of a new planner).

    Returns
    -------
    MemoryPlanner
    """
    if isinstance(memory_limit, MemoryPlanner):
        if memory_limit.device != device:
            raise ValueError(
                f"The memory planner counts {memory_limit.device}; this call computes on {device}."
            )
        return memory_limit
    return MemoryPlanner(device, memory_limit, hint=hint)
