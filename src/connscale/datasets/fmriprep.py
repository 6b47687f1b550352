"""A small synthetic fMRIPrep derivatives tree, built on nilearn's real confounds files.

nilearn ships the confounds of a real fMRIPrep run (30 volumes, with its JSON
sidecar) in ``nilearn/interfaces/fmriprep/data``. Each synthetic run pairs
them with a BOLD of the same length on a small grid whose voxels mix four
region signals (a patient-control difference in one pair when asked), the
motion and white-matter confounds, and noise; each run has its own brain
mask and a BOLD sidecar with the repetition time. For demos and examples:
``connscale bids`` runs on it in seconds.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["SyntheticFMRIPrep", "make_fmriprep_tree"]

_SHAPE = (8, 8, 6)
_AFFINE = np.diag([3.0, 3.0, 3.0, 1.0])
_REGIONS = ("Visual", "Motor", "Default", "Limbic")


@dataclass
class SyntheticFMRIPrep:
    """What :func:`make_fmriprep_tree` wrote.

    Attributes
    ----------
    derivatives : Path
        The fMRIPrep folder.
    atlas, atlas_labels, participants : Path
        A 4-region labels image, its ``dseg.tsv`` and ``participants.tsv``
        (column ``group``: control / patient).
    """

    derivatives: Path
    atlas: Path
    atlas_labels: Path
    participants: Path


def _confounds_files() -> tuple[Path, Path]:
    from nilearn.interfaces import fmriprep

    data = Path(fmriprep.__file__).parent / "data"
    return (
        data / "test_desc-confounds_regressors.tsv",
        data / "test_desc-confounds_regressors.json",
    )


def make_fmriprep_tree(
    root: str | os.PathLike,
    *,
    n_subjects: int = 6,
    t_r: float = 2.0,
    random_state: int | np.random.Generator | None = 0,
) -> SyntheticFMRIPrep:
    """Write a tiny fMRIPrep tree (one resting-state run per subject) under ``root``.

    Parameters
    ----------
    root : path
        Created; holds ``fmriprep/``, the atlas in the runs' space
        (``tpl-MNI152NLin2009cAsym_atlas-Slab4_dseg.nii.gz``), its ``dseg.tsv``
        and ``participants.tsv``.
    n_subjects : int, default=6
        Half controls, half patients; patients' Visual-Motor coupling is
        stronger.
    t_r : float, default=2.0
    random_state : int or None

    Returns
    -------
    SyntheticFMRIPrep
    """
    import nibabel as nib
    import pandas as pd

    if n_subjects < 2:
        raise ValueError(f"n_subjects must be at least 2; got {n_subjects}.")
    root = Path(root)
    derivatives = root / "fmriprep"
    derivatives.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(random_state)
    (derivatives / "dataset_description.json").write_text(
        json.dumps(
            {
                "Name": "synthetic fMRIPrep",
                "BIDSVersion": "1.9.0",
                "DatasetType": "derivative",
                "GeneratedBy": [{"Name": "fMRIPrep", "Version": "20.2.7"}],
            }
        )
    )
    labels = np.zeros(_SHAPE, dtype=np.int16)
    for x in range(1, _SHAPE[0] - 1):
        labels[x, 1:-1, 1:-1] = 1 + (x - 1) * len(_REGIONS) // (_SHAPE[0] - 2)
    atlas = root / "tpl-MNI152NLin2009cAsym_atlas-Slab4_dseg.nii.gz"
    nib.save(nib.Nifti1Image(labels, _AFFINE), atlas)
    dseg = root / "tpl-MNI152NLin2009cAsym_atlas-Slab4_dseg.tsv"
    dseg.write_text(
        "index\tname\n" + "".join(f"{i}\t{n}\n" for i, n in enumerate(_REGIONS, start=1))
    )
    tsv, sidecar = _confounds_files()
    confounds = pd.read_csv(tsv, sep="\t")
    n = len(confounds)
    motion = confounds[["trans_x", "trans_y", "rot_z", "white_matter"]].to_numpy()
    motion = (motion - motion.mean(0)) / motion.std(0)
    rows = ["participant_id\tgroup"]
    for s in range(n_subjects):
        subject = f"{s + 1:02d}"
        patient = s % 2 == 1
        rows.append(f"sub-{subject}\t{'patient' if patient else 'control'}")
        func = derivatives / f"sub-{subject}" / "func"
        func.mkdir(parents=True, exist_ok=True)
        signals = rng.standard_normal((n, len(_REGIONS)))
        if patient:
            signals[:, 1] = 0.6 * signals[:, 0] + 0.8 * signals[:, 1]
        region_of = np.clip(labels - 1, 0, len(_REGIONS) - 1)
        weights = rng.uniform(-5, 5, (*_SHAPE, motion.shape[1]))
        data = (
            1000.0
            + 10.0 * signals[:, region_of].transpose(1, 2, 3, 0)
            + np.einsum("xyzk,tk->xyzt", weights, motion)
            + rng.standard_normal((*_SHAPE, n))
        ).astype(np.float32)
        mask = np.zeros(_SHAPE, dtype=np.uint8)
        mask[1:-1, 1:-1, 1:] = 1
        mask[1 + s % 3, 1, 1] = 0  # each run its own mask
        stem = f"sub-{subject}_task-rest"
        space = "space-MNI152NLin2009cAsym"
        nib.save(nib.Nifti1Image(data, _AFFINE), func / f"{stem}_{space}_desc-preproc_bold.nii.gz")
        nib.save(nib.Nifti1Image(mask, _AFFINE), func / f"{stem}_{space}_desc-brain_mask.nii.gz")
        (func / f"{stem}_{space}_desc-preproc_bold.json").write_text(
            json.dumps({"RepetitionTime": t_r, "SkullStripped": False})
        )
        confounds.to_csv(
            func / f"{stem}_desc-confounds_timeseries.tsv", sep="\t", index=False, na_rep="n/a"
        )
        shutil.copy(sidecar, func / f"{stem}_desc-confounds_timeseries.json")
    participants = root / "participants.tsv"
    participants.write_text("\n".join(rows) + "\n")
    return SyntheticFMRIPrep(derivatives, atlas, dseg, participants)
