"""A run's temporal steps before cleaning, in XCP-D's order: what they keep, or why not.

From the run's confounds table and the options: the dummy scans
(``--dummy-scans``), the motion parameters through the respiration filter
(``--motion-filter-type``), the framewise displacement recomputed from them
with ``--head-radius``, the volumes ``--fd-thresh`` keeps, and whether the
run keeps ``--min-time`` seconds of them. The formulas are in
:mod:`connscale.motion`; the cleaning that follows is XCP-D's
(:func:`connscale.denoise.xcpd_operator`) when censoring, the interpolated
output or ``--bpf-order`` ask for it, else nilearn's. numpy and pandas only
(a reader process runs it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from connscale.bidsapp.config import ParticipantConfig
from connscale.bidsapp.layout import BoldRun
from connscale.motion import (
    MOTION_COLUMNS,
    check_motion_filter,
    dummy_scans,
    filter_motion,
    framewise_displacement,
    low_motion,
)

__all__ = ["TemporalPlan", "bpf_order", "plan_temporal", "uses_xcpd"]

#: XCP-D's Butterworth order (``--bpf-order``'s default there).
_XCPD_BPF_ORDER = 2


@dataclass(frozen=True)
class TemporalPlan:
    """What a run keeps before its cleaning.

    Attributes
    ----------
    dummy_scans : int
        Volumes dropped at the start.
    kept : ndarray of bool, shape (T,)
        The volumes the cleaning keeps: after the dummy scans, in nilearn's
        sample mask, with FD at most ``--fd-thresh``.
    fd : ndarray of shape (T,) or None
        The framewise displacement the censoring used (recomputed), else
        fMRIPrep's ``framewise_displacement`` column (None without it).
    motion : ndarray of shape (T, 6) or None
        The six motion parameters after the motion filter (as read without
        one); None when the confounds have none.
    record : dict
        The sidecars' ``TemporalSteps``: what was done, in numbers.
    """

    dummy_scans: int
    kept: np.ndarray
    fd: np.ndarray | None
    motion: np.ndarray | None
    record: dict

    @property
    def sample_mask(self) -> np.ndarray | None:
        """The kept volume indices (None: every volume)."""
        return None if self.kept.all() else np.flatnonzero(self.kept)


def uses_xcpd(config: ParticipantConfig) -> bool:
    """Return whether the runs are cleaned with XCP-D's steps, not nilearn's ``clean``."""
    return (
        config.fd_thresh is not None
        or config.output_type == "interpolated"
        or config.bpf_order is not None
    )


def _table(run: BoldRun):
    import pandas as pd

    if run.confounds is None:
        return None
    return pd.read_csv(run.confounds, sep="\t", na_values=["n/a"])


def _motion(config: ParticipantConfig, run: BoldRun, table, n_volumes: int):
    """Return the six motion parameters (filtered when asked), or None without them.

    Raises ValueError naming the run when the censoring or the filter needs
    a column the confounds lack, or the filter does not fit the run's TR.
    """
    needed = config.motion_filter_type is not None or config.fd_thresh is not None
    missing = [c for c in MOTION_COLUMNS if table is None or c not in table]
    if missing:
        if needed:
            raise ValueError(
                f"{run.bold.name}: the confounds have no {missing[0]!r} column: "
                "--fd-thresh and --motion-filter-type need the six motion parameters."
            )
        return None
    motion = table[list(MOTION_COLUMNS)].to_numpy(dtype=np.float64)
    if motion.shape[0] != n_volumes and not needed:  # used for nothing but the report's FD
        return None
    if motion.shape[0] != n_volumes:
        raise ValueError(
            f"{run.bold.name}: the confounds have {motion.shape[0]} rows for {n_volumes} volumes."
        )
    if config.motion_filter_type is None:
        return motion
    args = (config.band_stop_min, config.band_stop_max, config.motion_filter_order)
    try:
        check_motion_filter(config.motion_filter_type, run.t_r, *args)
    except ValueError as exc:
        raise ValueError(f"{run.bold.name}: {exc}") from None
    return filter_motion(np.nan_to_num(motion), run.t_r, config.motion_filter_type, *args)


def _recomputes_fd(config: ParticipantConfig) -> bool:
    """Whether FD is XCP-D's from the (filtered) parameters rather than fMRIPrep's column."""
    return (
        config.motion_filter_type is not None
        or config.fd_thresh is not None
        or config.head_radius != 50.0
    )


def _framewise_displacement(config: ParticipantConfig, table, motion, n_volumes: int):
    """Return the run's FD (None without it, or from a confounds file of another length)."""
    if _recomputes_fd(config) and motion is not None:
        return framewise_displacement(motion, config.head_radius)
    if table is None or "framewise_displacement" not in table or len(table) != n_volumes:
        return None
    return table["framewise_displacement"].fillna(0.0).to_numpy(dtype=float)


def plan_temporal(
    config: ParticipantConfig, run: BoldRun, n_volumes: int, sample_mask
) -> TemporalPlan:
    """Return a run's dummy scans, motion, FD and kept volumes.

    Parameters
    ----------
    config : ParticipantConfig
    run : BoldRun
    n_volumes : int
        T, the BOLD's volumes.
    sample_mask : ndarray of int or None
        nilearn's kept volumes (its preset's censoring, non-steady-state
        volumes), or None.

    Raises
    ------
    ValueError
        One line naming the run: a missing motion column, a filter band at or
        above Nyquist, dummy scans that leave fewer than 2 volumes,
        ``--min-time`` longer than the run.
    """
    table = _table(run)
    dummies = dummy_scans(config.dummy_scans, table)
    if dummies > n_volumes - 2:
        raise ValueError(
            f"{run.bold.name}: --dummy-scans {config.dummy_scans} leaves "
            f"{n_volumes - dummies} of its {n_volumes} volumes; at least 2 are needed."
        )
    motion = _motion(config, run, table, n_volumes)
    fd = _framewise_displacement(config, table, motion, n_volumes)
    kept = np.zeros(n_volumes, dtype=bool)
    kept[np.arange(n_volumes) if sample_mask is None else np.asarray(sample_mask)] = True
    kept[:dummies] = False
    if config.fd_thresh is not None:
        kept &= low_motion(fd, config.fd_thresh)
    seconds = float(kept.sum() * run.t_r) if run.t_r else None
    record = {
        "Cleaning": "xcpd" if uses_xcpd(config) else "nilearn",
        "DummyScans": dummies,
        "MotionFilter": _filter_record(config),
        "FramewiseDisplacement": (
            f"recomputed, head radius {config.head_radius:g} mm"
            if _recomputes_fd(config) and motion is not None
            else "fMRIPrep's framewise_displacement"
        ),
        "FDThreshold": config.fd_thresh,
        "VolumesCensored": int(n_volumes - dummies - kept.sum()),
        "LowMotionSeconds": seconds,
        "OutputType": config.output_type,
        "BandPassOrder": bpf_order(config) if (config.low_pass or config.high_pass) else None,
    }
    return TemporalPlan(dummies, kept, fd, motion, record)


def _filter_record(config: ParticipantConfig) -> dict | None:
    if config.motion_filter_type is None:
        return None
    return {
        "Type": config.motion_filter_type,
        "BandStopMin": config.band_stop_min,
        "BandStopMax": config.band_stop_max,
        "Order": config.motion_filter_order,
        "Units": "breaths per minute",
    }


def bpf_order(config: ParticipantConfig) -> int:
    """Return the Butterworth order the cleaning uses (nilearn's is 5, XCP-D's 2)."""
    if config.bpf_order is not None:
        return config.bpf_order
    return _XCPD_BPF_ORDER if uses_xcpd(config) else 5
