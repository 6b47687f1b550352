"""Figures of voxel-wise maps over the anatomy (nilearn's ``plot_stat_map``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from connscale.report.plots import _load_img, _pyplot, _save

if TYPE_CHECKING:
    from nibabel.spatialimages import SpatialImage


def plot_stat_map(
    img: str | Path | SpatialImage,
    out_path: str | os.PathLike,
    *,
    bg_img: str | Path | SpatialImage | None = None,
    title: str | None = None,
) -> Path:
    """One 3-D map over a background image, in three orthogonal cuts.

    Parameters
    ----------
    img : NIfTI image or path
        A 3-D map (degree, centrality, correlation...).
    out_path : str or path
        PNG to write.
    bg_img : NIfTI image, path or None
        The anatomy behind the map; the mean functional image for data in
        native space (None: nilearn's MNI template).
    title : str or None

    Returns
    -------
    Path
    """
    import warnings

    import numpy as np
    from nilearn import plotting

    img = _load_img(img)
    if len(img.shape) != 3:
        raise ValueError(f"A map must be a 3-D image; got shape {img.shape}.")
    plt = _pyplot()
    fig = plt.figure(figsize=(8, 3))
    kwargs = {"figure": fig, "title": title, "colorbar": True, "black_bg": False}
    if bg_img is not None:
        kwargs["bg_img"] = _load_img(bg_img)
    data = np.asarray(img.dataobj, dtype=float)
    finite = data[np.isfinite(data) & (data != 0)]
    if finite.size and finite.min() >= 0:
        kwargs["cmap"] = "hot"
    with warnings.catch_warnings():  # nilearn's notices about NaN and non-finite values
        warnings.simplefilter("ignore")
        plotting.plot_stat_map(img, **kwargs)
    return _save(fig, out_path)
