"""Evaluation of a LiFE fit.

Per-voxel RMSE, cross-validation against a second acquisition, the
gradient-direction split, and strength of evidence by virtual lesion (the
split's RMSE and the λ sweep, which solve, are in :mod:`connscale.life.api`).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import numpy.typing as npt
import torch

from connscale._validation import check_random_state
from connscale.life.encode import B0_THRESHOLD, LiFEModel, canonical_dictionary
from connscale.life.operators import LiFEOperator


def voxel_rmse(
    model: LiFEModel,
    weights_kept: npt.ArrayLike | torch.Tensor,
    *,
    signal: torch.Tensor | None = None,
    operator: LiFEOperator | None = None,
) -> np.ndarray:
    """sqrt(mean over directions of (b − M w)²) per model voxel (signal units).

    Parameters
    ----------
    model : LiFEModel
    weights_kept : array or Tensor of shape (n_fibres,)
        Weights of the kept fibres (model order).
    signal : Tensor of shape (n_voxels, n_directions) or None
        Demeaned signal to compare with (default: the model's b).
    operator : LiFEOperator or None
    """
    op = operator or LiFEOperator(model)
    w = torch.as_tensor(
        np.asarray(weights_kept) if not isinstance(weights_kept, torch.Tensor) else weights_kept
    )
    pred = op.matvec(w.to(model.device))
    b = model.signal if signal is None else signal.to(model.device, model.dtype)
    rmse = torch.sqrt(((b - pred).double() ** 2).mean(dim=1)) * model.signal_scale.double()
    return rmse.cpu().numpy()


def repeat_signal(model: LiFEModel, data: npt.ArrayLike) -> torch.Tensor:
    """Return a second acquisition's signal at the model voxels and directions, demeaned.

    ``data`` (X, Y, Z, n_volumes) must be on the model's grid with the same
    volumes (same b-values and directions, same order).
    """
    data = np.asarray(data)
    if data.ndim != 4 or data.shape[:3] != tuple(model.shape):
        raise ValueError(
            "The second acquisition must be a 4-D volume on the same grid "
            f"{tuple(model.shape)}; got shape {data.shape}."
        )
    if data.shape[3] <= int(model.volume_index.max()):
        raise ValueError(
            f"The second acquisition has {data.shape[3]} volumes; the first had at least "
            f"{int(model.volume_index.max()) + 1}."
        )
    v = model.voxels
    vals = data[v[:, 0], v[:, 1], v[:, 2]][:, model.volume_index].astype(np.float64)
    vals /= model.signal_scale.double().cpu().numpy()[:, None]
    vals -= vals.mean(axis=1, keepdims=True)
    return torch.as_tensor(vals, dtype=model.dtype, device=model.device)


def cross_validated_rmse(
    model: LiFEModel, weights_kept: npt.ArrayLike | torch.Tensor, data_repeat: npt.ArrayLike
) -> dict:
    """Per-voxel RMSE of the fit against a second acquisition.

    Parameters
    ----------
    model : LiFEModel
        From :func:`connscale.life.build_model`.
    weights_kept : array-like or torch.Tensor of shape (n_fibres,)
        The fit's weights (:attr:`LiFEFit.weights_kept`).
    data_repeat : array-like of shape (X, Y, Z, n_volumes)
        The second acquisition, on the scan's grid and directions.

    Returns
    -------
    dict with ``rmse`` (model vs repeat), ``rmse_data`` (scan vs repeat) and
    ``rrmse`` (their ratio, encode's Rrmse; < 1: the model predicts the
    repeat better than the scan itself), each of shape (n_voxels,).

    Examples
    --------
    >>> from connscale import life
    >>> from connscale.datasets import simulate_life_phantom
    >>> ph = simulate_life_phantom(20, 10, shape=(8, 8, 8), n_directions=12, random_state=0)
    >>> fit = life.fit(ph.dwi, ph.bvals, ph.bvecs, ph.streamlines, affine=ph.affine, lam=0.01,
    ...                device="cpu")
    >>> rmse = life.cross_validated_rmse(fit.model, fit.weights_kept, ph.dwi_repeat)
    >>> rmse["rrmse"].shape
    (166,)
    """
    b2 = repeat_signal(model, data_repeat)
    rmse = voxel_rmse(model, weights_kept, signal=b2)
    rmse_data = (
        (torch.sqrt(((model.signal - b2).double() ** 2).mean(dim=1)) * model.signal_scale.double())
        .cpu()
        .numpy()
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        rrmse = rmse / rmse_data
    return {"rmse": rmse, "rmse_data": rmse_data, "rrmse": rrmse}


def split_directions(
    model: LiFEModel, *, random_state: int | np.random.Generator | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Two halves of the diffusion directions (random, balanced per shell)."""
    rng = check_random_state(random_state)
    shells = np.round(model.bvals / 100).astype(int)
    a = []
    for s in np.unique(shells):
        idx = rng.permutation(np.flatnonzero(shells == s))
        a.extend(idx[: len(idx) // 2 + len(idx) % 2])
    a = np.sort(np.asarray(a, dtype=np.int64))
    b = np.setdiff1d(np.arange(model.n_directions), a)
    if len(a) < 2 or len(b) < 2:
        raise ValueError("A gradient-direction split needs at least 4 diffusion directions.")
    return a, b


def submodel(model: LiFEModel, directions: npt.ArrayLike) -> LiFEModel:
    """Return the model restricted to some directions (D rebuilt and de-medianed on them)."""
    directions = np.asarray(directions, dtype=np.int64)
    idx = torch.as_tensor(directions, device=model.device)
    raw = model.signal.index_select(1, idx).double() + model.signal_mean.double()[:, None]
    return _with_directions(
        model,
        raw,
        model.bvals[directions],
        model.bvecs[directions],
        model.volume_index[directions],
    )


def held_out_model(
    model: LiFEModel, data: npt.ArrayLike, bvals: npt.ArrayLike, bvecs: npt.ArrayLike
) -> LiFEModel:
    """Return the model at the diffusion-weighted directions of another scan of its grid.

    ``data`` (X, Y, Z, n_volumes) holds the same voxels, b=0 volumes,
    streamlines and mask as the fitted scan but other diffusion-weighted
    directions (those held out of the fit); Φ and S₀ are kept, D is built on
    the new directions and the signal read at the model voxels, as
    :func:`submodel` does on a subset of the model's own directions.

    Parameters
    ----------
    model : LiFEModel
    data : array of shape (X, Y, Z, n_volumes)
    bvals : array of shape (n_volumes,)
    bvecs : array of shape (n_volumes, 3)
        Unit vectors for the diffusion-weighted volumes.
    """
    data = np.asarray(data)
    if data.ndim != 4 or data.shape[:3] != tuple(model.shape):
        raise ValueError(
            f"The held-out scan must be a 4-D volume on the model's grid {tuple(model.shape)}; "
            f"got shape {data.shape}."
        )
    dw = np.flatnonzero(np.asarray(bvals) > B0_THRESHOLD)
    if dw.size < 2:
        raise ValueError(
            f"The held-out scan needs at least 2 diffusion-weighted volumes; got {dw.size}."
        )
    v = model.voxels
    vals = data[v[:, 0], v[:, 1], v[:, 2]][:, dw].astype(np.float64)
    vals /= model.signal_scale.double().cpu().numpy()[:, None]
    bvecs = np.asarray(bvecs, dtype=np.float64)[dw]
    return _with_directions(
        model,
        torch.as_tensor(vals, device=model.device),
        np.asarray(bvals, dtype=np.float64)[dw],
        bvecs / np.linalg.norm(bvecs, axis=1, keepdims=True),
        dw,
    )


def _with_directions(
    model: LiFEModel,
    raw: torch.Tensor,
    bvals: np.ndarray,
    bvecs: np.ndarray,
    volume_index: np.ndarray,
) -> LiFEModel:
    """Return ``model`` with D rebuilt on (bvals, bvecs) and ``raw`` as its signal.

    ``raw`` (float64, n_voxels × n_directions, in signal / scale units) is
    demeaned per voxel.
    """
    D = canonical_dictionary(
        bvals, bvecs, model.atoms, centre="median" if model.formulation == "encode" else "mean"
    )
    mean = raw.mean(dim=1)
    return dataclasses.replace(
        model,
        dictionary=torch.as_tensor(D, dtype=model.dtype, device=model.device),
        signal=(raw - mean[:, None]).to(model.dtype),
        signal_mean=mean.to(model.dtype),
        bvals=bvals,
        bvecs=bvecs,
        volume_index=volume_index,
    )


def strength_of_evidence(
    model: LiFEModel,
    weights_kept: npt.ArrayLike | torch.Tensor,
    fibres: npt.ArrayLike,
    *,
    n_boot: int = 5000,
    n_mc: int = 5,
    random_state: int | np.random.Generator | None = None,
) -> dict:
    """Compute the strength of evidence of a fascicle by virtual lesion.

    As encode's ``feComputeVirtualLesion`` + ``feComputeEvidence``.

    In the voxels the fascicle's kept fibres touch, the voxel RMSE with the
    weights and with the fascicle's weights set to 0 (no refit); ``n_mc``
    Monte-Carlo runs of ``n_boot`` bootstrap means of each;
    S = (mean_lesion − mean_nolesion) / sqrt(sd_nolesion² + sd_lesion²),
    averaged over the runs.

    Parameters
    ----------
    model : LiFEModel
    weights_kept : array or Tensor of shape (n_fibres,)
    fibres : array of int or bool
        Input streamline indices (or a boolean mask over input streamlines).

    Returns
    -------
    dict with ``strength`` (S), ``rmse_lesion``, ``rmse_nolesion``
    (per touched voxel) and ``n_voxels``.

    Examples
    --------
    >>> from connscale import life
    >>> from connscale.datasets import simulate_life_phantom
    >>> ph = simulate_life_phantom(20, 10, shape=(8, 8, 8), n_directions=12, random_state=0)
    >>> fit = life.fit(ph.dwi, ph.bvals, ph.bvecs, ph.streamlines, affine=ph.affine, lam=0.01,
    ...                device="cpu")
    >>> evidence = life.strength_of_evidence(fit.model, fit.weights_kept, range(10), n_boot=200,
    ...                                      random_state=0)
    >>> evidence["n_voxels"] > 0
    True
    """
    rng = check_random_state(random_state)
    fibres = np.asarray(fibres)
    if fibres.dtype == bool:
        if fibres.shape != (model.n_streamlines,):
            raise ValueError(
                f"A boolean 'fibres' mask must have {model.n_streamlines} entries; "
                f"got {fibres.shape}."
            )
        fibres = np.flatnonzero(fibres)
    if fibres.size and (fibres.min() < 0 or fibres.max() >= model.n_streamlines):
        raise ValueError(f"'fibres' indices must lie in [0, {model.n_streamlines}).")
    in_tract = np.isin(model.fibre_index, fibres)
    w = torch.as_tensor(
        np.asarray(weights_kept) if not isinstance(weights_kept, torch.Tensor) else weights_kept
    ).to(model.device, torch.float64)
    lesion = w.clone()
    mask_t = torch.as_tensor(in_tract, device=model.device)
    lesion[mask_t] = 0
    touched = mask_t[model.entry_fibre] & (w[model.entry_fibre] > 0)
    vox = torch.unique(model.entry_voxel()[touched]).cpu().numpy()
    if vox.size == 0:
        raise ValueError(
            "The fascicle has no kept, non-zero-weight fibre in the model; no evidence to compute."
        )
    op = LiFEOperator(model)
    r_no = voxel_rmse(model, w, operator=op)[vox]
    r_le = voxel_rmse(model, lesion, operator=op)[vox]
    n = len(vox)
    strengths = []
    for _ in range(int(n_mc)):
        means_no = np.empty(n_boot)
        means_le = np.empty(n_boot)
        step = max(1, (1 << 22) // n)
        for s in range(0, n_boot, step):
            e = min(n_boot, s + step)
            idx = rng.integers(0, n, size=(e - s, n))
            means_no[s:e] = r_no[idx].mean(axis=1)
            means_le[s:e] = r_le[idx].mean(axis=1)
        sd = np.sqrt(means_no.std() ** 2 + means_le.std() ** 2)
        strengths.append((means_le.mean() - means_no.mean()) / sd if sd > 0 else np.inf)
    return {
        "strength": float(np.mean(strengths)),
        "rmse_lesion": r_le,
        "rmse_nolesion": r_no,
        "n_voxels": n,
    }
