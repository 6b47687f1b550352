"""``connscale.life.fit`` and the ``LiFE`` estimator: from a dMRI scan and
a tractogram to streamline weights (LiFE, or ReAl-LiFE with λ > 0)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import torch

from connscale._compute import limit_error, memory_budget, parse_memory, resolve_device
from connscale._docs import fill_doc
from connscale._validation import check_random_state
from connscale.life._checkpoint import SolverCheckpoint, solver_key
from connscale.life.encode import LiFEModel, build_model
from connscale.life.evaluate import cross_validated_rmse, strength_of_evidence, voxel_rmse
from connscale.life.operators import LiFEOperator
from connscale.life.sbb import sbb_nnls
from connscale.io.streamlines import StreamlineArray, load_streamlines


# --------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------
def _is_path(x) -> bool:
    return isinstance(x, (str, os.PathLike))


def load_dwi(dwi, affine=None):
    """(data (X, Y, Z, n), affine, image or None) from a path, image or array."""
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
            raise ValueError("'affine' differs from the dMRI image's own affine; pass one or the other.")
        affine = img_affine
    else:
        data = np.asarray(dwi)
        if affine is None:
            raise ValueError("'affine' (voxel to RAS+ mm, 4 × 4) is needed when 'dwi' is an array.")
    if data.ndim != 4:
        raise ValueError(f"'dwi' must be a 4-D volume (X, Y, Z, n_volumes); got shape {data.shape}.")
    if not np.issubdtype(data.dtype, np.number):
        raise ValueError(f"'dwi' must hold numbers; got dtype {data.dtype}.")
    return data, np.asarray(affine, dtype=np.float64), image


def load_gradients(bvals, bvecs):
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


def _read_table(path, name: str, *, ndmin: int) -> np.ndarray:
    """Numbers of an FSL-style text file, with a one-line error naming it."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"{name} file not found: '{path}'.")
    try:
        return np.loadtxt(os.fspath(path), ndmin=ndmin)
    except ValueError as exc:
        raise ValueError(f"Cannot read '{name}' file {path} as numbers: {exc}") from exc


def load_volume(img, name: str):
    """A 3-D array from a path, image or array (mask, labels)."""
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


def check_space(streamlines: StreamlineArray, shape, affine) -> None:
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
            f"{dims} and voxel-to-RAS affine\n{np.round(vox2ras, 4)}\nbut the dMRI has {tuple(shape)} and\n"
            f"{np.round(affine, 4)}.\nRegister the tractogram to the dMRI first."
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


def plan_memory(memory_limit, *, device, n_points: int, loaded_bytes: int = 0):
    """Build chunk and operator options that keep LiFE within ``memory_limit``.

    Parameters
    ----------
    memory_limit : int, str or None
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
    if parse_memory(memory_limit) is None:
        return 1 << 23, None
    budget = memory_budget(resolve_device(device), memory_limit)
    chunk_points = max(1 << 12, budget // (4 * _BUILD_BYTES_PER_POINT))
    need = (loaded_bytes + _KEY_BYTES_PER_POINT * n_points
            + _BUILD_BYTES_PER_POINT * min(chunk_points, n_points))
    if need > budget:
        raise limit_error(f"The LiFE model of {n_points} streamline points (at worst)", need,
                          budget, memory_limit,
                          "Raise memory_limit, or fit fewer streamlines or a smaller mask.")
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
    _rmse: np.ndarray | None = field(default=None, repr=False)

    @property
    def voxel_rmse(self) -> np.ndarray:
        """RMSE per model voxel (signal units), shape (n_voxels,)."""
        if self._rmse is None:
            self._rmse = voxel_rmse(self.model, self.weights_kept)
        return self._rmse

    def rmse_volume(self) -> np.ndarray:
        """The voxel RMSE as a 3-D volume (NaN outside the model voxels)."""
        vol = np.full(self.model.shape, np.nan, dtype=np.float32)
        v = self.model.voxels
        vol[v[:, 0], v[:, 1], v[:, 2]] = self.voxel_rmse
        return vol

    def rmse_image(self):
        """The voxel RMSE map as a nibabel NIfTI image."""
        import nibabel as nib

        return nib.Nifti1Image(self.rmse_volume(), self.model.affine)

    def predict(self, bvals=None, bvecs=None, *, demeaned: bool = False) -> np.ndarray:
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
            D = self.model.dictionary_for(bvals, bvecs / np.linalg.norm(bvecs, axis=1, keepdims=True))
        op = LiFEOperator(self.model, dictionary=D)
        pred = op.matvec(self.weights_kept)
        if not demeaned:
            pred = pred + self.model.signal_mean[:, None]
        pred = pred * self.model.signal_scale[:, None]
        return pred.double().cpu().numpy()

    def strength_of_evidence(self, fibres, *, n_boot: int = 5000, n_mc: int = 5, random_state=None) -> dict:
        """Strength of evidence of the fascicle ``fibres`` (input indices or mask);
        see :func:`connscale.life.evaluate.strength_of_evidence`."""
        return strength_of_evidence(self.model, self.weights_kept, fibres, n_boot=n_boot,
                                    n_mc=n_mc, random_state=random_state)

    def cross_validate(self, dwi_repeat) -> dict:
        """Per-voxel RMSE against a second acquisition (array, image or path on
        the same grid); see :func:`connscale.life.evaluate.cross_validated_rmse`."""
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


def solve(model: LiFEModel, *, lam: float = 0.0, n_iter: int = 500, tol: float | None = 1e-5,
          x0=None, verbose: int = 0, callback=None, operator_options: dict | None = None,
          checkpoint=None, checkpoint_every: int = 50) -> LiFEFit:
    """Weights of a built model by preconditioned SBB-NNLS.

    The columns of M are divided by h_f = Σ val²‖D[:, a]‖² (the reference's
    preconditioner), the problem ``½‖M'x' − b‖² + λ·1ᵀx'`` solved, and
    w = x'/h. λ therefore acts as in ReAl-LiFE (a column-norm-weighted L1 on
    w) and is in weight units: λ ≥ :func:`lambda_max` gives all zeros.

    Parameters
    ----------
    model : LiFEModel
    lam : float, default=0
    n_iter : int, default=500
        The reference's ``maxit`` (``n_iter − 1`` updates at most).
    tol : float or None, default=1e-5
        Projected-gradient and objective-change thresholds; None runs all
        ``n_iter`` iterations.
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
        model's signal and column scales, ``lam``, ``n_iter``, ``tol``,
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
    if not np.isfinite(lam) or lam < 0:
        raise ValueError(f"'lam' must be a finite number ≥ 0; got {lam}.")
    base = LiFEOperator(model, **(operator_options or {}))
    h = base.column_norms_sq()
    h = torch.where(h > 0, h, torch.ones_like(h))
    op = LiFEOperator(model, column_scale=h, **(operator_options or {}))
    xp0 = None
    if x0 is not None:
        x0 = torch.as_tensor(np.asarray(x0) if not isinstance(x0, torch.Tensor) else x0)
        if x0.shape != (model.n_fibres,):
            raise ValueError(f"'x0' must have one weight per model fibre ({model.n_fibres}); got {tuple(x0.shape)}.")
        xp0 = x0.to(model.device, torch.float64) * h
    state = saver = None
    if checkpoint is not None:
        if int(checkpoint_every) < 1:
            raise ValueError(f"'checkpoint_every' must be at least 1; got {checkpoint_every}.")
        saved = SolverCheckpoint(checkpoint, solver_key(
            model.signal, h, x0=xp0, lam=lam, n_iter=int(n_iter), tol=tol))
        state, saver = saved.load(), saved.save
    res = sbb_nnls(op, model.signal, lam=lam, max_iter=int(n_iter), tol_grad=tol, tol_obj=tol,
                   x0=xp0, verbose=verbose, callback=callback, state=state, save_state=saver,
                   state_every=int(checkpoint_every))
    w_kept = res.x / h
    weights = np.zeros(model.n_streamlines, dtype=np.float64)
    weights[model.fibre_index] = w_kept.cpu().numpy()
    return LiFEFit(model=model, weights=weights, weights_kept=w_kept, objective=res.objective,
                   lam=lam, n_iter=res.n_iter, stop_reason=res.stop_reason, column_scale=h,
                   data_term=res.data_term, resumed_from=0 if state is None else state["k"])


@fill_doc
def fit(
    dwi,
    bvals,
    bvecs,
    streamlines,
    *,
    affine=None,
    mask=None,
    lam: float = 0.0,
    n_iter: int = 500,
    tol: float | None = 1e-5,
    sphere=None,
    formulation: str = "encode",
    device="auto",
    dtype="float32",
    random_state=None,
    x0=None,
    memory_limit=None,
    verbose: int = 0,
    checkpoint=None,
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
    n_iter : int, default=500
        Iterations (the reference's maxit).
    tol : float or None, default=1e-5
        Stop thresholds; None: exactly ``n_iter`` iterations.
    sphere : None, int, str, dipy Sphere or array, default=None
        Atom orientations (:func:`connscale.life.encode.resolve_sphere`).
    formulation : {'encode', 'dipy'}, default='encode'
        ENCODE's model (node shares, D de-medianed per shell, M × S₀) or
        dipy's / LiFE 1.0's (node sums, D demeaned, signal / S₀); see
        :func:`connscale.life.encode.build_model`.
    %(device)s
    %(dtype)s
    %(random_state)s
        (Unused by the deterministic solver; kept for the evaluation steps.)
    x0 : array of shape (n_streamlines,) or None
        Warm-start weights per input streamline.
    %(memory_limit)s
        Covers the dMRI volume when it is read from a file here, the model
        build's chunks, the model and the solver's copies; checked up front
        (at worst, from the number of streamline points) and again once the
        model's size is known, with a :class:`~connscale.MemoryLimitError`.
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
    is 0. With ``tol=None`` the solver runs ``n_iter`` iterations (``n_iter
    − 1`` updates, as the reference's ``maxit``).

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
    check_random_state(random_state)
    parse_memory(memory_limit)
    data, affine, image = load_dwi(dwi, affine=affine)
    bvals, bvecs = load_gradients(bvals, bvecs)
    mask_data, _ = load_volume(mask, "mask")
    sl = load_streamlines(streamlines)
    check_space(sl, data.shape[:3], affine)
    loaded = data.nbytes if image is not None else 0
    chunk_points, ops = plan_memory(memory_limit, device=device, n_points=int(sl.offsets[-1]),
                                    loaded_bytes=loaded)
    model = build_model(data, bvals, bvecs, sl, affine=affine, mask=mask_data, sphere=sphere,
                        formulation=formulation, device=device, dtype=dtype,
                        chunk_points=chunk_points, memory_limit=memory_limit,
                        loaded_bytes=loaded)
    x0k = None
    if x0 is not None:
        x0 = np.asarray(x0, dtype=np.float64)
        if x0.shape != (len(sl),):
            raise ValueError(f"'x0' must have one weight per streamline ({len(sl)}); got {x0.shape}.")
        x0k = x0[model.fibre_index]
    result = solve(model, lam=lam, n_iter=n_iter, tol=tol, x0=x0k, verbose=verbose,
                   operator_options=ops, checkpoint=checkpoint,
                   checkpoint_every=checkpoint_every)
    result.streamlines = sl
    return result


class LiFE:
    """scikit-learn-style LiFE / ReAl-LiFE estimator.

    Parameters
    ----------
    lam, n_iter, tol, sphere, formulation, device, dtype, random_state, verbose
        As in :func:`fit`.

    Attributes
    ----------
    weights_ : ndarray of shape (n_streamlines,)
    fit_ : LiFEFit
    objective_ : list of float
    n_iter_ : int
    voxel_rmse_ : ndarray of shape (n_voxels,)
    """

    def __init__(self, lam: float = 0.0, *, n_iter: int = 500, tol: float | None = 1e-5,
                 sphere=None, formulation="encode", device="auto", dtype="float32", random_state=None, verbose: int = 0):
        self.lam = lam
        self.n_iter = n_iter
        self.tol = tol
        self.sphere = sphere
        self.formulation = formulation
        self.device = device
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose

    def get_params(self, deep: bool = True) -> dict:
        return {k: getattr(self, k) for k in
                ("lam", "n_iter", "tol", "sphere", "formulation", "device", "dtype", "random_state", "verbose")}

    def set_params(self, **params):
        for k, v in params.items():
            if k not in self.get_params():
                raise ValueError(f"Invalid parameter {k!r} for LiFE.")
            setattr(self, k, v)
        return self

    def fit(self, dwi, bvals, bvecs, streamlines, *, affine=None, mask=None, checkpoint=None):
        """Fit to a scan and a tractogram (see :func:`fit`); returns self.

        ``checkpoint`` is a folder for the solver's state, from which an
        interrupted fit resumes."""
        if int(self.n_iter) < 1:
            raise ValueError(f"'n_iter' must be at least 1; got {self.n_iter}.")
        self.fit_ = fit(dwi, bvals, bvecs, streamlines, affine=affine, mask=mask, lam=self.lam,
                        n_iter=self.n_iter, tol=self.tol, sphere=self.sphere,
                        formulation=self.formulation, device=self.device,
                        dtype=self.dtype, random_state=self.random_state, verbose=self.verbose,
                        checkpoint=checkpoint)
        self.weights_ = self.fit_.weights
        self.objective_ = self.fit_.objective
        self.n_iter_ = self.fit_.n_iter
        self.voxel_rmse_ = self.fit_.voxel_rmse
        return self

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "fit_")

    def _check_fitted(self):
        if not hasattr(self, "fit_"):
            raise ValueError("This LiFE instance is not fitted yet; call fit first.")

    def predict(self, bvals=None, bvecs=None):
        """Predicted signal at the model voxels (see :meth:`LiFEFit.predict`)."""
        self._check_fitted()
        return self.fit_.predict(bvals, bvecs)

    def score(self, dwi_repeat=None) -> float:
        """Minus the median voxel RMSE (against ``dwi_repeat`` when given)."""
        self._check_fitted()
        if dwi_repeat is None:
            return -float(np.median(self.fit_.voxel_rmse))
        return -float(np.median(self.fit_.cross_validate(dwi_repeat)["rmse"]))
