"""CIFTI-2 files (grayordinates), read and written through nibabel's axes.

A CIFTI-2 file is a NIfTI-2 file whose XML extension describes its two axes
(:mod:`nibabel.cifti2`): a ``SeriesAxis`` (time points), ``ScalarAxis``
(named maps), ``LabelAxis`` (label maps with their tables), ``BrainModelAxis``
(grayordinates: surface vertices and volume voxels, by structure) or
``ParcelsAxis``. Arrays are read and taken in nibabel's orientation (axis 0 first: (T, N)
for a time series); :class:`DconnWriter` alone speaks of Workbench's rows,
the contiguous records on disk (nibabel's axis 1).

Read here: time series (``.dtseries.nii``, ``.ptseries.nii``), label maps
(``.dlabel.nii``), scalar maps (``.dscalar.nii``, ``.pscalar.nii``). The
data come as float32, memory-mapped when the file allows it (uncompressed,
native float32, no scaling). nibabel reads CIFTI-2 only: a CIFTI-1 file, or
a NIfTI file without the CIFTI-2 extension, gets a one-line error saying
so and how to convert it.

Written here: connectomes (``.dconn.nii``, ``.pconn.nii``) through
:class:`DconnWriter`, which writes the NIfTI-2 header and the CIFTI-2 XML
extension (serialised by nibabel) first, then each block of rows or tile at
its offset in the uncompressed file, so a 91,282-grayordinate connectome
(33 GB as float32) never sits in memory; and time series and scalar maps
(``write_ptseries``, ``write_dtseries``, ``write_pscalar``,
``write_dscalar``), through the same writer. Every file is staged beside its
path and published atomically (:mod:`connscale.io.atomic`), after a check
of the free space for its known size.

nibabel is imported inside the functions, so the numerical core runs
without it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from connscale._validation import parse_memory
from connscale.io.atomic import atomic_path, check_free_space

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
    "DconnWriter",
    "brain_model_summary",
    "check_same_brain_model",
    "cifti_kind",
    "cifti_nbytes",
    "read_cifti_labels",
    "read_cifti_scalars",
    "read_cifti_series",
    "write_dlabel",
    "write_dscalar",
    "write_dtseries",
    "write_pconn",
    "write_pscalar",
    "write_ptseries",
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
#: The data types the writers store (Workbench writes float32).
WRITE_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
#: The largest staging buffer a writer holds when a block is not contiguous.
_BUFFER_BYTES = 64 * 1024**2


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


def cifti_kind(axis0: object, axis1: object) -> tuple[str, str, str]:
    """Return (what the file is, its suffix, its NIfTI intent) for two CIFTI-2 axes.

    The axes in nibabel's order: ``header.get_axis(0)``, ``header.get_axis(1)``.

    Raises
    ------
    ValueError
        For a pair of axes that is no CIFTI-2 file type connscale knows.
    """
    key = (type(axis0).__name__, type(axis1).__name__)
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


# ----------------------------------------------------------------------------- writers


class DconnWriter:
    """Write a CIFTI-2 matrix file in blocks, straight to its place on disk.

    Made for dense and parcellated connectomes (``.dconn.nii``: a
    BrainModelAxis by a BrainModelAxis, ROI rows allowed; ``.pconn.nii``:
    ParcelsAxis by ParcelsAxis) and used by every writer here: the pair of
    axes gives the file type (:data:`CIFTI_TYPES`), whose suffix the path
    must carry.

    Rows are Workbench's rows: each is contiguous on disk (NIfTI stores
    CIFTI's first dimension fastest), so ``row_axis`` is nibabel's axis 1
    and ``column_axis`` its axis 0, and nibabel reads the file as the
    transpose, shape (n_columns, n_rows). For a dense connectome from ROI
    rows (Workbench's ``-roi-override``) ``row_axis`` is the ROI's brain
    model, exactly as ``wb_command -cifti-correlation`` writes it; for a
    symmetric connectome the orientation does not matter.

    On entry the free space for the whole file is checked and the
    NIfTI-2 header with the CIFTI-2 XML extension is written to a staging file
    beside ``path``; each block then goes to its offset in the uncompressed
    data (``os.pwrite``: blocks may come in any order, from several
    threads). On a clean exit every value must have been written exactly once;
    the file is then flushed, fsynced and renamed to ``path``. On an
    exception (or a missing value) nothing is published.

    Parameters
    ----------
    path : path
        The file to publish.
    row_axis, column_axis : nibabel.cifti2 axes
        One entry per row (nibabel's axis 1) and per column (nibabel's axis 0).
    dtype : {numpy.float32, numpy.float64}, default=numpy.float32
        The stored data type; blocks must have it (no silent conversion).
    memory_limit : int, str or None, default=None
        Caps the staging buffer (at most 64 MiB) used to make a
        non-contiguous block (a transposed tile) contiguous before it is
        written; contiguous blocks are written from their own memory.

    Examples
    --------
    >>> with DconnWriter("sub-01.dconn.nii", brain_model, brain_model) as out:  # doctest: +SKIP
    ...     for row0 in range(0, n, 4096):
    ...         out.write_rows(row0, corr[row0 : row0 + 4096])
    """

    def __init__(
        self,
        path: str | os.PathLike,
        row_axis: object,
        column_axis: object,
        *,
        dtype: npt.DTypeLike = np.float32,
        memory_limit: int | str | None = None,
    ) -> None:
        self.path = Path(path)
        what, suffix, _ = cifti_kind(column_axis, row_axis)
        if not self.path.name.endswith(suffix):
            raise ValueError(
                f"{self.path} would hold {what} ({type(column_axis).__name__} x "
                f"{type(row_axis).__name__}); its name must end with {suffix}."
            )
        self.dtype = _write_dtype(dtype)
        self.shape = (len(row_axis), len(column_axis))
        self._header = _header_bytes(column_axis, row_axis, self.dtype)
        self.nbytes = len(self._header) + self.shape[0] * self.shape[1] * self.dtype.itemsize
        limit = parse_memory(memory_limit)
        self._buffer_bytes = _BUFFER_BYTES if limit is None else min(_BUFFER_BYTES, limit)
        self._coverage = _Coverage(*self.shape)
        self._coverage_lock = threading.Lock()
        self._stack: contextlib.ExitStack | None = None
        self._fd = -1

    def __enter__(self) -> DconnWriter:
        check_free_space(self.path.parent, self.nbytes, what=str(self.path.name))
        with contextlib.ExitStack() as stack:
            staged = stack.enter_context(atomic_path(self.path))
            self._fd = os.open(staged, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
            stack.callback(os.close, self._fd)
            _pwrite_all(self._fd, self._header, 0)
            os.ftruncate(self._fd, self.nbytes)
            self._stack = stack.pop_all()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        stack, self._stack = self._stack, None
        if exc_type is None:
            try:
                self._coverage.check_complete(self.path)
            except BaseException:
                stack.__exit__(*sys.exc_info())
                raise
        return bool(stack.__exit__(exc_type, exc, tb))

    def write_rows(self, row0: int, block: np.ndarray) -> None:
        """Write whole rows ``row0 : row0 + len(block)`` (one large write when contiguous)."""
        self.write_block(row0, 0, block)

    def write_block(self, row0: int, col0: int, block: np.ndarray) -> None:
        """Write a tile at (``row0``, ``col0``), one segment per row at its offset.

        Full-width blocks of rows (:meth:`write_rows`) are the fast path: a
        tile costs one system call per row.

        Raises
        ------
        ValueError
            When the block has another dtype than the file, is not 2-D, lies
            (partly) outside the matrix or overlaps a block already written.
        """
        if self._stack is None:
            raise RuntimeError("DconnWriter writes only inside its 'with' block.")
        row0, col0 = int(row0), int(col0)  # Python ints: offsets pass 2**31
        block = self._checked(row0, col0, block)
        n_rows, width = block.shape
        with self._coverage_lock:
            self._coverage.add(row0, row0 + n_rows, col0, col0 + width)
        itemsize = self.dtype.itemsize
        if block.flags.c_contiguous or block.strides[1] == itemsize:
            step = max(1, n_rows)  # rows written from the block's own memory
        else:  # a transposed tile: rows copied through a buffer of at most _buffer_bytes
            step = max(1, self._buffer_bytes // max(1, width * itemsize))
        for start in range(0, n_rows, step):
            part = block[start : start + step]
            if step != n_rows:
                part = np.ascontiguousarray(part)
            self._write_part(row0 + start, col0, part)

    def _write_part(self, row0: int, col0: int, part: np.ndarray) -> None:
        """Write rows whose elements are contiguous: in one call when the rows are too."""
        itemsize = self.dtype.itemsize
        offset = len(self._header) + (row0 * self.shape[1] + col0) * itemsize
        if part.shape[1] == self.shape[1] and part.flags.c_contiguous:
            _pwrite_all(self._fd, part, offset)
            return
        for row in part:
            _pwrite_all(self._fd, row, offset)
            offset += self.shape[1] * itemsize

    def _checked(self, row0: int, col0: int, block: np.ndarray) -> np.ndarray:
        """Return ``block`` once its dtype, shape and place are valid."""
        if not isinstance(block, np.ndarray) or block.ndim != 2:
            raise ValueError(f"{self.path.name}: a block must be a 2-D numpy array.")
        if block.dtype != self.dtype:
            raise ValueError(
                f"{self.path.name} stores {self.dtype}; got a {block.dtype} block "
                f"(convert it first, e.g. block.astype(np.{self.dtype}))."
            )
        n_rows, n_cols = self.shape
        if row0 < 0 or col0 < 0 or row0 + block.shape[0] > n_rows or col0 + block.shape[1] > n_cols:
            raise ValueError(
                f"{self.path.name}: a {block.shape[0]} x {block.shape[1]} block at row {row0}, "
                f"column {col0} lies outside the {n_rows} x {n_cols} matrix."
            )
        return block


def cifti_nbytes(
    row_axis: object, column_axis: object, *, dtype: npt.DTypeLike = np.float32
) -> int:
    """Return the size in bytes of the CIFTI-2 file of two axes (header and data).

    The axes as :class:`DconnWriter` takes them (the size does not depend on
    their order); for planning free space before a writer is opened (which
    checks it again).
    """
    dtype = _write_dtype(dtype)
    header = _header_bytes(column_axis, row_axis, dtype)
    return len(header) + len(row_axis) * len(column_axis) * dtype.itemsize


def write_pconn(
    path: str | os.PathLike, parcels: ParcelsAxis, matrix: npt.ArrayLike, *, dtype=np.float32
) -> Path:
    """Write a parcellated connectome (``.pconn.nii``: parcels by parcels) atomically.

    ``matrix[i, j]`` is read back by nibabel at ``[i, j]`` (Workbench's row ``j``).
    """
    return _write_matrix(path, parcels, parcels, matrix, dtype=dtype)


def write_ptseries(
    path: str | os.PathLike,
    parcels: ParcelsAxis,
    series: SeriesAxis | float,
    data: npt.ArrayLike,
    *,
    dtype=np.float32,
) -> Path:
    """Write parcel time series (``.ptseries.nii``, (T, n_parcels)) atomically.

    ``series`` is the input's SeriesAxis (its start, step and unit are kept,
    its size is the data's) or the repetition time in seconds.
    """
    data = np.asarray(data)
    return _write_matrix(path, _series_axis(series, data), parcels, data, dtype=dtype)


def write_dtseries(
    path: str | os.PathLike,
    brain_model: BrainModelAxis,
    series: SeriesAxis | float,
    data: npt.ArrayLike,
    *,
    dtype=np.float32,
) -> Path:
    """Write dense time series (``.dtseries.nii``, (T, n_grayordinates)) atomically.

    ``series`` is the input's SeriesAxis (its start, step and unit are kept,
    its size is the data's) or the repetition time in seconds.
    """
    data = np.asarray(data)
    return _write_matrix(path, _series_axis(series, data), brain_model, data, dtype=dtype)


def write_pscalar(
    path: str | os.PathLike,
    parcels: ParcelsAxis,
    names: Sequence[str],
    data: npt.ArrayLike,
    *,
    dtype=np.float32,
) -> Path:
    """Write named parcel maps (``.pscalar.nii``, (n_maps, n_parcels)) atomically."""
    return _write_matrix(path, _scalar_axis(names), parcels, data, dtype=dtype)


def write_dscalar(
    path: str | os.PathLike,
    brain_model: BrainModelAxis,
    names: Sequence[str],
    data: npt.ArrayLike,
    *,
    dtype=np.float32,
) -> Path:
    """Write named grayordinate maps (``.dscalar.nii``, (n_maps, n_grayordinates)) atomically."""
    return _write_matrix(path, _scalar_axis(names), brain_model, data, dtype=dtype)


def write_dlabel(
    path: str | os.PathLike,
    brain_model: BrainModelAxis,
    labels: npt.ArrayLike,
    names: dict[int, str],
    *,
    colors: dict[int, tuple[float, float, float, float]] | None = None,
    map_name: str = "labels",
) -> Path:
    """Write one label map (``.dlabel.nii``) atomically: what :func:`read_cifti_labels` reads.

    Parameters
    ----------
    path : path
        The file to publish.
    brain_model : nibabel.cifti2.BrainModelAxis
        The grayordinates.
    labels : array-like of shape (n_grayordinates,), int
        Each grayordinate's key; 0 is unlabeled.
    names : dict of int to str
        The name of each key used (key 0 is written as Workbench's ``"???"``
        unless given).
    colors : dict of int to tuple of 4 floats, optional
        RGBA in [0, 1] per key; grey for the keys left out.
    map_name : str, default="labels"
        The name of the label map.
    """
    from nibabel.cifti2 import LabelAxis

    keys = np.asarray(labels)
    if keys.ndim != 1 or not np.array_equal(keys, np.round(keys)) or np.abs(keys).max() >= 2**24:
        raise ValueError(
            f"{Path(path).name}: labels must be one integer key (below 2**24) per grayordinate."
        )
    missing = sorted(set(np.unique(keys).astype(int).tolist()) - set(names) - {0})
    if missing:
        raise ValueError(f"{Path(path).name}: label keys {missing[:10]} have no name.")
    colors = colors or {}
    table = {0: ("???", (0.667, 0.667, 0.667, 0.0))}
    for key, name in names.items():
        table[int(key)] = (str(name), tuple(colors.get(key, (0.5, 0.5, 0.5, 1.0))))
    axis = LabelAxis([map_name], [table])
    return _write_matrix(path, axis, brain_model, keys[np.newaxis], dtype=np.float32)


class _Coverage:
    """Which values of a matrix have been written: whole rows and tiles, never twice."""

    def __init__(self, n_rows: int, n_cols: int) -> None:
        self.n_rows, self.n_cols = n_rows, n_cols
        self._full_rows = np.zeros(n_rows, dtype=bool)
        self._tiles = np.empty((16, 4), dtype=np.int64)  # row0, row1, col0, col1
        self._n_tiles = 0
        self._tile_values = 0

    def add(self, row0: int, row1: int, col0: int, col1: int) -> None:
        """Record a block; raise when it overlaps one recorded before."""
        tiles = self._tiles[: self._n_tiles]
        overlap = (tiles[:, 0] < row1) & (row0 < tiles[:, 1]) & (tiles[:, 2] < col1)
        if self._full_rows[row0:row1].any() or (overlap & (col0 < tiles[:, 3])).any():
            raise ValueError(
                f"the block of rows {row0}:{row1}, columns {col0}:{col1} overlaps one already "
                "written; each value is written once."
            )
        if col0 == 0 and col1 == self.n_cols:
            self._full_rows[row0:row1] = True
            return
        if self._n_tiles == len(self._tiles):
            self._tiles = np.concatenate([self._tiles, np.empty_like(self._tiles)])
        self._tiles[self._n_tiles] = (row0, row1, col0, col1)
        self._n_tiles += 1
        self._tile_values += (row1 - row0) * (col1 - col0)

    def check_complete(self, path: Path) -> None:
        """Raise unless every value has been written (blocks never overlap)."""
        written = int(self._full_rows.sum()) * self.n_cols + self._tile_values
        total = self.n_rows * self.n_cols
        if written != total:
            raise ValueError(
                f"{path.name}: {total - written} of the {self.n_rows} x {self.n_cols} values were "
                "never written; nothing was published."
            )


def _write_matrix(
    path: str | os.PathLike, axis0: object, axis1: object, data: npt.ArrayLike, *, dtype
) -> Path:
    """Write a whole CIFTI-2 array (nibabel's orientation) through :class:`DconnWriter`."""
    data = np.asarray(data)
    shape = (len(axis0), len(axis1))
    if data.shape != shape:
        raise ValueError(
            f"{Path(path).name}: the data are {data.shape}, the axes need {shape} "
            f"({type(axis0).__name__} x {type(axis1).__name__})."
        )
    writer = DconnWriter(path, axis1, axis0, dtype=dtype)
    with writer:
        writer.write_rows(0, data.astype(writer.dtype, copy=False).T)
    return Path(path)


def _series_axis(series: SeriesAxis | float, data: np.ndarray) -> SeriesAxis:
    """Return a SeriesAxis of ``len(data)`` points with ``series``'s start, step and unit."""
    from nibabel.cifti2 import SeriesAxis

    if data.ndim != 2:
        raise ValueError(f"A series must be 2-D (time points, columns); got shape {data.shape}.")
    if isinstance(series, SeriesAxis):
        return SeriesAxis(start=series.start, step=series.step, size=len(data), unit=series.unit)
    t_r = float(series)
    if not np.isfinite(t_r) or t_r <= 0:
        raise ValueError(f"The repetition time must be a positive number of seconds; got {series}.")
    return SeriesAxis(start=0.0, step=t_r, size=len(data), unit="SECOND")


def _scalar_axis(names: Sequence[str]) -> ScalarAxis:
    """Return a ScalarAxis of the map names."""
    from nibabel.cifti2 import ScalarAxis

    if isinstance(names, str):
        raise ValueError(f"'names' must be a list of map names; got the string {names!r}.")
    return ScalarAxis([str(name) for name in names])


def _write_dtype(dtype: npt.DTypeLike) -> np.dtype:
    """Return the native stored dtype, refusing others."""
    dtype = np.dtype(dtype).newbyteorder("=")
    if dtype not in WRITE_DTYPES:
        raise ValueError(f"CIFTI files are written as float32 or float64; got {dtype}.")
    return dtype


def _header_bytes(axis0: object, axis1: object, dtype: np.dtype) -> bytes:
    """Serialise the NIfTI-2 header and CIFTI-2 extension with nibabel; its length is vox_offset."""
    import io

    from nibabel.cifti2 import Cifti2Header
    from nibabel.cifti2.parse_cifti2 import Cifti2Extension
    from nibabel.nifti2 import Nifti2Header

    _, _, intent = cifti_kind(axis0, axis1)
    header = Nifti2Header()
    header.set_data_shape((1, 1, 1, 1, len(axis0), len(axis1)))
    header.set_data_dtype(dtype)
    header.set_intent(intent, name=intent)
    header["pixdim"][:4] = 1  # no qform: as nibabel's Cifti2Image writes
    xml = Cifti2Header.from_axes((axis0, axis1)).to_xml()
    header.extensions.append(Cifti2Extension.from_bytes(xml))
    buffer = io.BytesIO()
    header.write_to(buffer)
    data = buffer.getvalue()
    if len(data) != int(header["vox_offset"]):
        raise AssertionError("nibabel's header length differs from its vox_offset")
    return data


def _pwrite_all(fd: int, data: bytes | np.ndarray, offset: int) -> None:
    """Write all of ``data`` at ``offset`` (pwrite may write less than asked)."""
    view = memoryview(data).cast("B")
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written
