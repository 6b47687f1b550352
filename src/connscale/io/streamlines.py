"""Streamlines as one flat array of points plus offsets, their reader and writer.

The form is that of nibabel's ``ArraySequence``; the reader brings paths, nibabel
tractograms and lists of arrays to it, and the writer makes .trk/.tck files.

Only numpy here; nibabel is imported inside :func:`load_streamlines` and
:func:`save_streamlines`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from typing import TypeAlias

    from nibabel.streamlines.array_sequence import ArraySequence
    from nibabel.streamlines.tractogram import Tractogram
    from nibabel.streamlines.tractogram_file import TractogramFile

from connscale.io.atomic import atomic_path

_FORMATS = (".trk", ".tck")


@dataclass
class StreamlineArray:
    """Streamlines stored as ``points`` (n_points, 3) and ``offsets`` (n + 1,).

    Streamline ``i`` is ``points[offsets[i]:offsets[i + 1]]``. Behaves as a
    read-only sequence of (n_points_i, 3) arrays.

    Parameters
    ----------
    points : ndarray of shape (n_points, 3)
        Every streamline's points, one after the other.
    offsets : ndarray of shape (n_streamlines + 1,), int64
        Where each streamline starts in ``points`` (and the end).
    source : object, default=None
        The nibabel tractogram read, if any.
    path : str or None, default=None
        The file read, if any.

    Examples
    --------
    >>> import numpy as np
    >>> from connscale.life import StreamlineArray
    >>> streamlines = StreamlineArray(np.zeros((5, 3)), np.array([0, 2, 5]))
    >>> len(streamlines), streamlines.lengths.tolist(), streamlines[1].shape
    (2, [2, 3], (3, 3))
    """

    points: np.ndarray
    offsets: np.ndarray
    source: object = field(default=None, repr=False)  # nibabel TractogramFile when read from disk
    path: str | None = None

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index: int) -> np.ndarray:
        return self.points[self.offsets[index] : self.offsets[index + 1]]

    def __iter__(self) -> Iterator[np.ndarray]:
        for i in range(len(self)):
            yield self[i]

    @property
    def lengths(self) -> np.ndarray:
        """Number of points of each streamline."""
        return np.diff(self.offsets)

    def subset(self, index: npt.ArrayLike) -> StreamlineArray:
        """Return the streamlines at ``index`` (integer indices or a boolean mask).

        Parameters
        ----------
        index : array-like of int or bool
            Streamline indices, or a mask of ``len(self)`` booleans.

        Returns
        -------
        StreamlineArray
            Those streamlines, in the order of ``index``.

        Examples
        --------
        >>> import numpy as np
        >>> from connscale.life import StreamlineArray
        >>> streamlines = StreamlineArray.from_list([np.zeros((2, 3)), np.ones((4, 3))])
        >>> streamlines.subset([1]).lengths.tolist(), len(streamlines.subset([False, False]))
        ([4], 0)
        """
        index = np.asarray(index)
        if index.dtype == bool:
            index = np.flatnonzero(index)
        lengths = self.lengths[index]
        offsets = np.zeros(len(index) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if len(index) == 0:
            return StreamlineArray(np.zeros((0, 3), self.points.dtype), offsets)
        starts = self.offsets[index]
        take = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])
        return StreamlineArray(self.points[take], offsets)

    @classmethod
    def from_list(cls, streamlines: Iterable[npt.ArrayLike]) -> StreamlineArray:
        """Concatenate a sequence of (n_points, 3) arrays, validating each.

        Parameters
        ----------
        streamlines : iterable of array-like of shape (n_points, 3)
            The streamlines' points.

        Returns
        -------
        StreamlineArray

        Examples
        --------
        >>> import numpy as np
        >>> from connscale.life import StreamlineArray
        >>> StreamlineArray.from_list([np.zeros((2, 3)), np.ones((4, 3))]).offsets
        array([0, 2, 6])
        """
        arrays = []
        for i, s in enumerate(streamlines):
            try:
                a = np.asarray(s, dtype=np.float64)
            except (TypeError, ValueError) as exc:
                raise ValueError(
                    f"Streamline {i} is not a numeric array of points: {exc}"
                ) from None
            if a.ndim != 2 or a.shape[1] != 3:
                raise ValueError(
                    "Each streamline must be an array of shape (n_points, 3); "
                    f"streamline {i} has shape {a.shape}."
                )
            arrays.append(a)
        lengths = np.array([len(a) for a in arrays], dtype=np.int64)
        offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        points = (
            np.concatenate(arrays).astype(np.float32) if arrays else np.zeros((0, 3), np.float32)
        )
        return cls(points, offsets)


def _from_array_sequence(seq: ArraySequence) -> StreamlineArray:
    lengths = np.asarray(seq._lengths, dtype=np.int64)
    if len(lengths) == 0:
        raise ValueError("The tractogram holds no streamlines.")
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = np.asarray(seq._data)
    if data.ndim != 2 or (len(data) and data.shape[1] != 3):
        raise ValueError(
            "Streamline points must have 3 coordinates; the tractogram holds "
            f"points of shape {data.shape[1:]}."
        )
    if (
        np.array_equal(np.asarray(seq._offsets, dtype=np.int64), offsets[:-1])
        and len(data) == offsets[-1]
    ):
        points = data.astype(np.float32, copy=False)
    else:
        points = (
            np.concatenate([np.asarray(s) for s in seq]).astype(np.float32)
            if len(lengths)
            else np.zeros((0, 3), np.float32)
        )
    return StreamlineArray(points, offsets)


if TYPE_CHECKING:
    #: What :func:`load_streamlines` (and so ``life.fit``) accepts as streamlines.
    StreamlinesLike: TypeAlias = (
        str
        | os.PathLike
        | StreamlineArray
        | TractogramFile
        | Tractogram
        | ArraySequence
        | Iterable[npt.ArrayLike]
    )


def load_streamlines(streamlines: StreamlinesLike) -> StreamlineArray:
    """Bring streamlines to a :class:`StreamlineArray` in RAS+ mm.

    Parameters
    ----------
    streamlines : path, nibabel tractogram, sequence of arrays or StreamlineArray
        A ``.trk``/``.tck`` file (read with ``nibabel.streamlines.load``, which
        returns RAS+ mm), a nibabel ``TractogramFile``/``Tractogram``/
        ``ArraySequence``, or a list of (n_points, 3) arrays in RAS+ mm.

    Returns
    -------
    StreamlineArray
        With ``source`` set to the nibabel file object when read from disk.

    Examples
    --------
    >>> import numpy as np
    >>> from connscale.life import load_streamlines
    >>> streamlines = load_streamlines([np.zeros((3, 3)), np.ones((2, 3))])
    >>> len(streamlines), streamlines.points.shape
    (2, (5, 3))
    """
    if isinstance(streamlines, StreamlineArray):
        out = streamlines
    elif isinstance(streamlines, (str, os.PathLike)):
        path = Path(streamlines)
        if path.suffix.lower() not in _FORMATS:
            raise ValueError(f"Tractogram files must be .trk or .tck; got '{path.name}'.")
        if not path.exists():
            raise FileNotFoundError(f"Tractogram file not found: '{path}'.")
        import nibabel as nib

        try:
            tfile = nib.streamlines.load(str(path))
        except Exception as exc:  # nibabel raises many types on bad headers
            raise ValueError(
                f"Could not read tractogram '{path.name}': {type(exc).__name__}: {exc}"
            ) from None
        out = _from_array_sequence(tfile.streamlines)
        out.source = tfile
        out.path = str(path)
    elif hasattr(streamlines, "_lengths") and hasattr(streamlines, "_data"):
        out = _from_array_sequence(streamlines)
    elif hasattr(streamlines, "streamlines") and hasattr(streamlines.streamlines, "_lengths"):
        seq = streamlines.streamlines
        if hasattr(streamlines, "affine_to_rasmm") and not np.allclose(
            streamlines.affine_to_rasmm, np.eye(4)
        ):
            streamlines = streamlines.copy()
            streamlines.to_world()
            seq = streamlines.streamlines
        out = _from_array_sequence(seq)
        if hasattr(streamlines, "header"):
            out.source = streamlines
    elif isinstance(streamlines, np.ndarray) and streamlines.dtype != object:
        raise ValueError(
            "'streamlines' must be a list of (n_points, 3) arrays, a nibabel "
            f"tractogram or a .trk/.tck path; got one array of shape {streamlines.shape}."
        )
    else:
        try:
            iter(streamlines)
        except TypeError:
            raise ValueError(
                "'streamlines' must be a list of (n_points, 3) arrays, a nibabel "
                f"tractogram or a .trk/.tck path; got {type(streamlines).__name__}."
            ) from None
        out = StreamlineArray.from_list(streamlines)
    if len(out) == 0:
        raise ValueError("The tractogram holds no streamlines.")
    if not np.all(np.isfinite(out.points)):
        bad = np.flatnonzero(~np.all(np.isfinite(out.points), axis=1))[0]
        which = int(np.searchsorted(out.offsets, bad, side="right") - 1)
        raise ValueError(f"Streamline {which} holds NaN or infinite coordinates.")
    return out


def save_streamlines(
    streamlines: StreamlineArray,
    path: str | os.PathLike,
    *,
    weights: npt.ArrayLike | None = None,
    reference: TractogramFile | None = None,
    reference_affine: npt.ArrayLike | None = None,
    reference_shape: npt.ArrayLike | None = None,
) -> Path:
    """Write streamlines (RAS+ mm) as ``.trk`` or ``.tck``, atomically.

    Parameters
    ----------
    streamlines : StreamlineArray
    path : str or path
        ``.trk`` or ``.tck`` (the suffix chooses the format).
    weights : array of shape (n_streamlines,) or None
        Stored as the per-streamline ``weight`` of a ``.trk`` (a ``.tck``
        holds no per-streamline data).
    reference : nibabel TractogramFile or None
        A ``.trk`` reuses its header (the input file's, when there was one).
    reference_affine, reference_shape : array or None
        Otherwise, the voxel-to-RAS+ affine and grid of a ``.trk`` header.

    Returns
    -------
    Path
    """
    import nibabel as nib

    path = Path(path)
    seq = nib.streamlines.ArraySequence([streamlines[i] for i in range(len(streamlines))])
    tractogram = nib.streamlines.Tractogram(seq, affine_to_rasmm=np.eye(4))
    suffix = path.suffix.lower()
    header = None
    if suffix == ".trk":
        cls = nib.streamlines.TrkFile
        if weights is not None:
            tractogram.data_per_streamline["weight"] = np.asarray(weights).astype(np.float32)[
                :, None
            ]
        if isinstance(reference, cls):
            header = dict(reference.header)
        elif reference_affine is not None:
            affine = np.asarray(reference_affine, dtype=np.float64)
            header = {
                nib.streamlines.Field.VOXEL_TO_RASMM: affine.astype(np.float32),
                nib.streamlines.Field.DIMENSIONS: np.asarray(reference_shape, dtype=np.int16),
                nib.streamlines.Field.VOXEL_SIZES: np.sqrt((affine[:3, :3] ** 2).sum(0)).astype(
                    np.float32
                ),
                nib.streamlines.Field.VOXEL_ORDER: "".join(nib.aff2axcodes(affine)),
            }
    elif suffix == ".tck":
        cls = nib.streamlines.TckFile  # .tck holds no per-streamline data
    else:
        raise ValueError(f"Pruned tractograms are written as .trk or .tck; got '{path.name}'.")
    with atomic_path(path) as tmp:
        tfile = cls(tractogram, header=header) if header else cls(tractogram)
        with open(tmp, "wb") as fh:
            tfile.save(fh)
    return path
