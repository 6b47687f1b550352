"""Masked time series from 4-D NIfTI images, through nilearn's maskers.

Masking is never re-implemented: a brain mask goes through
``NiftiMasker``, an atlas (labels image) through ``NiftiLabelsMasker``.
nilearn and nibabel are imported here only, so the numerical core runs
without them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import pandas as pd
    from nibabel.spatialimages import SpatialImage
    from nilearn.maskers import NiftiLabelsMasker, NiftiMasker

NIFTI_SUFFIXES = (".nii", ".nii.gz")


def is_nifti(path: str | os.PathLike) -> bool:
    """Return whether ``path`` names a NIfTI file (``.nii`` or ``.nii.gz``)."""
    name = str(path).lower()
    return name.endswith(NIFTI_SUFFIXES)


def load_image(img: str | os.PathLike | SpatialImage, *, name: str = "image") -> SpatialImage:
    """Load a Niimg-like object (path or nibabel image), with a clear error."""
    import nibabel as nib

    if isinstance(img, (str, os.PathLike)):
        path = Path(img)
        if not path.exists():
            raise FileNotFoundError(f"No {name} file at {path}.")
        try:
            return nib.load(path)
        except Exception as exc:  # nibabel raises several types on bad files
            raise ValueError(f"Cannot read {name} {path} as NIfTI: {exc}") from exc
    if hasattr(img, "affine") and hasattr(img, "dataobj"):
        return img
    raise ValueError(f"'{name}' must be a NIfTI path or a nibabel image; got {type(img).__name__}.")


def read_data(image: SpatialImage, *, name: str = "image") -> np.ndarray:
    """Read the voxel array of a loaded image.

    The error is one line when the file is truncated or corrupt (nibabel reads lazily,
    so this is where it shows).
    """
    import zlib

    try:
        return np.asanyarray(image.dataobj)
    except (EOFError, OSError, ValueError, zlib.error) as exc:
        where = image.get_filename() or "(in memory)"
        raise ValueError(
            f"Cannot read the {name} data from {where}: the file is truncated or corrupt "
            f"({type(exc).__name__}: {exc}). Expected {int(np.prod(image.shape))} voxel "
            f"values of shape {image.shape}."
        ) from exc


def check_same_space(
    img: SpatialImage,
    other: SpatialImage,
    *,
    names: tuple[str, str] = ("image", "mask"),
    atol: float = 1e-3,
) -> None:
    """Raise unless two images share the 3-D grid (shape and affine)."""
    shape, other_shape = img.shape[:3], other.shape[:3]
    if shape != other_shape:
        raise ValueError(
            f"The {names[1]} grid {other_shape} does not match the {names[0]} grid {shape}; "
            f"resample the {names[1]} to the {names[0]} first."
        )
    if not np.allclose(img.affine, other.affine, atol=atol):
        raise ValueError(
            f"The {names[1]} affine does not match the {names[0]} affine: expected "
            f"{np.round(img.affine, 4).tolist()}, got {np.round(other.affine, 4).tolist()}; "
            f"resample the {names[1]} to the {names[0]} first."
        )


def load_masked(
    img: str | os.PathLike | SpatialImage,
    *,
    mask: str | os.PathLike | SpatialImage | None = None,
    atlas: str | os.PathLike | SpatialImage | None = None,
    t_r: float | None = None,
    standardize: str | bool | None = None,
    detrend: bool = False,
    confounds: str | os.PathLike | npt.ArrayLike | pd.DataFrame | None = None,
) -> tuple[np.ndarray, NiftiMasker | NiftiLabelsMasker]:
    """Time series of a 4-D image inside a mask, or averaged over atlas regions.

    Parameters
    ----------
    img : str, path or nibabel image
        4-D fMRI series.
    mask : str, path, nibabel image or None
        Binary brain mask on the image's grid (``NiftiMasker``). When both
        ``mask`` and ``atlas`` are None, a mask is computed from the image
        (nilearn's 'background' strategy).
    atlas : str, path, nibabel image or None
        Labels image (integer labels, 0 = background) for
        ``NiftiLabelsMasker`` (region means).
    t_r, standardize, detrend, confounds
        Passed to the masker (defaults leave the signal untouched;
        ``standardize`` takes nilearn's values, e.g. ``'zscore_sample'``).

    Returns
    -------
    timeseries : ndarray of shape (n_timepoints, n_voxels or n_regions)
    masker : fitted nilearn masker
        Use ``masker.inverse_transform`` to map values back to an image.

    Raises
    ------
    ValueError
        For a truncated or corrupt file, grids or affines that differ, an
        empty mask or atlas, non-integer atlas labels, and NaN or infinite
        values inside the mask or atlas (nilearn's maskers would silently
        turn them into 0).
    """
    from nilearn.maskers import NiftiLabelsMasker, NiftiMasker

    if mask is not None and atlas is not None:
        raise ValueError("Give a 'mask' or an 'atlas', not both.")
    image = load_image(img, name="fMRI image")
    cleaning = {"standardize": _no_standardize() if standardize is None else standardize}
    if image.ndim != 4:
        raise ValueError(f"Expected a 4-D fMRI image; got {image.ndim}-D of shape {image.shape}.")
    if image.shape[3] < 3:
        raise ValueError(f"The fMRI image has {image.shape[3]} volumes; at least 3 are needed.")
    # Read once here: a truncated file fails with a clear message, and the
    # raw values inside the mask can be checked before the masker sees them.
    image = _in_memory(image, read_data(image, name="fMRI image"))
    if atlas is not None:
        labels_img, labels = _load_volume_on(image, atlas, name="atlas", kind="labels image")
        _check_labels(labels)
        labels_img = _in_memory(labels_img, labels)
        masker = NiftiLabelsMasker(
            labels_img=labels_img, t_r=t_r, detrend=detrend, resampling_target=None, **cleaning
        ).fit()
        inside, where = labels != 0, "atlas regions"
    else:
        mask_img = None
        if mask is not None:
            mask_img, values = _load_volume_on(image, mask, name="mask", kind="image")
            if not np.any(values):
                raise ValueError(
                    f"The mask selects no voxel: expected at least one non-zero voxel; got "
                    f"all {values.size} zero."
                )
            mask_img = _in_memory(mask_img, values)
        masker = NiftiMasker(mask_img=mask_img, t_r=t_r, detrend=detrend, **cleaning)
        # Without a mask, nilearn computes one from the image.
        masker.fit(image if mask_img is None else None)
        inside, where = np.asanyarray(masker.mask_img_.dataobj) != 0, "mask"
    _check_finite_inside(image.dataobj, inside, where)
    timeseries = masker.transform(image, confounds=confounds)
    if timeseries.shape[1] == 0:
        raise ValueError("The mask or atlas selects no voxel of the image.")
    return np.asarray(timeseries), masker


def _load_volume_on(
    image: SpatialImage, volume: str | os.PathLike | SpatialImage, *, name: str, kind: str
) -> tuple[SpatialImage, np.ndarray]:
    """Load a 3-D mask or atlas on ``image``'s grid, and its values (clear errors otherwise)."""
    volume_img = load_image(volume, name=name)
    if volume_img.ndim != 3:
        raise ValueError(f"The {name} must be a 3-D {kind}; got shape {volume_img.shape}.")
    check_same_space(image, volume_img, names=("fMRI image", name))
    return volume_img, read_data(volume_img, name=name)


def _in_memory(image: SpatialImage, data: np.ndarray) -> SpatialImage:
    """``image`` with its voxels already read (no second read by the masker)."""
    return image.__class__(data, image.affine, image.header)


def _check_labels(labels: np.ndarray) -> None:
    """Integer labels, at least one region."""
    if labels.dtype.kind == "f":
        bad = ~np.isfinite(labels) | (labels != np.round(labels))
        if bad.any():
            raise ValueError(
                "The atlas must hold integer labels (0 = background); got "
                f"{int(bad.sum())} non-integer value(s) such as {float(labels[bad][0])} "
                f"(dtype {labels.dtype}). Threshold a probabilistic atlas into labels first."
            )
    elif labels.dtype.kind not in "biu":
        raise ValueError(f"The atlas must hold integer labels; got dtype {labels.dtype}.")
    if not np.any(labels):
        raise ValueError("The atlas has no region: expected labels > 0; got only 0 (background).")


def _check_finite_inside(data: np.ndarray, inside: np.ndarray, where: str) -> None:
    """Raise when a voxel inside the mask has a NaN or infinite value in any volume.

    Reads the volumes in slabs, so the check needs little memory.
    """
    if data.dtype.kind not in "fc":
        return  # integer data cannot hold NaN or inf
    n_inside = int(inside.sum())
    finite = np.ones(n_inside, dtype=bool)
    step = max(1, (1 << 24) // max(1, n_inside))
    for t0 in range(0, data.shape[3], step):
        finite &= np.isfinite(data[..., t0 : t0 + step][inside]).all(axis=1)
    if not finite.all():
        first = tuple(int(i) for i in np.argwhere(inside)[np.flatnonzero(~finite)[0]])
        raise ValueError(
            f"The fMRI image has NaN or infinite values in {int((~finite).sum())} voxel(s) "
            f"inside the {where} (first at voxel {first}); expected finite values there. "
            f"Fix the image, or leave those voxels out of the {where}."
        )


def _no_standardize() -> bool | None:
    """Return nilearn's spelling of 'no standardisation'.

    None from 0.14 (where the boolean False is deprecated), False before.
    """
    import nilearn

    major, minor = (int(part) for part in nilearn.__version__.split(".")[:2])
    return None if (major, minor) >= (0, 14) else False


def region_labels(masker: NiftiMasker | NiftiLabelsMasker) -> list[str]:
    """Names of the columns a fitted masker returns."""
    labels = getattr(masker, "region_names_", None) or getattr(masker, "labels_", None)
    if labels is not None and not isinstance(labels, dict):
        names = [str(label) for label in labels]
        if names and names[0].lower() == "background":
            names = names[1:]
        return names
    if isinstance(labels, dict):
        return [str(v) for v in labels.values()]
    return []


def save_nifti_gz(path: str | os.PathLike, img: SpatialImage) -> Path:
    """Write a nibabel image as gzipped NIfTI (``.nii.gz``), atomically.

    Compressed by ISA-L (level 2 of 0-3: a standard gzip member, 12x faster
    than zlib's level 6 on a 2 mm map and slightly smaller), so that writing
    a run's maps does not hold up the process computing the next run.
    """
    from isal import igzip

    from connscale.io.atomic import atomic_path

    path = Path(path)
    with atomic_path(path) as tmp:
        tmp.write_bytes(igzip.compress(img.to_bytes(), compresslevel=2))
    return path
