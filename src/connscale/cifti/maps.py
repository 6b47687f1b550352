"""Seeds on grayordinates, for the maps of a dense series (``connscale maps X.dtseries.nii``).

The maps themselves are :mod:`connscale.maps`' on the (n_timepoints,
n_grayordinates) matrix; a seed names the grayordinate whose series is
correlated with all others: by its index, by a vertex of a surface structure,
or by world coordinates in the volume part (the nearest voxel of the brain
model). nibabel is imported where a structure name is read.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from nibabel.cifti2 import BrainModelAxis

#: ``INDEX`` or ``STRUCTURE:VERTEX`` (a grayordinate seed written on the command line).
GRAYORDINATE = re.compile(r"^\s*(?:(?P<structure>[A-Za-z_]+)\s*:\s*)?(?P<number>\d+)\s*$")


def parse_grayordinate(text: str) -> int | tuple[str, int]:
    """Return the seed written ``INDEX`` (an int) or ``STRUCTURE:VERTEX`` (a pair).

    Parameters
    ----------
    text : str
        ``"1234"`` or ``"CORTEX_LEFT:1234"``.

    Returns
    -------
    int or tuple of (str, int)

    Raises
    ------
    ValueError
        One line, when ``text`` is neither.

    Examples
    --------
    >>> from connscale.cifti import parse_grayordinate
    >>> parse_grayordinate("1234"), parse_grayordinate("CORTEX_LEFT:17")
    (1234, ('CORTEX_LEFT', 17))
    """
    match = GRAYORDINATE.match(text)
    if match is None:
        raise ValueError(
            f"A grayordinate seed is INDEX or STRUCTURE:VERTEX (e.g. 1234 or "
            f"CORTEX_LEFT:1234); got {text!r}."
        )
    number = int(match["number"])
    return number if match["structure"] is None else (match["structure"], number)


def seed_index(brain_model: BrainModelAxis, seed) -> int:
    """Return the grayordinate (column) of one seed.

    Parameters
    ----------
    brain_model : nibabel.cifti2.BrainModelAxis
        The grayordinates of the series.
    seed : int, str, (structure, vertex) or (x, y, z)
        A grayordinate index; ``"INDEX"`` or ``"STRUCTURE:VERTEX"``
        (:func:`parse_grayordinate`; a structure as Workbench or nibabel
        names it: ``CORTEX_LEFT``, ``CortexLeft``); a vertex of a surface
        structure; or world coordinates in mm, taken to the nearest voxel of
        the volume part (within one voxel's largest side).

    Returns
    -------
    int

    Raises
    ------
    ValueError
        One line, when the seed is not in the brain model.

    Examples
    --------
    >>> import numpy as np
    >>> from nibabel.cifti2 import BrainModelAxis
    >>> from connscale.cifti import seed_index
    >>> model = BrainModelAxis.from_surface(np.array([0, 2, 5]), 6, "CortexRight")
    >>> seed_index(model, "CORTEX_RIGHT:5"), seed_index(model, 1)
    (2, 1)
    """
    if isinstance(seed, str):
        seed = parse_grayordinate(seed)
    if isinstance(seed, (int, np.integer)):
        if not 0 <= seed < len(brain_model):
            raise ValueError(
                f"Grayordinate {seed} is out of range: the series has {len(brain_model)} "
                f"grayordinates (0 to {len(brain_model) - 1})."
            )
        return int(seed)
    if len(seed) == 2:
        return _vertex_index(brain_model, *seed)
    if len(seed) == 3:
        return _nearest_voxel(brain_model, np.asarray(seed, dtype=float))
    raise ValueError(f"A seed is an index, (structure, vertex) or (x, y, z); got {seed!r}.")


def seed_indices(brain_model: BrainModelAxis, seeds: Sequence) -> list[int]:
    """Return the grayordinate of each seed (:func:`seed_index`), in order.

    Parameters
    ----------
    brain_model : nibabel.cifti2.BrainModelAxis
        The grayordinates of the series.
    seeds : sequence
        Seeds as :func:`seed_index` takes them.

    Returns
    -------
    list of int

    Examples
    --------
    >>> import numpy as np
    >>> from nibabel.cifti2 import BrainModelAxis
    >>> from connscale.cifti import seed_indices
    >>> model = BrainModelAxis.from_surface(np.array([0, 2, 5]), 6, "CortexRight")
    >>> seed_indices(model, [("CortexRight", 2), "0"])
    [1, 0]
    """
    return [seed_index(brain_model, seed) for seed in seeds]


def _vertex_index(brain_model: BrainModelAxis, structure: str, vertex: int) -> int:
    """Return the grayordinate of ``vertex`` of surface ``structure``."""
    try:
        name = brain_model.to_cifti_brain_structure_name(structure)
    except ValueError:
        raise ValueError(f"{structure!r} is not a CIFTI brain structure.") from None
    short = name.removeprefix("CIFTI_STRUCTURE_")
    if name not in brain_model.nvertices:
        surfaces = ", ".join(s.removeprefix("CIFTI_STRUCTURE_") for s in brain_model.nvertices)
        raise ValueError(
            f"{short} is not a surface structure of the series (its surfaces: "
            f"{surfaces or 'none'})."
        )
    where = np.flatnonzero(
        brain_model.surface_mask & (brain_model.name == name) & (brain_model.vertex == vertex)
    )
    if where.size == 0:
        raise ValueError(
            f"Vertex {vertex} of {short} is not a grayordinate of the series (its mesh has "
            f"{brain_model.nvertices[name]} vertices; the medial wall and others are left out)."
        )
    return int(where[0])


def _nearest_voxel(brain_model: BrainModelAxis, xyz: np.ndarray) -> int:
    """Return the grayordinate of the voxel nearest ``xyz`` (mm), within one voxel."""
    volume = np.flatnonzero(brain_model.volume_mask)
    if volume.size == 0:
        raise ValueError(
            f"The seed at {tuple(xyz.tolist())} mm needs a volume part; the series has "
            "surfaces only: give a vertex as STRUCTURE:VERTEX."
        )
    affine = brain_model.affine
    ijk = brain_model.voxel[volume]
    centres = ijk @ affine[:3, :3].T + affine[:3, 3]
    distance = np.linalg.norm(centres - xyz, axis=1)
    nearest = int(np.argmin(distance))
    side = float(np.linalg.norm(affine[:3, :3], axis=0).max())
    if distance[nearest] > side:
        raise ValueError(
            f"The seed at {tuple(xyz.tolist())} mm is outside the volume part of the series "
            f"(the nearest of its voxels is {distance[nearest]:.1f} mm away); give a point "
            "inside it, or a vertex as STRUCTURE:VERTEX."
        )
    return int(volume[nearest])
