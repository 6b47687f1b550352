"""Orders of the series in the thresholded benchmarks (issue 26), and their checks.

The exact scheme skips work where a whole tile of R is far from θ, so its
speed depends on where the networks sit in the index order. Every benchmark
of a thresholded job runs on these layouts and reports each:

``block``
    The simulation's own order: each network a contiguous block of indices
    (favourable: most tiles hold one network or none).
``permuted``
    The same array with its series (columns) permuted by a fixed seed
    (``PERMUTATION_SEED``): the same matrix up to the permutation, so the
    results permuted back must equal ``block``'s (:func:`compare_maps`,
    :func:`compare_patterns`).
``random``
    (maps) Each series draws its network at random (76 % in one of 20), the
    hardest case.
``raster``
    (maps) The voxels of nilearn's MNI152 2 mm grey-matter mask (P = 204,492)
    in raster (C) order, each network a few contiguous parcels spread over the
    brain (a Voronoi partition of the mask around random centres), as real
    data reach a GPU. Without nilearn, an ellipsoid on the 91×109×91 grid.

The networks are those of ``connscale.datasets.simulate_timeseries``: 20, a
shared signal per network with c = 0.6, 76 % of the series in one.
"""

from __future__ import annotations

import dataclasses
import numbers

import numpy as np
import torch

LAYOUTS = ("block", "permuted", "random", "raster")
PERMUTATION_SEED = 26
N_NETWORKS = 20
FRACTION_IN_NETWORKS = 0.76
PARCELS_PER_NETWORK = 4


def parse_layouts(value: str, allowed: tuple[str, ...]) -> list[str]:
    """Return the layouts of a ``--layout`` value (``all``: every one of ``allowed``)."""
    names = [v.strip() for v in value.split(",") if v.strip()]
    if names == ["all"]:
        return list(allowed)
    unknown = [v for v in names if v not in allowed]
    if unknown or not names:
        raise SystemExit(f"--layout: choose from {', '.join(allowed)} or all; got {value!r}.")
    return names


def permutation(n: int, seed: int = PERMUTATION_SEED) -> np.ndarray:
    """The fixed permutation of ``n`` series: permuted series a is block series perm[a]."""
    return np.random.default_rng(seed).permutation(n)


def block_labels(n: int) -> np.ndarray:
    """Networks in contiguous blocks (the first 76 % of the series), -1 for none."""
    n_in = int(round(FRACTION_IN_NETWORKS * n))
    labels = np.full(n, -1, dtype=np.int64)
    labels[:n_in] = np.arange(n_in) * N_NETWORKS // n_in
    return labels


def random_labels(n: int, seed: int) -> np.ndarray:
    """Each series in a network drawn at random (76 %) or in none (-1)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, N_NETWORKS, size=n)
    labels[rng.random(n) >= FRACTION_IN_NETWORKS] = -1
    return labels


def mni_mask() -> tuple[np.ndarray, str]:
    """The 2 mm grey-matter mask (bool 3-D array) and where it came from."""
    try:
        from nilearn.datasets import load_mni152_gm_mask

        image = load_mni152_gm_mask(resolution=2)
        return np.asarray(image.dataobj) > 0, "nilearn MNI152 2 mm grey-matter mask"
    except (ImportError, OSError) as exc:
        shape = np.array([91, 109, 91])
        grid = np.indices(tuple(shape)).astype(float)
        centre, radii = (shape - 1) / 2, np.array([36.0, 45.0, 34.0])
        inside = (((grid - centre[:, None, None, None]) / radii[:, None, None, None]) ** 2).sum(0)
        return inside <= 1, f"ellipsoid on 91x109x91 (nilearn unavailable: {exc})"


def raster_labels(seed: int, stride: int = 1) -> tuple[np.ndarray, str]:
    """Networks of the mask's voxels in raster order, each a few smooth parcels.

    ``stride`` > 1 keeps every stride-th voxel along each axis (small tests).
    """
    from scipy.spatial import cKDTree

    mask, source = mni_mask()
    mask = mask[::stride, ::stride, ::stride]
    voxels = np.argwhere(mask)  # C order: the order of a masked image's columns
    rng = np.random.default_rng(seed)
    n_in = N_NETWORKS * PARCELS_PER_NETWORK
    n_parcels = int(round(n_in / FRACTION_IN_NETWORKS))
    centres = voxels[rng.choice(len(voxels), size=n_parcels, replace=False)]
    parcel = cKDTree(centres).query(voxels)[1]
    network = np.full(n_parcels, -1, dtype=np.int64)
    network[:n_in] = np.arange(n_in) % N_NETWORKS  # parcels beyond n_in: no network
    return network[rng.permutation(n_parcels)][parcel], source


def labels_for(layout: str, n: int, seed: int, stride: int = 1) -> tuple[np.ndarray, str]:
    """The network of each series for ``block``, ``random`` or ``raster``, and a note.

    ``raster`` takes P from the mask (every ``stride``-th voxel per axis), not ``n``.
    """
    if layout == "block":
        return block_labels(n), "networks in contiguous index blocks"
    if layout == "random":
        return random_labels(n, seed + 1), "network drawn at random per series"
    if layout == "raster":
        labels, source = raster_labels(seed + 2, stride)
        step = f", every {stride}th voxel per axis" if stride > 1 else ""
        return labels, f"{source}{step}, raster order, Voronoi parcels (P from the mask)"
    raise ValueError(f"No labels for layout {layout!r} (permuted is block's array permuted).")


def _plain(value):
    if isinstance(value, torch.Tensor):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return str(value)


def confirmation_counts(found) -> dict | None:
    """The exact path's confirmation counts, whatever form the result exposes them in.

    ``found``: an object with ``as_dict()`` (``connscale.fc._exact.Confirmation``),
    a dataclass, a dict (the ``info["confirmation"]`` of ``compute_degree``), an
    object with public attributes, or None (no exact scheme ran).
    """
    if found is None:
        return None
    if isinstance(found, dict):
        return _plain(found)
    as_dict = getattr(found, "as_dict", None)
    if callable(as_dict):
        return _plain(as_dict())
    if dataclasses.is_dataclass(found):
        return _plain(dataclasses.asdict(found))
    names = [k for k in dir(found) if not k.startswith("_")]
    return _plain({k: getattr(found, k) for k in names if not callable(getattr(found, k))})


def unpermute(values, perm: np.ndarray):
    """Values of the permuted series (last axis) back in block order."""
    out = values.clone() if isinstance(values, torch.Tensor) else np.array(values, copy=True)
    index = (
        torch.as_tensor(perm, device=values.device) if isinstance(values, torch.Tensor) else perm
    )
    out[..., index] = values
    return out


def compare_maps(block, permuted, perm: np.ndarray, *, atol: float) -> dict:
    """Maps of the permuted layout, permuted back, against block's (same shape, float)."""
    back = torch.as_tensor(unpermute(permuted, perm), dtype=torch.float64)
    block = torch.as_tensor(block, dtype=torch.float64, device=back.device)
    differ = (back - block).abs().nan_to_num(0.0)
    return {
        "voxels_differing": int((differ > atol).sum()),
        "max_abs_difference": float(differ.max()) if differ.numel() else 0.0,
        "agree": bool((differ <= atol).all()),
    }


def pattern_keys(matrix, perm: np.ndarray | None = None, device="cpu"):
    """Sorted keys i·N + j (i < j, block order) of a window's kept pairs, and their values.

    ``matrix``: a scipy CSR/COO of kept upper-triangle entries; with ``perm``
    its indices are the permuted layout's and are mapped back.
    """
    coo = matrix.tocoo()
    n = matrix.shape[0]
    rows = torch.as_tensor(coo.row.astype(np.int64), device=device)
    cols = torch.as_tensor(coo.col.astype(np.int64), device=device)
    if perm is not None:
        p = torch.as_tensor(perm, device=device)
        rows, cols = p[rows], p[cols]
    keys = torch.minimum(rows, cols) * n + torch.maximum(rows, cols)
    keys, order = torch.sort(keys)
    values = torch.as_tensor(coo.data, device=device)[order]
    return keys, values


def compare_patterns(reference_keys, reference_values, keys, values, *, atol: float) -> dict:
    """Two runs' kept pairs of a window (:func:`pattern_keys`): pattern and values."""
    in_other = torch.isin(reference_keys, keys)
    in_reference = torch.isin(keys, reference_keys)
    differ = (reference_values[in_other].double() - values[in_reference].double()).abs()
    max_diff = float(differ.max()) if differ.numel() else 0.0
    only_reference, only_this = int((~in_other).sum()), int((~in_reference).sum())
    return {
        "nnz_reference": int(reference_keys.numel()),
        "nnz": int(keys.numel()),
        "only_in_reference": only_reference,
        "only_in_this": only_this,
        "max_abs_value_difference": max_diff,
        "agree": only_reference == 0 and only_this == 0 and max_diff <= atol,
    }


def float64_keys(x: np.ndarray, theta: float, device, block_rows: int = 4096):
    """Sorted keys (:func:`pattern_keys`) of the pairs with r ≥ θ in float64, and U in float64.

    ``x``: the (w, N) window of series, correlated in float64 (the reference
    that the fp32 and exact paths' errors are measured against).
    """
    from connscale.fc.normalize import normalize_series

    u, _ = normalize_series(torch.as_tensor(x, device=device), dtype=torch.float64)
    n = u.shape[0]
    found = []
    for r0 in range(0, n, block_rows):
        r = u[r0 : r0 + block_rows] @ u.T
        rows = torch.arange(r0, r0 + r.shape[0], device=device)[:, None]
        cols = torch.arange(n, device=device)[None, :]
        i, j = torch.nonzero((r >= theta) & (cols > rows), as_tuple=True)
        found.append((i + r0) * n + j)
    return torch.cat(found), u


def errors_against_float64(reference, u64, keys, theta: float) -> dict:
    """Pairs a path kept or dropped against float64's r ≥ θ, and how far from θ they lie."""
    n = u64.shape[0]
    dropped = reference[~torch.isin(reference, keys)]
    added = keys[~torch.isin(keys, reference)]

    def distance(found):
        if not found.numel():
            return None
        r = (u64[found // n] * u64[found % n]).sum(-1)
        return float((r - theta).abs().max())

    return {
        "dropped": int(dropped.numel()),
        "added": int(added.numel()),
        "dropped_max_r_minus_theta": distance(dropped),
        "added_max_theta_minus_r": distance(added),
    }


def degree_errors(counts: np.ndarray, reference: np.ndarray) -> dict:
    """Per threshold, series counted lower and higher than ``reference`` (e.g. float64)."""
    diff = np.nan_to_num(np.asarray(counts, dtype=float) - np.asarray(reference, dtype=float))
    diff = diff.reshape(-1, diff.shape[-1])
    return {
        "lower": [int(v) for v in (diff < 0).sum(-1)],
        "higher": [int(v) for v in (diff > 0).sum(-1)],
        "total_abs": [float(v) for v in np.abs(diff).sum(-1)],
    }
