"""The atlas of the participant level: its space and labels checked once, then on each run's grid.

An atlas is a 3-D image of integer labels (0 and below: background). Its
space is the ``space-`` or ``tpl-`` entity of its file name (TemplateFlow's
``tpl-MNI152NLin2009cAsym_res-02_atlas-Schaefer2018_dseg.nii.gz``, BIDS's
``sub-01_space-T1w_atlas-X_dseg.nii.gz``), or what the user declares
(``--atlas-space``). A run's space is the ``space-`` entity of its BOLD
(fMRIPrep's ``T1w``, ``MNI152NLin2009cAsym``...); a BOLD without one is in
the run's own acquisition space, named :data:`NATIVE`. A run whose space is
not the atlas's is refused, naming both: a label image in one space laid on
a series in another is a connectome of the wrong regions, and the grids
alone cannot tell (both may be 2 mm MNI-sized boxes).

What fails every run (an unreadable file, not 3-D, non-integer values, no
label above 0, a labels table missing some of them, no known space) is
found by :func:`check_atlas` once, before any run. Within one space, the
atlas is taken onto each run's grid by nearest neighbour (as
``NiftiLabelsMasker(resampling_target='data')``), and
:func:`atlas_on_grid` says from which grid to which, and which labels the
coarser grid lost, for the run's sidecars and report.
"""

from __future__ import annotations

import copy
import csv
import dataclasses
import functools
import os
from pathlib import Path

import numpy as np

from connscale.bidsapp.decode import reading
from connscale.bidsapp.layout import BoldRun

__all__ = [
    "NATIVE",
    "GridMaps",
    "atlas_on_grid",
    "atlas_space",
    "check_atlas",
    "is_probabilistic",
    "maps_on_grid",
    "maps_region_series",
    "read_atlas_labels",
    "refuse_other_spaces",
    "run_space",
]

#: The space of a BOLD without a ``space-`` entity (BIDS: the space of its acquisition).
NATIVE = "native"


#: The index and name columns of a labels table: BIDS's ``dseg.tsv``, then
#: TemplateFlow's DiFuMo ``probseg.tsv`` (its maps numbered from 1).
_INDEX_COLUMNS = ("index", "component")
_NAME_COLUMNS = ("name", "difumo_names")


def read_atlas_labels(path) -> dict[int, str]:
    """Region names of an atlas from a BIDS ``dseg.tsv`` (``index`` and ``name`` columns).

    A headerless two-column file (index, name) is read too, and TemplateFlow's
    DiFuMo tables (``Component``, ``Difumo_names``: map ``k`` of the 4-D image
    is region ``k + 1``).
    """
    path = Path(path)
    with open(path, newline="") as fh:
        rows = [r for r in csv.reader(fh, delimiter="\t") if r and any(c.strip() for c in r)]
    if not rows:
        raise ValueError(f"{path.name} holds no atlas label.")
    header = [c.strip().lower() for c in rows[0]]
    index = next((c for c in _INDEX_COLUMNS if c in header), None)
    name = next((c for c in _NAME_COLUMNS if c in header), None)
    if index is not None and name is not None:
        i, n = header.index(index), header.index(name)
        rows = rows[1:]
    else:
        i, n = 0, 1
    labels = {}
    for row in rows:
        try:
            labels[int(float(row[i]))] = row[n].strip()
        except (ValueError, IndexError):
            raise ValueError(f"{path.name}: expected 'index<TAB>name' rows; got {row!r}.") from None
    return labels


def atlas_space(path: str | os.PathLike) -> str | None:
    """Return the space of an atlas file from its name.

    The space is its ``space-`` entity, else its ``tpl-`` one (TemplateFlow), else None.

    Examples
    --------
    >>> atlas_space("tpl-MNI152NLin2009cAsym_res-02_atlas-Schaefer2018_dseg.nii.gz")
    'MNI152NLin2009cAsym'
    >>> atlas_space("atlas.nii.gz") is None
    True
    """
    from bids.layout import parse_file_entities

    template = {"name": "tpl", "pattern": r"(?:^|_)tpl-([a-zA-Z0-9+]+)"}
    entities = parse_file_entities(
        Path(path).name, config=["bids", "derivatives", {"name": "tpl", "entities": [template]}]
    )
    return entities.get("space", entities.get("tpl"))


def run_space(run: BoldRun) -> str:
    """Return the space of a run's BOLD: its ``space-`` entity, else :data:`NATIVE`."""
    return run.entities.get("space", NATIVE)


def check_atlas(
    path: str | os.PathLike, *, space: str | None = None, labels_file=None
) -> tuple[str, np.ndarray]:
    """Check, once before any run, what would fail every run; return the space and labels.

    Parameters
    ----------
    path : path
        The atlas image: 3-D labels, or 4-D probabilistic maps (one map per
        volume, region ``k + 1`` the ``k``-th; a 4-D ``_dseg`` is refused:
        BIDS's discrete segmentations are 3-D).
    space : str or None
        The atlas's space as declared (``--atlas-space``); None: from its name
        (:func:`atlas_space`).
    labels_file : path or None
        Region names (:func:`read_atlas_labels`): it must name every label.

    Returns
    -------
    space : str
    labels : ndarray of int
        The sorted labels above 0 (maps: 1..R).

    Raises
    ------
    ValueError
        One line naming the file: no known space (or not a BIDS label),
        unreadable, not 3-D, not integer, no label above 0, labels missing
        from ``labels_file``; maps not finite or all zero.
    """
    import nibabel as nib

    path = Path(path)
    if space is not None and not (space.isascii() and space.replace("+", "").isalnum()):
        raise ValueError(
            f"--atlas-space must be a BIDS space label (letters, digits or '+'); got {space!r}."
        )
    space = space or atlas_space(path)
    if space is None:
        raise ValueError(
            f"The space of the atlas {path.name} is unknown: its name has no space- or tpl- "
            "entity; pass --atlas-space (e.g. MNI152NLin2009cAsym, the space- of the runs it "
            "applies to)."
        )
    with reading(path):
        img = nib.load(path)
        data = np.asarray(img.dataobj)
    if data.ndim == 4 and not _is_dseg(path):
        labels = _check_maps(path, data)
    else:
        labels = _check_labels(path, data)
    if labels_file is not None:
        table = read_atlas_labels(labels_file)
        missing = [int(v) for v in labels if int(v) not in table]
        if missing:
            raise ValueError(
                f"{Path(labels_file).name} names no region for label(s) {missing[:10]} of "
                f"the atlas {path.name}."
            )
    return space, labels


def _is_dseg(path: Path) -> bool:
    """Whether the name says a discrete segmentation (BIDS ``_dseg``): a labels image."""
    return path.name.split(".", 1)[0].endswith("_dseg")


def _check_maps(path: Path, data: np.ndarray) -> np.ndarray:
    """Check probabilistic maps (4-D, finite, some map non-zero); return their labels 1..R."""
    if not np.issubdtype(data.dtype, np.number) or not np.isfinite(data).all():
        raise ValueError(f"The probabilistic atlas {path.name} holds NaN or infinite weights.")
    if not data.any():
        raise ValueError(f"The probabilistic atlas {path.name} holds no map (all zero).")
    return np.arange(1, data.shape[3] + 1, dtype=np.int64)


def _check_labels(path: Path, data: np.ndarray) -> np.ndarray:
    """Check a labels image (3-D, integer, some label above 0); return its sorted labels."""
    if data.ndim != 3:
        raise ValueError(
            f"The atlas must be a 3-D labels image; {path.name} has shape {data.shape}."
        )
    if not np.issubdtype(data.dtype, np.integer):
        rounded = np.round(data)
        if not np.array_equal(data, rounded, equal_nan=False):
            where = tuple(int(i[0]) for i in np.nonzero(data != rounded))
            raise ValueError(
                f"The atlas {path.name} must hold integer labels; voxel {where} holds "
                f"{data[where].item()!r}."
            )
    labels = np.unique(data[data > 0]).astype(np.int64)
    if labels.size == 0:
        raise ValueError(f"The atlas {path.name} holds no label above 0 (all background).")
    return labels


def refuse_other_spaces(runs: list[BoldRun], space: str) -> list[BoldRun]:
    """Return the runs, those whose space is not ``space`` given a problem naming both spaces."""
    refused = []
    for run in runs:
        if run_space(run) != space:
            where = run_space(run) + (" (no space- entity)" if "space" not in run.entities else "")
            why = (
                f"{run.bold.name} is in space {where}, the atlas in {space}: "
                "select the runs of the atlas's space (--space) or give an atlas in theirs"
            )
            run = dataclasses.replace(run, problem="; ".join(p for p in (run.problem, why) if p))
        refused.append(run)
    return refused


def _grid(shape: tuple, affine: np.ndarray) -> dict:
    return {
        "Shape": [int(n) for n in shape[:3]],
        "VoxelSize": [round(float(z), 6) for z in np.sqrt((affine[:3, :3] ** 2).sum(axis=0))],
        "Affine": np.round(affine, 6).tolist(),
    }


def atlas_on_grid(atlas_path: str | os.PathLike, bold_img) -> tuple[np.ndarray, dict]:
    """Return the atlas labels on the BOLD's grid (read-only), and how they got there.

    Returns
    -------
    labels : ndarray of int64 of the BOLD's 3-D shape
    resampling : dict
        ``Resampled`` (bool), ``From`` and ``To`` (``Shape``, ``VoxelSize``
        in mm, ``Affine``), and when resampled ``Interpolation``
        ('nearest') and ``LabelsLost`` (labels with no voxel on the run's
        grid).
    """
    affine = np.asarray(bold_img.affine, dtype=np.float64)
    labels, resampling = _atlas_for_grid(
        str(atlas_path),
        os.stat(atlas_path).st_mtime_ns,
        tuple(int(n) for n in bold_img.shape[:3]),
        affine.tobytes(),
    )
    return labels, copy.deepcopy(resampling)  # the cached one stays as it is


@functools.lru_cache(maxsize=4)
def _atlas_for_grid(
    atlas_path: str, mtime_ns: int, shape: tuple, affine: bytes
) -> tuple[np.ndarray, dict]:
    """Read the atlas (and resample it when the grids differ) once per grid.

    The runs of a cohort share one or a few grids, so a task reads and resamples it once,
    not per run (four grids at most are kept; a changed file is read again).
    """
    import nibabel as nib
    from nilearn.image import resample_to_img

    affine = np.frombuffer(affine, dtype=np.float64).reshape(4, 4)
    with reading(atlas_path):
        atlas = nib.load(atlas_path)
        source = np.round(np.asarray(atlas.dataobj)).astype(np.int64)
    resampling = {"Resampled": False, "From": _grid(atlas.shape, atlas.affine)}
    if atlas.shape != shape or not np.allclose(atlas.affine, affine, atol=1e-3):
        ref = nib.Nifti1Image(np.zeros(shape, np.int8), affine)
        atlas = resample_to_img(
            atlas,
            ref,
            interpolation="nearest",
            copy_header=True,
            force_resample=True,
        )
        labels = np.round(np.asarray(atlas.dataobj)).astype(np.int64)
        lost = np.setdiff1d(source[source > 0], labels[labels > 0])
        resampling.update(
            {"Resampled": True, "Interpolation": "nearest", "LabelsLost": lost.tolist()}
        )
    else:
        labels = source
    resampling["To"] = _grid(shape, affine)
    labels.setflags(write=False)
    return labels, resampling


@dataclasses.dataclass(frozen=True)
class GridMaps:
    """Probabilistic maps on a run's grid, kept where any map is non-zero.

    Attributes
    ----------
    support : ndarray of bool, the grid's 3-D shape
        The voxels where some map is non-zero.
    weights : ndarray of shape (n_support, n_maps), float
        The maps' weights at those voxels, in the C order of ``numpy.nonzero(support)``.
    labels : ndarray of int64, the grid's 3-D shape
        Each voxel's strongest map (1-based; 0 outside the support): the
        parcellation the run's report draws.
    """

    support: np.ndarray
    weights: np.ndarray
    labels: np.ndarray

    def on_mask(self, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return the masked series' columns inside the support and their weights.

        ``mask`` orders the columns as :func:`~connscale.bidsapp.decode.read_masked_bold`
        does (the C order of ``numpy.nonzero(mask)``); the weights are
        (n_columns, n_maps).
        """
        index = np.full(mask.shape, -1, dtype=np.intp)
        index[self.support] = np.arange(self.weights.shape[0])
        rows = index[mask]
        columns = np.flatnonzero(rows >= 0)
        return columns, self.weights[rows[columns]]


def is_probabilistic(path: str | os.PathLike) -> bool:
    """Return whether an atlas file holds probabilistic maps (4-D, not a ``_dseg``)."""
    return _ndim(str(path), os.stat(path).st_mtime_ns) == 4 and not _is_dseg(Path(path))


@functools.lru_cache(maxsize=8)
def _ndim(path: str, mtime_ns: int) -> int:
    import nibabel as nib

    with reading(path):
        return len(nib.load(path).shape)


def maps_on_grid(atlas_path: str | os.PathLike, bold_img) -> tuple[GridMaps, dict]:
    """Return probabilistic maps on the BOLD's grid, and how they got there.

    Resampled, when the grids differ, as ``NiftiMapsMasker(resampling_target='data')``
    does (nilearn's ``resample_img``, linear interpolation); non-finite
    weights read as 0 (nilearn's ``safe_get_data(ensure_finite=True)``).

    Returns
    -------
    maps : GridMaps
    resampling : dict
        As :func:`atlas_on_grid`'s, with ``Interpolation`` 'linear' and
        ``LabelsLost`` the maps (1-based) left all zero on the run's grid.
    """
    affine = np.asarray(bold_img.affine, dtype=np.float64)
    maps, resampling = _maps_for_grid(
        str(atlas_path),
        os.stat(atlas_path).st_mtime_ns,
        tuple(int(n) for n in bold_img.shape[:3]),
        affine.tobytes(),
    )
    return maps, copy.deepcopy(resampling)


@functools.lru_cache(maxsize=2)
def _maps_for_grid(atlas_path: str, mtime_ns: int, shape: tuple, affine: bytes) -> tuple:
    """Read the maps (and resample them when the grids differ) once per grid."""
    import nibabel as nib
    from nilearn.image import resample_img

    affine = np.frombuffer(affine, dtype=np.float64).reshape(4, 4)
    with reading(atlas_path):
        atlas = nib.load(atlas_path)
        source = np.asanyarray(atlas.dataobj)
    resampling = {"Resampled": False, "From": _grid(atlas.shape, atlas.affine)}
    data = source
    if atlas.shape[:3] != shape or not np.allclose(atlas.affine, affine, atol=1e-3):
        resampled = resample_img(
            atlas,
            interpolation="linear",
            target_shape=shape,
            target_affine=affine,
            copy_header=True,
            force_resample=True,
        )
        data = np.asanyarray(resampled.dataobj)
        lost = np.flatnonzero(source.any(axis=(0, 1, 2)) & ~data.any(axis=(0, 1, 2))) + 1
        resampling.update(
            {"Resampled": True, "Interpolation": "linear", "LabelsLost": lost.tolist()}
        )
    support = data.any(axis=3)  # (a voxel of NaN only: a row of zeros, which fits nothing)
    weights = data[support].astype(np.result_type(data.dtype, np.float32))
    np.nan_to_num(weights, copy=False, nan=0.0, posinf=0.0, neginf=0.0)
    labels = np.zeros(shape, dtype=np.int64)
    labels[support] = np.argmax(np.abs(weights), axis=1) + 1
    resampling["To"] = _grid(shape, affine)
    for array in (support, weights, labels):
        array.setflags(write=False)
    return GridMaps(support, weights, labels), resampling


def maps_region_series(
    atlas_path: str | os.PathLike, img, mask: np.ndarray, data, *, device: str = "auto"
) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """Return the region series of probabilistic maps over a run's masked voxel series.

    What ``NiftiMapsMasker(maps, mask_img=mask, resampling_target='data')``
    extracts before cleaning: the maps on the run's grid (:func:`maps_on_grid`),
    those with no weight inside the mask dropped (nilearn's ``_trim_maps``),
    fitted to each volume by least squares on the device
    (:func:`connscale.denoise.map_signals`).

    Parameters
    ----------
    atlas_path : path
    img : nibabel image
        The BOLD (its grid).
    mask : ndarray of bool
        The run's mask; ``data``'s columns are its voxels in C order.
    data : ndarray of shape (n_volumes, n_voxels)
    device : str

    Returns
    -------
    series : ndarray of shape (n_volumes, n_regions), float64
    regions : ndarray of int
        The maps kept (1-based).
    labels : ndarray of int64
        Each voxel's strongest map (for the report's figure).
    resampling : dict
        :func:`maps_on_grid`'s, with ``MapsOutsideMask`` (the maps dropped).

    Raises
    ------
    ValueError
        No map has a weight inside the mask.
    """
    from connscale.denoise import map_signals

    maps, resampling = maps_on_grid(atlas_path, img)
    columns, weights = maps.on_mask(mask)
    inside = np.abs(weights).sum(axis=0) > 0
    if not inside.any():
        raise ValueError(f"No map of the atlas {Path(atlas_path).name} overlaps the run's mask.")
    resampling["MapsOutsideMask"] = (np.flatnonzero(~inside) + 1).tolist()
    series = map_signals(data, weights[:, inside], columns=columns, device=device)
    return series, np.flatnonzero(inside) + 1, maps.labels, resampling
