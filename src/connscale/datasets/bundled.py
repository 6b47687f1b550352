"""Loaders for real data that installs offline with nitime and nibabel.

- nitime's ``fmri_timeseries.csv``: 250 time points × 31 resting-state ROI
  series (TR 1.89 s), with region names.
- nitime's ``fmri1.nii.gz`` (and ``fmri2.nii.gz``): 10×10×18×40 scans
  (TR 1.35 s) with different content; never concatenate them.
- nibabel's ``tests/data/functional.nii``: 17×21×3×20 (TR 2 s).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from connscale.io.timeseries import load_timeseries

if TYPE_CHECKING:
    from nibabel.nifti1 import Nifti1Image
    from nibabel.spatialimages import SpatialImage


def _package_file(package: str, *parts: str, extra: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise ImportError(
            f"The bundled data of '{package}' is needed; install it with "
            f"'pip install {package}' (or 'pip install connscale[{extra}]')."
        )
    path = Path(spec.origin).parent.joinpath(*parts)
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing from the installed {package}.")
    return path


def nitime_roi_path() -> Path:
    """Return the path of nitime's ``fmri_timeseries.csv``.

    Returns
    -------
    Path
        Inside the installed nitime (the ``data`` extra).

    Examples
    --------
    >>> from connscale.datasets import nitime_roi_path
    >>> nitime_roi_path().name
    'fmri_timeseries.csv'
    """
    return _package_file("nitime", "data", "fmri_timeseries.csv", extra="data")


def load_nitime_roi() -> tuple[np.ndarray, list[str]]:
    """Load nitime's 250 × 31 ROI time series (TR 1.89 s).

    Returns
    -------
    timeseries : ndarray of shape (250, 31)
    labels : list of str
        Region names (``'WM'``, ``'Vent'``, ``'Brain'``, ``'LCau'``, ...).

    Examples
    --------
    >>> from connscale.datasets import load_nitime_roi
    >>> timeseries, labels = load_nitime_roi()
    >>> timeseries.shape, labels[:4]
    ((250, 31), ['WM', 'Vent', 'Brain', 'LCau'])
    """
    return load_timeseries(nitime_roi_path())


def nitime_fmri_path(run: int = 1) -> Path:
    """Return the path of nitime's ``fmri1.nii.gz`` (run=1) or ``fmri2.nii.gz`` (run=2).

    Parameters
    ----------
    run : {1, 2}, default=1
        Which scan.

    Returns
    -------
    Path
        Inside the installed nitime (the ``data`` extra).

    Examples
    --------
    >>> from connscale.datasets import nitime_fmri_path
    >>> nitime_fmri_path(2).name
    'fmri2.nii.gz'
    """
    if run not in (1, 2):
        raise ValueError(f"'run' must be 1 or 2; got {run!r}.")
    return _package_file("nitime", "data", f"fmri{run}.nii.gz", extra="data")


def load_nitime_fmri(run: int = 1) -> SpatialImage:
    """Load nitime's 4-D scan (10×10×18×40, TR 1.35 s) as a nibabel image.

    Parameters
    ----------
    run : {1, 2}, default=1
        Which scan (their content differs: never concatenate them).

    Returns
    -------
    nibabel image
        Read on access.

    Examples
    --------
    >>> from connscale.datasets import load_nitime_fmri
    >>> load_nitime_fmri().shape
    (10, 10, 18, 40)
    """
    import nibabel as nib

    return nib.load(nitime_fmri_path(run))


def nibabel_functional_path() -> Path:
    """Return the path of nibabel's ``tests/data/functional.nii``.

    Returns
    -------
    Path
        Inside the installed nibabel.

    Examples
    --------
    >>> from connscale.datasets import nibabel_functional_path
    >>> nibabel_functional_path().name
    'functional.nii'
    """
    return _package_file("nibabel", "tests", "data", "functional.nii", extra="data")


def load_nibabel_functional() -> SpatialImage:
    """Load nibabel's small 4-D test scan (17×21×3×20, TR 2 s).

    Returns
    -------
    nibabel image
        Read on access.

    Examples
    --------
    >>> from connscale.datasets import load_nibabel_functional
    >>> load_nibabel_functional().shape
    (17, 21, 3, 20)
    """
    import nibabel as nib

    return nib.load(nibabel_functional_path())


def compute_brain_mask(img: str | os.PathLike | SpatialImage) -> Nifti1Image:
    """Compute a mask of a 4-D image's non-background voxels.

    nilearn's ``compute_background_mask``: the bundled scans are crops of the
    brain, on which the EPI-intensity heuristic (``compute_epi_mask``) keeps
    almost nothing.

    Parameters
    ----------
    img : str, path or nibabel image
        A 4-D image.

    Returns
    -------
    nibabel.Nifti1Image
        3-D, 1 inside the mask.

    Examples
    --------
    >>> from connscale.datasets import compute_brain_mask, load_nitime_fmri
    >>> mask = compute_brain_mask(load_nitime_fmri())
    >>> mask.shape, int(mask.get_fdata().sum()) > 0
    ((10, 10, 18), True)
    """
    from nilearn.masking import compute_background_mask

    return compute_background_mask(img)
