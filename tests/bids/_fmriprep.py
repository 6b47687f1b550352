"""Tiny fMRIPrep-like derivatives made of nilearn's real confounds files.

nilearn ships the confounds of real fMRIPrep runs (30 volumes) in
``nilearn/interfaces/fmriprep/data``; each fake run pairs them with a BOLD of
30 volumes whose voxels mix region signals, confounds and noise, its own
brain mask, and a BOLD JSON sidecar with the repetition time.
:func:`make_fmriprep_cifti` makes fMRIPrep's grayordinate runs instead
(``*_space-fsLR_den-91k_bold.dtseries.nii`` on the exact HCP 91k brain model
of ``tests/data/cifti/ones.dscalar.nii``, simulated parcel signals plus the
same confounds), with :func:`write_cifti_atlas` for a ``.dlabel.nii`` on it.
"""

from __future__ import annotations

import functools
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


# --- fMRIPrep's grayordinate runs (space-fsLR_den-91k_bold.dtseries.nii) ---

#: The exact HCP 91,282-grayordinate brain model (tests/data/cifti, see its SOURCE.md).
CIFTI_MODEL = Path(__file__).parents[1] / "data" / "cifti" / "ones.dscalar.nii"
#: The fsLR atlas's file name (a dlabel on the 91k brain model).
CIFTI_ATLAS = "tpl-fsLR_atlas-Struct10_den-91k_dseg.dlabel.nii"
#: Its parcels: 4 per cortical hemisphere (runs of vertices), the cerebellum, the rest.
CIFTI_PARCELS = 10


@functools.lru_cache(maxsize=1)
def brain_model_91k():
    """Return the BrainModelAxis of the HCP 91k grayordinates (read once: its XML is slow)."""
    return nib.load(CIFTI_MODEL).header.get_axis(1)


def cifti_parcels(brain_model=None) -> np.ndarray:
    """Return the parcel of each grayordinate (1..CIFTI_PARCELS; 0: unlabelled)."""
    brain_model = brain_model_91k() if brain_model is None else brain_model
    labels = np.zeros(len(brain_model), dtype=np.int32)
    for name, part, model in brain_model.iter_structures():
        n = len(model)
        rows = np.arange(part.start, part.start + n)
        if name == "CIFTI_STRUCTURE_CORTEX_LEFT":
            labels[rows] = 1 + (4 * np.arange(n)) // n
        elif name == "CIFTI_STRUCTURE_CORTEX_RIGHT":
            labels[rows] = 5 + (4 * np.arange(n)) // n
        elif name.startswith("CIFTI_STRUCTURE_CEREBELLUM"):
            labels[rows] = 9
        elif name != "CIFTI_STRUCTURE_BRAIN_STEM":  # the brain stem stays unlabelled
            labels[rows] = 10
    return labels


def write_cifti_atlas(path: Path, brain_model=None, labels: np.ndarray | None = None) -> Path:
    """Write a one-map ``.dlabel.nii`` of :func:`cifti_parcels` (or ``labels``)."""
    brain_model = brain_model_91k() if brain_model is None else brain_model
    labels = cifti_parcels(brain_model) if labels is None else labels
    table = {0: ("???", (0.0, 0.0, 0.0, 0.0))}
    for value in np.unique(labels[labels > 0]):
        table[int(value)] = (f"parcel{int(value)}", (value / 10, 0.5, 1 - value / 10, 1.0))
    axis = nib.cifti2.LabelAxis(["parcels"], [table])
    nib.save(nib.Cifti2Image(labels[None].astype(np.float32), (axis, brain_model)), path)
    return path


def write_cifti_run(
    func: Path,
    entities: str,
    *,
    seed: int,
    n_volumes: int | None = None,
    t_r: float = T_R,
    series_t_r: float | None = None,
    brain_model=None,
) -> Path:
    """Write one run's fsLR dtseries, its sidecar and confounds; return the dtseries path.

    Each grayordinate is its parcel's simulated signal
    (:func:`connscale.datasets.simulate_timeseries`) plus confounds and noise;
    ``series_t_r``: the dtseries' own TR (SeriesAxis step) when it should
    differ from the sidecar's ``t_r``.
    """
    from connscale.datasets import simulate_timeseries

    func.mkdir(parents=True, exist_ok=True)
    brain_model = brain_model_91k() if brain_model is None else brain_model
    confounds = pd.read_csv(CONFOUNDS_TSV, sep="\t")
    if n_volumes is not None:
        confounds = confounds.iloc[:n_volumes]
    n = len(confounds)
    rng = np.random.default_rng(seed)
    motion = confounds[["trans_x", "trans_y", "rot_z", "white_matter"]].to_numpy()
    motion = (motion - motion.mean(0)) / motion.std(0)
    signals, _ = simulate_timeseries(
        n, CIFTI_PARCELS + 1, n_blocks=2, dtype="float64", random_state=seed
    )
    parcels = cifti_parcels(brain_model)
    data = 1000 + 10 * signals[:, parcels] + (motion @ rng.uniform(-5, 5, (4, 1)))
    data += rng.standard_normal(data.shape)
    series = nib.cifti2.SeriesAxis(0.0, t_r if series_t_r is None else series_t_r, n, "second")
    bold = func / f"{entities}_space-fsLR_den-91k_bold.dtseries.nii"
    nib.save(nib.Cifti2Image(data.astype(np.float32), (series, brain_model)), bold)
    (func / f"{entities}_space-fsLR_den-91k_bold.json").write_text(
        json.dumps({"RepetitionTime": t_r})
    )
    confounds.to_csv(
        func / f"{entities}_desc-confounds_timeseries.tsv", sep="\t", index=False, na_rep="n/a"
    )
    shutil.copy(CONFOUNDS_JSON, func / f"{entities}_desc-confounds_timeseries.json")
    return bold


def make_fmriprep_cifti(
    root: Path, runs: list[tuple[str, str | None, str, str | None]], **kwargs
) -> Path:
    """A derivatives tree of fsLR dtseries runs: one per (subject, session, task, run) tuple.

    ``kwargs`` go to :func:`write_cifti_run` (``n_volumes=20``: the fast variant);
    a tuple may carry a fifth item, a dict of keywords for that run alone.
    """
    make_fmriprep(root, [])
    for i, (sub, ses, task, run, *own) in enumerate(runs):
        func = root / f"sub-{sub}" / ("" if ses is None else f"ses-{ses}") / "func"
        entities = "_".join(
            [f"sub-{sub}"]
            + ([] if ses is None else [f"ses-{ses}"])
            + [f"task-{task}"]
            + ([] if run is None else [f"run-{run}"])
        )
        write_cifti_run(func, entities, seed=i, **{**kwargs, **(own[0] if own else {})})
    return root


def write_surfaces(folder: Path, n_vertices: int = 32492) -> tuple[Path, Path]:
    """Write two sphere meshes of ``n_vertices`` (fs_LR 32k's count) as GIFTI; return their paths.

    Stand-ins for fs_LR 32k midthickness surfaces: random points on a sphere,
    triangulated by their convex hull.
    """
    from scipy.spatial import ConvexHull

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, hemi in enumerate("LR"):
        points = np.random.default_rng(i).standard_normal((n_vertices, 3))
        points /= np.linalg.norm(points, axis=1, keepdims=True)
        faces = ConvexHull(points).simplices.astype(np.int32)
        image = nib.gifti.GiftiImage(
            darrays=[
                nib.gifti.GiftiDataArray((70 * points).astype(np.float32), "NIFTI_INTENT_POINTSET"),
                nib.gifti.GiftiDataArray(faces, "NIFTI_INTENT_TRIANGLE"),
            ]
        )
        path = folder / f"tpl-fsLR_den-32k_hemi-{hemi}_sphere.surf.gii"
        nib.save(image, path)
        paths.append(path)
    return paths[0], paths[1]
