"""The ENCODE model of LiFE.

Streamlines and a dMRI scan to the sparse tensor Φ (atom, voxel, fibre,
value), the dictionary D of canonical stick signals, S₀ and the demeaned
signal b (Caiafa & Pestilli 2017; encode's
``feConnectomeEncoding``/``feBuildDictionaries``).

M is never formed: ``M[(v, θ), f] = Σ_a Φ(a, v, f) · D[θ, a]``.

The build runs in torch on the chosen device (CPU or CUDA), chunked over
streamlines so memory stays bounded. Only numpy and torch are needed; a dipy
sphere may be passed by name (dipy imported lazily then).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import torch

from connscale._compute import (
    MemoryPlanner,
    parse_memory,
    planner_for,
    resolve_device,
    resolve_dtype,
)
from connscale._validation import user_stacklevel
from connscale.io.streamlines import StreamlineArray

if TYPE_CHECKING:
    from dipy.core.sphere import Sphere

#: Default number of atom orientations (half-sphere Fibonacci lattice, ~2.6°).
DEFAULT_N_ATOMS = 2000
#: Stick diffusivity (mm²/s) of the canonical signal: exp(-b·d·(g·a)²).
STICK_DIFFUSIVITY = 1e-3
#: Largest |norm - 1| accepted for a diffusion-weighted b-vector (dipy's
#: gradient_table uses the same 1e-2); rounding in text files stays far below it.
BVEC_NORM_TOL = 1e-2
#: Volumes with a b-value at most this are b=0 volumes (S₀).
B0_THRESHOLD = 50.0


# --------------------------------------------------------------------------
# Atoms (orientations) and the dictionary
# --------------------------------------------------------------------------
def fibonacci_hemisphere(n: int) -> np.ndarray:
    """``n`` nearly uniform unit vectors on the half-sphere z ≥ 0.

    Parameters
    ----------
    n : int
        Number of directions (≥ 1).

    Returns
    -------
    ndarray of shape (n, 3)
    """
    if int(n) < 1:
        raise ValueError(f"The number of atoms must be at least 1; got {n}.")
    n = int(n)
    i = np.arange(n, dtype=np.float64)
    z = 1.0 - (i + 0.5) / n  # (0, 1]: equal-area bands of the hemisphere
    r = np.sqrt(np.clip(1.0 - z * z, 0.0, None))
    phi = i * math.pi * (3.0 - math.sqrt(5.0))
    return np.stack([r * np.cos(phi), r * np.sin(phi), z], axis=1)


def resolve_sphere(sphere: int | str | Sphere | npt.ArrayLike | None) -> np.ndarray:
    """Atom orientations (n_atoms, 3), unit norm, from the user's ``sphere``.

    Parameters
    ----------
    sphere : None, int, str, dipy Sphere or array of shape (n_atoms, 3)
        None: :data:`DEFAULT_N_ATOMS` Fibonacci half-sphere directions; an int:
        that many; a str: a dipy sphere by name (e.g. ``'repulsion724'``,
        needs dipy); an object with ``vertices`` (dipy ``Sphere``); or the
        directions themselves. Antipodal directions are the same stick.
    """
    if sphere is None:
        return fibonacci_hemisphere(DEFAULT_N_ATOMS)
    if isinstance(sphere, (int, np.integer)) and not isinstance(sphere, bool):
        return fibonacci_hemisphere(int(sphere))
    if isinstance(sphere, str):
        try:
            from dipy.data import get_sphere
        except ImportError as exc:  # pragma: no cover - dipy present in tests
            raise ImportError(
                "A sphere given by name needs dipy: pip install connscale[data]"
            ) from exc
        try:
            sphere = get_sphere(name=sphere)
        except Exception as exc:
            raise ValueError(f"Unknown dipy sphere {sphere!r}: {exc}") from None
    vertices = getattr(sphere, "vertices", sphere)
    atoms = np.asarray(vertices, dtype=np.float64)
    if atoms.ndim != 2 or atoms.shape[1] != 3 or len(atoms) == 0:
        raise ValueError(f"'sphere' directions must have shape (n_atoms, 3); got {atoms.shape}.")
    norms = np.linalg.norm(atoms, axis=1)
    if not np.all(np.isfinite(norms)) or np.any(norms == 0):
        raise ValueError("'sphere' directions must be finite and non-zero.")
    return atoms / norms[:, None]


def shell_labels(bvals: np.ndarray, *, rounding: float = 100.0) -> np.ndarray:
    """Shell of each volume: b-values rounded to the nearest ``rounding``."""
    return np.round(np.asarray(bvals, dtype=np.float64) / rounding).astype(np.int64)


def canonical_dictionary(
    bvals: npt.ArrayLike,
    bvecs: npt.ArrayLike,
    atoms: npt.ArrayLike,
    *,
    diffusivity: float = STICK_DIFFUSIVITY,
    centre: str = "median",
) -> np.ndarray:
    """D (n_directions, n_atoms): stick signals, minus their median per shell.

    ``D[θ, a] = exp(-b_θ · d · (g_θ · atom_a)²)``, then for every shell and atom
    the median over that shell's directions is subtracted (as encode's
    ``feBuildDictionaries``), or with ``centre='mean'`` the mean over all
    directions (as dipy's ``FiberModel``).

    Parameters
    ----------
    bvals : array of shape (n_directions,)
        Non-zero b-values (s/mm²).
    bvecs : array of shape (n_directions, 3)
        Unit gradient directions.
    atoms : array of shape (n_atoms, 3)
        Unit stick orientations.
    diffusivity : float, default=1e-3
        Axial diffusivity of the stick (mm²/s).
    centre : {'median', 'mean'}, default='median'

    Returns
    -------
    ndarray of shape (n_directions, n_atoms), float64
    """
    bvals = np.asarray(bvals, dtype=np.float64)
    bvecs = np.asarray(bvecs, dtype=np.float64)
    cos = bvecs @ np.asarray(atoms, dtype=np.float64).T
    D = np.exp(-bvals[:, None] * diffusivity * cos * cos)
    if centre == "mean":
        return D - D.mean(axis=0, keepdims=True)
    shells = shell_labels(bvals)
    for s in np.unique(shells):
        rows = shells == s
        D[rows] -= np.median(D[rows], axis=0, keepdims=True)
    return D


class _SnapTable:
    """Nearest-atom lookup on a fine (z, φ) grid of the half-sphere.

    Snapping 10⁸ node tangents against 10³ atoms directly would cost 10¹¹
    products; the table costs one per grid cell (once) and O(1) per node.
    Cells are ≤ 0.35° × 0.7° (polar angle × azimuth), far below the atom
    spacing, so the snapped atom is the nearest one except within a
    fraction of a degree of a boundary between two atoms.
    """

    def __init__(
        self, atoms: np.ndarray, device: torch.device, n_theta: int = 256, n_phi: int = 512
    ) -> None:
        self.n_theta, self.n_phi = n_theta, n_phi
        theta = (np.arange(n_theta) + 0.5) / n_theta * (np.pi / 2)
        phi = (np.arange(n_phi) + 0.5) / n_phi * 2 * np.pi - np.pi
        z, r = np.cos(theta), np.sin(theta)
        centres = np.stack(
            [np.outer(r, np.cos(phi)), np.outer(r, np.sin(phi)), np.repeat(z[:, None], n_phi, 1)],
            axis=-1,
        ).reshape(-1, 3)
        from scipy.spatial import cKDTree

        # Nearest stick = nearest of the atoms and their antipodes.
        both = np.concatenate([atoms, -atoms])
        _, nearest = cKDTree(both).query(centres)
        table = torch.as_tensor(nearest % len(atoms), dtype=torch.int64, device=device)
        self.table = table

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        """Atom index of each unit tangent row of ``t`` (n, 3)."""
        flip = t[:, 2] < 0
        t = torch.where(flip[:, None], -t, t)
        theta = torch.acos(t[:, 2].clamp(-1.0, 1.0))
        zi = (theta * (self.n_theta / (math.pi / 2))).long().clamp_(0, self.n_theta - 1)
        phi = torch.atan2(t[:, 1], t[:, 0])
        pi = ((phi + math.pi) * (self.n_phi / (2 * math.pi))).long().clamp_(0, self.n_phi - 1)
        return self.table[zi * self.n_phi + pi]


# --------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------
@dataclass
class LiFEModel:
    """The ENCODE model: Φ, D, S₀, the demeaned signal and their indices.

    Entries of Φ are sorted by (voxel, atom, fibre); ``av_*`` list the
    distinct (voxel, atom) pairs in that order, ``crow`` their CSR row
    pointer over voxels. Fibre indices are compact (kept fibres only);
    ``fibre_index`` maps them to the input streamlines.

    Attributes
    ----------
    entry_fibre, entry_av : Tensor of shape (n_entries,), int64
        Fibre (compact) and (voxel, atom) pair of each Φ entry.
    entry_value : Tensor of shape (n_entries,)
        Φ value: share of the fibre's nodes in the voxel with that atom × S₀.
    av_voxel, av_atom : Tensor of shape (n_pairs,), int64
        Voxel (compact) and atom of each (voxel, atom) pair.
    crow : Tensor of shape (n_voxels + 1,), int64
        Start of each voxel's pairs.
    dictionary : Tensor of shape (n_directions, n_atoms)
        D, de-medianed per shell.
    s0 : Tensor of shape (n_voxels,)
        Mean b=0 signal per model voxel.
    signal : Tensor of shape (n_voxels, n_directions)
        Measured diffusion-weighted signal, demeaned per voxel (b).
    signal_mean : Tensor of shape (n_voxels,)
        The per-voxel mean removed from ``signal``.
    signal_scale : Tensor of shape (n_voxels,)
        ``signal`` is the measured signal divided by this (1 for 'encode',
        S₀ for 'dipy'); RMSE and predictions are multiplied back.
    formulation : str
    voxels : ndarray of shape (n_voxels, 3), int64
        Voxel indices (i, j, k) of the model voxels in the dMRI volume.
    fibre_index : ndarray of shape (n_fibres,), int64
        Input index of each kept fibre.
    atoms : ndarray of shape (n_atoms, 3)
    bvals, bvecs : ndarray
        b-values and directions of the diffusion-weighted (non-b0) volumes.
    volume_index : ndarray of int
        Index of those volumes in the input scan.
    n_streamlines : int
        Number of input streamlines.
    n_dropped_short, n_dropped_outside : int
        Streamlines dropped for < 2 points, or with no node in the volume/mask.
    shape : tuple of int
        Spatial shape of the dMRI volume.
    affine : ndarray of shape (4, 4)

    Examples
    --------
    >>> from connscale import life
    >>> from connscale.datasets import simulate_life_phantom
    >>> ph = simulate_life_phantom(20, 10, shape=(8, 8, 8), n_directions=12, random_state=0)
    >>> model = life.build_model(ph.dwi, ph.bvals, ph.bvecs, ph.streamlines, affine=ph.affine,
    ...                          device="cpu")
    >>> model.to_dense().shape  # (voxels x directions, streamlines)
    (1992, 30)
    """

    entry_fibre: torch.Tensor
    entry_av: torch.Tensor
    entry_value: torch.Tensor
    av_voxel: torch.Tensor
    av_atom: torch.Tensor
    crow: torch.Tensor
    dictionary: torch.Tensor
    s0: torch.Tensor
    signal: torch.Tensor
    signal_mean: torch.Tensor
    signal_scale: torch.Tensor
    formulation: str
    voxels: np.ndarray
    fibre_index: np.ndarray
    atoms: np.ndarray
    bvals: np.ndarray
    bvecs: np.ndarray
    volume_index: np.ndarray
    n_streamlines: int
    n_dropped_short: int
    n_dropped_outside: int
    shape: tuple
    affine: np.ndarray

    @property
    def n_fibres(self) -> int:
        """The number of kept fibres."""
        return len(self.fibre_index)

    @property
    def n_voxels(self) -> int:
        """The number of model voxels."""
        return len(self.voxels)

    @property
    def n_directions(self) -> int:
        """The number of diffusion-weighted directions."""
        return int(self.dictionary.shape[0])

    @property
    def n_atoms(self) -> int:
        """The number of atoms (stick orientations)."""
        return int(self.dictionary.shape[1])

    @property
    def n_entries(self) -> int:
        """The number of entries of Φ."""
        return int(self.entry_value.numel())

    @property
    def device(self) -> torch.device:
        """The device of the model's tensors."""
        return self.entry_value.device

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of Φ's values, D and the signal."""
        return self.entry_value.dtype

    def entry_voxel(self) -> torch.Tensor:
        """Voxel (compact) of each Φ entry.

        Returns
        -------
        torch.Tensor of shape (n_entries,), int64

        Examples
        --------
        >>> from connscale import life
        >>> from connscale.datasets import simulate_life_phantom
        >>> ph = simulate_life_phantom(20, 10, shape=(8, 8, 8), n_directions=12, random_state=0)
        >>> model = life.build_model(ph.dwi, ph.bvals, ph.bvecs, ph.streamlines, affine=ph.affine,
        ...                          device="cpu")
        >>> int(model.entry_voxel().max()) < 166  # the model's voxels
        True
        """
        return self.av_voxel[self.entry_av]

    def entry_atom(self) -> torch.Tensor:
        """Atom of each Φ entry.

        Returns
        -------
        torch.Tensor of shape (n_entries,), int64

        Examples
        --------
        >>> from connscale import life
        >>> from connscale.datasets import simulate_life_phantom
        >>> ph = simulate_life_phantom(20, 10, shape=(8, 8, 8), n_directions=12, random_state=0)
        >>> model = life.build_model(ph.dwi, ph.bvals, ph.bvecs, ph.streamlines, affine=ph.affine,
        ...                          device="cpu")
        >>> model.entry_atom().shape == model.entry_voxel().shape
        True
        """
        return self.av_atom[self.entry_av]

    def to_dense(self) -> np.ndarray:
        """M as a dense float64 array (n_voxels·n_directions, n_fibres); tests only.

        Returns
        -------
        ndarray of shape (n_voxels * n_directions, n_fibres), float64

        Examples
        --------
        >>> from connscale import life
        >>> from connscale.datasets import simulate_life_phantom
        >>> ph = simulate_life_phantom(20, 10, shape=(8, 8, 8), n_directions=12, random_state=0)
        >>> model = life.build_model(ph.dwi, ph.bvals, ph.bvecs, ph.streamlines, affine=ph.affine,
        ...                          device="cpu")
        >>> model.to_dense().shape
        (1992, 30)
        """
        n_dir = self.n_directions
        M = np.zeros((self.n_voxels * n_dir, self.n_fibres))
        D = self.dictionary.double().cpu().numpy()
        v = self.entry_voxel().cpu().numpy()
        a = self.entry_atom().cpu().numpy()
        f = self.entry_fibre.cpu().numpy()
        val = self.entry_value.double().cpu().numpy()
        for vi, ai, fi, x in zip(v, a, f, val):
            M[vi * n_dir : (vi + 1) * n_dir, fi] += x * D[:, ai]
        return M

    def dictionary_for(self, bvals: npt.ArrayLike, bvecs: npt.ArrayLike) -> torch.Tensor:
        """D for other gradient directions with this model's atoms.

        Parameters
        ----------
        bvals : array-like of shape (n_volumes,)
            The b-values.
        bvecs : array-like of shape (n_volumes, 3)
            The gradient directions.

        Returns
        -------
        torch.Tensor of shape (n_volumes, n_atoms)
            The dictionary D of those directions, one row per volume given.

        Examples
        --------
        >>> from connscale import life
        >>> from connscale.datasets import simulate_life_phantom
        >>> ph = simulate_life_phantom(20, 10, shape=(8, 8, 8), n_directions=12, random_state=0)
        >>> model = life.build_model(ph.dwi, ph.bvals, ph.bvecs, ph.streamlines, affine=ph.affine,
        ...                          device="cpu")
        >>> tuple(model.dictionary_for(ph.bvals, ph.bvecs).shape)
        (13, 2000)
        """
        D = canonical_dictionary(
            bvals, bvecs, self.atoms, centre="median" if self.formulation == "encode" else "mean"
        )
        return torch.as_tensor(D, dtype=self.dtype, device=self.device)


def _check_gradients(
    bvals: npt.ArrayLike, bvecs: npt.ArrayLike, n_volumes: int
) -> tuple[np.ndarray, np.ndarray]:
    bvals = np.asarray(bvals, dtype=np.float64).ravel()
    bvecs = np.asarray(bvecs, dtype=np.float64)
    if bvecs.ndim == 2 and bvecs.shape[0] == 3 and bvecs.shape[1] != 3:
        bvecs = bvecs.T
    if bvals.shape != (n_volumes,):
        raise ValueError(
            f"'bvals' must hold one b-value per volume ({n_volumes}); got {bvals.size}."
        )
    if bvecs.shape != (n_volumes, 3):
        raise ValueError(
            f"'bvecs' must have shape ({n_volumes}, 3) or (3, {n_volumes}); got {bvecs.shape}."
        )
    if not np.all(np.isfinite(bvals)):
        raise ValueError("'bvals' must be finite.")
    return bvals, bvecs


def model_memory(
    n_entries: int, n_pairs: int, n_voxels: int, n_volumes: int, n_fibres: int, itemsize: int
) -> int:
    """Return the bytes of a model and of fitting it.

    Φ (two int64 indices and a value per entry), the (voxel, atom) tables and
    the voxel signals, plus the larger of the float64 signal copies made while
    it is built and the solver's copies (scaled Φ values, signal-sized
    residuals, fibre vectors).
    """
    signal = n_voxels * n_volumes
    model = n_entries * (16 + itemsize) + n_pairs * 24 + 3 * signal * itemsize
    work = max(5 * signal * 8, n_entries * itemsize + 6 * signal * 8 + 16 * n_fibres * 8)
    return model + work


#: What to do when a LiFE model does not fit its memory budget.
MEMORY_HINT = "Raise memory_limit, or fit fewer streamlines or a smaller mask."


@dataclass(frozen=True)
class _Scan:
    """The checked scan of a build: volumes, gradients, affine and mask.

    Attributes
    ----------
    data : ndarray of shape (X, Y, Z, n_volumes)
    shape : tuple of 3 int
    bvals : ndarray of shape (n_volumes,)
    is_b0 : ndarray of shape (n_volumes,), bool
    gradients : ndarray of shape (n_dw, 3)
        Unit directions of the diffusion-weighted volumes.
    affine : ndarray of shape (4, 4)
    mask : ndarray of shape (X, Y, Z), bool, or None
    """

    data: np.ndarray
    shape: tuple
    bvals: np.ndarray
    is_b0: np.ndarray
    gradients: np.ndarray
    affine: np.ndarray
    mask: np.ndarray | None

    @property
    def dw(self) -> np.ndarray:
        """Which volumes are diffusion-weighted."""
        return ~self.is_b0

    @property
    def n_volumes(self) -> int:
        return int(self.data.shape[3])


def _check_affine(affine: npt.ArrayLike) -> np.ndarray:
    affine = np.asarray(affine, dtype=np.float64)
    if (
        affine.shape != (4, 4)
        or not np.all(np.isfinite(affine))
        or abs(np.linalg.det(affine[:3, :3])) < 1e-12
    ):
        raise ValueError(
            f"'affine' must be an invertible finite (4, 4) matrix; got shape {affine.shape}."
        )
    return affine


def _unit_gradients(bvecs: np.ndarray, dw: np.ndarray) -> np.ndarray:
    """Return the unit directions of the diffusion-weighted volumes ``dw``."""
    norms = np.linalg.norm(bvecs[dw], axis=1)
    if not np.all(np.isfinite(norms)) or np.any(norms < 1e-6):
        raise ValueError("Diffusion-weighted volumes need finite, non-zero 'bvecs'.")
    off = np.abs(norms - 1.0) > BVEC_NORM_TOL
    if off.any():
        first = int(np.flatnonzero(dw)[np.argmax(off)])
        raise ValueError(
            f"'bvecs' of diffusion-weighted volumes must be unit vectors (norm within "
            f"{BVEC_NORM_TOL} of 1); got {int(off.sum())} that are not, e.g. volume {first} "
            f"with norm {norms[np.argmax(off)]:.4g}. Check the file (a b-value scaled into "
            "the vector is not supported)."
        )
    return bvecs[dw] / norms[:, None]


def _check_scan(
    data: npt.ArrayLike,
    bvals: npt.ArrayLike,
    bvecs: npt.ArrayLike,
    affine: npt.ArrayLike,
    mask: npt.ArrayLike | None,
    b0_threshold: float,
) -> _Scan:
    """Check the scan, its gradients, affine and mask (one-line errors)."""
    data = np.asarray(data)
    if data.ndim != 4:
        raise ValueError(
            f"'dwi' must be a 4-D volume (X, Y, Z, n_volumes); got shape {data.shape}."
        )
    shape = tuple(int(s) for s in data.shape[:3])
    bvals, bvecs = _check_gradients(bvals, bvecs, data.shape[3])
    affine = _check_affine(affine)
    is_b0 = bvals <= b0_threshold
    if not is_b0.any():
        raise ValueError(f"The scan has no b=0 volume (b ≤ {b0_threshold}); S₀ is needed.")
    if is_b0.all():
        raise ValueError("The scan has no diffusion-weighted volume (all b ≤ b0_threshold).")
    g = _unit_gradients(bvecs, ~is_b0)
    if mask is not None:
        mask = np.asarray(mask)
        if mask.shape != shape:
            raise ValueError(
                f"'mask' must have the spatial shape of the dMRI {shape}; got {mask.shape}."
            )
        mask = mask.astype(bool)
    return _Scan(data, shape, bvals, is_b0, g, affine, mask)


@dataclass(frozen=True)
class _Voxeliser:
    """What turns a chunk of streamline nodes into (voxel, atom, fibre) keys.

    A key is ``(voxel · n_atoms + atom) · n_fibres + fibre`` over the whole
    grid (linear voxel index) and the input streamlines.
    """

    rotation: torch.Tensor
    translation: torch.Tensor
    dims: torch.Tensor
    strides: torch.Tensor
    mask_flat: torch.Tensor | None
    snap: _SnapTable
    too_short: np.ndarray
    n_atoms: int
    n_fibres: int
    n_vox_total: int
    device: torch.device

    @classmethod
    def create(
        cls, scan: _Scan, atoms: np.ndarray, too_short: np.ndarray, device: torch.device
    ) -> _Voxeliser:
        """Return the voxeliser of ``scan`` (affine, grid, mask) and ``atoms``."""
        shape = scan.shape
        n_vox_total = int(np.prod(shape))
        F = len(too_short)
        if n_vox_total * len(atoms) * max(F, 1) >= 2**62:
            raise ValueError(
                f"Model too large for 64-bit keys: {n_vox_total} voxels × {len(atoms)} atoms "
                f"× {F} streamlines."
            )
        inv = torch.as_tensor(np.linalg.inv(scan.affine), dtype=torch.float64)
        mask = scan.mask
        return cls(
            rotation=inv[:3, :3].to(device, torch.float32),
            translation=inv[:3, 3].to(device, torch.float32),
            dims=torch.tensor(shape, device=device),
            strides=torch.tensor([shape[1] * shape[2], shape[2], 1], device=device),
            mask_flat=torch.as_tensor(mask.ravel(), device=device) if mask is not None else None,
            snap=_SnapTable(atoms, device),
            too_short=too_short,
            n_atoms=len(atoms),
            n_fibres=F,
            n_vox_total=n_vox_total,
            device=device,
        )

    def chunk_keys(
        self, streamlines: StreamlineArray, c0: int, c1: int
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Distinct keys of streamlines ``c0:c1`` and their node counts (None: no node)."""
        dev = self.device
        offsets = streamlines.offsets
        p0, p1 = int(offsets[c0]), int(offsets[c1])
        if p1 == p0:
            return None
        pts = torch.as_tensor(streamlines.points[p0:p1], dtype=torch.float32).to(dev)
        lens = torch.as_tensor(np.diff(offsets[c0 : c1 + 1]), device=dev)
        fib = torch.repeat_interleave(torch.arange(c0, c1, device=dev), lens)
        vox = pts @ self.rotation.T + self.translation
        del pts
        n = vox.shape[0]
        local_off = torch.as_tensor(offsets[c0 : c1 + 1] - p0, device=dev)
        first = torch.zeros(n, dtype=torch.bool, device=dev)
        last = torch.zeros(n, dtype=torch.bool, device=dev)
        nonempty = lens > 0
        first[local_off[:-1][nonempty]] = True
        last[local_off[1:][nonempty] - 1] = True
        nxt = torch.roll(vox, -1, 0)
        prv = torch.roll(vox, 1, 0)
        # numpy.gradient along each streamline: one-sided at the ends.
        tang = torch.where(
            first[:, None], nxt - vox, torch.where(last[:, None], vox - prv, 0.5 * (nxt - prv))
        )
        del nxt, prv
        tnorm = torch.linalg.vector_norm(tang, dim=1)
        ijk = torch.floor(vox + 0.5).long()
        del vox
        ok = (tnorm > 0) & torch.all((ijk >= 0) & (ijk < self.dims), dim=1)
        ok &= ~torch.as_tensor(self.too_short[c0:c1], device=dev)[fib - c0]
        lin = (ijk * self.strides).sum(1)
        del ijk
        if self.mask_flat is not None:
            ok &= self.mask_flat[lin.clamp(0, self.n_vox_total - 1)]
        idx = torch.nonzero(ok).squeeze(1)
        if idx.numel() == 0:
            return None
        t = tang[idx] / tnorm[idx, None]
        atom = self.snap(t)
        key = (lin[idx] * self.n_atoms + atom) * self.n_fibres + fib[idx]
        del tang, tnorm, lin, fib, t, atom, idx, ok
        return torch.unique(key, sorted=True, return_counts=True)


def _chunk_bounds(offsets: np.ndarray, n_fibres: int, chunk_points: int) -> list[int]:
    """Streamline bounds of the build chunks (a streamline never spans two)."""
    bounds = [0]
    while bounds[-1] < n_fibres:
        start = bounds[-1]
        stop = int(np.searchsorted(offsets, offsets[start] + chunk_points, side="right")) - 1
        bounds.append(min(n_fibres, max(stop, start + 1)))
    return bounds


def _node_keys(
    voxeliser: _Voxeliser, streamlines: StreamlineArray, chunk_points: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sorted (voxel, atom, fibre) keys of every node and their node counts."""
    keys_list, counts_list = [], []
    bounds = _chunk_bounds(streamlines.offsets, voxeliser.n_fibres, chunk_points)
    for c0, c1 in zip(bounds[:-1], bounds[1:]):
        found = voxeliser.chunk_keys(streamlines, c0, c1)
        if found is not None:
            keys_list.append(found[0])
            counts_list.append(found[1])
    if not keys_list:
        raise ValueError(
            "No streamline has a node inside the dMRI volume"
            + (" and mask" if voxeliser.mask_flat is not None else "")
            + "; are the streamlines in RAS+ mm of this image (check the affine)?"
        )
    key = torch.cat(keys_list)
    cnt = torch.cat(counts_list)
    del keys_list, counts_list
    key, order = torch.sort(key)
    return key, cnt[order]


@dataclass(frozen=True)
class _Entries:
    """The entries of Φ before their values are scaled (see :class:`LiFEModel`).

    ``share`` is each entry's share of its (voxel, fibre) nodes ('encode') or
    its node count ('dipy'), float64; ``voxel_lin`` the linear grid index of
    each model voxel; ``kept`` the input index of each kept fibre.
    """

    share: torch.Tensor
    entry_fibre: torch.Tensor
    entry_av: torch.Tensor
    av_voxel: torch.Tensor
    av_atom: torch.Tensor
    crow: torch.Tensor
    voxel_lin: torch.Tensor
    kept: torch.Tensor

    @property
    def n_pairs(self) -> int:
        return int(self.av_voxel.numel())


def _phi_entries(
    voxeliser: _Voxeliser, streamlines: StreamlineArray, chunk_points: int, formulation: str
) -> _Entries:
    """Voxelise the streamlines and index the entries of Φ by (voxel, atom, fibre)."""
    dev, F, n_atoms = voxeliser.device, voxeliser.n_fibres, voxeliser.n_atoms
    key, cnt = _node_keys(voxeliser, streamlines, chunk_points)
    fib = key % F
    va = key // F
    del key
    lin = va // n_atoms
    if formulation == "encode":
        # Nodes of each (voxel, fibre): value = share of those nodes with this atom.
        vf = lin * F + fib
        _, vf_inv = torch.unique(vf, return_inverse=True)
        del vf
        n_vf = torch.zeros(int(vf_inv.max()) + 1, dtype=torch.int64, device=dev).index_add_(
            0, vf_inv, cnt
        )
        share = cnt.double() / n_vf[vf_inv].double()
        del vf_inv, n_vf
    else:  # 'count': node signals summed, as dipy and LiFE 1.0
        share = cnt.double()
    del cnt
    av_key, entry_av = torch.unique_consecutive(va, return_inverse=True)
    del va
    av_atom = av_key % n_atoms
    av_lin = av_key // n_atoms
    voxel_lin, av_voxel, per_voxel = torch.unique_consecutive(
        av_lin, return_inverse=True, return_counts=True
    )
    crow = torch.zeros(len(voxel_lin) + 1, dtype=torch.int64, device=dev)
    torch.cumsum(per_voxel, 0, out=crow[1:])
    kept, entry_fibre = torch.unique(fib, return_inverse=True)
    return _Entries(share, entry_fibre, entry_av, av_voxel, av_atom, crow, voxel_lin, kept)


def _count_model(
    planner: MemoryPlanner, entries: _Entries, n_volumes: int, tdtype: torch.dtype
) -> None:
    """Count the model and its fit in ``planner``.

    With a limit, refuse them when they do not fit, before the voxel signals
    are read.
    """
    n_entries, n_voxels = entries.entry_fibre.numel(), entries.voxel_lin.numel()
    need = model_memory(
        n_entries,
        entries.n_pairs,
        n_voxels,
        n_volumes,
        entries.kept.numel(),
        torch.empty((), dtype=tdtype).element_size(),
    )
    if parse_memory(planner.memory_limit) is not None:
        planner.require(
            need,
            f"The LiFE model ({n_entries} Φ entries, {n_voxels} voxels x "
            f"{n_volumes} volumes) and its fit",
        )
    planner.reserve_device(need)


@dataclass(frozen=True)
class _VoxelSignal:
    """The measured signal of the model voxels (see :class:`LiFEModel`)."""

    voxels: np.ndarray
    s0: np.ndarray
    signal: np.ndarray
    mean: np.ndarray
    scale: np.ndarray


def _voxel_signal(scan: _Scan, voxel_lin: torch.Tensor, formulation: str) -> _VoxelSignal:
    """S₀ from the b=0 volumes and b, the signal demeaned per voxel."""
    voxel_lin_np = voxel_lin.cpu().numpy()
    voxels = np.stack(np.unravel_index(voxel_lin_np, scan.shape), axis=1).astype(np.int64)
    vals = scan.data[voxels[:, 0], voxels[:, 1], voxels[:, 2]].astype(np.float64)
    s0 = vals[:, scan.is_b0].mean(axis=1)
    dwv = vals[:, scan.dw]
    if formulation == "encode":
        scale = np.ones_like(s0)
    else:
        scale = np.where(s0 > 0, s0, 1.0)
        dwv = dwv / scale[:, None]
    mean = dwv.mean(axis=1)
    return _VoxelSignal(voxels, s0, dwv - mean[:, None], mean, scale)


def _warn_dropped(n_streamlines: int, n_kept: int, n_short: int) -> int:
    """Warn about dropped streamlines; return how many had no node inside."""
    n_outside = n_streamlines - n_short - n_kept
    if n_kept < n_streamlines:
        warnings.warn(
            f"{n_streamlines - n_kept} of {n_streamlines} streamlines dropped "
            f"({n_short} with fewer than 2 points, {n_outside} with no node inside the "
            "volume/mask); they get weight 0.",
            stacklevel=user_stacklevel(),
        )
    return n_outside


def _assemble(
    scan: _Scan,
    atoms: np.ndarray,
    entries: _Entries,
    measured: _VoxelSignal,
    formulation: str,
    tdtype: torch.dtype,
) -> dict:
    """Return the tensors and tables of a :class:`LiFEModel` on the entries' device."""
    dev = entries.crow.device
    D = canonical_dictionary(
        scan.bvals[scan.dw],
        scan.gradients,
        atoms,
        centre="median" if formulation == "encode" else "mean",
    )
    s0_t = torch.as_tensor(measured.s0, device=dev)
    if formulation == "encode":
        value = (entries.share * s0_t[entries.av_voxel[entries.entry_av]]).to(tdtype)
    else:
        value = entries.share.to(tdtype)
    return {
        "entry_fibre": entries.entry_fibre,
        "entry_av": entries.entry_av,
        "entry_value": value,
        "av_voxel": entries.av_voxel,
        "av_atom": entries.av_atom,
        "crow": entries.crow,
        "dictionary": torch.as_tensor(D, dtype=tdtype, device=dev),
        "s0": s0_t.to(tdtype),
        "signal": torch.as_tensor(measured.signal, dtype=tdtype, device=dev),
        "signal_mean": torch.as_tensor(measured.mean, dtype=tdtype, device=dev),
        "signal_scale": torch.as_tensor(measured.scale, dtype=tdtype, device=dev),
        "formulation": formulation,
        "voxels": measured.voxels,
        "atoms": atoms,
        "bvals": scan.bvals[scan.dw],
        "bvecs": scan.gradients,
        "volume_index": np.flatnonzero(scan.dw),
        "shape": scan.shape,
        "affine": scan.affine,
    }


def build_model(  # noqa: PLR0913 - its public keywords (the scan, model and compute options)
    data: npt.ArrayLike,
    bvals: npt.ArrayLike,
    bvecs: npt.ArrayLike,
    streamlines: StreamlineArray,
    *,
    affine: npt.ArrayLike,
    mask: npt.ArrayLike | None = None,
    sphere: int | str | Sphere | npt.ArrayLike | None = None,
    b0_threshold: float = B0_THRESHOLD,
    formulation: str = "encode",
    device: str | torch.device | None = "auto",
    dtype: str | np.dtype | torch.dtype | type = "float32",
    chunk_points: int = 1 << 23,
    memory_limit: int | str | MemoryPlanner | None = None,
    loaded_bytes: int = 0,
) -> LiFEModel:
    """Build the ENCODE model of a dMRI scan and a tractogram.

    Parameters
    ----------
    data : array of shape (X, Y, Z, n_volumes)
        Diffusion-weighted volumes.
    bvals : array of shape (n_volumes,)
    bvecs : array of shape (n_volumes, 3) or (3, n_volumes)
    streamlines : StreamlineArray
        Streamlines in RAS+ mm (see :func:`~connscale.life.streamlines.load_streamlines`).
    affine : array of shape (4, 4)
        Voxel-to-RAS+ mm affine of ``data``.
    mask : array of shape (X, Y, Z) or None
        Nodes outside the mask are ignored.
    sphere : see :func:`resolve_sphere`
    b0_threshold : float, default=50
        Volumes with b ≤ this are b=0 volumes (S₀).
    formulation : {'encode', 'dipy'}, default='encode'
        ``'encode'``: Φ value = share of the fibre's nodes in the voxel with
        that atom × S₀, D de-medianed per shell, b = signal demeaned per
        voxel (encode / ReAl-LiFE). ``'dipy'``: node signals summed (Φ value
        = number of nodes), D demeaned by its mean over all directions, b =
        signal / S₀ demeaned per voxel (dipy's ``FiberModel`` and LiFE 1.0,
        whose MATLAB results dipy ships), still stored as the compact Φ.
        RMSE and predictions are in signal units either way.
    device, dtype : see :func:`connscale.life.fit`
    chunk_points : int
        Points processed at once (memory bound of the build).
    memory_limit : int, str, MemoryPlanner or None
        Once the model's size is known (before the voxel signals are read),
        raise :class:`~connscale.MemoryLimitError` when it and fitting it
        (:func:`model_memory`), with ``loaded_bytes``, exceed this limit. A
        caller's :class:`~connscale._compute.MemoryPlanner` (its task's
        budget) is counted into instead.
    loaded_bytes : int, default=0
        Bytes the caller's run already holds (its loaded dMRI volumes).

    Returns
    -------
    LiFEModel

    Examples
    --------
    >>> from connscale import life
    >>> from connscale.datasets import simulate_life_phantom
    >>> ph = simulate_life_phantom(20, 10, shape=(8, 8, 8), n_directions=12, random_state=0)
    >>> model = life.build_model(ph.dwi, ph.bvals, ph.bvecs, ph.streamlines, affine=ph.affine,
    ...                          device="cpu")
    >>> tuple(model.signal.shape)  # (voxels, diffusion-weighted directions)
    (166, 12)
    """
    dev = resolve_device(device)
    tdtype = resolve_dtype(dtype)
    planner = planner_for(dev, memory_limit, hint=MEMORY_HINT)
    planner.reserve_host(loaded_bytes)
    if formulation not in ("encode", "dipy"):
        raise ValueError(f"'formulation' must be 'encode' or 'dipy'; got {formulation!r}.")
    scan = _check_scan(data, bvals, bvecs, affine, mask, b0_threshold)
    atoms = resolve_sphere(sphere)
    too_short = streamlines.lengths < 2
    voxeliser = _Voxeliser.create(scan, atoms, too_short, dev)
    entries = _phi_entries(voxeliser, streamlines, chunk_points, formulation)
    _count_model(planner, entries, scan.n_volumes, tdtype)
    measured = _voxel_signal(scan, entries.voxel_lin, formulation)
    kept_np = entries.kept.cpu().numpy()
    n_short = int(too_short.sum())
    n_outside = _warn_dropped(len(streamlines), len(kept_np), n_short)
    return LiFEModel(
        **_assemble(scan, atoms, entries, measured, formulation, tdtype),
        fibre_index=kept_np,
        n_streamlines=len(streamlines),
        n_dropped_short=n_short,
        n_dropped_outside=n_outside,
    )
