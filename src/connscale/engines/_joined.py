"""A scheduler plugin recording the workers that joined (for the SLURM JobKeeper)."""

from __future__ import annotations

from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin


class Joined(SchedulerPlugin):
    """Record the name of every worker that joined the scheduler."""

    name = "connscale-joined"

    def __init__(self) -> None:
        self.names: set[str] = set()

    def add_worker(self, scheduler: Any, worker: str) -> None:
        self.names.add(str(scheduler.workers[worker].name))
