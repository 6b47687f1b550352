"""The logs of the participant level: one report and one errors table per call.

Calls on one output may run at the same time (an array job's tasks), so each
writes its own pair under ``<output>/logs/``, never another call's::

    participant_<who>_<when>_report.json
    participant_<who>_<when>_errors.tsv

``<who>`` is ``all`` (no participant label), ``sub-<label>`` (one) or
``sub-<first>+<n>`` (the first label and how many others); ``<when>`` is the
call's start in UTC (``20250101T120000Z``) and ``job<SLURM_JOB_ID>`` under
SLURM, else ``pid<pid>``, with ``-2``, ``-3``... when a call of the same second
already wrote that name. :func:`participant_reports` lists them, oldest first.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from connscale.engines.batch import BatchLogs

__all__ = ["call_logs", "participant_reports"]

_KINDS = ("report.json", "errors.tsv")


def _who(participant_label: tuple | None) -> str:
    """Return the ``<who>`` of a call's log names."""
    if not participant_label:
        return "all"
    first = str(participant_label[0]).removeprefix("sub-")
    others = len(participant_label) - 1
    return f"sub-{first}" + (f"+{others}" if others else "")


def call_logs(folder: Path, participant_label: tuple | None) -> BatchLogs:
    """Return the log names of a call, unused in ``folder``."""
    when = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    job = os.environ.get("SLURM_JOB_ID")
    stem = f"participant_{_who(participant_label)}_{when}-" + (
        f"job{job}" if job else f"pid{os.getpid()}"
    )
    name, k = stem, 1
    while any(os.path.lexists(Path(folder) / f"{name}_{kind}") for kind in _KINDS):
        k += 1
        name = f"{stem}-{k}"
    return BatchLogs(folder, f"{name}_report.json", f"{name}_errors.tsv")


def participant_reports(output: str | os.PathLike) -> list[Path]:
    """Return the participant-level reports of ``output``, oldest first (by when written)."""
    found = Path(output, "logs").glob("participant_*_report.json")
    return sorted(found, key=lambda path: (path.stat().st_mtime_ns, path.name))
