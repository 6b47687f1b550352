"""``connscale.life.fit`` and the ``LiFE`` estimator.

From a dMRI scan and a tractogram to streamline weights (LiFE, or ReAl-LiFE
with λ > 0).
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from numbers import Integral, Real
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import torch
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from connscale._choices import LIFE_FORMULATIONS
from connscale._compute import MemoryPlanner, parse_memory, planner_for, resolve_device
from connscale._docs import fill_doc
from connscale._validation import (
    Interval,
    SequenceOf,
    StrOptions,
    skip_nested_validation,
    validate_estimator_params,
    validate_params,
)
from connscale.io.streamlines import StreamlineArray, load_streamlines
from connscale.life._checkpoint import SolverCheckpoint, solver_key
from connscale.life.encode import (
    B0_THRESHOLD,
    MEMORY_HINT,
    LiFEModel,
    _check_gradients,
    build_model,
)
from connscale.life.evaluate import (
    cross_validated_rmse,
    held_out_model,
    split_directions,
    strength_of_evidence,
    submodel,
    voxel_rmse,
)
from connscale.life.operators import LiFEOperator
from connscale.life.sbb import sbb_nnls

if TYPE_CHECKING:
    from typing import TypeAlias

    from dipy.core.sphere import Sphere
    from nibabel.nifti1 import Nifti1Image
    from nibabel.spatialimages import SpatialImage

    from connscale.io.streamlines import StreamlinesLike

    #: A diffusion (or mask) image: a NIfTI path, a nibabel image or an array.
    ImageLike: TypeAlias = str | os.PathLike | SpatialImage | npt.ArrayLike


# --------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------
def _is_path(x: object) -> bool:
    return isinstance(x, (str, os.PathLike))


def load_dwi(
    dwi: ImageLike, affine: npt.ArrayLike | None = None
) -> tuple[np.ndarray, np.ndarray, SpatialImage | None]:
    """Return (data (X, Y, Z, n), affine, image or None) from a path, image or array."""
    image = None
    if _is_path(dwi):
        from connscale.io.nifti import load_image

        if not os.path.exists(dwi):
            raise FileNotFoundError(f"dMRI file not found: '{dwi}'.")
        image = load_image(dwi, name="dMRI image")
    elif hasattr(dwi, "dataobj") and hasattr(dwi, "affine"):
        image = dwi
    if image is not None:
        from connscale.io.nifti import read_data

        data = np.asarray(read_data(image, name="dMRI image"))
        img_affine = np.asarray(image.affine, dtype=np.float64)
        if affine is not None and not np.allclose(affine, img_affine, atol=1e-4):
            raise ValueError(
                "'affine' differs from the dMRI image's own affine; pass one or the other."
            )
        affine = img_affine
    else:
        data = np.asarray(dwi)
        if affine is None:
            raise ValueError("'affine' (voxel to RAS+ mm, 4 × 4) is needed when 'dwi' is an array.")
    if data.ndim != 4:
        raise ValueError(
            f"'dwi' must be a 4-D volume (X, Y, Z, n_volumes); got shape {data.shape}."
        )
    if not np.issubdtype(data.dtype, np.number):
        raise ValueError(f"'dwi' must hold numbers; got dtype {data.dtype}.")
    return data, np.asarray(affine, dtype=np.float64), image


def load_gradients(
    bvals: str | os.PathLike | npt.ArrayLike, bvecs: str | os.PathLike | npt.ArrayLike
) -> tuple[np.ndarray, np.ndarray]:
    """b-values (n,) and directions (n, 3) from FSL-style files or arrays."""
    if _is_path(bvals):
        bvals = _read_table(bvals, "bvals", ndmin=1)
    if _is_path(bvecs):
        bvecs = _read_table(bvecs, "bvecs", ndmin=2)
    bvals = np.asarray(bvals, dtype=np.float64).ravel()
    bvecs = np.asarray(bvecs, dtype=np.float64)
    if bvecs.ndim == 2 and bvecs.shape[0] == 3 and bvecs.shape[1] != 3:
        bvecs = bvecs.T
    return bvals, bvecs


def _read_table(path: str | os.PathLike, name: str, *, ndmin: int) -> np.ndarray:
    """Numbers of an FSL-style text file, with a one-line error naming it."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"{name} file not found: '{path}'.")
    try:
        return np.loadtxt(os.fspath(path), ndmin=ndmin)
    except ValueError as exc:
        raise ValueError(f"Cannot read '{name}' file {path} as numbers: {exc}") from exc


def load_volume(img: ImageLike | None, name: str) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Return a 3-D array from a path, image or array (mask, labels)."""
    if img is None:
        return None, None
    affine = None
    if _is_path(img):
        from connscale.io.nifti import load_image

        if not os.path.exists(img):
            raise FileNotFoundError(f"{name} file not found: '{img}'.")
        img = load_image(img, name=name)
    if hasattr(img, "dataobj"):
        from connscale.io.nifti import read_data

        affine = np.asarray(img.affine, dtype=np.float64)
        img = np.asarray(read_data(img, name=name))
    data = np.asarray(img)
    if data.ndim == 4 and data.shape[3] == 1:
        data = data[..., 0]
    if data.ndim != 3:
        raise ValueError(f"'{name}' must be a 3-D volume; got shape {data.shape}.")
    return data, affine


def check_space(
    streamlines: StreamlineArray, shape: tuple[int, ...], affine: npt.ArrayLike
) -> None:
    """Raise when a .trk header's space differs from the dMRI's."""
    src = streamlines.source
    header = getattr(src, "header", None)
    if header is None or streamlines.path is None or not streamlines.path.lower().endswith(".trk"):
        return
    import nibabel as nib

    fields = nib.streamlines.Field
    dims = tuple(int(d) for d in header[fields.DIMENSIONS])
    vox2ras = np.asarray(header[fields.VOXEL_TO_RASMM], dtype=np.float64)
    if dims == (1, 1, 1) and np.allclose(vox2ras, np.eye(4)):
        return  # nibabel's default header: no reference space recorded
    if dims != tuple(shape) or not np.allclose(vox2ras, affine, atol=1e-3):
        raise ValueError(
            "The tractogram's space does not match the dMRI: .trk header has dimensions "
            f"{dims} and voxel-to-RAS affine\n{np.round(vox2ras, 4)}\nbut the dMRI "
            f"has {tuple(shape)} and\n"
            f"{np.round(affine, 4)}.\nRegister the tractogram to the dMRI first."
        )


class DiffusionData:
    """A dMRI scan, its gradients and a tractogram, indexed by direction.

    Its samples are the diffusion-weighted directions: ``len`` and ``shape``
    count them and indexing keeps some of them (with every b=0 volume, for
    S₀), so that scikit-learn's splitters (``KFold``, ``GridSearchCV``,
    ``cross_val_score``) cross-validate :class:`LiFE` over directions: fit
    the weights on some, predict the signal of the others.

    Parameters
    ----------
    dwi, bvals, bvecs, streamlines, affine, mask
        As in :func:`fit`; read here once.

    Attributes
    ----------
    dwi : ndarray of shape (X, Y, Z, n_volumes)
    bvals : ndarray of shape (n_volumes,)
    bvecs : ndarray of shape (n_volumes, 3)
    streamlines : StreamlineArray
    affine : ndarray of shape (4, 4)
    mask : ndarray of shape (X, Y, Z) or None
    shape : tuple of int
        ``(n_directions,)``: the diffusion-weighted volumes (b > 50).
    """

    def __init__(
        self,
        dwi: ImageLike,
        bvals: str | os.PathLike | npt.ArrayLike,
        bvecs: str | os.PathLike | npt.ArrayLike,
        streamlines: StreamlinesLike,
        *,
        affine: npt.ArrayLike | None = None,
        mask: ImageLike | None = None,
    ) -> None:
        self.dwi, self.affine, _ = load_dwi(dwi, affine=affine)
        bvals, bvecs = load_gradients(bvals, bvecs)
        self.bvals, self.bvecs = _check_gradients(bvals, bvecs, self.dwi.shape[3])
        self.mask, _ = load_volume(mask, "mask")
        self.streamlines = load_streamlines(streamlines)

    @property
    def shape(self) -> tuple[int]:
        """The number of diffusion-weighted directions, as ``(n_directions,)``."""
        return (int(np.count_nonzero(self.bvals > B0_THRESHOLD)),)

    def __len__(self) -> int:
        """Return the number of diffusion-weighted directions."""
        return self.shape[0]

    def __getitem__(self, key: object) -> DiffusionData:
        """Return the data at some diffusion-weighted directions and every b=0 volume.

        ``key`` is an int, slice, integer or boolean array over
        ``range(len(self))``.
        """
        if isinstance(key, tuple):  # scikit-learn's _safe_indexing: X[key, ...]
            if len(key) != 2 or key[1] is not Ellipsis:
                raise IndexError(f"DiffusionData takes one index (directions); got {key!r}.")
            key = key[0]
        directions = np.flatnonzero(self.bvals > B0_THRESHOLD)
        volumes = np.union1d(np.flatnonzero(self.bvals <= B0_THRESHOLD), directions[key])
        subset = copy.copy(self)
        subset.dwi = np.take(self.dwi, volumes, axis=3)
        subset.bvals, subset.bvecs = self.bvals[volumes], self.bvecs[volumes]
        return subset

    def __repr__(self) -> str:
        """Return the sizes of the data."""
        return (
            f"DiffusionData(n_directions={len(self)}, "
            f"n_b0={int(np.count_nonzero(self.bvals <= B0_THRESHOLD))}, "
            f"grid={self.dwi.shape[:3]}, n_streamlines={len(self.streamlines)})"
        )


# --------------------------------------------------------------------------
# Memory
# --------------------------------------------------------------------------
# Bytes per streamline point of one build chunk's temporaries (~110 measured
# on the CPU), and kept per point at worst (a 64-bit key and count per
# (voxel, atom, fibre), twice while they are sorted).
_BUILD_BYTES_PER_POINT = 160
_KEY_BYTES_PER_POINT = 32
# Bytes per element of a chunk of the operator's products.
_OPERATOR_BYTES_PER_ELEMENT = 64


def plan_memory(
    memory_limit: int | str | MemoryPlanner | None,
    *,
    device: str | torch.device,
    n_points: int,
    loaded_bytes: int = 0,
) -> tuple[int, dict | None]:
    """Build chunk and operator options that keep LiFE within ``memory_limit``.

    Parameters
    ----------
    memory_limit : int, str, MemoryPlanner or None
        The user's limit, or the call's planner (counted into: the loaded
        bytes are reserved in it).
    device : str or torch.device
    n_points : int
        Streamline points (nodes) of the tractogram.
    loaded_bytes : int, default=0
        Bytes already taken by the inputs this run loaded (the dMRI volume).

    Returns
    -------
    chunk_points : int
        Points per build chunk (see :func:`connscale.life.encode.build_model`).
    operator_options : dict or None
        ``chunk_size`` of :class:`~connscale.life.operators.LiFEOperator`.

    Raises
    ------
    MemoryLimitError
        When the loaded inputs and the model's keys cannot fit, at worst.
    """
    planner = planner_for(resolve_device(device), memory_limit, hint=MEMORY_HINT)
    planner.reserve_host(loaded_bytes)
    if parse_memory(planner.memory_limit) is None:
        return 1 << 23, None
    budget = planner.device_budget
    chunk_points = max(1 << 12, budget // (4 * _BUILD_BYTES_PER_POINT))
    planner.require(
        _KEY_BYTES_PER_POINT * n_points + _BUILD_BYTES_PER_POINT * min(chunk_points, n_points),
        f"The LiFE model of {n_points} streamline points (at worst)",
    )
    return chunk_points, {"chunk_size": max(1 << 12, budget // (4 * _OPERATOR_BYTES_PER_ELEMENT))}


# --------------------------------------------------------------------------
# Fit result
# --------------------------------------------------------------------------
@dataclass
class LiFEFit:
    """Result of :func:`fit` / :func:`solve`.

    Attributes
    ----------
    model : LiFEModel
        Φ, D, S₀, voxel indices and the demeaned signal.
    weights : ndarray of shape (n_streamlines,)
        One weight per input streamline; 0 for dropped ones.
    weights_kept : Tensor of shape (n_fibres,), float64
        The weights of the model's fibres (model order).
    objective : list of float
        ½‖Mw − b‖² + λ·Σ h_f w_f per update (index 0: the start).
    lam : float
    n_iter : int
    stop_reason : str
    column_scale : Tensor of shape (n_fibres,)
        The preconditioner h_f.
    resumed_from : int
        The solver iteration it resumed from (0: solved from the start).
    streamlines : StreamlineArray or None
        The input streamlines (set by :func:`fit`).
    cv_rmse : ndarray of shape (n_voxels,) or None
        Cross-validated RMSE per model voxel (set by :func:`fit` with
        ``cross_validate=True`` or ``dwi_repeat``).
    lambda_sweep : list of dict or None
        One row per λ of :func:`fit`'s ``lambdas`` (``lam``, ``weight_sum``,
        ``n_nonzero``, ``cv_rmse_median``, ``rmse_median``, ``objective``,
        ``n_iter``); this fit is the row with the lowest ``cv_rmse_median``.
    timings : dict
        Seconds spent by :func:`fit` in each step (``load``, ``build``,
        ``solve``, ``cross_validation`` or ``lambda_sweep``).
    """

    model: LiFEModel
    weights: np.ndarray
    weights_kept: torch.Tensor
    objective: list
    lam: float
    n_iter: int
    stop_reason: str
    column_scale: torch.Tensor
    data_term: list = field(default_factory=list)
    resumed_from: int = 0
    streamlines: StreamlineArray | None = None
    cv_rmse: np.ndarray | None = None
    lambda_sweep: list | None = None
    timings: dict = field(default_factory=dict)
    _rmse: np.ndarray | None = field(default=None, repr=False)

    @property
    def voxel_rmse(self) -> np.ndarray:
        """RMSE per model voxel (signal units), shape (n_voxels,)."""
        if self._rmse is None:
            self._rmse = voxel_rmse(self.model, self.weights_kept)
        return self._rmse

    def rmse_volume(self) -> np.ndarray:
        """Return the voxel RMSE as a 3-D volume (NaN outside the model voxels)."""
        vol = np.full(self.model.shape, np.nan, dtype=np.float32)
        v = self.model.voxels
        vol[v[:, 0], v[:, 1], v[:, 2]] = self.voxel_rmse
        return vol

    def rmse_image(self) -> Nifti1Image:
        """Return the voxel RMSE map as a nibabel NIfTI image."""
        import nibabel as nib

        return nib.Nifti1Image(self.rmse_volume(), self.model.affine)

    def predict(
        self,
        bvals: str | os.PathLike | npt.ArrayLike | None = None,
        bvecs: str | os.PathLike | npt.ArrayLike | None = None,
        *,
        demeaned: bool = False,
    ) -> np.ndarray:
        """Predicted diffusion signal at the model voxels.

        Parameters
        ----------
        bvals, bvecs : arrays or None
            Other diffusion-weighted directions to predict (default: the
            fitted ones).
        demeaned : bool, default=False
            Return M w (demeaned per voxel) instead of M w + the voxel's
            measured mean signal.

        Returns
        -------
        ndarray of shape (n_voxels, n_directions)
        """
        D = None
        if bvals is not None or bvecs is not None:
            if bvals is None or bvecs is None:
                raise ValueError("Pass both 'bvals' and 'bvecs' to predict other directions.")
            bvals, bvecs = load_gradients(bvals, bvecs)
            if bvecs.shape != (len(bvals), 3):
                raise ValueError(f"'bvecs' must have shape ({len(bvals)}, 3); got {bvecs.shape}.")
            D = self.model.dictionary_for(
                bvals, bvecs / np.linalg.norm(bvecs, axis=1, keepdims=True)
            )
        op = LiFEOperator(self.model, dictionary=D)
        pred = op.matvec(self.weights_kept)
        if not demeaned:
            pred = pred + self.model.signal_mean[:, None]
        pred = pred * self.model.signal_scale[:, None]
        return pred.double().cpu().numpy()

    def strength_of_evidence(
        self,
        fibres: npt.ArrayLike,
        *,
        n_boot: int = 5000,
        n_mc: int = 5,
        random_state: int | np.random.Generator | None = None,
    ) -> dict:
        """Return the strength of evidence of the fascicle ``fibres``.

        ``fibres`` are input indices or a mask; see
        :func:`connscale.life.evaluate.strength_of_evidence`.
        """
        return strength_of_evidence(
            self.model,
            self.weights_kept,
            fibres,
            n_boot=n_boot,
            n_mc=n_mc,
            random_state=random_state,
        )

    def cross_validate(self, dwi_repeat: ImageLike) -> dict:
        """Return the per-voxel RMSE against a second acquisition.

        ``dwi_repeat`` is an array, image or path on the same grid; see
        :func:`connscale.life.evaluate.cross_validated_rmse`.
        """
        data, _, _ = load_dwi(dwi_repeat, affine=self.model.affine)
        return cross_validated_rmse(self.model, self.weights_kept, data)


# --------------------------------------------------------------------------
# Solve and fit
# --------------------------------------------------------------------------
def lambda_max(model: LiFEModel) -> float:
    """Smallest λ whose solution is all zeros: max_f (M'ᵀ b)_f (preconditioned)."""
    op = LiFEOperator(model)
    h = op.column_norms_sq()
    g = LiFEOperator(model, column_scale=h).rmatvec(model.signal)
    return max(0.0, float(g.max()))


# Declared once for fit, solve and the LiFE estimator.
_PARAMETER_CONSTRAINTS = {
    "lam": [Interval(Real, 0, None, closed="left")],
    "max_iter": [Interval(Integral, 1, None, closed="left")],
    "tol": [Interval(Real, 0, None, closed="left"), None],
    "formulation": [StrOptions(set(LIFE_FORMULATIONS))],
    "device": ["device", None],
    "dtype": ["dtype"],
    "cross_validate": ["boolean"],
    "random_state": ["random_state"],
    "memory_limit": ["memory", MemoryPlanner, None],
    "verbose": [Interval(Integral, 0, None, closed="left"), "boolean"],
    "checkpoint_every": [Interval(Integral, 1, None, closed="left")],
    "lambdas": [SequenceOf(Interval(Real, 0, None, closed="left")), None],
}
_SOLVE_PARAMETERS = ("lam", "max_iter", "tol", "verbose", "checkpoint_every")
_ESTIMATOR_PARAMETERS = (
    "lam",
    "max_iter",
    "tol",
    "formulation",
    "device",
    "dtype",
    "cross_validate",
    "random_state",
    "verbose",
)


@validate_params({k: _PARAMETER_CONSTRAINTS[k] for k in _SOLVE_PARAMETERS})
def solve(
    model: LiFEModel,
    *,
    lam: float = 0.0,
    max_iter: int = 500,
    tol: float | None = 1e-5,
    x0: npt.ArrayLike | torch.Tensor | None = None,
    verbose: int = 0,
    callback: Callable[[int, torch.Tensor, float], object] | None = None,
    operator_options: dict | None = None,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: int = 50,
) -> LiFEFit:
    """Weights of a built model by preconditioned SBB-NNLS.

    The columns of M are divided by h_f = Σ val²‖D[:, a]‖² (the reference's
    preconditioner), the problem ``½‖M'x' − b‖² + λ·1ᵀx'`` solved, and
    w = x'/h. λ therefore acts as in ReAl-LiFE (a column-norm-weighted L1 on
    w) and is in weight units: λ ≥ :func:`lambda_max` gives all zeros.

    Parameters
    ----------
    model : LiFEModel
    lam : float, default=0
    max_iter : int, default=500
        The reference's ``maxit`` (``max_iter − 1`` updates at most).
    tol : float or None, default=1e-5
        Projected-gradient and objective-change thresholds; None runs all
        ``max_iter`` iterations.
    x0 : array or Tensor of shape (n_fibres,) or None
        Warm start (weights of the model's fibres).
    verbose : int, default=0
    callback : callable or None
        ``callback(k, x, objective)`` after each update.
    operator_options : dict or None
        Keyword arguments of :class:`~connscale.life.operators.LiFEOperator`
        (kernel choices, chunk size).
    checkpoint : path or None, default=None
        A folder where the solver's state (the weights, gradients and
        objective history) is saved every ``checkpoint_every`` updates and
        at the stop, in a file named after this problem's fingerprint (the
        model's signal and column scales, ``lam``, ``max_iter``, ``tol``,
        ``x0``). A solve of the same problem resumes from it, with the
        iterates of an uninterrupted run; one that had finished returns at
        once. Several solves can share a folder.
    checkpoint_every : int, default=50
        Updates between checkpoints.

    Returns
    -------
    LiFEFit
    """
    lam = float(lam)
    base = LiFEOperator(model, **(operator_options or {}))
    h = base.column_norms_sq()
    h = torch.where(h > 0, h, torch.ones_like(h))
    op = LiFEOperator(model, column_scale=h, **(operator_options or {}))
    xp0 = None
    if x0 is not None:
        x0 = torch.as_tensor(np.asarray(x0) if not isinstance(x0, torch.Tensor) else x0)
        if x0.shape != (model.n_fibres,):
            raise ValueError(
                f"'x0' must have one weight per model fibre ({model.n_fibres}); got "
                f"{tuple(x0.shape)}."
            )
        xp0 = x0.to(model.device, torch.float64) * h
    state = saver = None
    if checkpoint is not None:
        saved = SolverCheckpoint(
            checkpoint, solver_key(model.signal, h, x0=xp0, lam=lam, n_iter=int(max_iter), tol=tol)
        )
        state, saver = saved.load(), saved.save
    res = sbb_nnls(
        op,
        model.signal,
        lam=lam,
        max_iter=int(max_iter),
        tol_grad=tol,
        tol_obj=tol,
        x0=xp0,
        verbose=verbose,
        callback=callback,
        state=state,
        save_state=saver,
        state_every=int(checkpoint_every),
    )
    w_kept = res.x / h
    weights = np.zeros(model.n_streamlines, dtype=np.float64)
    weights[model.fibre_index] = w_kept.cpu().numpy()
    return LiFEFit(
        model=model,
        weights=weights,
        weights_kept=w_kept,
        objective=res.objective,
        lam=lam,
        n_iter=res.n_iter,
        stop_reason=res.stop_reason,
        column_scale=h,
        data_term=res.data_term,
        resumed_from=0 if state is None else state["k"],
    )


def _held_out_rmse(
    model: LiFEModel, op_b: LiFEOperator, mb: LiFEModel, weights_kept: torch.Tensor
) -> np.ndarray:
    """Return the per-voxel RMSE of the held-out half ``mb`` predicted from ``weights_kept``.

    The prediction is demeaned per voxel, as the held-out signal is.
    """
    pred = op_b.matvec(weights_kept)
    pred = pred - pred.mean(dim=1, keepdim=True)
    return (
        (torch.sqrt(((mb.signal - pred).double() ** 2).mean(dim=1)) * model.signal_scale.double())
        .cpu()
        .numpy()
    )


def split_rmse(
    model: LiFEModel,
    *,
    lam: float = 0.0,
    max_iter: int = 500,
    tol: float | None = 1e-5,
    random_state: int | np.random.Generator | None = None,
    operator_options: dict | None = None,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: int = 50,
) -> np.ndarray:
    """Cross-validated per-voxel RMSE by a gradient-direction split.

    Fits on one half of the directions and predicts the other half (the
    prediction demeaned per voxel, as the held-out signal is). ``checkpoint``
    and ``checkpoint_every`` are passed to :func:`connscale.life.solve`.
    """
    da, db = split_directions(model, random_state=random_state)
    ma, mb = submodel(model, da), submodel(model, db)
    fa = solve(
        ma,
        lam=lam,
        max_iter=max_iter,
        tol=tol,
        operator_options=operator_options,
        checkpoint=checkpoint,
        checkpoint_every=checkpoint_every,
    )
    return _held_out_rmse(model, LiFEOperator(mb, **(operator_options or {})), mb, fa.weights_kept)


@validate_params({"lams": [_PARAMETER_CONSTRAINTS["lambdas"][0]]})
def lambda_sweep(
    model: LiFEModel,
    lams: Iterable[float],
    *,
    data_repeat: npt.ArrayLike | None = None,
    max_iter: int = 500,
    tol: float | None = 1e-5,
    random_state: int | np.random.Generator | None = None,
    verbose: int = 0,
    operator_options: dict | None = None,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: int = 50,
) -> list[dict]:
    """Fit each λ, warm-started from the previous one, and report each fit.

    A row per λ: the weight sum, non-zero count, objective and
    cross-validated median RMSE.

    Cross-validation uses ``data_repeat`` when given, otherwise a
    gradient-direction split (one split for all λ). ``checkpoint`` and
    ``checkpoint_every`` are passed to every :func:`connscale.life.solve`.
    """
    lams = [float(x) for x in lams]
    if data_repeat is None:
        da, db = split_directions(model, random_state=random_state)
        ma, mb = submodel(model, da), submodel(model, db)
        op_b = LiFEOperator(mb, **(operator_options or {}))
    saving = {"checkpoint": checkpoint, "checkpoint_every": checkpoint_every}
    rows = []
    x0 = x0a = None
    for lam in lams:
        fit = solve(
            model,
            lam=lam,
            max_iter=max_iter,
            tol=tol,
            x0=x0,
            verbose=verbose,
            operator_options=operator_options,
            **saving,
        )
        x0 = fit.weights_kept
        if data_repeat is not None:
            cv = cross_validated_rmse(model, fit.weights_kept, data_repeat)["rmse"]
        else:
            fa = solve(
                ma,
                lam=lam,
                max_iter=max_iter,
                tol=tol,
                x0=x0a,
                operator_options=operator_options,
                **saving,
            )
            x0a = fa.weights_kept
            cv = _held_out_rmse(model, op_b, mb, fa.weights_kept)
        w = fit.weights
        rows.append(
            {
                "lam": lam,
                "weight_sum": float(w.sum()),
                "n_nonzero": int((w > 0).sum()),
                "cv_rmse_median": float(np.median(cv)),
                "rmse_median": float(np.median(fit.voxel_rmse)),
                "objective": float(fit.objective[-1]),
                "n_iter": fit.n_iter,
                "fit": fit,
            }
        )
    return rows


@dataclass(frozen=True)
class _Inputs:
    """The inputs of :func:`fit`, read once.

    Attributes
    ----------
    data : ndarray of shape (X, Y, Z, n_volumes)
    affine : ndarray of shape (4, 4)
    bvals : ndarray of shape (n_volumes,)
    bvecs : ndarray
    mask : ndarray of shape (X, Y, Z) or None
    streamlines : StreamlineArray
    repeat : ndarray of shape (X, Y, Z, n_volumes) or None
        The second acquisition (``dwi_repeat``).
    loaded_bytes : int
        Bytes of the volumes read from files here.
    """

    data: np.ndarray
    affine: np.ndarray
    bvals: np.ndarray
    bvecs: np.ndarray
    mask: np.ndarray | None
    streamlines: StreamlineArray
    repeat: np.ndarray | None
    loaded_bytes: int


def _load_inputs(
    dwi: ImageLike,
    bvals: str | os.PathLike | npt.ArrayLike,
    bvecs: str | os.PathLike | npt.ArrayLike,
    streamlines: StreamlinesLike,
    *,
    affine: npt.ArrayLike | None,
    mask: ImageLike | None,
    dwi_repeat: ImageLike | None,
) -> _Inputs:
    """Read the scan, gradients, mask, tractogram and repeat of :func:`fit`."""
    data, affine, image = load_dwi(dwi, affine=affine)
    bvals, bvecs = load_gradients(bvals, bvecs)
    mask_data, _ = load_volume(mask, "mask")
    sl = load_streamlines(streamlines)
    check_space(sl, data.shape[:3], affine)
    loaded = data.nbytes if image is not None else 0
    repeat = None
    if dwi_repeat is not None:
        repeat, _, repeat_image = load_dwi(dwi_repeat, affine=affine)
        loaded += repeat.nbytes if repeat_image is not None else 0
    return _Inputs(data, affine, bvals, bvecs, mask_data, sl, repeat, loaded)


def _build(
    inputs: _Inputs,
    planner: MemoryPlanner,
    *,
    sphere: int | str | Sphere | npt.ArrayLike | None,
    formulation: str,
    dtype: str | np.dtype | torch.dtype | type,
) -> tuple[LiFEModel, dict | None]:
    """Plan the build in ``planner``, build the model and return it with the operator options."""
    chunk_points, ops = plan_memory(
        planner,
        device=planner.device,
        n_points=int(inputs.streamlines.offsets[-1]),
        loaded_bytes=inputs.loaded_bytes,
    )
    model = build_model(
        inputs.data,
        inputs.bvals,
        inputs.bvecs,
        inputs.streamlines,
        affine=inputs.affine,
        mask=inputs.mask,
        sphere=sphere,
        formulation=formulation,
        device=planner.device,
        dtype=dtype,
        chunk_points=chunk_points,
        memory_limit=planner,
    )
    return model, ops


@dataclass(frozen=True)
class _SolveOptions:
    """The solver options :func:`fit` passes to each of its solves."""

    max_iter: int
    tol: float | None
    random_state: int | np.random.Generator | None
    verbose: int
    operator_options: dict | None
    checkpoint: str | os.PathLike | None
    checkpoint_every: int

    def saving(self) -> dict:
        """Return the checkpoint keywords of :func:`solve`."""
        return {"checkpoint": self.checkpoint, "checkpoint_every": self.checkpoint_every}


def _check_sweep(lam: float, lambdas: Iterable[float] | None, x0: object) -> None:
    if lambdas is not None and (float(lam) != 0.0 or x0 is not None):
        raise ValueError(
            "'lambdas' replaces 'lam' and 'x0' (the sweep warm-starts each λ "
            f"from the previous one); got lam={lam} and x0 "
            f"{'given' if x0 is not None else 'None'}."
        )


def _fit_sweep(
    model: LiFEModel, inputs: _Inputs, lambdas: Iterable[float], options: _SolveOptions
) -> LiFEFit:
    """Fit each λ; return the fit with the lowest cross-validated RMSE, with the table."""
    rows = lambda_sweep(
        model,
        lambdas,
        data_repeat=inputs.repeat,
        max_iter=options.max_iter,
        tol=options.tol,
        random_state=options.random_state,
        verbose=options.verbose,
        operator_options=options.operator_options,
        **options.saving(),
    )
    result = min(rows, key=lambda row: row["cv_rmse_median"])["fit"]
    result.lambda_sweep = [{k: v for k, v in row.items() if k != "fit"} for row in rows]
    return result


def _fit_one(
    model: LiFEModel,
    inputs: _Inputs,
    lam: float,
    x0: npt.ArrayLike | torch.Tensor | None,
    options: _SolveOptions,
) -> LiFEFit:
    """Fit one λ, warm-started from ``x0`` (one weight per input streamline)."""
    x0k = None
    if x0 is not None:
        x0 = np.asarray(x0, dtype=np.float64)
        n = len(inputs.streamlines)
        if x0.shape != (n,):
            raise ValueError(f"'x0' must have one weight per streamline ({n}); got {x0.shape}.")
        x0k = x0[model.fibre_index]
    return solve(
        model,
        lam=lam,
        max_iter=options.max_iter,
        tol=options.tol,
        x0=x0k,
        verbose=options.verbose,
        operator_options=options.operator_options,
        **options.saving(),
    )


def _cross_validated(
    model: LiFEModel, result: LiFEFit, inputs: _Inputs, lam: float, options: _SolveOptions
) -> np.ndarray:
    """Return the cross-validated RMSE of ``result`` (against the repeat, or a split)."""
    if inputs.repeat is not None:
        return cross_validated_rmse(model, result.weights_kept, inputs.repeat)["rmse"]
    return split_rmse(
        model,
        lam=lam,
        max_iter=options.max_iter,
        tol=options.tol,
        random_state=options.random_state,
        operator_options=options.operator_options,
        **options.saving(),
    )


@fill_doc
@validate_params(_PARAMETER_CONSTRAINTS)
def fit(  # noqa: PLR0913 - public keywords: the LiFE estimator's and the inputs'
    dwi: ImageLike,
    bvals: str | os.PathLike | npt.ArrayLike,
    bvecs: str | os.PathLike | npt.ArrayLike,
    streamlines: StreamlinesLike,
    *,
    affine: npt.ArrayLike | None = None,
    mask: ImageLike | None = None,
    lam: float = 0.0,
    lambdas: Iterable[float] | None = None,
    dwi_repeat: ImageLike | None = None,
    cross_validate: bool = False,
    max_iter: int = 500,
    tol: float | None = 1e-5,
    sphere: int | str | Sphere | npt.ArrayLike | None = None,
    formulation: str = "encode",
    device: str | torch.device | None = "auto",
    dtype: str | np.dtype | torch.dtype | type = "float32",
    random_state: int | np.random.Generator | None = None,
    x0: npt.ArrayLike | torch.Tensor | None = None,
    memory_limit: int | str | MemoryPlanner | None = None,
    verbose: int = 0,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: int = 50,
) -> LiFEFit:
    """Fit LiFE (λ = 0) or ReAl-LiFE (λ > 0) to a dMRI scan and a tractogram.

    Parameters
    ----------
    dwi : path, nibabel image or array of shape (X, Y, Z, n_volumes)
        The diffusion scan (an array needs ``affine``).
    bvals, bvecs : paths (FSL text) or arrays
    streamlines : path (.trk/.tck), nibabel tractogram or list of arrays
        Streamlines in RAS+ mm. A .trk whose header space differs from the
        scan's raises a ValueError.
    affine : array of shape (4, 4) or None
        Voxel to RAS+ mm of ``dwi`` when it is an array.
    mask : path, image or array of shape (X, Y, Z) or None
        Only nodes inside the mask enter the model.
    lam : float, default=0
        ReAl-LiFE's λ (on the preconditioned weights, see :func:`solve`).
    lambdas : sequence of float or None, default=None
        Fit each λ (warm-started from the previous one, see
        :func:`connscale.life.lambda_sweep`) and return the fit with the
        lowest cross-validated median RMSE, its table in ``lambda_sweep``.
        Replaces ``lam`` (leave it at 0) and ``x0``.
    dwi_repeat : path, nibabel image, array or None, default=None
        A second acquisition on the same grid and volumes, against which the
        fit is cross-validated (``cv_rmse``; the sweep's selection).
        Without it cross-validation splits the gradient directions in two.
    cross_validate : bool, default=False
        Set ``cv_rmse`` (always done with ``dwi_repeat`` or ``lambdas``).
    max_iter : int, default=500
        Most iterations (the reference's maxit).
    tol : float or None, default=1e-5
        Stop thresholds; None: exactly ``max_iter`` iterations.
    sphere : None, int, str, dipy Sphere or array, default=None
        Atom orientations (:func:`connscale.life.encode.resolve_sphere`).
    formulation : {'encode', 'dipy'}, default='encode'
        ENCODE's model (node shares, D de-medianed per shell, M × S₀) or
        dipy's / LiFE 1.0's (node sums, D demeaned, signal / S₀); see
        :func:`connscale.life.encode.build_model`.
    %(device)s
    %(dtype)s
    %(random_state)s
        Draws the gradient-direction split of the cross-validation (the
        solver itself is deterministic).
    x0 : array of shape (n_streamlines,) or None
        Warm-start weights per input streamline.
    %(memory_limit)s
        Covers the dMRI volumes when they are read from a file here, the model
        build's chunks, the model and the solver's copies; checked up front
        (at worst, from the number of streamline points) and again once the
        model's size is known, with a :class:`~connscale.MemoryLimitError`.
        A caller's :class:`~connscale._compute.MemoryPlanner` (its task's
        budget) is counted into instead.
    %(verbose)s
    checkpoint : path or None, default=None
        A folder for the solver's state, from which an interrupted fit
        resumes (see :func:`solve`).
    checkpoint_every : int, default=50
        Updates between checkpoints.

    Returns
    -------
    LiFEFit

    Notes
    -----
    λ is ReAl-LiFE's: it weighs the L1 norm of the preconditioned weights,
    i.e. Σ_f λ·h_f·w_f with h_f ≈ ‖M_f‖², which makes it independent of the
    signal's units; :func:`lambda_max` gives the λ above which every weight
    is 0. With ``tol=None`` the solver runs ``max_iter`` iterations
    (``max_iter − 1`` updates, as the reference's ``maxit``).

    Examples
    --------
    >>> from connscale import life
    >>> from connscale.datasets import simulate_life_phantom
    >>> ph = simulate_life_phantom(random_state=0)
    >>> result = life.fit(ph.dwi, ph.bvals, ph.bvecs, ph.streamlines,
    ...                   affine=ph.affine, lam=0.01, device="cpu")
    >>> result.weights.shape
    (720,)
    """
    _check_sweep(lam, lambdas, x0)
    dev = resolve_device(device)
    planner = planner_for(dev, memory_limit, hint=MEMORY_HINT)
    timings = {}
    start = time.perf_counter()
    inputs = _load_inputs(
        dwi, bvals, bvecs, streamlines, affine=affine, mask=mask, dwi_repeat=dwi_repeat
    )
    timings["load"] = time.perf_counter() - start
    start = time.perf_counter()
    model, ops = _build(inputs, planner, sphere=sphere, formulation=formulation, dtype=dtype)
    timings["build"] = time.perf_counter() - start
    options = _SolveOptions(max_iter, tol, random_state, verbose, ops, checkpoint, checkpoint_every)
    start = time.perf_counter()
    if lambdas is not None:
        result = _fit_sweep(model, inputs, lambdas, options)
        result.streamlines = inputs.streamlines
        result.timings = {**timings, "lambda_sweep": time.perf_counter() - start}
        return result
    result = _fit_one(model, inputs, lam, x0, options)
    result.streamlines = inputs.streamlines
    timings["solve"] = time.perf_counter() - start
    start = time.perf_counter()
    if inputs.repeat is not None or cross_validate:
        result.cv_rmse = _cross_validated(model, result, inputs, lam, options)
        timings["cross_validation"] = time.perf_counter() - start
    result.timings = timings
    return result


class LiFE(BaseEstimator):
    """LiFE / ReAl-LiFE as a scikit-learn estimator.

    Parameters
    ----------
    lam, max_iter, tol, sphere, formulation, device, dtype, verbose
        As in :func:`fit`.
    cross_validate : bool, default=False
        Cross-validate the fit by a gradient-direction split (``cv_rmse_``).
    random_state : int, Generator or None, default=None
        Draws that split.

    Attributes
    ----------
    weights_ : ndarray of shape (n_streamlines,)
    fit_ : LiFEFit
    objective_ : list of float
    n_iter_ : int
    voxel_rmse_ : ndarray of shape (n_voxels,)
    cv_rmse_ : ndarray of shape (n_voxels,)
        Only with ``cross_validate=True``.

    Notes
    -----
    ``fit`` takes a :class:`DiffusionData` (or a scan, its gradients and a
    tractogram), not a feature matrix: its samples are the diffusion-weighted
    directions, so ``GridSearchCV`` and ``cross_val_score`` cross-validate λ
    over directions (fit on some, :meth:`score` the others). The estimator
    clones, sets parameters and reports fitted state as scikit-learn's, but
    does not enter a ``Pipeline``.
    """

    _parameter_constraints = {k: _PARAMETER_CONSTRAINTS[k] for k in _ESTIMATOR_PARAMETERS}

    def __init__(
        self,
        lam: float = 0.0,
        *,
        max_iter: int = 500,
        tol: float | None = 1e-5,
        sphere: int | str | Sphere | npt.ArrayLike | None = None,
        formulation: str = "encode",
        device: str | torch.device | None = "auto",
        dtype: str | np.dtype | torch.dtype | type = "float32",
        cross_validate: bool = False,
        random_state: int | np.random.Generator | None = None,
        verbose: int = 0,
    ) -> None:
        self.lam = lam
        self.max_iter = max_iter
        self.tol = tol
        self.sphere = sphere
        self.formulation = formulation
        self.device = device
        self.dtype = dtype
        self.cross_validate = cross_validate
        self.random_state = random_state
        self.verbose = verbose

    def fit(
        self,
        X: DiffusionData | ImageLike,
        y: str | os.PathLike | npt.ArrayLike | None = None,
        bvecs: str | os.PathLike | npt.ArrayLike | None = None,
        streamlines: StreamlinesLike | None = None,
        *,
        affine: npt.ArrayLike | None = None,
        mask: ImageLike | None = None,
        checkpoint: str | os.PathLike | None = None,
    ) -> LiFE:
        """Fit to a scan and a tractogram (see :func:`fit`); returns self.

        Parameters
        ----------
        X : DiffusionData, or the dMRI scan (path, image or array)
            A :class:`DiffusionData` (what scikit-learn's splitters index by
            direction) carries everything; otherwise ``X`` is :func:`fit`'s
            ``dwi`` and ``y``, ``bvecs`` and ``streamlines`` are needed.
        y : bvals (path or array), or None
            Ignored with a DiffusionData; the scan's b-values otherwise, as in
            ``fit(dwi, bvals, bvecs, streamlines)``.
        bvecs, streamlines, affine, mask
            As in :func:`fit`, when ``X`` is the scan.
        checkpoint : path or None, default=None
            A folder for the solver's state, from which an interrupted fit
            resumes.

        Returns
        -------
        self : LiFE
        """
        if isinstance(X, DiffusionData):
            extra = [
                name
                for name, value in (
                    ("bvecs", bvecs),
                    ("streamlines", streamlines),
                    ("affine", affine),
                    ("mask", mask),
                )
                if value is not None
            ]
            if extra:
                raise ValueError(
                    f"LiFE.fit takes a DiffusionData alone (it holds the gradients, "
                    f"streamlines, affine and mask); got {', '.join(extra)} as well."
                )
            dwi, bvals, bvecs, streamlines = X.dwi, X.bvals, X.bvecs, X.streamlines
            affine, mask = X.affine, X.mask
        else:
            missing = [
                name
                for name, value in (("bvals", y), ("bvecs", bvecs), ("streamlines", streamlines))
                if value is None
            ]
            if missing:
                raise ValueError(
                    "LiFE.fit takes a DiffusionData, or a scan with its bvals, bvecs and "
                    f"streamlines (dwi, bvals, bvecs, streamlines); got no {', '.join(missing)}."
                )
            dwi, bvals = X, y
        validate_estimator_params(self)
        for name in ("fit_", "weights_", "objective_", "n_iter_", "voxel_rmse_", "cv_rmse_"):
            self.__dict__.pop(name, None)
        with skip_nested_validation():
            self.fit_ = fit(
                dwi,
                bvals,
                bvecs,
                streamlines,
                affine=affine,
                mask=mask,
                lam=self.lam,
                max_iter=self.max_iter,
                tol=self.tol,
                sphere=self.sphere,
                formulation=self.formulation,
                device=self.device,
                dtype=self.dtype,
                cross_validate=self.cross_validate,
                random_state=self.random_state,
                verbose=self.verbose,
                checkpoint=checkpoint,
            )
        self.weights_ = self.fit_.weights
        self.objective_ = self.fit_.objective
        self.n_iter_ = self.fit_.n_iter
        self.voxel_rmse_ = self.fit_.voxel_rmse
        if self.fit_.cv_rmse is not None:
            self.cv_rmse_ = self.fit_.cv_rmse
        return self

    def predict(
        self,
        bvals: str | os.PathLike | npt.ArrayLike | None = None,
        bvecs: str | os.PathLike | npt.ArrayLike | None = None,
    ) -> np.ndarray:
        """Predicted signal at the model voxels (see :meth:`LiFEFit.predict`)."""
        check_is_fitted(self, "fit_")
        return self.fit_.predict(bvals, bvecs)

    def score(
        self,
        X: DiffusionData | ImageLike | None = None,
        y: None = None,
    ) -> float:
        """Minus the median voxel RMSE of the fit's prediction (higher is better).

        Parameters
        ----------
        X : DiffusionData, second acquisition (path, image or array) or None
            A :class:`DiffusionData` of directions held out of the fit (same
            grid, b=0 volumes, streamlines and mask; e.g. a test fold): the
            RMSE of the signal predicted for its directions, demeaned per
            voxel, as :func:`split_rmse`. A second acquisition on the same
            grid and volumes: the RMSE against it. None: against the fitted
            signal.
        y : None
            Ignored.

        Returns
        -------
        float
        """
        check_is_fitted(self, "fit_")
        if X is None:
            return -float(np.median(self.fit_.voxel_rmse))
        if not isinstance(X, DiffusionData):
            return -float(np.median(self.fit_.cross_validate(X)["rmse"]))
        model = self.fit_.model
        if not np.allclose(X.affine, model.affine, atol=1e-4) or (
            len(X.streamlines) != model.n_streamlines
        ):
            raise ValueError(
                "The held-out DiffusionData must share the fit's grid and streamlines: it has "
                f"affine\n{np.round(X.affine, 4)}\nand {len(X.streamlines)} streamlines; the fit "
                f"had\n{np.round(model.affine, 4)}\nand {model.n_streamlines}."
            )
        held_out = held_out_model(model, X.dwi, X.bvals, X.bvecs)
        rmse = _held_out_rmse(model, LiFEOperator(held_out), held_out, self.fit_.weights_kept)
        return -float(np.median(rmse))
