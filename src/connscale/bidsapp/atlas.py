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
    "atlas_on_grid",
    "atlas_space",
    "check_atlas",
    "read_atlas_labels",
    "refuse_other_spaces",
    "run_space",
]

#: The space of a BOLD without a ``space-`` entity (BIDS: the space of its acquisition).
NATIVE = "native"


def read_atlas_labels(path) -> dict[int, str]:
    """Region names of an atlas from a BIDS ``dseg.tsv`` (``index`` and ``name`` columns).

    A headerless two-column file (index, name) is read too.
    """
    path = Path(path)
    with open(path, newline="") as fh:
        rows = [r for r in csv.reader(fh, delimiter="\t") if r and any(c.strip() for c in r)]
    if not rows:
        raise ValueError(f"{path.name} holds no atlas label.")
    header = [c.strip().lower() for c in rows[0]]
    if "index" in header and "name" in header:
        i, n = header.index("index"), header.index("name")
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
        The atlas image.
    space : str or None
        The atlas's space as declared (``--atlas-space``); None: from its name
        (:func:`atlas_space`).
    labels_file : path or None
        Region names (:func:`read_atlas_labels`): it must name every label.

    Returns
    -------
    space : str
    labels : ndarray of int
        The sorted labels above 0.

    Raises
    ------
    ValueError
        One line naming the file: no known space (or not a BIDS label),
        unreadable, not 3-D, not integer, no label above 0, labels missing
        from ``labels_file``.
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
    if labels_file is not None:
        table = read_atlas_labels(labels_file)
        missing = [int(v) for v in labels if int(v) not in table]
        if missing:
            raise ValueError(
                f"{Path(labels_file).name} names no region for label(s) {missing[:10]} of "
                f"the atlas {path.name}."
            )
    return space, labels


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
