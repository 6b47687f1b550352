"""Masked time series from 4-D NIfTI images, through nilearn's maskers.

Masking is never re-implemented: a brain mask goes through
``NiftiMasker``, an atlas (labels image) through ``NiftiLabelsMasker``.
nilearn and nibabel are imported here only, so the numerical core runs
without them.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

NIFTI_SUFFIXES = (".nii", ".nii.gz")


def is_nifti(path) -> bool:
    """True when ``path`` names a NIfTI file (``.nii`` or ``.nii.gz``)."""
    name = str(path).lower()
    return name.endswith(NIFTI_SUFFIXES)


def load_image(img, *, name: str = "image"):
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


def check_same_space(img, other, *, names=("image", "mask"), atol: float = 1e-3) -> None:
    """Raise unless two images share the 3-D grid (shape and affine)."""
    shape, other_shape = img.shape[:3], other.shape[:3]
    if shape != other_shape:
        raise ValueError(
            f"The {names[1]} grid {other_shape} does not match the {names[0]} grid {shape}; "
            f"resample the {names[1]} to the {names[0]} first."
        )
    if not np.allclose(img.affine, other.affine, atol=atol):
        raise ValueError(
            f"The {names[1]} affine does not match the {names[0]} affine:\n"
            f"{names[0]}:\n{np.round(img.affine, 4)}\n{names[1]}:\n{np.round(other.affine, 4)}"
        )


def load_masked(img, *, mask=None, atlas=None, t_r=None, standardize=None, detrend=False,
                confounds=None):
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
    if atlas is not None:
        labels_img = load_image(atlas, name="atlas")
        if labels_img.ndim != 3:
            raise ValueError(f"The atlas must be a 3-D labels image; got shape {labels_img.shape}.")
        check_same_space(image, labels_img, names=("fMRI image", "atlas"))
        masker = NiftiLabelsMasker(labels_img=labels_img, t_r=t_r, detrend=detrend,
                                   resampling_target=None, **cleaning)
    else:
        mask_img = None
        if mask is not None:
            mask_img = load_image(mask, name="mask")
            if mask_img.ndim != 3:
                raise ValueError(f"The mask must be a 3-D image; got shape {mask_img.shape}.")
            check_same_space(image, mask_img, names=("fMRI image", "mask"))
        masker = NiftiMasker(mask_img=mask_img, t_r=t_r, detrend=detrend, **cleaning)
    timeseries = masker.fit_transform(image, confounds=confounds)
    if timeseries.shape[1] == 0:
        raise ValueError("The mask or atlas selects no voxel of the image.")
    return np.asarray(timeseries), masker


def _no_standardize():
    """nilearn's spelling of 'no standardisation': None from 0.14 (where the
    boolean False is deprecated), False before."""
    import nilearn

    major, minor = (int(part) for part in nilearn.__version__.split(".")[:2])
    return None if (major, minor) >= (0, 14) else False


def region_labels(masker) -> list[str]:
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
