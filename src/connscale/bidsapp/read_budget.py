"""``memory_limit`` over the whole participant call: the runs read ahead are counted.

The participant level reads runs ahead of the one computing (reader threads
or processes, :class:`~connscale.engines.batch.ReadAheadEngine`; a GPU
worker's readers): each decoded run waits, whole, in memory (shared memory
for a reader process) until its turn. With ``memory_limit`` set, the call's
limit is shared out before the first read:

- among the runs computing at once (one per GPU worker, or ``n_jobs`` on a
  local Dask or Spark engine), evenly;
- within each share, the runs read ahead are held at the size of the largest
  run still to read (:func:`expected_held_bytes`, from the headers and masks:
  what :func:`~connscale.bidsapp.participant._held_bytes` counts once read),
  and no more are read ahead than fit in half the share, so the run computing
  keeps at least half: ``readers = min(asked, runs - 1, (share // 2) // run_bytes)``;
- each run's own limit (its :class:`~connscale.engines.batch.TaskBudget`) is
  the share less the runs waiting: ``share - readers * run_bytes``.

When not even one run fits in half the share, the serial path reads each run
in its own task (no reading ahead); a GPU worker keeps one reader. The plan is
recorded in the participant report (``memory``) and said in its notes when it
lowered the readers. A cluster's jobs (a scheduler's address, SLURM) each
have their own memory: there ``memory_limit`` is each run's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from connscale._choices import MAP_MEASURES, REGION_MEASURES, VOXEL_MEASURES
from connscale._compute.memory import format_bytes
from connscale._validation import parse_memory
from connscale.bidsapp.config import ParticipantConfig
from connscale.bidsapp.layout import BoldRun
from connscale.bidsapp.run_sets import needs_decode

__all__ = ["ReadAhead", "expected_held_bytes", "plan_read_ahead", "reads_voxels"]


@dataclass(frozen=True)
class ReadAhead:
    """How a call's ``memory_limit`` is shared out among the runs it holds.

    Attributes
    ----------
    readers : int
        Runs read ahead of each computing one (0: each run read in its task),
        never more than the runs to read less one.
    run_limit : int or None
        Each run's own ``memory_limit`` (None: no limit).
    run_bytes : int
        The largest run's expected held bytes (0 when nothing is to be read).
    asked : int
        The readers asked for.
    """

    readers: int
    run_limit: int | None
    run_bytes: int
    asked: int

    def record(self, memory_limit) -> dict:
        """Return the plan as the participant report records it (``memory``)."""
        return {
            "memory_limit": parse_memory(memory_limit),
            "run_limit": self.run_limit,
            "largest_run_bytes": self.run_bytes,
            "readers_asked": self.asked,
            "readers": self.readers,
        }

    def note(self) -> str | None:
        """Return the report's note when the limit lowered the readers, else None."""
        if self.readers >= self.asked:
            return None
        return (
            f"--memory-limit: {self.readers} run(s) read ahead instead of {self.asked}: "
            f"the largest run holds {format_bytes(self.run_bytes)}, and the run computing "
            f"keeps at least half of its share ({format_bytes(self.run_limit)} left to it)."
        )


def _atlas_sizes(atlas: str) -> tuple[int, bool]:
    """Return an atlas's regions (an upper bound of a run's) and whether it is probabilistic."""
    import nibabel as nib

    img = nib.load(atlas)
    if img.ndim == 4:  # maps: one region per volume
        return int(img.shape[3]), True
    labels = np.asarray(img.dataobj)
    return int(np.unique(labels[labels > 0]).size), False


def reads_voxels(config: ParticipantConfig, *, probabilistic: bool = False) -> bool:
    """Return whether a run's in-mask voxel series are read (not only region means)."""
    voxel_measures = any(m in VOXEL_MEASURES + MAP_MEASURES for m in config.measures)
    return probabilistic or bool(config.reports) or bool(config.despike) or voxel_measures


def expected_held_bytes(
    config: ParticipantConfig, run: BoldRun, n_regions: int, *, probabilistic: bool = False
) -> int:
    """Return the bytes a run will hold once read, from its header and mask.

    What :func:`~connscale.bidsapp.participant._held_bytes` counts after the
    read, with all volumes kept (an upper bound): the voxel series (float32)
    when they are read, the region means (float64), the mask and the atlas
    on the grid, and the widest cleaned series in ``config.dtype``; with
    ``reports``, the data of its report's figures too, which wait for a
    helper process after the run is computed
    (:func:`~connscale.bidsapp.report.figures_bytes`), and with regions
    the copies of its connectome and region series handed to a helper
    process to be written (:func:`connscale.bidsapp.beside.write`).
    """
    import nibabel as nib

    img = nib.load(run.bold)
    itemsize = np.dtype(config.dtype).itemsize
    if run.is_cifti:
        n_volumes, n_series = img.shape
        return n_volumes * n_series * (4 + itemsize)
    n_volumes, grid = int(img.shape[3]), int(np.prod(img.shape[:3]))
    n_voxels = int(np.count_nonzero(np.asarray(nib.load(run.mask).dataobj))) if run.mask else grid
    voxels = reads_voxels(config, probabilistic=probabilistic)
    regional = n_regions > 0
    held = grid + (grid * 4 if regional else 0)  # the mask; the atlas on the grid
    held += n_volumes * n_voxels * 4 if voxels else 0
    held += n_volumes * n_regions * 8 if regional else 0
    widths = [n_regions] if regional else []
    if voxels and any(m not in REGION_MEASURES for m in config.measures):
        widths.append(n_voxels)
    if regional:  # the tables handed to a helper process
        held += (n_regions + n_volumes) * n_regions * itemsize
    if config.reports and regional:
        from connscale.bidsapp.report import figures_bytes

        held += figures_bytes(n_volumes, n_voxels, grid, n_regions)
    return held + n_volumes * max(widths, default=0) * itemsize


def _run_bytes(tasks: list[tuple[ParticipantConfig, BoldRun]]) -> int:
    """Return the largest expected held bytes of the tasks' runs still to read."""
    sizes, largest = {}, 0
    for config, run in tasks:
        if run.problem or not needs_decode(config, run):
            continue
        regional = any(m in REGION_MEASURES for m in config.measures)
        if regional and config.file_format == "nifti" and config.atlas not in sizes:
            sizes[config.atlas] = _atlas_sizes(config.atlas)
        n_regions, probabilistic = sizes.get(config.atlas, (0, False)) if regional else (0, False)
        held = expected_held_bytes(config, run, n_regions, probabilistic=probabilistic)
        largest = max(largest, held)
    return largest


def plan_read_ahead(
    tasks: list[tuple[ParticipantConfig, BoldRun]],
    memory_limit: int | str | None,
    *,
    readers: int,
    computing: int = 1,
) -> ReadAhead:
    """Share ``memory_limit`` out among the runs computing and those read ahead.

    Parameters
    ----------
    tasks : list of (ParticipantConfig, BoldRun)
        The call's runs with their tasks' configs (atlas, measures); those
        already published are not read, so not counted.
    memory_limit : int, str or None
        The call's limit.
    readers : int
        Runs read ahead of each computing one, as asked.
    computing : int, default=1
        Runs computing at once (GPU workers, or a local engine's jobs).

    Returns
    -------
    ReadAhead
        The readers unchanged and no run limit when ``memory_limit`` is None.
    """
    limit = parse_memory(memory_limit)
    if limit is None:
        return ReadAhead(readers, None, 0, readers)
    share = limit // max(computing, 1)
    todo = [(c, r) for c, r in tasks if not r.problem and needs_decode(c, r)]
    run_bytes = _run_bytes(todo)
    waiting = min(readers, max(len(todo) - 1, 0))  # runs that can ever wait beside one
    fit = waiting if run_bytes == 0 else min(waiting, (share // 2) // run_bytes)
    return ReadAhead(fit, share - fit * run_bytes, run_bytes, readers)
