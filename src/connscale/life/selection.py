"""Model selection for LiFE: held-out RMSE of a gradient-direction split, and
a warm-started sweep over λ (both built on :func:`connscale.life.solve`)."""

from __future__ import annotations

import numpy as np
import torch

from connscale.life.api import solve
from connscale.life.encode import LiFEModel
from connscale.life.evaluate import cross_validated_rmse, split_directions, submodel
from connscale.life.operators import LiFEOperator

__all__ = ["lambda_sweep", "split_rmse"]


def _held_out_rmse(model: LiFEModel, op_b: LiFEOperator, mb: LiFEModel,
                   weights_kept) -> np.ndarray:
    """Per-voxel RMSE of the held-out half ``mb`` predicted from ``weights_kept``
    (the prediction demeaned per voxel, as the held-out signal is)."""
    pred = op_b.matvec(weights_kept)
    pred = pred - pred.mean(dim=1, keepdim=True)
    return (torch.sqrt(((mb.signal - pred).double() ** 2).mean(dim=1))
            * model.signal_scale.double()).cpu().numpy()


def split_rmse(model: LiFEModel, *, lam: float = 0.0, n_iter: int = 500, tol=1e-5,
               random_state=None, operator_options=None, checkpoint=None,
               checkpoint_every: int = 50) -> np.ndarray:
    """Cross-validated per-voxel RMSE by a gradient-direction split.

    Fits on one half of the directions and predicts the other half (the
    prediction demeaned per voxel, as the held-out signal is). ``checkpoint``
    and ``checkpoint_every`` are passed to :func:`connscale.life.solve`.
    """
    da, db = split_directions(model, random_state=random_state)
    ma, mb = submodel(model, da), submodel(model, db)
    fa = solve(ma, lam=lam, n_iter=n_iter, tol=tol, operator_options=operator_options,
               checkpoint=checkpoint, checkpoint_every=checkpoint_every)
    return _held_out_rmse(model, LiFEOperator(mb, **(operator_options or {})), mb,
                          fa.weights_kept)


def lambda_sweep(model: LiFEModel, lams, *, data_repeat=None, n_iter: int = 500, tol=1e-5,
                 random_state=None, verbose: int = 0, operator_options=None, checkpoint=None,
                 checkpoint_every: int = 50) -> list[dict]:
    """Fit each λ (warm-started from the previous one) and report the
    weight sum, non-zero count, objective and cross-validated median RMSE.

    Cross-validation uses ``data_repeat`` when given, otherwise a
    gradient-direction split (one split for all λ). ``checkpoint`` and
    ``checkpoint_every`` are passed to every :func:`connscale.life.solve`.
    """
    lams = [float(x) for x in lams]
    if not lams or any(not np.isfinite(x) or x < 0 for x in lams):
        raise ValueError(f"'lams' must be a non-empty list of finite values ≥ 0; got {lams}.")
    if data_repeat is None:
        da, db = split_directions(model, random_state=random_state)
        ma, mb = submodel(model, da), submodel(model, db)
        op_b = LiFEOperator(mb, **(operator_options or {}))
    saving = {"checkpoint": checkpoint, "checkpoint_every": checkpoint_every}
    rows = []
    x0 = x0a = None
    for lam in lams:
        fit = solve(model, lam=lam, n_iter=n_iter, tol=tol, x0=x0, verbose=verbose,
                    operator_options=operator_options, **saving)
        x0 = fit.weights_kept
        if data_repeat is not None:
            cv = cross_validated_rmse(model, fit.weights_kept, data_repeat)["rmse"]
        else:
            fa = solve(ma, lam=lam, n_iter=n_iter, tol=tol, x0=x0a, operator_options=operator_options,
                       **saving)
            x0a = fa.weights_kept
            cv = _held_out_rmse(model, op_b, mb, fa.weights_kept)
        w = fit.weights
        rows.append({
            "lam": lam,
            "weight_sum": float(w.sum()),
            "n_nonzero": int((w > 0).sum()),
            "cv_rmse_median": float(np.median(cv)),
            "rmse_median": float(np.median(fit.voxel_rmse)),
            "objective": float(fit.objective[-1]),
            "n_iter": fit.n_iter,
            "fit": fit,
        })
    return rows
