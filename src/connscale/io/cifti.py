"""CIFTI-2 files (grayordinates), read and written through nibabel's axes.

A CIFTI-2 file is a NIfTI-2 file whose XML extension describes its two axes
(:mod:`nibabel.cifti2`): a ``SeriesAxis`` (time points), ``ScalarAxis``
(named maps), ``LabelAxis`` (label maps with their tables), ``BrainModelAxis``
(grayordinates: surface vertices and volume voxels, by structure) or
``ParcelsAxis``. Rows are axis 0, columns axis 1.

Read here: time series (``.dtseries.nii``, ``.ptseries.nii``), label maps
(``.dlabel.nii``), scalar maps (``.dscalar.nii``, ``.pscalar.nii``). The
data come as float32, memory-mapped when the file allows it (uncompressed,
native float32, no scaling). nibabel reads CIFTI-2 only: a CIFTI-1 file, or
a NIfTI file without the CIFTI-2 extension, gets a one-line error saying
so and how to convert it.

nibabel is imported inside the functions, so the numerical core runs
without it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from nibabel.cifti2 import (
        BrainModelAxis,
        Cifti2Image,
        LabelAxis,
        ParcelsAxis,
        ScalarAxis,
        SeriesAxis,
    )

    ColumnAxis = BrainModelAxis | ParcelsAxis

__all__ = [
    "CONVERT_HINT",
    "CiftiLabels",
    "CiftiSeries",
    "brain_model_summary",
    "check_same_brain_model",
    "cifti_kind",
    "read_cifti_labels",
    "read_cifti_scalars",
    "read_cifti_series",
]

#: How to turn a CIFTI-1 file into the CIFTI-2 that nibabel reads.
CONVERT_HINT = "convert it with: wb_command -file-convert -cifti-version-convert IN 2 OUT"

#: The CIFTI-2 file types: (row axis, column axis) -> (what it is, file suffix, NIfTI intent).
CIFTI_TYPES = {
    ("BrainModelAxis", "BrainModelAxis"): ("a dense connectome", ".dconn.nii", "ConnDense"),
    ("SeriesAxis", "BrainModelAxis"): ("a dense time series", ".dtseries.nii", "ConnDenseSeries"),
    ("ParcelsAxis", "ParcelsAxis"): ("a parcellated connectome", ".pconn.nii", "ConnParcels"),
    ("SeriesAxis", "ParcelsAxis"): ("a parcel time series", ".ptseries.nii", "ConnParcelSries"),
    ("ScalarAxis", "BrainModelAxis"): ("dense scalar maps", ".dscalar.nii", "ConnDenseScalar"),
    ("LabelAxis", "BrainModelAxis"): ("dense label maps", ".dlabel.nii", "ConnDenseLabel"),
    ("ScalarAxis", "ParcelsAxis"): ("parcel scalar maps", ".pscalar.nii", "ConnParcelScalr"),
}

_STRUCTURE_PREFIX = "CIFTI_STRUCTURE_"


@dataclass(frozen=True)
class CiftiSeries:
    """A CIFTI-2 time series (``.dtseries.nii`` or ``.ptseries.nii``).

    Attributes
    ----------
    data : ndarray of shape (n_timepoints, n_grayordinates), float32
        The series; a read-only memory map of the file where nibabel allows it.
    brain_model : nibabel.cifti2.BrainModelAxis or nibabel.cifti2.ParcelsAxis
        The column axis: the grayordinates (or parcels) of each column.
    series : nibabel.cifti2.SeriesAxis
        The row axis (start, step, unit, size).
    t_r : float or None
        The repetition time in seconds (the series step); None when the
        series unit is not seconds (a frequency or distance series).
    path : Path or None
        The file read.
    """

    data: np.ndarray
    brain_model: ColumnAxis
    series: SeriesAxis
    t_r: float | None
    path: Path | None = None


@dataclass(frozen=True)
class CiftiLabels:
    """One label map of a ``.dlabel.nii``: a parcellation of grayordinates.

    Attributes
    ----------
    labels : ndarray of shape (n_grayordinates,), int32
        Each grayordinate's label key; 0 is unlabeled.
    names : dict of int to str
        Each label key's name, key 0 (unlabeled) left out.
    colors : dict of int to tuple of 4 floats
        Each label key's RGBA colour, for the same keys as ``names``.
    brain_model : nibabel.cifti2.BrainModelAxis
        The grayordinates of ``labels``.
    map_name : str
        The name of the label map read.
    path : Path or None
        The file read.
    """

    labels: np.ndarray
    names: dict[int, str]
    colors: dict[int, tuple[float, float, float, float]]
    brain_model: BrainModelAxis
    map_name: str
    path: Path | None = None


def read_cifti_series(path: str | os.PathLike, *, mmap: bool = True) -> CiftiSeries:
    """Read a CIFTI-2 time series (``.dtseries.nii`` or ``.ptseries.nii``).

    Parameters
    ----------
    path : path
        The file: a SeriesAxis by a BrainModelAxis or a ParcelsAxis.
    mmap : bool, default=True
        Map the data instead of reading it when the file allows it
        (uncompressed native float32 without scaling); otherwise it is read
        (and converted to float32) in one sequential pass.

    Returns
    -------
    CiftiSeries

    Raises
    ------
    ValueError
        One line, when the file is not CIFTI-2 (CIFTI-1 included) or its axes
        are not a series by grayordinates or parcels.
    """
    image, axes = _load(path, mmap=mmap)
    _require_axes(path, axes, ("SeriesAxis",), ("BrainModelAxis", "ParcelsAxis"), "a time series")
    series, brain_model = axes
    return CiftiSeries(
        data=_float32_data(image, path),
        brain_model=brain_model,
        series=series,
        t_r=float(series.step) if series.unit == "SECOND" else None,
        path=Path(path),
    )


def read_cifti_labels(path: str | os.PathLike, *, map_index: int | str = 0) -> CiftiLabels:
    """Read one label map of a ``.dlabel.nii`` as a parcellation of grayordinates.

    Parameters
    ----------
    path : path
        The file: a LabelAxis by a BrainModelAxis.
    map_index : int or str, default=0
        Which label map: its index (0 is the first) or its name.

    Returns
    -------
    CiftiLabels

    Raises
    ------
    ValueError
        One line, when the file is not a CIFTI-2 label file, the map does not
        exist or its keys are not integers.
    """
    image, axes = _load(path, mmap=True)
    _require_axes(path, axes, ("LabelAxis",), ("BrainModelAxis",), "a label file")
    label_axis, brain_model = axes
    index = _map_position(path, label_axis, map_index)
    keys = np.asarray(image.dataobj[index], dtype=np.float64)
    labels = keys.astype(np.int32)
    if not np.array_equal(labels, keys):
        raise ValueError(
            f"{path}: label map {label_axis.name[index]!r} holds non-integer keys; "
            "a .dlabel.nii holds integer label keys."
        )
    table = {int(key): value for key, value in label_axis.label[index].items() if int(key) != 0}
    return CiftiLabels(
        labels=labels,
        names={key: str(name) for key, (name, _) in table.items()},
        colors={key: tuple(float(c) for c in rgba) for key, (_, rgba) in table.items()},
        brain_model=brain_model,
        map_name=str(label_axis.name[index]),
        path=Path(path),
    )


def read_cifti_scalars(
    path: str | os.PathLike,
) -> tuple[np.ndarray, list[str], ColumnAxis]:
    """Read the maps of a ``.dscalar.nii`` or ``.pscalar.nii``.

    Parameters
    ----------
    path : path
        The file: a ScalarAxis by a BrainModelAxis or a ParcelsAxis.

    Returns
    -------
    data : ndarray of shape (n_maps, n_grayordinates), float32
    names : list of str
        The map names.
    brain_model : nibabel.cifti2.BrainModelAxis or nibabel.cifti2.ParcelsAxis
        The column axis.
    """
    image, axes = _load(path, mmap=True)
    _require_axes(path, axes, ("ScalarAxis",), ("BrainModelAxis", "ParcelsAxis"), "a scalar file")
    scalars, brain_model = axes
    return _float32_data(image, path), [str(n) for n in scalars.name], brain_model


def cifti_kind(row_axis: object, column_axis: object) -> tuple[str, str, str]:
    """Return (what the file is, its suffix, its NIfTI intent) for two CIFTI-2 axes.

    Raises
    ------
    ValueError
        For a pair of axes that is no CIFTI-2 file type connscale knows.
    """
    key = (type(row_axis).__name__, type(column_axis).__name__)
    if key not in CIFTI_TYPES:
        known = ", ".join(f"{r} x {c} ({s})" for (r, c), (_, s, _) in CIFTI_TYPES.items())
        raise ValueError(f"No CIFTI-2 file type for axes {key[0]} x {key[1]}; known: {known}.")
    return CIFTI_TYPES[key]


def brain_model_summary(axis: object) -> str:
    """Describe a brain model in one line: its structures and their sizes."""
    if type(axis).__name__ == "ParcelsAxis":
        return f"{len(axis)} parcels"
    parts = []
    n_voxels, volume_structures = 0, 0
    for name, _, model in axis.iter_structures():
        count = len(model)
        if model.surface_mask.any():
            short = str(name).removeprefix(_STRUCTURE_PREFIX)
            parts.append(f"{short} {count} of {model.nvertices[name]} vertices")
        else:
            n_voxels += count
            volume_structures += 1
    if volume_structures:
        parts.append(f"{volume_structures} volume structures {n_voxels} voxels")
    return f"{len(axis)} grayordinates (" + ", ".join(parts) + ")"


def check_same_brain_model(a: object, b: object, *, what: str = "the inputs") -> None:
    """Raise unless two CIFTI-2 files (or axes) share their brain model.

    Parameters
    ----------
    a, b : CiftiSeries, CiftiLabels, or a BrainModelAxis / ParcelsAxis
        Read files (named in the message by their path) or bare axes.
    what : str
        What is being matched, for the message (e.g. ``"the atlas"``).

    Raises
    ------
    ValueError
        One line naming both files and their structures and counts.
    """
    axis_a, axis_b = (getattr(x, "brain_model", x) for x in (a, b))
    if type(axis_a) is type(axis_b) and axis_a == axis_b:
        return
    name_a, name_b = (str(getattr(x, "path", None) or "(in memory)") for x in (a, b))
    summary_a, summary_b = brain_model_summary(axis_a), brain_model_summary(axis_b)
    detail = " (same counts; the vertices, voxels or volume grid differ)"
    raise ValueError(
        f"{what}: {name_b} is on another brain model than {name_a}: {summary_b} vs "
        f"{summary_a}{detail if summary_a == summary_b else ''}; resample one onto the other's "
        "grayordinates first (e.g. wb_command -cifti-resample)."
    )


def _load(path: str | os.PathLike, *, mmap: bool) -> tuple[Cifti2Image, tuple]:
    """Load a CIFTI-2 file and its two axes, with one-line errors."""
    import nibabel as nib
    from nibabel.cifti2 import Cifti2Image

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"No CIFTI file at {path}.")
    try:
        image = nib.load(path, mmap="r" if mmap else False)
    except ValueError as exc:
        if "CIFTI-2" in str(exc):  # nibabel: "Only CIFTI-2 files are supported; found version 1"
            raise ValueError(
                f"{path} is a CIFTI-1 file ({exc}); nibabel reads CIFTI-2 only: {CONVERT_HINT}."
            ) from None
        raise ValueError(f"Cannot read {path} as CIFTI-2: {exc}") from exc
    except Exception as exc:  # nibabel raises several types on a bad file
        raise ValueError(f"Cannot read {path} as CIFTI-2 ({type(exc).__name__}: {exc}).") from exc
    if not isinstance(image, Cifti2Image):
        kind = type(image).__name__.removesuffix("Image") or "unknown"
        raise ValueError(
            f"{path} is not a CIFTI-2 file (nibabel reads it as {kind}, shape {image.shape}, "
            f"without the CIFTI-2 extension); nibabel reads CIFTI-2 only: if it is CIFTI-1, "
            f"{CONVERT_HINT}."
        )
    if len(image.shape) != 2:
        raise ValueError(f"{path}: a CIFTI-2 file with {len(image.shape)} axes; 2 are supported.")
    return image, (image.header.get_axis(0), image.header.get_axis(1))


def _require_axes(
    path: str | os.PathLike,
    axes: tuple,
    rows: tuple[str, ...],
    columns: tuple[str, ...],
    needed: str,
) -> None:
    """Raise a one-line error naming the file's type and the one needed."""
    found = tuple(type(axis).__name__ for axis in axes)
    if found[0] in rows and found[1] in columns:
        return
    what, suffix, _ = CIFTI_TYPES.get(found, (None, None, None))
    found_text = f"{what} ({suffix}: " if what else "("
    wanted = [f"{CIFTI_TYPES[(r, c)][1]}" for r in rows for c in columns if (r, c) in CIFTI_TYPES]
    raise ValueError(
        f"{path} holds {found_text}{found[0]} x {found[1]}); {needed} is needed here "
        f"({' or '.join(wanted)}: {'/'.join(rows)} x {' or '.join(columns)})."
    )


def _map_position(
    path: str | os.PathLike, label_axis: LabelAxis | ScalarAxis, key: int | str
) -> int:
    """Return the position of a map given by index or name, with a one-line error."""
    names = [str(n) for n in label_axis.name]
    if isinstance(key, str):
        if key in names:
            return names.index(key)
        raise ValueError(f"{path} has no map named {key!r}; its maps: {names}.")
    index = int(key)
    if not -len(names) <= index < len(names):
        raise ValueError(f"{path} has {len(names)} maps; map index {key} does not exist.")
    return index % len(names)


def _float32_data(image: Cifti2Image, path: str | os.PathLike) -> np.ndarray:
    """Return the image data as float32 (the memory map itself where it is already)."""
    try:
        data = np.asanyarray(image.dataobj)
    except (EOFError, OSError, ValueError) as exc:
        raise ValueError(
            f"Cannot read the data of {path}: the file is truncated or corrupt "
            f"({type(exc).__name__}: {exc}); expected shape {image.shape}."
        ) from exc
    if data.dtype != np.float32 or not data.dtype.isnative:
        data = np.asarray(data, dtype=np.float32)
    return data
