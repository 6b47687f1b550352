"""A CIFTI run made ready for its measures, or the reason it is refused.

fMRIPrep's grayordinate series (``*_space-fsLR_den-91k_bold.dtseries.nii``)
is read with :func:`connscale.io.cifti.read_cifti_series` (memory-mapped: the
file is uncompressed), its confounds and cleaning operator made as for a
volume run (:mod:`connscale.bidsapp.cleaning`), and checked before any
measure: its TR (the SeriesAxis step) must be the sidecar's
``RepetitionTime``, the atlas (a ``.dlabel.nii``) must be on its brain model,
its values finite, and not every grayordinate constant over time. What a
reader process runs: this module and its imports hold no torch.
"""

from __future__ import annotations

import functools
import math
import os
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from connscale._choices import REGION_MEASURES
from connscale._operator import constant_series
from connscale.bidsapp.cleaning import RunRefused, _cleaning_context, check_dof
from connscale.bidsapp.config import ParticipantConfig
from connscale.bidsapp.layout import BoldRun
from connscale.bidsapp.run_sets import needs_decode

__all__ = [
    "CIFTI_MEASURES",
    "CiftiDecoded",
    "check_cifti_atlas",
    "decode_cifti_run",
    "held_bytes",
    "prefetch_cifti",
    "read_only_series",
]

#: The measures of a CIFTI run: the atlas level's and the grayordinate maps
#: (``write_denoised`` adds its dtseries).
CIFTI_MEASURES = (*REGION_MEASURES, "maps", "alff", "reho")

#: How far the dtseries' TR may be from the sidecar's (relative): rounding in either file.
_TR_TOLERANCE = 1e-3


@contextmanager
def read_only_series():
    """Silence torch's warning on a read-only array: the memory-mapped series are only read."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        yield


@dataclass
class CiftiDecoded:
    """A CIFTI run's inputs: its series (memory-mapped), its atlas and its cleaning context.

    ``cifti`` is the :class:`~connscale.io.cifti.CiftiSeries` (``data``: the
    (T, N) float32 grayordinate series; ``brain_model``; ``series``: the
    SeriesAxis); ``atlas`` the :class:`~connscale.io.cifti.CiftiLabels` of the
    atlas (None without a region measure) and ``regions`` its label keys
    (every key of its table but 0, ascending); ``constant`` says which
    grayordinates are constant over time in the BOLD. ``context``,
    ``seconds``, ``clean_seconds`` and ``started`` as
    :class:`~connscale.bidsapp.cleaning.DecodedRun`'s.
    """

    cifti: object
    atlas: object | None
    regions: np.ndarray | None
    constant: np.ndarray
    seconds: float
    context: dict = field(default_factory=dict)
    clean_seconds: float = 0.0
    started: float | None = None

    @property
    def data(self) -> np.ndarray:
        """Return the (T, N) float32 grayordinate series."""
        return self.cifti.data

    def numbers(self) -> dict:
        """Return the run record's sizes: volumes, kept volumes and grayordinates."""
        return {
            "n_volumes": int(self.data.shape[0]),
            "n_kept": int(self.context["operator"].volumes.size),
            "n_grayordinates": int(self.data.shape[1]),
        }


def _check_t_r(run: BoldRun, cifti) -> None:
    """Refuse a run whose dtseries' TR is not its sidecar's ``RepetitionTime``."""
    if cifti.t_r is None:
        raise RunRefused(
            f"{run.bold.name}: its series axis is in {cifti.series.unit.lower()}, not seconds; "
            "no repetition time to check against the sidecar's.",
            {"t_r": {"sidecar": run.t_r, "series_unit": str(cifti.series.unit)}},
        )
    if not math.isclose(cifti.t_r, run.t_r, rel_tol=_TR_TOLERANCE):
        raise RunRefused(
            f"{run.bold.name}: its series step (TR) is {cifti.t_r:g} s but the sidecar's "
            f"RepetitionTime is {run.t_r:g} s; fix one of them.",
            {"t_r": {"sidecar": run.t_r, "series": cifti.t_r}},
        )


@functools.lru_cache(maxsize=2)
def _atlas_labels(path: str, stamp: tuple):
    """Return the atlas's labels, read once per process while the file (``stamp``) is unchanged."""
    from connscale.io.cifti import read_cifti_labels

    return read_cifti_labels(path)


def _read_atlas(config: ParticipantConfig, run: BoldRun, cifti):
    """Return the atlas's labels and keys, refusing it when it is on another brain model."""
    from connscale.io.cifti import check_same_brain_model

    stat = os.stat(config.atlas)
    atlas = _atlas_labels(str(config.atlas), (stat.st_mtime_ns, stat.st_size))
    try:
        check_same_brain_model(cifti, atlas, what=f"The atlas of {run.bold.name}")
    except ValueError as exc:
        raise RunRefused(str(exc), {"atlas": config.atlas}) from None
    return atlas, np.array(sorted(atlas.names), dtype=np.int64)


def check_cifti_atlas(path) -> None:
    """Check, once before any run, that the atlas is a ``.dlabel.nii`` with a parcel.

    Raises
    ------
    ValueError
        One line naming the file.
    """
    from connscale.io.cifti import read_cifti_labels

    atlas = read_cifti_labels(path)
    if not atlas.names or not (atlas.labels > 0).any():
        raise ValueError(f"The atlas {path.name} has no parcel (no label above 0 is used).")


def decode_cifti_run(config: ParticipantConfig, run: BoldRun) -> CiftiDecoded:
    """Read a CIFTI run's inputs and make its cleaning operator (timed as a volume run's).

    Raises
    ------
    RunRefused
        Its TR differs from the sidecar's, the atlas is on another brain
        model, too few residual degrees of freedom are left
        (:func:`~connscale.bidsapp.cleaning.check_dof`), or every grayordinate
        is constant over time.
    ValueError
        The file is not a CIFTI-2 dense series, or holds NaN or infinite values.
    """
    from nibabel.cifti2 import BrainModelAxis

    from connscale.io.cifti import read_cifti_series

    started = time.time()
    tic = time.perf_counter()
    cifti = read_cifti_series(run.bold)
    if not isinstance(cifti.brain_model, BrainModelAxis):
        raise ValueError(f"{run.bold.name} is not a dense series (its columns are parcels).")
    _check_t_r(run, cifti)
    atlas, regions = None, None
    if any(m in REGION_MEASURES for m in config.measures):
        atlas, regions = _read_atlas(config, run, cifti)
    made = time.perf_counter()
    context = _cleaning_context(config, run, int(cifti.data.shape[0]))
    check_dof(config, run, context["dof"])
    clean_seconds = time.perf_counter() - made
    if not np.isfinite(cifti.data).all():
        raise ValueError(f"{run.bold.name} holds NaN or infinite values.")
    constant = constant_series(cifti.data, dtype=config.dtype)
    if constant.all():
        raise RunRefused(
            f"{run.bold.name} is constant over time in every grayordinate "
            f"({constant.size}): no correlation can be computed.",
            {"constant": "grayordinate"},
        )
    seconds = time.perf_counter() - tic - clean_seconds
    return CiftiDecoded(
        cifti, atlas, regions, constant, seconds, context, clean_seconds, started=started
    )


def held_bytes(config: ParticipantConfig, decoded: CiftiDecoded) -> int:
    """Bytes a CIFTI run holds through its task.

    Its series (and, with ``despike``, their despiked copy) and their cleaned
    copies: the unstandardised one of the QC table's final DVARS (and the
    ALFF and ReHo maps), the standardised one of ``write_denoised`` and
    ``maps``, and with ``write_denoised`` and ``output_type='interpolated'``
    one of every published volume.
    """
    kept = decoded.context["operator"].volumes.size
    rows = kept
    if config.write_denoised or "maps" in config.measures:
        rows += kept
    every = decoded.context.get("series_operator", decoded.context["operator"])
    if config.write_denoised and every.interpolated is not None:
        rows += every.volumes.size
    read = decoded.data.nbytes * (2 if config.despike else 1)
    return read + rows * decoded.data.shape[1] * np.dtype(config.dtype).itemsize


def prefetch_cifti(task: tuple) -> CiftiDecoded | None:
    """Read a CIFTI run ahead of its task (None when its sets are all published)."""
    config, run = task
    return decode_cifti_run(config, run) if needs_decode(config, run) else None
