"""A tractography phantom with ground truth for LiFE.

True streamlines in bundles (weights ~ U(0.5, 1.5)) plus false random
straight segments (weight 0), and a dMRI signal generated from the true ones
only.

The generating kernel is a zeppelin (λ∥ = 1.7e-3, λ⊥ = 0.3e-3 mm²/s) at
each node's exact tangent, averaged per (voxel, fibre) as ENCODE does, so a
stick-kernel, sphere-snapped fit is not an inverse crime:
``S/S₀ = 0.3·exp(−0.003 b) + 0.4 + 0.02·(M_gen w)``, S₀ = 1000, Rician
noise at the given SNR, independent draws for the training scan and its
repeat. Needs only numpy and torch; scales to millions of streamlines
(chunked, on the GPU when ``device`` is CUDA).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from connscale._compute import resolve_device
from connscale._docs import fill_doc
from connscale._validation import check_random_state


@dataclass
class LiFEPhantom:
    """A simulated dMRI scan, its repeat and a tractogram with ground truth.

    Attributes
    ----------
    dwi, dwi_repeat : ndarray of shape (X, Y, Z, n_volumes), float32
        Two independent noisy acquisitions.
    affine : ndarray of shape (4, 4)
        Voxel to RAS+ mm.
    bvals : ndarray of shape (n_volumes,)
    bvecs : ndarray of shape (n_volumes, 3)
    streamlines : StreamlineArray
        True then false streamlines, in RAS+ mm.
    weights_true : ndarray of shape (n_streamlines,)
        Generating weights (0 for false streamlines).
    is_true : ndarray of shape (n_streamlines,), bool

    Examples
    --------
    >>> from connscale.datasets import simulate_life_phantom
    >>> phantom = simulate_life_phantom(20, 10, shape=(8, 8, 8), n_directions=12, random_state=0)
    >>> phantom.dwi.shape, int(phantom.is_true.sum()), len(phantom.weights_true)
    ((8, 8, 8, 13), 20, 30)
    """

    dwi: np.ndarray
    dwi_repeat: np.ndarray
    affine: np.ndarray
    bvals: np.ndarray
    bvecs: np.ndarray
    streamlines: object
    weights_true: np.ndarray
    is_true: np.ndarray


def _gradient_directions(n: int) -> np.ndarray:
    i = np.arange(n) + 0.5
    z = 1 - i / n
    r = np.sqrt(1 - z * z)
    phi = i * math.pi * (3 - math.sqrt(5))
    return np.stack([r * np.cos(phi), r * np.sin(phi), z], 1)


def _bundle_templates(
    shape: tuple[int, int, int], n_bundles: int, rng: np.random.Generator
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(p0, p1, bulge) of each bundle's centre curve, in voxel units."""
    X, Y, Z = (s - 1 for s in shape)
    c = np.array([X, Y, Z]) / 2.0
    canonical = [
        (np.array([0.0, 0.4 * Y, c[2]]), np.array([X, 0.4 * Y, c[2]]), np.zeros(3)),  # along x
        (
            np.array([c[0], 0.0, c[2]]),
            np.array([c[0], Y, c[2]]),
            np.zeros(3),
        ),  # along y, crossing it
        (
            np.array([0.1 * X, 0.7 * Y, 0.15 * Z]),
            np.array([0.9 * X, 0.7 * Y, 0.15 * Z]),
            np.array([0.0, 0.0, 0.6 * Z]),
        ),  # arc in x-z
    ]
    out = canonical[:n_bundles]
    for _ in range(max(0, n_bundles - 3)):
        u = rng.normal(size=3)
        u /= np.linalg.norm(u)
        half = 0.45 * np.array([X, Y, Z]) * np.abs(u) + 0.15 * min(X, Y, Z)
        centre = c + rng.uniform(-0.25, 0.25, 3) * np.array([X, Y, Z])
        p0, p1 = centre - half * np.sign(u), centre + half * np.sign(u)
        bulge = rng.normal(size=3) * 0.15 * min(X, Y, Z)
        out.append((p0, p1, bulge - np.dot(bulge, u) * u))
    return out


@dataclass(frozen=True)
class _Curves:
    """The fibres' curves ``c(t) = p0 + t (p1 − p0) + 4 t (1 − t) h`` (voxel units).

    Attributes
    ----------
    p0, p1, bulge : ndarray of shape (n_fibres, 3)
        Ends and bulge ``h`` of each fibre, the true ones first.
    t : ndarray of shape (n_nodes,)
        Curve parameter of the nodes, 0 to 1.
    weights : ndarray of shape (n_fibres,)
        Generating weights (0 for false fibres).
    n_true : int
    """

    p0: np.ndarray
    p1: np.ndarray
    bulge: np.ndarray
    t: np.ndarray
    weights: np.ndarray
    n_true: int

    @property
    def n_fibres(self) -> int:
        return len(self.p0)

    @property
    def n_nodes(self) -> int:
        return len(self.t)


@dataclass(frozen=True)
class _Bundles:
    """How the true fibres are laid out (see :func:`simulate_life_phantom`)."""

    n_bundles: int
    bundle_radius: float
    step: float


def _fibre_curves(
    shape: tuple[int, int, int],
    n_true: int,
    n_false: int,
    bundles: _Bundles,
    rng: np.random.Generator,
) -> _Curves:
    """Draw the true fibres (bundle curve + offset), then the false ones (random segments)."""
    dims = np.array(shape, dtype=np.float64)
    templates = _bundle_templates(shape, max(1, int(bundles.n_bundles)), rng)
    length = max(np.linalg.norm(p1 - p0) for p0, p1, _ in templates)
    K = max(2, int(round(length / bundles.step)) + 1)

    # True fibres: template curve + constant offset within bundle_radius.
    bundle = rng.integers(0, len(templates), n_true)
    P0 = np.stack([t[0] for t in templates])[bundle]
    P1 = np.stack([t[1] for t in templates])[bundle]
    H = np.stack([t[2] for t in templates])[bundle]
    off = rng.normal(size=(n_true, 3))
    off *= (bundles.bundle_radius * rng.uniform(0, 1, (n_true, 1)) ** (1 / 3)) / np.linalg.norm(
        off, axis=1, keepdims=True
    )
    # False fibres: random straight segments inside the volume.
    lf = rng.uniform(0.3, 0.8, (n_false, 1)) * dims.min()
    d = rng.normal(size=(n_false, 3))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    q0 = rng.uniform(0, 1, (n_false, 3)) * (dims - 1)
    q1 = np.clip(q0 + lf * d, 0, dims - 1)
    return _Curves(
        p0=np.concatenate([P0 + off, q0]),
        p1=np.concatenate([P1 + off, q1]),
        bulge=np.concatenate([H, np.zeros((n_false, 3))]),
        t=np.linspace(0.0, 1.0, K),
        weights=np.concatenate([rng.uniform(0.5, 1.5, n_true), np.zeros(n_false)]),
        n_true=n_true,
    )


@dataclass(frozen=True)
class _Kernel:
    """The zeppelin signal's gradients and grid, on the simulation's device."""

    bvecs: torch.Tensor
    bvals: torch.Tensor
    t: torch.Tensor
    dims: torch.Tensor
    strides: torch.Tensor
    weights: torch.Tensor
    n_fibres: int
    n_nodes: int

    #: Axial and radial diffusivities of the zeppelin (mm²/s).
    lam_par = 1.7e-3
    lam_perp = 0.3e-3

    def add(self, sig: torch.Tensor, pts: torch.Tensor, tan: torch.Tensor, s: int) -> None:
        """Add the signal of fibres ``s, s + 1, …`` to ``sig``.

        ``pts`` are their nodes and ``tan`` the unit tangents there; the
        signal is averaged per (voxel, fibre).
        """
        K, F = self.n_nodes, self.n_fibres
        ijk = torch.floor(pts + 0.5).long().reshape(-1, 3)
        inside = torch.all((ijk >= 0) & (ijk < self.dims), dim=1)
        lin = (ijk * self.strides).sum(1)[inside]
        fib = torch.arange(s, s + len(pts), device=sig.device).repeat_interleave(K)[inside]
        tan = tan.reshape(-1, 3)[inside]
        if lin.numel() == 0:
            return
        _, inv, cnt = torch.unique(lin * F + fib, return_inverse=True, return_counts=True)
        w = self.weights[fib] / cnt[inv].float()
        cos2 = (tan @ self.bvecs.T) ** 2
        bv = self.bvals
        zep = torch.exp(-bv * self.lam_perp - bv * (self.lam_par - self.lam_perp) * cos2)
        sig.index_add_(0, lin, (w[:, None] * zep).double())


def _trace(
    curves: _Curves,
    shape: tuple[int, int, int],
    bvals: np.ndarray,
    bvecs: np.ndarray,
    dev: torch.device,
) -> tuple[np.ndarray, np.ndarray]:
    """Trace the fibres and sum the signal of the true ones.

    Return the node points (n_fibres, n_nodes, 3) of every fibre and the
    summed signal (n_voxels, n_volumes) of the true ones, chunked over fibres.
    """
    F, K, n_true = curves.n_fibres, curves.n_nodes, curves.n_true
    kernel = _Kernel(
        bvecs=torch.as_tensor(bvecs, dtype=torch.float32, device=dev),
        bvals=torch.as_tensor(bvals, dtype=torch.float32, device=dev),
        t=torch.as_tensor(curves.t, dtype=torch.float32, device=dev),
        dims=torch.tensor(shape, device=dev),
        strides=torch.tensor([shape[1] * shape[2], shape[2], 1], device=dev),
        weights=torch.as_tensor(curves.weights, dtype=torch.float32, device=dev),
        n_fibres=F,
        n_nodes=K,
    )
    sig = torch.zeros(int(np.prod(shape)), len(bvals), dtype=torch.float64, device=dev)
    tt = kernel.t
    chunk = max(1, (1 << 21) // K)
    points = np.empty((F, K, 3), dtype=np.float32)
    for s in range(0, F, chunk):
        e = min(F, s + chunk)
        p0 = torch.as_tensor(curves.p0[s:e], dtype=torch.float32, device=dev)
        p1 = torch.as_tensor(curves.p1[s:e], dtype=torch.float32, device=dev)
        h = torch.as_tensor(curves.bulge[s:e], dtype=torch.float32, device=dev)
        # c(t) = p0 + t (p1 - p0) + 4 t (1 - t) h ; c'(t) = (p1 - p0) + 4 (1 - 2t) h
        pts = (
            p0[:, None]
            + tt[None, :, None] * (p1 - p0)[:, None]
            + (4 * tt * (1 - tt))[None, :, None] * h[:, None]
        )
        points[s:e] = pts.cpu().numpy()
        if s >= n_true:
            continue
        m = min(e, n_true) - s
        tan = (p1 - p0)[:m, None] + (4 * (1 - 2 * tt))[None, :, None] * h[:m, None]
        tan = tan / torch.linalg.vector_norm(tan, dim=2, keepdim=True)
        kernel.add(sig, pts[:m], tan, s)
    return points, sig.cpu().numpy()


def _rician(
    clean: np.ndarray, sigma: float, shape: tuple[int, ...], rng: np.random.Generator
) -> np.ndarray:
    """One noisy acquisition of ``clean`` (n_voxels, n_volumes), as a 4-D volume."""
    n1 = rng.normal(size=clean.shape) * sigma
    n2 = rng.normal(size=clean.shape) * sigma
    return np.sqrt((clean + n1) ** 2 + n2**2).astype(np.float32).reshape(shape)


@fill_doc
def simulate_life_phantom(  # noqa: PLR0913 - its public keywords (one per phantom property)
    n_true: int = 360,
    n_false: int = 360,
    *,
    shape: tuple[int, int, int] = (20, 20, 20),
    voxel_size: float = 2.0,
    n_bundles: int = 3,
    bundle_radius: float = 2.0,
    step: float = 0.25,
    n_directions: int = 64,
    bvalue: float = 1000.0,
    n_b0: int = 1,
    snr: float = 25.0,
    random_state: int | np.random.Generator | None = None,
    device: str | torch.device = "cpu",
) -> LiFEPhantom:
    """Simulate the LiFE phantom (see the module docstring).

    Parameters
    ----------
    n_true, n_false : int, default=360
        Numbers of true (bundled, weighted) and false (random, weight 0)
        streamlines.
    shape : tuple of 3 int, default=(20, 20, 20)
        Grid of the scan.
    voxel_size : float, default=2.0
        Isotropic voxel size in mm.
    n_bundles : int, default=3
        The first three are a bundle along x, one along y crossing it and
        an x–z arc; more bundles are random arcs.
    bundle_radius : float, default=2.0
        Jitter of the fibres around their bundle's centre curve (voxels).
    step : float, default=0.25
        Node spacing along the bundle curves (voxels).
    n_directions : int, default=64
        Diffusion-weighted directions on one shell.
    bvalue : float, default=1000
    n_b0 : int, default=1
    snr : float, default=25
        S₀ / σ of the Rician noise.
    %(random_state)s
    device : {'cpu', 'cuda', 'auto'}, default='cpu'
        Where the signal is accumulated.

    Returns
    -------
    LiFEPhantom

    Examples
    --------
    >>> from connscale.datasets import simulate_life_phantom
    >>> phantom = simulate_life_phantom(20, 10, shape=(8, 8, 8), n_directions=12, random_state=0)
    >>> phantom.bvals.tolist()[:3], phantom.bvecs.shape
    ([0.0, 1000.0, 1000.0], (13, 3))
    """
    from connscale.io.streamlines import StreamlineArray

    if n_true < 1 or n_false < 0:
        raise ValueError(f"Need n_true ≥ 1 and n_false ≥ 0; got {n_true}, {n_false}.")
    rng = check_random_state(random_state)
    dev = resolve_device(device)
    shape = tuple(int(s) for s in shape)
    dims = np.array(shape, dtype=np.float64)
    curves = _fibre_curves(shape, n_true, n_false, _Bundles(n_bundles, bundle_radius, step), rng)
    bvecs = np.concatenate([np.zeros((n_b0, 3)), _gradient_directions(n_directions)])
    bvals = np.concatenate([np.zeros(n_b0), np.full(n_directions, float(bvalue))])
    affine = np.diag([voxel_size, voxel_size, voxel_size, 1.0])
    affine[:3, 3] = -voxel_size * (dims - 1) / 2

    # Signal of the true fibres, chunked over fibres, averaged per (voxel, fibre).
    points, sig = _trace(curves, shape, bvals, bvecs, dev)
    S0 = 1000.0
    base = 0.3 * np.exp(-0.003 * bvals) + 0.4
    clean = S0 * (base[None, :] + 0.02 * sig)
    sigma = S0 / snr
    dwi = _rician(clean, sigma, shape + (len(bvals),), rng)
    dwi_repeat = _rician(clean, sigma, shape + (len(bvals),), rng)
    # Streamlines to RAS+ mm.
    flat = points.reshape(-1, 3)  # voxel -> RAS+ mm in place (diagonal affine)
    flat *= np.float32(voxel_size)
    flat += affine[:3, 3].astype(np.float32)
    F, K = curves.n_fibres, curves.n_nodes
    offsets = np.arange(F + 1, dtype=np.int64) * K
    return LiFEPhantom(
        dwi=dwi,
        dwi_repeat=dwi_repeat,
        affine=affine,
        bvals=bvals,
        bvecs=bvecs,
        streamlines=StreamlineArray(flat, offsets),
        weights_true=curves.weights,
        is_true=np.arange(F) < n_true,
    )
