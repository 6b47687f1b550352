"""Tiny fMRIPrep-like derivatives made of nilearn's real confounds files.

nilearn ships the confounds of real fMRIPrep runs (30 volumes) in
``nilearn/interfaces/fmriprep/data``; each fake run pairs them with a BOLD of
30 volumes whose voxels mix region signals, confounds and noise, its own
brain mask, and a BOLD JSON sidecar with the repetition time.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nibabel as nib
import numpy as np
import pandas as pd

DATA = Path(__import__("nilearn.interfaces.fmriprep", fromlist=["x"]).__file__).parent / "data"
CONFOUNDS_TSV = DATA / "test_desc-confounds_regressors.tsv"
CONFOUNDS_JSON = DATA / "test_desc-confounds_regressors.json"
SHAPE = (6, 6, 5)
T_R = 2.0
AFFINE = np.diag([3.0, 3.0, 3.0, 1.0])
#: The atlas file name: TemplateFlow's, its tpl- entity the space of the runs.
ATLAS = "tpl-MNI152NLin2009cAsym_atlas-Slab4_dseg.nii.gz"


def atlas_img(n_regions: int = 4) -> nib.Nifti1Image:
    """Labels 1..n in slabs along x, background at the border."""
    labels = np.zeros(SHAPE, dtype=np.int16)
    inner = np.arange(1, SHAPE[0] - 1)
    for i, x in enumerate(inner):
        labels[x, 1:-1, 1:-1] = 1 + (i * n_regions) // len(inner)
    return nib.Nifti1Image(labels, AFFINE)


def write_run(
    func: Path,
    entities: str,
    *,
    seed: int,
    space: str = "MNI152NLin2009cAsym",
    desc: str = "preproc",
    n_volumes: int | None = None,
    t_r: float = T_R,
) -> Path:
    """Write one run's BOLD, mask, sidecar and confounds; return the BOLD path."""
    func.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    confounds = pd.read_csv(CONFOUNDS_TSV, sep="\t")
    if n_volumes is not None:
        confounds = confounds.iloc[:n_volumes]
    n = len(confounds)
    motion = confounds[["trans_x", "trans_y", "rot_z", "white_matter"]].to_numpy()
    motion = (motion - motion.mean(0)) / motion.std(0)
    regions = rng.standard_normal((n, 4))
    data = np.empty((*SHAPE, n), dtype=np.float32)
    for idx in np.ndindex(SHAPE):
        data[idx] = (
            1000
            + 50 * idx[0]
            + 10 * regions[:, min(idx[0], 3)]
            + motion @ rng.uniform(-5, 5, 4)
            + rng.standard_normal(n)
        )
    mask = np.zeros(SHAPE, dtype=np.uint8)
    mask[1:-1, 1:-1, 1:] = 1
    mask[1 + seed % 3, 1, 1] = 0  # each run its own mask
    bold = func / f"{entities}_space-{space}_desc-{desc}_bold.nii.gz"
    nib.save(nib.Nifti1Image(data, AFFINE), bold)
    nib.save(
        nib.Nifti1Image(mask, AFFINE), func / f"{entities}_space-{space}_desc-brain_mask.nii.gz"
    )
    (func / f"{entities}_space-{space}_desc-{desc}_bold.json").write_text(
        json.dumps({"RepetitionTime": t_r, "SkullStripped": False})
    )
    confounds.to_csv(
        func / f"{entities}_desc-confounds_timeseries.tsv", sep="\t", index=False, na_rep="n/a"
    )
    shutil.copy(CONFOUNDS_JSON, func / f"{entities}_desc-confounds_timeseries.json")
    return bold


def make_fmriprep(
    root: Path, runs: list[tuple[str, str | None, str, str | None]], **kwargs
) -> Path:
    """A derivatives tree: one run per (subject, session, task, run) tuple."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "dataset_description.json").write_text(
        json.dumps(
            {
                "Name": "fake fMRIPrep",
                "BIDSVersion": "1.9.0",
                "DatasetType": "derivative",
                "GeneratedBy": [{"Name": "fMRIPrep", "Version": "20.2.7"}],
            }
        )
    )
    for i, (sub, ses, task, run) in enumerate(runs):
        func = root / f"sub-{sub}"
        entities = f"sub-{sub}"
        if ses is not None:
            func = func / f"ses-{ses}"
            entities += f"_ses-{ses}"
        entities += f"_task-{task}"
        if run is not None:
            entities += f"_run-{run}"
        write_run(func / "func", entities, seed=i, **kwargs)
    return root


def participant_log(out: Path) -> tuple[dict, list[str]]:
    """Return the report and the errors table's lines of the last participant call on ``out``."""
    from connscale.bidsapp.participant_logs import participant_reports

    report = participant_reports(out)[-1]
    errors = report.with_name(report.name.replace("_report.json", "_errors.tsv"))
    return json.loads(report.read_text()), errors.read_text().splitlines()
