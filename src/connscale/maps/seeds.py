"""Seed series from a 4-D image through nilearn's maskers (coordinates or a mask).

nilearn and nibabel are imported here only.
"""

from __future__ import annotations

import os

import numpy as np


def seed_timeseries(img, seeds, *, radius: float | None = None) -> np.ndarray:
    """Mean time series of each seed.

    Parameters
    ----------
    img : NIfTI image or path
        4-D fMRI image.
    seeds : sequence of (x, y, z), or a 3-D mask image or path
        World coordinates in mm (spheres of ``radius``, ``NiftiSpheresMasker``)
        or a binary mask on the image's grid (its mean series).
    radius : float or None
        Sphere radius in mm (None: the voxel holding each coordinate).

    Returns
    -------
    ndarray of shape (n_timepoints, n_seeds)
    """
    from nilearn.maskers import NiftiMasker, NiftiSpheresMasker

    from connscale.io.nifti import _no_standardize, check_same_space, load_image

    image = load_image(img, name="fMRI image")
    if isinstance(seeds, (str, os.PathLike)) or hasattr(seeds, "affine"):
        mask = load_image(seeds, name="seed mask")
        if mask.ndim != 3:
            raise ValueError(f"The seed mask must be a 3-D image; got shape {mask.shape}.")
        check_same_space(image, mask, names=("fMRI image", "seed mask"))
        series = NiftiMasker(mask_img=mask, standardize=_no_standardize()).fit_transform(image)
        if series.shape[1] == 0:
            raise ValueError("The seed mask selects no voxel of the image.")
        return np.asarray(series).mean(axis=1, keepdims=True)
    coords = np.asarray(seeds, dtype=float)
    if coords.ndim == 1:
        coords = coords[None, :]
    if coords.ndim != 2 or coords.shape[1] != 3:
        raise ValueError(
            f"Seed coordinates must be (x, y, z) triples; got an array of shape {coords.shape}."
        )
    masker = NiftiSpheresMasker(
        [tuple(c) for c in coords], radius=radius, standardize=_no_standardize()
    )
    return np.asarray(masker.fit_transform(image))
