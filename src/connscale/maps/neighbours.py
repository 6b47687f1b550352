"""Neighbourhoods of voxels and grayordinates, as lists of indices, for ReHo.

A neighbour list is an int64 array of shape (n_series, K): row ``i`` holds the
indices of the members of series ``i``'s neighbourhood, ``i`` itself first,
padded with -1. It is what :func:`connscale.maps.reho_series` takes.

- Voxels: AFNI ``3dReHo -nneigh 7|19|27`` (``src/ptaylor/3dReHo.c``,
  ``FindVoxHood`` in ``rsfc.c``): the voxel and its face (7), face and edge
  (19) or face, edge and corner (27) neighbours on the voxel grid, those
  outside the mask (or the grid) left out. AFNI draws them as the grid points
  within an index-space sphere of radius 1.1, 1.7 or 1.9; these are the same
  sets.
- Grayordinates: cortex from the mesh, as XCP-D's ``mesh_adjacency``
  (``xcp_d/utils/restingstate.py``): the vertex and every vertex that shares a
  triangle with it (its 1-ring); the volume (subcortex, cerebellum) as
  ``3dReHo`` on the voxels of the brain model. Cortex and volume are never
  mixed, and a vertex outside the brain model (the medial wall) is no one's
  neighbour. XCP-D runs its surface ReHo on ``wb_command -cifti-separate``
  output, where the medial wall is present as series of zeros that count as
  neighbours; here it is left out as 3dReHo leaves out voxels outside the mask.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

#: The voxel neighbourhoods of ``3dReHo -nneigh``.
NEIGHBOURHOODS = (7, 19, 27)

#: Largest |di| + |dj| + |dk| of an offset in each neighbourhood.
_CITY_BLOCK = {7: 1, 19: 2, 27: 3}

#: The package's fs_LR 32k triangles (see ``connscale/data/SOURCE.md``).
FSLR32K_FACES = Path(__file__).resolve().parent.parent / "data" / "fslr32k_faces.npz"

#: The CIFTI cortex structures and the hemisphere of their surface.
_HEMISPHERES = {"CIFTI_STRUCTURE_CORTEX_LEFT": "left", "CIFTI_STRUCTURE_CORTEX_RIGHT": "right"}


def check_neighbourhood(neighbourhood) -> int:
    """Return ``neighbourhood`` as an int, or raise naming the choices."""
    if isinstance(neighbourhood, bool) or neighbourhood not in NEIGHBOURHOODS:
        raise ValueError(
            f"'neighbourhood' must be 7, 19 or 27 (3dReHo -nneigh); got {neighbourhood!r}."
        )
    return int(neighbourhood)


def voxel_offsets(neighbourhood: int) -> np.ndarray:
    """Return the (K, 3) grid offsets of a neighbourhood, (0, 0, 0) first."""
    limit = _CITY_BLOCK[check_neighbourhood(neighbourhood)]
    offsets = [o for o in itertools.product((-1, 0, 1), repeat=3) if sum(map(abs, o)) <= limit]
    offsets.sort(key=lambda o: (o != (0, 0, 0), o))
    return np.array(offsets, dtype=np.int64)


def _grid_neighbours(index: np.ndarray, coords: np.ndarray, neighbourhood: int) -> np.ndarray:
    """Return the neighbour list of the points ``coords`` (M, 3) of the grid ``index``.

    ``index`` holds each grid point's series index, -1 where there is none.
    """
    padded = np.pad(index, 1, constant_values=-1)
    offsets = voxel_offsets(neighbourhood)
    neighbours = np.empty((coords.shape[0], offsets.shape[0]), dtype=np.int64)
    for k, offset in enumerate(offsets):
        shifted = coords + 1 + offset
        neighbours[:, k] = padded[shifted[:, 0], shifted[:, 1], shifted[:, 2]]
    return _packed(neighbours)


def _packed(neighbours: np.ndarray) -> np.ndarray:
    """Move the -1 of each row to its end (a stable sort on 'is missing')."""
    order = np.argsort(neighbours < 0, axis=1, kind="stable")
    packed = np.take_along_axis(neighbours, order, axis=1)
    width = int((packed >= 0).sum(axis=1).max(initial=1))
    return np.ascontiguousarray(packed[:, :width])


def voxel_neighbours(mask, neighbourhood: int = 27) -> np.ndarray:
    """Return the neighbour list of every voxel of a 3-D mask.

    Parameters
    ----------
    mask : array-like of shape (X, Y, Z)
        The voxels to use (non-zero); the series are in the C order of
        ``mask.nonzero()`` (that of ``data[mask]``).
    neighbourhood : {7, 19, 27}, default=27
        Faces; faces and edges; faces, edges and corners (AFNI ``3dReHo
        -nneigh``), the voxel itself included.

    Returns
    -------
    ndarray of shape (n_voxels, K), int64
        Row ``i``: voxel ``i`` first, then its neighbours inside the mask in a
        fixed offset order, padded with -1 (boundary voxels have fewer). K is
        the largest neighbourhood found (at most ``neighbourhood``).

    Examples
    --------
    >>> import numpy as np
    >>> from connscale.maps import voxel_neighbours
    >>> voxel_neighbours(np.ones((3, 3, 3), bool), 7)[13]
    array([13,  4, 10, 12, 14, 16, 22])
    """
    neighbourhood = check_neighbourhood(neighbourhood)
    mask = np.asarray(mask)
    if mask.ndim != 3:
        raise ValueError(f"'mask' must be a 3-D array; got shape {mask.shape}.")
    mask = mask.astype(bool)
    if not mask.any():
        raise ValueError("'mask' selects no voxel.")
    index = np.full(mask.shape, -1, dtype=np.int64)
    index[mask] = np.arange(int(mask.sum()))
    return _grid_neighbours(index, np.argwhere(mask), neighbourhood)


def grayordinate_neighbours(
    brain_model, surfaces: Mapping | None = None, *, neighbourhood: int = 27
) -> np.ndarray:
    """Return the neighbour list of every grayordinate of a CIFTI brain model.

    Parameters
    ----------
    brain_model : nibabel.cifti2.BrainModelAxis or Cifti2Image
        The grayordinates (an image's brain-model axis, its last).
    surfaces : mapping or None, default=None
        Mesh of each cortex structure: keys ``'left'`` / ``'right'`` (or a
        CIFTI structure name), values a GIfTI surface (path or image) or an
        (n_faces, 3) array of triangles. None uses the package's fs_LR 32k
        triangles (Conte69, from BrainSpace), the same for every fs_LR 32k
        surface.
    neighbourhood : {7, 19, 27}, default=27
        The voxel neighbourhood of the volume grayordinates.

    Returns
    -------
    ndarray of shape (n_grayordinates, K), int64
        Row ``i``: grayordinate ``i`` first, then its neighbours, padded with
        -1. A vertex's neighbours are the vertices of the brain model that
        share a triangle with it; a voxel's, the voxels of the brain model in
        its neighbourhood, whatever their structure. No edge joins a vertex and
        a voxel.

    Examples
    --------
    >>> import numpy as np
    >>> from nibabel.cifti2 import BrainModelAxis
    >>> from connscale.maps import grayordinate_neighbours
    >>> cortex = BrainModelAxis.from_surface(np.arange(4), 4, "CortexLeft")
    >>> mask = np.zeros((2, 2, 2), bool)
    >>> mask[0, 0, :] = True
    >>> voxels = BrainModelAxis.from_mask(mask, name="thalamus_left", affine=np.eye(4))
    >>> triangles = np.array([[0, 1, 2], [1, 2, 3]])
    >>> grayordinate_neighbours(cortex + voxels, {"left": triangles}, neighbourhood=7)
    array([[ 0,  1,  2, -1],
           [ 1,  0,  2,  3],
           [ 2,  0,  1,  3],
           [ 3,  1,  2, -1],
           [ 4,  5, -1, -1],
           [ 5,  4, -1, -1]])
    """
    neighbourhood = check_neighbourhood(neighbourhood)
    axis = _brain_model_axis(brain_model)
    blocks: list[tuple[np.ndarray, np.ndarray]] = []  # (grayordinates, their neighbour rows)
    surface, names = axis.surface_mask, axis.name  # each computed per element by nibabel
    for name, n_vertices in axis.nvertices.items():  # the surface structures
        members = np.flatnonzero(surface & (names == name))
        faces = _surface_faces(name, n_vertices, surfaces)
        local = _mesh_neighbours(faces, axis.vertex[members], n_vertices)
        blocks.append((members, np.where(local >= 0, members[np.maximum(local, 0)], -1)))
    if not surface.all():
        members = np.flatnonzero(~surface)  # the voxels
        index = np.full(axis.volume_shape, -1, dtype=np.int64)
        coords = axis.voxel[members]
        index[tuple(coords.T)] = members
        blocks.append((members, _grid_neighbours(index, coords, neighbourhood)))
    neighbours = np.full((len(axis), max(b.shape[1] for _, b in blocks)), -1, dtype=np.int64)
    for members, block in blocks:
        neighbours[members, : block.shape[1]] = block
    return neighbours


def _brain_model_axis(brain_model):
    """Return the BrainModelAxis of ``brain_model`` (an axis or a CIFTI image)."""
    from nibabel.cifti2 import BrainModelAxis

    if isinstance(brain_model, BrainModelAxis):
        return brain_model
    header = getattr(brain_model, "header", None)
    if header is not None and hasattr(header, "get_axis"):
        axis = header.get_axis(header.number_of_mapped_indices - 1)
        if isinstance(axis, BrainModelAxis):
            return axis
    raise ValueError(
        "'brain_model' must be a nibabel BrainModelAxis or a CIFTI image whose last axis is "
        f"one; got {type(brain_model).__name__}."
    )


def _surface_faces(structure: str, n_vertices: int, surfaces: Mapping | None) -> np.ndarray:
    """Return the triangles of ``structure``'s mesh, checked against its vertex count."""
    hemisphere = _HEMISPHERES.get(structure)
    if surfaces is None:
        if hemisphere is None or n_vertices != 32492:
            raise ValueError(
                f"No mesh for {structure} ({n_vertices} vertices): the package ships the fs_LR "
                "32k cortex (32492 vertices a hemisphere); pass surfaces={...} with its mesh."
            )
        with np.load(FSLR32K_FACES) as packed:
            return packed[hemisphere].astype(np.int64)
    source = surfaces.get(structure, surfaces.get(hemisphere) if hemisphere else None)
    if source is None:
        raise ValueError(
            f"'surfaces' has no mesh for {structure}; give it under {hemisphere or structure!r}."
        )
    return _faces_of(source, structure, n_vertices)


def _faces_of(source, structure: str, n_vertices: int) -> np.ndarray:
    """Return the checked (n_faces, 3) triangles of a GIfTI surface or an array."""
    if isinstance(source, (str, os.PathLike)) or hasattr(source, "agg_data"):
        import nibabel

        surface = nibabel.load(source) if isinstance(source, (str, os.PathLike)) else source
        points = surface.agg_data("pointset")
        if points is not None and len(points) != n_vertices:
            raise ValueError(
                f"The surface of {structure} has {len(points)} vertices; the brain model has "
                f"{n_vertices}."
            )
        source = surface.agg_data("triangle")
        if source is None:
            raise ValueError(f"The surface of {structure} holds no triangles.")
    faces = np.asarray(source)
    if faces.ndim != 2 or faces.shape[1] != 3 or not np.issubdtype(faces.dtype, np.integer):
        raise ValueError(
            f"The mesh of {structure} must be an (n_faces, 3) integer array of triangles; got "
            f"dtype {faces.dtype}, shape {faces.shape}."
        )
    if faces.size and (faces.min() < 0 or faces.max() >= n_vertices):
        raise ValueError(
            f"The mesh of {structure} names vertices outside 0..{n_vertices - 1} "
            f"(range {faces.min()}..{faces.max()})."
        )
    return faces.astype(np.int64)


def _mesh_neighbours(faces: np.ndarray, vertices: np.ndarray, n_vertices: int) -> np.ndarray:
    """Return the 1-ring neighbour list of ``vertices`` (indices 0.. in their order).

    Vertices of the mesh that are not in ``vertices`` are left out.
    """
    index = np.full(n_vertices, -1, dtype=np.int64)
    index[vertices] = np.arange(len(vertices))
    a, b = np.concatenate([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]]).T
    a, b = index[a], index[b]
    kept = (a >= 0) & (b >= 0) & (a != b)
    n = len(vertices)
    # Each directed edge once, as one int64 code sorted by source, then target.
    codes = np.sort(np.concatenate([a[kept] * n + b[kept], b[kept] * n + a[kept]]))
    codes = codes[np.concatenate([[True], codes[1:] != codes[:-1]])]
    source, target = np.divmod(codes, n)
    degree = np.bincount(source, minlength=n)
    neighbours = np.full((n, 1 + int(degree.max(initial=0))), -1, dtype=np.int64)
    neighbours[:, 0] = np.arange(n)
    first = np.concatenate([[0], np.cumsum(degree)[:-1]])
    neighbours[source, 1 + np.arange(len(codes)) - first[source]] = target
    return neighbours
