"""Read a run's BOLD inside its mask, decoding ``.nii.gz`` with ISA-L when installed.

Reading gzip bounds a cohort run on a GPU: a 2 mm MNI BOLD of 400 volumes
is ~1.7 GB raw. :func:`read_masked_bold` parses the header with nibabel,
then decompresses the data block with ``isal``'s igzip (the Intel ISA-L
inflate, several times zlib's speed, with the GIL released; see
``benchmarks/RESULTS.md``) a volume or a few at a time (a block small enough
to stay in the core's cache) into one reused buffer, and gathers from each
block what the run needs: the in-mask voxel series
and/or the sums of the atlas regions (float64). The whole 4-D image is
never held in memory, and no float64 copy of it is made. Without ISA-L (or
for an uncompressed file) nibabel reads the array (zlib) and the same
gathers follow. Nothing is cached: each call reads its file once. With
ISA-L the stream is inflated to its end, so that its CRC is checked; a
damaged or cut file is refused in one line naming it (:func:`reading`).
"""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from connscale.engines.shared import empty

__all__ = [
    "HAVE_ISAL",
    "MaskedBold",
    "load_masked_bold",
    "read_masked_bold",
    "read_nifti_data",
    "reading",
]

try:
    from isal import igzip as _igzip
    from isal import isal_zlib as _isal_zlib
    from isal.isal_zlib import error as _IsalError

    HAVE_ISAL = True
except ImportError:  # pragma: no cover - depends on the install
    _igzip = _isal_zlib = None
    _IsalError = zlib.error
    HAVE_ISAL = False

#: What gzip, zlib and ISA-L raise on a damaged or cut ``.nii.gz``.
_DAMAGED = (EOFError, zlib.error, gzip.BadGzipFile, _IsalError)

_READ_BYTES = 16 * 1024**2
#: The most bytes of whole volumes inflated before they are gathered (at least one
#: volume): a block the gather reads back from the core's cache, not from memory (a
#: 2 mm MNI volume is 4.3 MB; 16 MB blocks made a run's read 19% slower on 2 cores).
_BLOCK_BYTES = 4 * 1024**2


def _use_isal(path: Path, use_isal: bool | None) -> bool:
    use_isal = HAVE_ISAL and path.name.endswith(".gz") if use_isal is None else use_isal
    if use_isal and not HAVE_ISAL:
        raise ImportError("Decoding with ISA-L needs the 'isal' package: pip install isal")
    return use_isal


@contextmanager
def _inflating(path: Path):
    """Open ``path`` (gzip) for ``readinto`` straight into the caller's buffer.

    ISA-L's C reader (what ``igzip.open`` wraps in a ``BufferedReader`` and a
    ``GzipFile``) decompresses into the buffer given: ``GzipFile.readinto``
    would decompress into a new bytes object, then copy it (~7% of a read).
    Where a later ``isal`` lacks it, ``igzip.open``.
    """
    reader = getattr(_isal_zlib, "_GzipReader", None)
    if reader is None:  # pragma: no cover - depends on the isal version
        with _igzip.open(path, "rb") as fh:
            yield fh
        return
    with open(path, "rb") as raw:
        yield reader(raw, _igzip.READ_BUFFER_SIZE)


def _skip_header(fh, offset: int) -> int:
    skipped = 0
    while skipped < offset:  # the header and extensions
        chunk = fh.read(offset - skipped)
        if not chunk:
            break
        skipped += len(chunk)
    return skipped


def _fill(fh, view: memoryview) -> int:
    filled = 0
    while filled < view.nbytes:
        n = fh.readinto(view[filled : filled + _READ_BYTES])
        if not n:
            break
        filled += n
    return filled


def _check_end(fh) -> None:
    """Inflate to the end of the gzip stream, so that its CRC and length are checked.

    The data were read without reaching the stream's trailer: a damaged
    stream that still inflates would otherwise give garbage without an
    error. Bytes after the data (none in a file nibabel writes) are dropped.
    """
    scratch = memoryview(bytearray(1 << 16))
    while fh.readinto(scratch):
        pass


@contextmanager
def reading(path: str | os.PathLike) -> Iterator[None]:
    """Turn what nibabel, gzip, zlib and ISA-L raise on a damaged image into one line.

    Raises
    ------
    ValueError
        ``path`` is not a NIfTI image nibabel can read, or its data are cut
        short or corrupt; the message names the file.
    """
    from nibabel.filebasedimages import ImageFileError

    name = Path(path).name
    try:
        yield
    except ImageFileError as exc:
        raise ValueError(f"{name} is not a readable NIfTI image ({_one_line(exc)}).") from exc
    except _DAMAGED as exc:
        raise ValueError(f"{name} is truncated or corrupt ({_one_line(exc)}).") from exc
    except OSError as exc:
        if exc.errno is not None:  # the system's (missing file, permissions, I/O): as is
            raise
        # nibabel's short read ("could the file be damaged?"), indexed_gzip's ZranError
        raise ValueError(f"{name} is truncated or corrupt ({_one_line(exc)}).") from exc


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _truncated(path: Path, got: int, expected: int) -> ValueError:
    return ValueError(f"{path.name} is truncated: {got} bytes of {expected} after decompression.")


def read_nifti_data(img, path: str | os.PathLike, *, use_isal: bool | None = None) -> np.ndarray:
    """Read the stored data array of a NIfTI file (raw dtype, unscaled, Fortran order).

    Parameters
    ----------
    img : nibabel.Nifti1Image
        ``nibabel.load(path)`` (only its header is used).
    path : path
        The file (``.nii.gz`` decoded with ISA-L when available).
    use_isal : bool or None
        None: ISA-L for ``.gz`` files when installed; False: nibabel.

    Returns
    -------
    ndarray
        The array as stored (scale factors not applied).
    """
    path = Path(path)
    if not _use_isal(path, use_isal):
        return np.asanyarray(img.dataobj.get_unscaled())
    proxy = img.dataobj  # the file's own offset, dtype and order
    offset = int(proxy.offset)
    out = np.empty(tuple(int(n) for n in proxy.shape), dtype=proxy.dtype, order=proxy.order)
    view = memoryview(out.reshape(-1, order="A").view(np.uint8))
    with _inflating(path) as fh:
        skipped = _skip_header(fh, offset)
        filled = _fill(fh, view) if skipped == offset else 0
        if skipped < offset or filled < view.nbytes:
            raise _truncated(path, skipped + filled, offset + view.nbytes)
        _check_end(fh)
    return out


def _volume_blocks(img, path: Path, use_isal: bool):
    """Yield the data as ``(first volume, (n_volumes, n_voxels_3d) raw array)`` blocks.

    Each block's row ``t`` is one volume in the file's (Fortran) voxel order.
    With ISA-L, whole volumes are decompressed at most :data:`_BLOCK_BYTES`
    (or one volume) at a time into one reused buffer; otherwise nibabel's
    array is one block.
    """
    proxy = img.dataobj
    shape = tuple(int(n) for n in proxy.shape)
    n_volumes = shape[3]
    if not use_isal or proxy.order != "F":
        raw = read_nifti_data(img, path, use_isal=use_isal)
        order = "F" if raw.flags.f_contiguous else "C"
        yield 0, raw.reshape((-1, n_volumes), order=order).T, order
        return
    volume_bytes = int(np.prod(shape[:3])) * proxy.dtype.itemsize
    per_block = max(1, min(n_volumes, _BLOCK_BYTES // max(volume_bytes, 1)))
    buffer = np.empty((per_block, volume_bytes // proxy.dtype.itemsize), dtype=proxy.dtype)
    offset = int(proxy.offset)
    with _inflating(path) as fh:
        got = _skip_header(fh, offset)
        if got < offset:
            raise _truncated(path, got, offset + n_volumes * volume_bytes)
        for first in range(0, n_volumes, per_block):
            block = buffer[: min(per_block, n_volumes - first)]
            filled = _fill(fh, memoryview(block.reshape(-1).view(np.uint8)))
            got += filled
            if filled < block.nbytes:
                raise _truncated(path, got, offset + n_volumes * volume_bytes)
            yield first, block, "F"
        _check_end(fh)


def _checked_blocks(blocks, path: Path):
    """``blocks``, a damaged file's decompression error turned into one line naming it."""
    with reading(path):
        yield from blocks


class _Gather:
    """Take a block of volumes' in-mask voxels and region sums, reading memory in order.

    The voxels are read in the block's memory order (sorted flat indices: one
    sequential pass over each volume), then put in the C order of
    ``numpy.nonzero(mask)`` within the small gathered block, which stays in
    cache. A region's sum adds its in-mask voxels in memory order, in
    float64, in one reduction over the labelled voxels laid out region by
    region: taken so from the block when no voxel series is asked for, else
    from the gathered block. The same values in the same order either way,
    so the same sums; the cost does not depend on how an atlas's regions
    interleave in memory (a reduction per run of voxels cost 3× as much).
    """

    def __init__(self, mask: np.ndarray, labels: np.ndarray | None, voxels: bool) -> None:
        self.mask = mask
        self.voxels = voxels
        self.n_voxels = int(np.count_nonzero(mask))
        self.labels = None if labels is None else np.where(mask, labels, 0)
        self.regions = np.empty(0, np.int64)
        self.counts = np.empty(0, np.int64)
        if labels is not None:
            inside = self.labels[self.labels > 0]
            self.regions, self.counts = np.unique(inside, return_counts=True)
        #: Where each region's voxels begin among the labelled voxels, region by region.
        self.region_starts = np.concatenate([[0], np.cumsum(self.counts)[:-1]]).astype(np.intp)
        self._orders: dict[str, tuple] = {}

    def _indices(self, order: str) -> tuple:
        """(read, to_c, by_region) of the blocks in ``order``.

        ``read``: the flat indices taken from a block (the in-mask voxels in
        memory order; without voxel series, the labelled ones region by
        region); ``to_c``: where each voxel of the C order sits in ``read``;
        ``by_region``: where the labelled voxels sit in ``read``, region by
        region, each region's in memory order (None: ``read`` is so already,
        or there is no region).
        """
        if order not in self._orders:
            read = np.flatnonzero(self.mask.ravel(order=order))
            to_c = by_region = None
            if self.voxels:
                place = np.empty(self.mask.size, dtype=np.intp)  # each voxel's place in ``read``
                place[read] = np.arange(read.size)
                to_c = place.reshape(self.mask.shape, order=order)[self.mask]
            if self.regions.size:
                labels = self.labels.ravel(order=order)
                labelled = np.flatnonzero(labels > 0)
                # a stable sort keeps each region's voxels in memory order
                labelled = labelled[np.argsort(_compact(labels[labelled]), kind="stable")]
                if self.voxels:
                    by_region = place[labelled]
                else:
                    read = labelled
            self._orders[order] = (read, to_c, by_region)
        return self._orders[order]

    def __call__(self, block, order: str, data, sums, rows: slice) -> None:
        """Gather ``block`` (a few volumes) into ``data`` (its rows) and ``sums[rows]``."""
        read, to_c, by_region = self._indices(order)
        # mode='clip': the indices are valid by construction, and numpy buffers
        # ``out`` with the default mode.
        taken = np.take(block, read, axis=1, mode="clip")
        if data is not None and taken.dtype == data.dtype:
            np.take(taken, to_c, axis=1, out=data, mode="clip")
        elif data is not None:
            data[...] = np.take(taken, to_c, axis=1, mode="clip")
        if self.regions.size:
            labelled = taken
            if by_region is not None:
                labelled = np.take(taken, by_region, axis=1, mode="clip")
            sums[rows] = np.add.reduceat(labelled, self.region_starts, axis=1, dtype=np.float64)


def _compact(values: np.ndarray) -> np.ndarray:
    """Return positive integer labels in the smallest unsigned type that holds them.

    numpy sorts 8- and 16-bit integers with a radix sort (``kind='stable'``).
    """
    if values.dtype.kind not in "iu":
        return values
    top = int(values.max(initial=0))
    for kind in (np.uint8, np.uint16):
        if top <= np.iinfo(kind).max:
            return values.astype(kind)
    return values


@dataclass
class MaskedBold:
    """What :func:`read_masked_bold` gathered from one BOLD.

    Attributes
    ----------
    img : nibabel.Nifti1Image
        The (lazy) image, for its affine and header.
    data : ndarray of shape (n_volumes, n_voxels), float32, or None
        The in-mask voxel series, in the C order of ``numpy.nonzero(mask)``.
    region_means : ndarray of shape (n_volumes, n_regions), float64, or None
        The mean series of each atlas region over its in-mask voxels.
    regions : ndarray of int or None
        The labels of ``region_means``' columns (sorted).
    """

    img: object
    data: np.ndarray | None
    region_means: np.ndarray | None = None
    regions: np.ndarray | None = None


def read_masked_bold(
    path: str | os.PathLike,
    mask: np.ndarray,
    *,
    labels: np.ndarray | None = None,
    voxels: bool = True,
    use_isal: bool | None = None,
) -> MaskedBold:
    """Read a 4-D BOLD's in-mask voxel series and atlas region means, in one pass.

    Parameters
    ----------
    path : path
        The BOLD image.
    mask : ndarray of bool of the image's 3-D shape
        Voxels kept.
    labels : ndarray of int of the image's 3-D shape, or None
        An atlas on the BOLD grid (labels <= 0 are background): the mean
        series of each positive label over its voxels inside ``mask`` (what
        ``NiftiLabelsMasker`` extracts before cleaning), summed in float64.
    voxels : bool, default=True
        Return the in-mask voxel series (False: only the region means).
    use_isal : bool or None
        See :func:`read_nifti_data`.

    Returns
    -------
    MaskedBold
        Scaled as nibabel scales the data (``scl_slope``, ``scl_inter``).
    """
    import nibabel as nib

    path = Path(path)
    with reading(path):
        img = nib.load(path)
    if img.ndim != 4:
        raise ValueError(f"{path.name} is not a 4-D BOLD series (shape {img.shape}).")
    shape = img.shape[:3]
    if mask.shape != shape:
        raise ValueError(f"The mask has shape {mask.shape}; {path.name} has {shape}.")
    if labels is not None and labels.shape != shape:
        raise ValueError(f"The atlas has shape {labels.shape} on the grid of {path.name} {shape}.")
    if not voxels and labels is None:
        raise ValueError("read_masked_bold needs voxels=True or labels.")
    n_volumes = img.shape[3]
    slope, inter = float(img.dataobj.slope), float(img.dataobj.inter)
    gather = _Gather(mask, labels, voxels)
    data = empty((n_volumes, gather.n_voxels), np.float32) if voxels else None
    sums = np.zeros((n_volumes, gather.regions.size), np.float64) if labels is not None else None
    blocks = _checked_blocks(_volume_blocks(img, path, _use_isal(path, use_isal)), path)
    for first, block, order in blocks:
        rows = slice(first, first + block.shape[0])
        gather(block, order, None if data is None else data[rows], sums, rows)
    if data is not None and (slope != 1.0 or inter != 0.0):
        data *= np.float32(slope)
        data += np.float32(inter)
    if labels is None:
        return MaskedBold(img, data)
    means = sums / gather.counts
    if slope != 1.0 or inter != 0.0:
        means = means * slope + inter
    return MaskedBold(img, data, means, gather.regions)


def load_masked_bold(
    path: str | os.PathLike, mask: np.ndarray, *, use_isal: bool | None = None
) -> tuple[object, np.ndarray]:
    """Load a 4-D BOLD's in-mask voxel series as (T, V) float32, time along axis 0.

    Parameters
    ----------
    path : path
        The BOLD image.
    mask : ndarray of bool of the image's 3-D shape
        Voxels kept, in the C order of ``numpy.nonzero(mask)``.
    use_isal : bool or None
        See :func:`read_nifti_data`.

    Returns
    -------
    img : nibabel.Nifti1Image
        The (lazy) image, for its affine and header.
    data : ndarray of shape (n_volumes, n_voxels), float32, C-contiguous
        Scaled as nibabel scales it (``scl_slope``, ``scl_inter``).
    """
    read = read_masked_bold(path, mask, use_isal=use_isal)
    return read.img, read.data
