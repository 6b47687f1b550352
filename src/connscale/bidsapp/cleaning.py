"""A run made ready for its measures, or the reason the data cannot support it.

Its temporal steps are planned (:mod:`connscale.bidsapp.temporal`: dummy
scans, motion filter, FD, censoring, ``--min-time``), its cleaning operator
is built and checked (degrees of freedom, a BOLD that varies), its BOLD and
confounds read and its region series cleaned.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from connscale._choices import MAP_MEASURES, REGION_MEASURES, VOXEL_MEASURES
from connscale._compute.memory import MemoryLimitError
from connscale._operator import (
    cleaning_operator,
    constant_series,
    load_confounds,
    residual_dof,
    xcpd_operator,
)
from connscale.bidsapp.atlas import atlas_on_grid, is_probabilistic
from connscale.bidsapp.config import ParticipantConfig
from connscale.bidsapp.decode import read_masked_bold, reading
from connscale.bidsapp.layout import BoldRun
from connscale.bidsapp.run_sets import needs_decode
from connscale.bidsapp.temporal import bpf_order, plan_temporal, uses_xcpd

__all__ = ["DecodedRun", "RunRefused", "check_dof", "check_min_time", "decode_run", "prefetch"]


class RunRefused(ValueError):
    """A run the data cannot support (too few degrees of freedom, constant BOLD).

    Attributes
    ----------
    details : dict
        The numbers behind the decision (e.g. :func:`connscale.denoise.residual_dof`).
    """

    def __init__(self, message: str, details: dict | None = None) -> None:
        super().__init__(message)
        self.details = dict(details or {})


@dataclass
class DecodedRun:
    """A run's inputs read into memory: what a task needs before its computation.

    ``data`` (the (T, V) float32 in-mask voxel series, in C order) is read only
    for the voxel-level measures and the report; ``region_means`` ((T, R)
    float64, the mean of each atlas region ``regions[r]`` over its in-mask
    voxels) only for the atlas-level measures, in the same pass over the file.
    ``context`` holds the confounds, the sample mask, the cleaning operator and
    the framewise displacement; ``seconds`` and ``clean_seconds`` time the
    BOLD's reading (decode stage) and the operator's making (clean stage);
    ``started`` is when the reading began (epoch seconds).
    """

    img: object
    mask: np.ndarray
    data: np.ndarray | None
    seconds: float
    atlas: np.ndarray | None = None
    region_means: np.ndarray | None = None
    regions: np.ndarray | None = None
    atlas_resampling: dict | None = None
    context: dict = field(default_factory=dict)
    clean_seconds: float = 0.0
    started: float | None = None


def _nilearn_params(config: ParticipantConfig) -> dict:
    """Return ``load_confounds_strategy``'s extra parameters: ``fd_thresh`` is 'scrubbing''s."""
    params = dict(config.strategy_params)
    if config.fd_thresh is None or config.strategy != "scrubbing":
        return params
    given = params.setdefault("fd_threshold", config.fd_thresh)
    if given != config.fd_thresh:
        raise ValueError(
            f"fd_thresh={config.fd_thresh:g} and strategy_params' fd_threshold={given:g} "
            "differ; give one."
        )
    return params


def _cleaning_context(config: ParticipantConfig, run: BoldRun, n_volumes: int) -> dict:
    """Return a run's cleaning context (see :class:`DecodedRun`).

    Keys: ``confounds``, ``sample_mask`` (the kept volume indices, None:
    all), ``operator`` (its rows: the kept volumes), ``series_operator``
    (the published series' rows: ``operator``, or with ``--output-type
    interpolated`` every volume after the dummy scans), ``dof``, ``fd`` (the
    FD the censoring used, over every volume), ``mean_fd``, ``motion`` (the
    filtered motion parameters, (T, 6), or None), ``dummy_scans``,
    ``fd_thresh``, ``t_r`` and ``temporal`` (the sidecars' ``TemporalSteps``).

    Raises
    ------
    RunRefused
        Fewer than ``--min-time`` seconds of low-motion volumes.
    ValueError
        One line naming the run: what the confounds lack, a band at or above
        Nyquist, ``--min-time`` longer than the run.
    """
    confounds, sample_mask = load_confounds(
        run.bold, config.strategy, confounds_file=run.confounds, **_nilearn_params(config)
    )
    plan = plan_temporal(config, run, n_volumes, sample_mask)
    check_min_time(config, run, plan)
    values = None if confounds is None else confounds.to_numpy()
    try:
        series_operator = _operator(config, run, n_volumes, values, plan)
    except MemoryLimitError:
        raise
    except ValueError as exc:  # a band at or above Nyquist: named with its run
        raise ValueError(f"{run.bold.name}: {exc}") from None
    operator = series_operator.low_motion()
    fd = plan.fd
    return {
        "confounds": confounds,
        "sample_mask": plan.sample_mask,
        "operator": operator,
        "series_operator": series_operator,
        "dof": residual_dof(operator, confounds=values, detrend=config.detrend),
        "fd": fd,
        "mean_fd": None if fd is None else float(fd.mean()),
        "motion": plan.motion,
        "dummy_scans": plan.dummy_scans,
        "fd_thresh": config.fd_thresh,
        "t_r": run.t_r,
        "temporal": plan.record,
    }


def _operator(config: ParticipantConfig, run: BoldRun, n_volumes: int, values, plan):
    """Return the run's cleaning operator: XCP-D's steps or nilearn's ``clean``."""
    band = {"low_pass": config.low_pass, "high_pass": config.high_pass, "t_r": run.t_r}
    if not uses_xcpd(config):
        return cleaning_operator(
            n_volumes,
            confounds=values,
            sample_mask=plan.sample_mask,
            detrend=config.detrend,
            **band,
        )
    return xcpd_operator(
        n_volumes,
        confounds=values,
        sample_mask=plan.kept,
        dummy_scans=plan.dummy_scans,
        detrend=config.detrend,
        filter_order=bpf_order(config),
        output_type=config.output_type,
        **band,
    )


def check_min_time(config: ParticipantConfig, run: BoldRun, plan) -> None:
    """Refuse a censored run left with fewer than ``config.min_time`` seconds of kept volumes.

    XCP-D's ``flag_bad_run``: the seconds of the volumes kept after the dummy
    scans (here also after nilearn's sample mask). Only with ``--fd-thresh``.

    Raises
    ------
    ValueError
        ``--min-time`` is longer than the run after its dummy scans.
    RunRefused
        Fewer seconds kept (or fewer than 2 volumes); ``details['censoring']``
        holds the numbers.
    """
    if config.fd_thresh is None:
        return
    left = int(plan.kept.size - plan.dummy_scans)
    duration = left * run.t_r
    if config.min_time > duration:
        raise ValueError(
            f"{run.bold.name}: --min-time {config.min_time:g} s is longer than the run "
            f"({left} volumes of {run.t_r:g} s after {plan.dummy_scans} dummy scans: "
            f"{duration:g} s)."
        )
    n_kept = int(plan.kept.sum())
    if plan.record["LowMotionSeconds"] >= config.min_time and n_kept >= 2:
        return
    raise RunRefused(
        f"{run.bold.name}: {n_kept} of {left} volumes kept with FD <= {config.fd_thresh:g} mm "
        f"({plan.record['LowMotionSeconds']:g} s), fewer than --min-time {config.min_time:g} s"
        f"{'' if n_kept >= 2 else ' (or 2 volumes)'}; not cleaned.",
        {"censoring": plan.record},
    )


def check_dof(config: ParticipantConfig, run: BoldRun, dof: dict) -> None:
    """Refuse a run whose residual degrees of freedom fall below ``config.min_dof``.

    Raises
    ------
    RunRefused
        Naming the volumes kept, the regressors (and their parts) and the
        degrees of freedom left; ``details`` holds them.
    """
    if round(dof["dof"], 6) >= config.min_dof:
        return
    parts = [f"{dof['confound_rank']} independent of {dof['confounds']} confounds"]
    parts += ["the trend"] * dof["detrend"] + ["the mean"]
    if dof["filter"]:
        parts.append(f"{dof['filter']:g} for the filter")
    raise RunRefused(
        f"{run.bold.name}: {dof['volumes_kept']} of {dof['volumes']} volumes kept, "
        f"{dof['regressors']:g} regressors ({', '.join(parts)}): {dof['dof']:g} residual "
        f"degrees of freedom, fewer than --min-dof {config.min_dof:g}; not cleaned.",
        {"dof": dof},
    )


def _check_varies(run: BoldRun, read, dtype: str) -> None:
    """Refuse a run whose BOLD is constant over time in every region or voxel read."""
    for values, what in ((read.region_means, "atlas region"), (read.data, "voxel of its mask")):
        if values is not None and values.shape[1] and constant_series(values, dtype=dtype).all():
            raise RunRefused(
                f"{run.bold.name} is constant over time in every {what} "
                f"({values.shape[1]}): no correlation can be computed.",
                {"constant": what},
            )


def decode_run(config: ParticipantConfig, run: BoldRun) -> DecodedRun:
    """Read a run's inputs (timed: decode and clean stages).

    One pass over the BOLD gathers what the run's measures need (see
    :class:`DecodedRun`); the atlas is taken onto the run's grid once per grid.
    The confounds are read and the run's cleaning operator is made here too,
    so that the serial runner's prefetch thread does it ahead of the compute.

    Raises
    ------
    RunRefused
        Before the BOLD's data are read, when the run's residual degrees of
        freedom fall below ``config.min_dof`` (:func:`check_dof`); after, when
        the BOLD is constant over time everywhere.
    """
    import nibabel as nib

    started = time.time()
    tic = time.perf_counter()
    with reading(run.bold):
        img = nib.load(run.bold)
    if img.ndim != 4:
        raise ValueError(f"{run.bold.name} is not a 4-D BOLD series (shape {img.shape}).")
    with reading(run.mask):
        mask_img = nib.load(run.mask)
        mask = np.asarray(mask_img.dataobj) > 0
    if mask_img.shape[:3] != img.shape[:3] or not np.allclose(
        mask_img.affine, img.affine, atol=1e-3
    ):
        raise ValueError(f"The mask {run.mask.name} is not on the grid of {run.bold.name}.")
    made = time.perf_counter()
    context = _cleaning_context(config, run, int(img.shape[3]))
    check_dof(config, run, context["dof"])
    clean_seconds = time.perf_counter() - made
    regional = any(m in REGION_MEASURES for m in config.measures)
    # Probabilistic maps: the voxels are read, their region series computed on the device.
    maps = regional and is_probabilistic(config.atlas)
    labelled = regional and not maps
    atlas, resampling = atlas_on_grid(config.atlas, img) if labelled else (None, None)
    read = read_masked_bold(
        run.bold,
        mask,
        labels=atlas,
        voxels=maps
        or config.reports
        or config.despike
        or config.write_denoised
        or any(m in VOXEL_MEASURES + MAP_MEASURES for m in config.measures),
    )
    for values in (read.data, read.region_means):
        if values is not None and not np.isfinite(values).all():
            raise ValueError(f"{run.bold.name} holds NaN or infinite values inside its mask.")
    _check_varies(run, read, config.dtype)
    seconds = time.perf_counter() - tic - clean_seconds
    return DecodedRun(
        img,
        mask,
        read.data,
        seconds,
        atlas=atlas,
        region_means=read.region_means,
        regions=read.regions,
        atlas_resampling=resampling,
        context=context,
        clean_seconds=clean_seconds,
        started=started,
    )


def prefetch(task: tuple) -> DecodedRun | None:
    """Read a run ahead of its task (:func:`decode_run`).

    Returns None when its sets are all published (nothing to read). What a
    reader process runs: this module and its imports hold no torch.
    """
    config, run = task
    return decode_run(config, run) if needs_decode(config, run) else None
