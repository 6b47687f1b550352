"""Small CIFTI-2 files for the tests: a brain model of two surfaces and two volume structures.

Written with nibabel itself (the reference writer), so that Workbench and
connscale read the same files.
"""

from __future__ import annotations

import nibabel as nib
import numpy as np
from nibabel.cifti2 import BrainModelAxis, Cifti2Image, LabelAxis, SeriesAxis

#: A 2 mm grid with MNI-like axes (x flipped), 5 x 6 x 4 voxels.
AFFINE = np.array([[-2.0, 0, 0, 10], [0, 2, 0, -20], [0, 0, 2, -12], [0, 0, 0, 1]])
VOLUME_SHAPE = (5, 6, 4)

#: The label tables of the two label maps: key -> (name, RGBA); key 9 labels
#: no grayordinate (an empty parcel), keys are not in name order.
TABLES = (
    {
        0: ("???", (0.0, 0.0, 0.0, 0.0)),
        1: ("Alpha", (1.0, 0.0, 0.0, 1.0)),
        3: ("Gamma", (0.0, 1.0, 0.0, 1.0)),
        2: ("Beta", (0.0, 0.0, 1.0, 1.0)),
        5: ("Epsilon", (1.0, 1.0, 0.0, 1.0)),
        4: ("Delta", (1.0, 0.0, 1.0, 1.0)),
        9: ("Empty", (0.0, 1.0, 1.0, 1.0)),
    },
    {
        0: ("???", (0.0, 0.0, 0.0, 0.0)),
        1: ("L1", (1.0, 0.0, 0.0, 1.0)),
        2: ("L2", (0.0, 1.0, 0.0, 1.0)),
        3: ("L3", (0.0, 0.0, 1.0, 1.0)),
    },
)


def brain_model(*, shift_vertex: bool = False) -> BrainModelAxis:
    """Return 10 + 8 vertices of two 20- and 18-vertex surfaces and 8 + 9 voxels.

    ``shift_vertex`` moves one left vertex: another brain model of the same counts.
    """
    left = np.array([0, 2, 3, 5, 6, 7, 9, 11, 12, 14 + 4 * shift_vertex])
    thalamus = np.zeros(VOLUME_SHAPE, bool)
    thalamus[1:3, 2:4, 1:3] = True
    cerebellum = np.zeros(VOLUME_SHAPE, bool)
    cerebellum[3:5, 0:2, 0:2] = True
    cerebellum[4, 5, 3] = True
    return (
        BrainModelAxis.from_surface(left, 20, "CortexLeft")
        + BrainModelAxis.from_surface(np.array([1, 2, 4, 8, 10, 13, 15, 17]), 18, "CortexRight")
        + BrainModelAxis.from_mask(thalamus, name="ThalamusLeft", affine=AFFINE)
        + BrainModelAxis.from_mask(cerebellum, name="CerebellumRight", affine=AFFINE)
    )


def label_keys(n: int, seed: int = 0) -> np.ndarray:
    """Return two label maps (2, n): keys 0-5 (no 9) and keys 0-3."""
    rng = np.random.default_rng(seed)
    return np.stack([rng.integers(0, 6, n), rng.integers(0, 4, n)])


def save_dlabel(path, keys: np.ndarray, model: BrainModelAxis):
    """Write a two-map ``.dlabel.nii`` of ``keys`` (2, N) with :data:`TABLES`."""
    axis = LabelAxis(["first", "second"], list(TABLES))
    nib.save(Cifti2Image(keys.astype(np.float32), header=(axis, model)), path)
    return path


def save_dtseries(path, data: np.ndarray, model: BrainModelAxis, t_r: float = 0.8):
    """Write a ``.dtseries.nii`` of ``data`` (T, N)."""
    series = SeriesAxis(0.0, t_r, data.shape[0], "SECOND")
    nib.save(Cifti2Image(data.astype(np.float32), header=(series, model)), path)
    return path
