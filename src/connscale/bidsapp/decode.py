"""Read a run's BOLD inside its mask, decoding ``.nii.gz`` with ISA-L when installed.

Reading gzip bounds a cohort run on a GPU: a 2 mm MNI BOLD of 400 volumes
is ~1.7 GB raw. :func:`load_masked_bold` parses the header with nibabel,
then decompresses the data block straight into one preallocated array with
``isal``'s igzip (the Intel ISA-L inflate, several times zlib's speed; see
``benchmarks/RESULTS.md``), and falls back on nibabel's reader (zlib)
without it. Nothing is cached: each call reads its file once.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

__all__ = ["HAVE_ISAL", "load_masked_bold", "read_nifti_data"]

try:
    from isal import igzip as _igzip

    HAVE_ISAL = True
except ImportError:  # pragma: no cover - depends on the install
    _igzip = None
    HAVE_ISAL = False

_READ_BYTES = 16 * 1024**2


def read_nifti_data(img, path: str | os.PathLike, *, use_isal: bool | None = None) -> np.ndarray:
    """The stored data array of a NIfTI file (raw dtype, unscaled, Fortran order).

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
    use_isal = HAVE_ISAL and path.name.endswith(".gz") if use_isal is None else use_isal
    if not use_isal:
        return np.asanyarray(img.dataobj.get_unscaled())
    if not HAVE_ISAL:
        raise ImportError("Decoding with ISA-L needs the 'isal' package: pip install isal")
    proxy = img.dataobj  # the file's own offset, dtype and order
    shape = tuple(int(n) for n in proxy.shape)
    offset = int(proxy.offset)
    out = np.empty(shape, dtype=proxy.dtype, order=proxy.order)
    view = memoryview(out.reshape(-1, order="A").view(np.uint8))
    with _igzip.open(path, "rb") as fh:
        skipped = 0
        while skipped < offset:  # the header and extensions
            chunk = fh.read(offset - skipped)
            if not chunk:
                break
            skipped += len(chunk)
        filled = 0
        while filled < view.nbytes:
            n = fh.readinto(view[filled : filled + _READ_BYTES])
            if not n:
                break
            filled += n
    if skipped < offset or filled < view.nbytes:
        raise ValueError(
            f"{path.name} is truncated: {skipped + filled} bytes of "
            f"{offset + view.nbytes} after decompression."
        )
    return out


def load_masked_bold(
    path: str | os.PathLike, mask: np.ndarray, *, use_isal: bool | None = None
) -> tuple[object, np.ndarray]:
    """A 4-D BOLD's in-mask voxel series as (T, V) float32, time along axis 0.

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
    import nibabel as nib

    img = nib.load(path)
    if img.ndim != 4:
        raise ValueError(f"{Path(path).name} is not a 4-D BOLD series (shape {img.shape}).")
    if mask.shape != img.shape[:3]:
        raise ValueError(f"The mask has shape {mask.shape}; {Path(path).name} has {img.shape[:3]}.")
    raw = read_nifti_data(img, path, use_isal=use_isal)
    slope, inter = float(img.dataobj.slope), float(img.dataobj.inter)
    # Volume by volume: each volume is contiguous in the file's (Fortran) order,
    # so the in-mask voxels are gathered from 4 MB at a time into one row of
    # the (T, V) result, in the C order of numpy.nonzero(mask).
    volumes = raw.reshape((-1, raw.shape[3]), order="A")
    order = "F" if raw.flags.f_contiguous else "C"
    where = np.ravel_multi_index(np.nonzero(mask), mask.shape, order=order)
    data = np.empty((raw.shape[3], where.size), dtype=np.float32)
    if order == "F":
        for t in range(raw.shape[3]):
            data[t] = volumes[:, t].take(where)
    else:
        data[...] = volumes[where].T
    del raw, volumes
    if slope != 1.0 or inter != 0.0:
        data *= np.float32(slope)
        data += np.float32(inter)
    return img, data
