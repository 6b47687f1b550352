"""Figures of grayordinate data (CIFTI-2 brain models), saved as PNG files.

The carpet plot stacks the grayordinates in their brain-model order,
structure by structure. A map is drawn on the cortical surfaces when the
user gives the meshes (fs_LR 32k ``*.surf.gii``: :func:`plot_surface_views`,
nilearn's ``plot_surf_stat_map``); otherwise the flat view draws each
structure's values as one strip (its vertices or voxels in brain-model
order), so a value's structure is seen but not its place on the cortex.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import numpy.typing as npt

from connscale.report.plots import _draw_carpet, _pyplot, _save

__all__ = [
    "FLAT_VIEW",
    "load_surfaces",
    "plot_grayordinate_carpet",
    "plot_structure_view",
    "plot_surface_views",
    "surface_problem",
]

#: What the report says of the maps it draws without a surface mesh.
FLAT_VIEW = (
    "flat per-structure view (no fs_LR surface mesh: each structure's grayordinates in "
    "brain-model order)"
)

_STRUCTURE_PREFIX = "CIFTI_STRUCTURE_"


def _limits(finite: np.ndarray) -> tuple[float, float]:
    """Return the colour limits of finite values: their 2nd and 98th percentiles, apart."""
    low, high = np.percentile(finite, [2, 98]) if finite.size else (0.0, 1.0)
    return float(low), float(high if high > low else low + 1.0)


def _structures(brain_model) -> list[tuple[str, slice]]:
    """Return each structure's short name and its columns."""
    return [
        (str(name).removeprefix(_STRUCTURE_PREFIX).lower(), part)
        for name, part, _ in brain_model.iter_structures()
    ]


def _groups(brain_model) -> list[tuple[str, int, int]]:
    """Return (name, first, stop) of the left cortex, the right cortex and the volume part."""
    groups: dict[str, list[int]] = {}
    for name, part, model in brain_model.iter_structures():
        stop = part.stop if part.stop is not None else len(brain_model)
        label = str(name).removeprefix(_STRUCTURE_PREFIX).lower()
        if not model.surface_mask.any():
            label = "subcortical (volume)"
        bounds = groups.setdefault(label, [part.start, stop])
        bounds[0], bounds[1] = min(bounds[0], part.start), max(bounds[1], stop)
    return [(name, lo, hi) for name, (lo, hi) in groups.items()]


def plot_grayordinate_carpet(
    data: npt.ArrayLike,
    brain_model,
    out_path: str | os.PathLike,
    *,
    times: npt.ArrayLike | None = None,
    title: str | None = None,
    max_rows: int = 2000,
) -> Path:
    """Draw a carpet plot of grayordinate series, structures separated.

    Parameters
    ----------
    data : array-like of shape (n_timepoints, n_grayordinates)
        The series, one column per grayordinate of ``brain_model``; each is
        z-scored over time for the plot.
    brain_model : nibabel.cifti2.BrainModelAxis
    out_path : str or path
        PNG to write.
    times : array-like of int or None
        The volume of each row of ``data`` (None: 0, 1, ...).
    title : str or None
    max_rows : int, default=2000
        At most this many grayordinates are drawn (every k-th one).

    Returns
    -------
    Path
    """
    x = np.asarray(data)
    if x.ndim != 2 or x.shape[1] != len(brain_model):
        raise ValueError(
            f"Expected series of {len(brain_model)} grayordinates; got shape {x.shape}."
        )
    times = np.arange(x.shape[0]) if times is None else np.asarray(times)
    step = max(1, x.shape[1] // max_rows)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 4))
    _draw_carpet(ax, np.asarray(x[:, ::step], dtype=np.float64), times)
    for name, first, stop in _groups(brain_model):
        ax.axhline(stop / step, color="#d62728", lw=0.8)
        ax.text(times[-1] + 1, (first + stop) / 2 / step, name, va="center", fontsize=8)
    ax.set_xlabel("volume")
    ax.set_ylabel(f"grayordinates (1 in {step})")
    ax.set_title(title or "grayordinates (z-scored)")
    return _save(fig, out_path)


def _binned(values: np.ndarray, width: int) -> np.ndarray:
    """Return ``values`` as ``width`` bins (the mean of each run of values; NaN left out)."""
    edges = np.linspace(0, values.size, min(width, values.size) + 1).astype(int)
    finite = np.isfinite(values)
    sums = np.add.reduceat(np.where(finite, values, 0.0), edges[:-1])
    counts = np.add.reduceat(finite.astype(np.int64), edges[:-1])
    with np.errstate(invalid="ignore", divide="ignore"):
        row = sums / counts
    return np.interp(np.linspace(0, row.size - 1, width), np.arange(row.size), row)


def plot_structure_view(
    values: npt.ArrayLike,
    brain_model,
    out_path: str | os.PathLike,
    *,
    title: str | None = None,
    cmap: str = "viridis",
    width: int = 400,
) -> Path:
    """Draw one value per grayordinate as a flat view: one strip per structure.

    Each structure's values, in brain-model order, are averaged into
    ``width`` bins and drawn as one row of an image.

    Parameters
    ----------
    values : array-like of shape (n_grayordinates,)
        One value per grayordinate of ``brain_model`` (NaN: left out).
    brain_model : nibabel.cifti2.BrainModelAxis
    out_path : str or path
        PNG to write.
    title : str or None
    cmap : str, default='viridis'
    width : int, default=400
        Bins per structure.

    Returns
    -------
    Path
    """
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size != len(brain_model):
        raise ValueError(f"Expected {len(brain_model)} values; got {v.size}.")
    structures = _structures(brain_model)
    image = np.stack([_binned(v[part], width) for _, part in structures])
    finite = image[np.isfinite(image)]
    low, high = _limits(finite)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 0.25 * len(structures) + 1))
    drawn = ax.imshow(image, aspect="auto", cmap=cmap, vmin=low, vmax=high, interpolation="nearest")
    ax.set_yticks(np.arange(len(structures)))
    ax.set_yticklabels([f"{name} ({_part_size(part, len(v))})" for name, part in structures])
    ax.tick_params(axis="y", labelsize=7)
    ax.set_xticks([])
    ax.set_xlabel("grayordinates in brain-model order (binned)")
    fig.colorbar(drawn, ax=ax, fraction=0.02, pad=0.01)
    ax.set_title(title or "grayordinate values", fontsize=10)
    return _save(fig, out_path)


def _part_size(part: slice, n: int) -> int:
    """Return the number of grayordinates of a structure's slice."""
    return len(range(*part.indices(n)))


#: The cortical structures drawn on surfaces, with nilearn's hemisphere names.
_HEMISPHERES = (("CIFTI_STRUCTURE_CORTEX_LEFT", "left"), ("CIFTI_STRUCTURE_CORTEX_RIGHT", "right"))


def load_surfaces(left: str | os.PathLike, right: str | os.PathLike) -> dict:
    """Read two GIFTI surface meshes (e.g. fs_LR 32k ``*.surf.gii``) as ``{hemi: (coords, faces)}``.

    Raises
    ------
    ValueError
        One line, when a file is not a GIFTI surface (points and triangles).
    """
    import nibabel as nib

    meshes = {}
    for hemi, path in (("left", left), ("right", right)):
        try:
            image = nib.load(path)
            coords, faces = image.agg_data("pointset"), image.agg_data("triangle")
        except Exception as exc:  # noqa: BLE001 - any reading error is the same one line
            raise ValueError(
                f"{Path(path).name} is not a readable GIFTI surface ({exc})."
            ) from None
        if not isinstance(coords, np.ndarray) or not isinstance(faces, np.ndarray):
            raise ValueError(
                f"{Path(path).name} is not a GIFTI surface: it needs a point set and triangles."
            )
        meshes[hemi] = (np.asarray(coords, dtype=np.float64), np.asarray(faces, dtype=np.int64))
    return meshes


def surface_problem(brain_model, meshes: dict) -> str | None:
    """Return why ``meshes`` cannot draw ``brain_model``'s cortex (None: they can)."""
    counts = dict(brain_model.nvertices)
    for structure, hemi in _HEMISPHERES:
        if structure not in counts:
            return f"the brain model has no {structure.removeprefix(_STRUCTURE_PREFIX).lower()}"
        if meshes[hemi][0].shape[0] != counts[structure]:
            return (
                f"the {hemi} mesh has {meshes[hemi][0].shape[0]} vertices, the brain model's "
                f"{structure.removeprefix(_STRUCTURE_PREFIX).lower()} {counts[structure]}"
            )
    return None


def plot_surface_views(
    values: npt.ArrayLike,
    brain_model,
    meshes: dict,
    out_path: str | os.PathLike,
    *,
    title: str | None = None,
    cmap: str = "viridis",
) -> Path:
    """Draw the cortical part of grayordinate values on two surfaces (lateral views).

    Parameters
    ----------
    values : array-like of shape (n_grayordinates,)
        One value per grayordinate of ``brain_model``; the vertices it does
        not hold (the medial wall) are drawn as the lowest value.
    brain_model : nibabel.cifti2.BrainModelAxis
    meshes : dict
        ``{'left': (coords, faces), 'right': (coords, faces)}``
        (:func:`load_surfaces`), with the brain model's vertex counts.
    out_path : str or path
        PNG to write.
    title : str or None
    cmap : str, default='viridis'

    Returns
    -------
    Path
    """
    from nilearn import plotting

    v = np.asarray(values, dtype=np.float64).ravel()
    problem = surface_problem(brain_model, meshes)
    if problem is not None:
        raise ValueError(f"Cannot draw on these surfaces: {problem}.")
    finite = v[np.isfinite(v)]
    low, high = _limits(finite)
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), subplot_kw={"projection": "3d"})
    parts = {str(name): (part, model) for name, part, model in brain_model.iter_structures()}
    for ax, (structure, hemi) in zip(axes, _HEMISPHERES):
        part, model = parts[structure]
        texture = np.full(meshes[hemi][0].shape[0], low)
        texture[model.vertex] = np.where(np.isfinite(v[part]), v[part], low)
        plotting.plot_surf_stat_map(
            meshes[hemi],
            texture,
            hemi=hemi,
            view="lateral",
            axes=ax,
            figure=fig,
            colorbar=hemi == "right",
            cmap=cmap,
            vmin=low,
            vmax=high,
            symmetric_cbar=False,
            title=f"{hemi} cortex",
        )
    fig.suptitle(title or "grayordinate values", fontsize=10)
    return _save(fig, out_path)
