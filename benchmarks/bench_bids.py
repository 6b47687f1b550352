"""BIDS-App benchmark: fMRIPrep derivatives to denoised atlas connectivity.

A synthetic fMRIPrep tree (``--runs`` runs, 2 mm MNI grid 97 x 115 x 97,
~244k in-mask voxels, T = 400, float32 ``.nii.gz`` as fMRIPrep writes them,
the region signals of ``--atlas`` (100 blocks, favourable to the region sums,
or 400 compact parcels interleaved in memory as real atlases are), each run
with its own brain mask, BOLD sidecar and a confounds TSV with
fMRIPrep's column names, each participant with fMRIPrep's other outputs
(``anat``, ``figures``, ``log``, the confounds' sidecar with an entry per
column and CompCor component: the files a real tree adds to the index the
participant level builds, empty but the sidecars); written by
``--tree-jobs`` processes) is processed
on the same machine by:

* connscale: ``connscale bids ... participant --denoise simple --measures
  fc,timeseries`` (``run_participant``, reports off), ``--device`` cpu or
  cuda: the serial backend, ``--readers`` processes reading the next runs
  (BOLD decoded with ISA-L and gathered; confounds; cleaning operator; the
  voxel series back through shared memory) while the main process cleans,
  correlates and writes with ``--threads`` torch threads. With
  ``--gpus-sweep 1,2,4``: one Dask worker per GPU (``connscale bids --gpus
  N``), once per count, on the same tree in the same call, each worker with
  its share of the host's cores as reader processes (the plan of
  ``connscale.bidsapp.gpus.plan_readers``, or ``--gpu-readers`` each): runs
  per minute per count, its ratio to one GPU (to the smallest count when 1 is
  not swept) and to the decode floor. Reported: runs per minute over the
  whole call (cluster start included) and over the runs' own span, and the
  per-stage split (decode, clean, compute, write) summed over runs;
* nilearn: the same pipeline as users write it: ``load_confounds_strategy(
  bold, 'simple')``, ``NiftiLabelsMasker(labels_img, mask_img, detrend=True,
  standardize='zscore_sample', t_r).fit_transform(bold, confounds,
  sample_mask)``, ``ConnectivityMeasure(kind='correlation',
  cov_estimator=EmpiricalCovariance())``, matrix and series written as TSV;
  one process per run on every core (``--nilearn-jobs``, default the host's
  cores: the masker has no ``n_jobs`` for one image, and
  ``MultiNiftiLabelsMasker``'s needs one mask for all runs);
* the decode floor: every BOLD decoded with ISA-L, one process per core,
  nothing else done (the rate no reader can pass on this host).

Both pipelines' matrices are compared (max |difference|). Both start warm
(imports done before timing); connscale's time includes the pybids index.
``--cold`` also times connscale's command line in a fresh process on the
same tree (interpreter start, imports and the readers' fork server timed):
a user's first call, which the warm figure leaves out.
``--measures fc,timeseries,maps`` adds voxel degree (binary and weighted at
0.25), eigenvector centrality and global correlation maps of every run.

    python benchmarks/bench_bids.py --quick --runs 20          # this laptop-size grid
    python benchmarks/bench_bids.py --runs 20                  # 20 runs at 2 mm, T = 400
    python benchmarks/bench_bids.py --gpus-sweep 1,2,4 --skip-nilearn  # 1, 2, then 4 GPUs
    python benchmarks/bench_bids.py --gpus-sweep 1,2,4 --skip-nilearn --measures fc,timeseries,maps
    python benchmarks/bench_bids.py --quick --runs 4 --gpus-sweep 1 --stand-in --skip-nilearn
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

FULL = {"shape": (97, 115, 97), "radii": (36, 45, 36), "t": 400, "regions": (5, 5, 4)}
QUICK = {"shape": (48, 57, 48), "radii": (18, 23, 18), "t": 200, "regions": (4, 4, 3)}
T_R = 2.0


def _mask(shape, radii) -> np.ndarray:
    grids = np.ogrid[tuple(slice(0, n) for n in shape)]
    centre = [n / 2 for n in shape]
    inside = sum(((g - c) / r) ** 2 for g, c, r in zip(grids, centre, radii))
    return inside <= 1.0


#: The benchmark's atlases, by ``--atlas``: their name in the tree (``atlas-<name>``).
ATLASES = {"blocks": "Blocks", "parcels": "Parcels400"}


def _atlas(mask: np.ndarray, grid: dict) -> np.ndarray:
    """The atlas of ``grid["atlas"]`` on ``mask``: labels 1..n (int16), 0 outside."""
    if grid["atlas"] == "parcels":
        return parcels_atlas(mask, 400)
    return _blocks(mask, grid["regions"])


def _blocks(mask: np.ndarray, blocks) -> np.ndarray:
    """Labels 1..n: the mask's bounding box cut into blocks (empty blocks dropped).

    A favourable layout for the region sums: each block is a few long runs of
    consecutive voxels in memory.
    """
    idx = np.argwhere(mask)
    lo, hi = idx.min(0), idx.max(0) + 1
    cell = [
        np.minimum((np.arange(n) - low) * b // max(high - low, 1), b - 1)
        for n, low, high, b in zip(mask.shape, lo, hi, blocks)
    ]
    block = (cell[0][:, None, None] * blocks[1] + cell[1][None, :, None]) * blocks[2] + cell[2][
        None, None, :
    ]
    labels = np.where(mask, block + 1, 0)
    _, dense = np.unique(labels, return_inverse=True)
    return dense.reshape(mask.shape).astype(np.int16)


def parcels_atlas(mask: np.ndarray, n_parcels: int, seed: int = 0) -> np.ndarray:
    """Labels 1..n: ``n_parcels`` compact parcels (the Voronoi cells of random in-mask voxels).

    A stand-in for a cortical parcellation such as Schaefer's 400 (TemplateFlow
    is not reachable here): parcels of ~600 voxels at 2 mm, each crossing
    hundreds of rows of the grid, interleaved in memory as real atlases are.
    """
    from scipy.spatial import cKDTree

    voxels = np.argwhere(mask)
    seeds = voxels[np.random.default_rng(seed).choice(len(voxels), n_parcels, replace=False)]
    labels = np.zeros(mask.shape, dtype=np.int16)
    labels[tuple(voxels.T)] = cKDTree(seeds).query(voxels)[1] + 1
    return labels


def _confounds(t: int, rng) -> pd.DataFrame:  # noqa: F821
    import pandas as pd

    def walk(scale):
        return np.cumsum(rng.standard_normal(t)) * scale

    columns = {}
    for name, scale in (
        ("trans_x", 0.02),
        ("trans_y", 0.02),
        ("trans_z", 0.03),
        ("rot_x", 3e-4),
        ("rot_y", 3e-4),
        ("rot_z", 3e-4),
        ("csf", 5.0),
        ("white_matter", 3.0),
        ("global_signal", 2.0),
    ):
        base = walk(scale) + (0 if name.startswith(("trans", "rot")) else 500)
        derivative = np.concatenate([[np.nan], np.diff(base)])
        columns[name] = base
        columns[f"{name}_derivative1"] = derivative
        columns[f"{name}_power2"] = base**2
        columns[f"{name}_derivative1_power2"] = derivative**2
    motion = np.stack([columns[k] for k in ("trans_x", "trans_y", "trans_z")], 1)
    rotation = 50 * np.stack([columns[k] for k in ("rot_x", "rot_y", "rot_z")], 1)
    fd = np.abs(np.diff(np.concatenate([motion, rotation], 1), axis=0)).sum(1)
    columns["framewise_displacement"] = np.concatenate([[np.nan], fd])
    columns["dvars"] = np.concatenate([[np.nan], 20 + rng.random(t - 1)])
    columns["std_dvars"] = np.concatenate([[np.nan], 1 + rng.random(t - 1) * 0.1])
    n_cos = int(np.floor(2 * t * T_R / 128))
    time_axis = (np.arange(t) + 0.5) / t
    for k in range(n_cos):
        columns[f"cosine{k:02d}"] = np.sqrt(2 / t) * np.cos(np.pi * (k + 1) * time_axis)
    columns["non_steady_state_outlier00"] = (np.arange(t) == 0).astype(float)
    return pd.DataFrame(columns)


def _affine() -> np.ndarray:
    affine = np.diag([2.0, 2.0, 2.0, 1.0])
    affine[:3, 3] = [-96.0, -132.0, -78.0]
    return affine


def _save_gz(img, path: Path) -> None:
    """``nibabel.save`` through ISA-L's gzip at level 1 (the tree is written faster)."""
    try:
        from isal import igzip
    except ImportError:
        import nibabel as nib

        nib.save(img, path)
        return
    with igzip.open(path, "wb", compresslevel=1) as fh:
        img.to_file_map(img.make_file_map({"image": fh}))


def _write_run(derivatives: Path, i: int, grid: dict, seed: int) -> None:
    """One run's BOLD, mask, sidecar and confounds, and fMRIPrep's other outputs of its
    participant (its own generator: any order, any job)."""
    import nibabel as nib

    rng = np.random.default_rng([seed, i])
    affine = _affine()
    mask = _mask(grid["shape"], grid["radii"])
    labels = _atlas(mask, grid)[mask]
    n_regions = int(labels.max())
    t = grid["t"]
    func = derivatives / f"sub-{i + 1:02d}" / "func"
    func.mkdir(parents=True, exist_ok=True)
    stem = f"sub-{i + 1:02d}_task-rest"
    run_mask = mask.copy()
    run_mask[tuple(np.argwhere(mask)[rng.integers(0, mask.sum(), 50)].T)] = False
    confounds = _confounds(t, rng)
    regions = rng.standard_normal((t, n_regions)).astype(np.float32)
    drift = confounds[["trans_x", "white_matter", "csf"]].to_numpy(np.float32)
    drift = (drift - drift.mean(0)) / drift.std(0)
    inside = 1000.0 + 8.0 * regions[:, labels - 1]
    inside += drift @ rng.uniform(-3, 3, (3, labels.size)).astype(np.float32)
    inside += 4.0 * rng.standard_normal((t, labels.size), dtype=np.float32)
    data = np.zeros((*grid["shape"], t), dtype=np.float32)
    data[mask] = inside.T
    del inside
    _save_gz(
        nib.Nifti1Image(data, affine),
        func / f"{stem}_space-MNI152NLin2009cAsym_res-2_desc-preproc_bold.nii.gz",
    )
    del data
    nib.save(
        nib.Nifti1Image(run_mask.astype(np.uint8), affine),
        func / f"{stem}_space-MNI152NLin2009cAsym_res-2_desc-brain_mask.nii.gz",
    )
    (func / f"{stem}_space-MNI152NLin2009cAsym_res-2_desc-preproc_bold.json").write_text(
        json.dumps({"RepetitionTime": T_R, "SkullStripped": False})
    )
    confounds.to_csv(
        func / f"{stem}_desc-confounds_timeseries.tsv", sep="\t", index=False, na_rep="n/a"
    )
    _other_outputs(derivatives, f"sub-{i + 1:02d}", confounds)


#: fMRIPrep's other outputs of a participant (23.x names; ``{s}`` its label), as
#: empty files: what a real tree adds to the index that the participant level builds.
_ANAT = [
    "{s}_desc-preproc_T1w.nii.gz",
    "{s}_desc-preproc_T1w.json",
    "{s}_desc-brain_mask.nii.gz",
    "{s}_desc-brain_mask.json",
    "{s}_dseg.nii.gz",
    *(f"{{s}}_label-{t}_probseg.nii.gz" for t in ("CSF", "GM", "WM")),
    "{s}_space-MNI152NLin2009cAsym_res-2_desc-preproc_T1w.nii.gz",
    "{s}_space-MNI152NLin2009cAsym_res-2_desc-preproc_T1w.json",
    "{s}_space-MNI152NLin2009cAsym_res-2_desc-brain_mask.nii.gz",
    "{s}_space-MNI152NLin2009cAsym_res-2_dseg.nii.gz",
    "{s}_from-MNI152NLin2009cAsym_to-T1w_mode-image_xfm.h5",
    "{s}_from-T1w_to-MNI152NLin2009cAsym_mode-image_xfm.h5",
    "{s}_from-T1w_to-fsnative_mode-image_xfm.txt",
    "{s}_from-fsnative_to-T1w_mode-image_xfm.txt",
    *(
        f"{{s}}_hemi-{h}_{k}"
        for h in "LR"
        for k in (
            "pial.surf.gii",
            "white.surf.gii",
            "midthickness.surf.gii",
            "inflated.surf.gii",
            "thickness.shape.gii",
            "curv.shape.gii",
            "sulc.shape.gii",
        )
    ),
]
_FUNC = [
    "{s}_task-rest_desc-coreg_boldref.nii.gz",
    "{s}_task-rest_desc-hmc_boldref.nii.gz",
    "{s}_task-rest_from-boldref_to-T1w_mode-image_desc-coreg_xfm.txt",
    "{s}_task-rest_from-orig_to-boldref_mode-image_desc-hmc_xfm.txt",
    "{s}_task-rest_space-MNI152NLin2009cAsym_res-2_boldref.nii.gz",
    "{s}_task-rest_space-MNI152NLin2009cAsym_res-2_desc-aparcaseg_dseg.nii.gz",
    "{s}_task-rest_space-MNI152NLin2009cAsym_res-2_desc-aseg_dseg.nii.gz",
    "{s}_task-rest_hemi-L_space-fsaverage5_bold.func.gii",
    "{s}_task-rest_hemi-R_space-fsaverage5_bold.func.gii",
]
_FIGURES = [
    "{s}_desc-about_T1w.html",
    "{s}_desc-conform_T1w.html",
    "{s}_desc-reconall_T1w.svg",
    "{s}_desc-summary_T1w.html",
    "{s}_dseg.svg",
    "{s}_space-MNI152NLin2009cAsym_T1w.svg",
    *(
        f"{{s}}_task-rest_desc-{d}_bold.{e}"
        for d, e in (
            ("carpetplot", "svg"),
            ("compcorvar", "svg"),
            ("confoundcorr", "svg"),
            ("coreg", "svg"),
            ("rois", "svg"),
            ("summary", "html"),
            ("validation", "html"),
        )
    ),
]


def _confounds_sidecar(confounds) -> dict:
    """fMRIPrep's confounds sidecar: an entry per column and per CompCor component
    (fMRIPrep lists the components it did not keep too)."""
    sidecar = {c: {"Method": "fmriprep"} for c in confounds.columns}
    for kind, mask in (("a", "combined"), ("c", "CSF"), ("w", "WM"), ("t", None)):
        for k in range(60):
            sidecar[f"{kind}_comp_cor_{k:02d}"] = {
                "Method": "aCompCor" if kind != "t" else "tCompCor",
                **({"Mask": mask} if mask else {}),
                "Retained": k < 10,
                "SingularValue": 100.0 / (k + 1),
                "VarianceExplained": 0.1 / (k + 1),
                "CumulativeVarianceExplained": min(1.0, 0.05 * (k + 1)),
            }
    return sidecar


def _other_outputs(derivatives: Path, subject: str, confounds) -> None:
    """Write ``subject``'s other fMRIPrep outputs (empty files but the sidecars)."""
    for folder, names in (("anat", _ANAT), ("func", _FUNC), ("figures", _FIGURES)):
        (derivatives / subject / folder).mkdir(parents=True, exist_ok=True)
        for name in names:
            path = derivatives / subject / folder / name.format(s=subject)
            path.write_text("{}" if name.endswith(".json") else "")
    sidecar = derivatives / subject / "func" / f"{subject}_task-rest_desc-confounds_timeseries.json"
    sidecar.write_text(json.dumps(_confounds_sidecar(confounds), indent=2))
    (derivatives / subject / "log").mkdir(exist_ok=True)
    (derivatives / subject / "log" / "citation.md").write_text("")


def make_tree(
    root: Path, n_runs: int, grid: dict, seed: int = 0, *, jobs: int = 1
) -> tuple[Path, Path]:
    """The synthetic fMRIPrep tree and its atlas; returns (derivatives, atlas path)."""
    from concurrent.futures import ProcessPoolExecutor

    import nibabel as nib

    mask = _mask(grid["shape"], grid["radii"])
    atlas = _atlas(mask, grid)
    atlas_path = root / _atlas_file(grid)
    derivatives = root / "fmriprep"
    derivatives.mkdir(parents=True, exist_ok=True)
    nib.save(nib.Nifti1Image(atlas, _affine()), atlas_path)
    (derivatives / "dataset_description.json").write_text(
        json.dumps(
            {
                "Name": "synthetic fMRIPrep",
                "BIDSVersion": "1.9.0",
                "DatasetType": "derivative",
                "GeneratedBy": [{"Name": "fMRIPrep", "Version": "23.2.0"}],
            }
        )
    )
    if jobs > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            list(
                pool.map(
                    _write_run,
                    [derivatives] * n_runs,
                    range(n_runs),
                    [grid] * n_runs,
                    [seed] * n_runs,
                )
            )
    else:
        for i in range(n_runs):
            _write_run(derivatives, i, grid, seed)
    return derivatives, atlas_path


def _atlas_file(grid: dict) -> str:
    return f"tpl-MNI152NLin2009cAsym_res-2_atlas-{ATLASES[grid['atlas']]}_dseg.nii.gz"


def _existing_tree(work: Path, n_runs: int, grid: dict) -> tuple[Path, Path] | None:
    """Return (derivatives, atlas) of the tree left in ``work`` if it has ``n_runs`` of ``grid``.

    An older tree without fMRIPrep's other outputs gets them.
    """
    import nibabel as nib
    import pandas as pd

    derivatives = work / "fmriprep"
    atlas = work / _atlas_file(grid)  # the runs' signals follow their atlas
    bolds = sorted(derivatives.rglob("*_desc-preproc_bold.nii.gz"))
    if len(bolds) != n_runs or not atlas.exists():
        return None
    if nib.load(bolds[0]).shape != (*grid["shape"], grid["t"]):
        return None
    for confounds in derivatives.rglob("*_desc-confounds_timeseries.tsv"):  # an older tree's
        if not confounds.with_suffix(".json").exists():
            subject = confounds.name.split("_")[0]
            _other_outputs(derivatives, subject, pd.read_csv(confounds, sep="\t", nrows=1))
    return derivatives, atlas


def _nilearn_run(bold: Path, atlas: Path, out: Path) -> tuple[str, np.ndarray, float]:
    """One run through the nilearn pipeline: (subject, FC, seconds)."""
    from nilearn.connectome import ConnectivityMeasure
    from nilearn.interfaces.fmriprep import load_confounds_strategy
    from nilearn.maskers import NiftiLabelsMasker
    from sklearn.covariance import EmpiricalCovariance

    tic = time.perf_counter()
    confounds, sample_mask = load_confounds_strategy(str(bold), denoise_strategy="simple")
    masker = NiftiLabelsMasker(
        labels_img=str(atlas),
        mask_img=str(bold).replace("desc-preproc_bold", "desc-brain_mask"),
        detrend=True,
        standardize="zscore_sample",
        t_r=T_R,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        series = masker.fit_transform(str(bold), confounds=confounds, sample_mask=sample_mask)
    fc = ConnectivityMeasure(
        kind="correlation", cov_estimator=EmpiricalCovariance(), standardize="zscore_sample"
    ).fit_transform([series])[0]
    name = bold.name.split("_space-")[0]
    np.savetxt(out / f"{name}_relmat.tsv", fc, delimiter="\t", fmt="%.8g")
    np.savetxt(out / f"{name}_timeseries.tsv", series, delimiter="\t", fmt="%.8g")
    return name.split("_")[0].removeprefix("sub-"), fc, time.perf_counter() - tic


def run_nilearn(derivatives: Path, atlas: Path, out: Path, *, jobs: int = 1, runs=None) -> dict:
    """The same pipeline written with nilearn: one run after the other, or on joblib
    processes (``jobs``); the first ``runs`` runs only when given."""
    bolds = sorted(derivatives.glob("sub-*/func/*_desc-preproc_bold.nii.gz"))[:runs]
    out.mkdir(parents=True, exist_ok=True)
    tic = time.perf_counter()
    if jobs == 1:
        done = [_nilearn_run(bold, atlas, out) for bold in bolds]
    else:
        from joblib import Parallel, delayed

        done = Parallel(n_jobs=jobs)(delayed(_nilearn_run)(b, atlas, out) for b in bolds)
    seconds = time.perf_counter() - tic
    return {
        "seconds": seconds,
        "runs": len(bolds),
        "per_run": [d[2] for d in done],
        "matrices": {d[0]: d[1] for d in done},
    }


def _atlas_name(atlas: Path) -> str:
    """Return the ``atlas-`` label of a TemplateFlow-named atlas file (the outputs' ``seg-``)."""
    return atlas.name.split("atlas-")[1].split("_")[0]


def run_connscale(
    derivatives: Path,
    atlas: Path,
    out: Path,
    *,
    device: str,
    threads: int,
    readers: int | None,
    gpus: int | None = None,
    measures: tuple[str, ...] = ("fc", "timeseries"),
    reports: bool = False,
    workers: int | None = None,
) -> dict:
    """connscale's participant level: serial with ``readers`` readers, or one Dask
    worker per GPU for ``gpus``; with ``reports``, each run's HTML report and figures
    (the command line's default). ``workers``: that many Dask workers compute runs
    side by side instead (``--backend dask --n-jobs``), each reading its own."""
    from connscale.bidsapp.participant import run_participant
    from connscale.io.relmat import read_relmat_tsv

    shutil.rmtree(out, ignore_errors=True)
    called = time.time()  # epoch seconds, as the records' times
    tic = time.perf_counter()
    report = run_participant(
        derivatives,
        out,
        atlas=atlas,
        atlas_name=_atlas_name(atlas),
        strategy="simple",
        measures=list(measures),
        backend="serial" if workers is None else "dask",
        n_jobs=readers if workers is None else workers,
        gpus=gpus,
        device=device,
        threads_per_task=threads,
        reports=reports,
        verbose=0,
    )
    seconds = time.perf_counter() - tic
    failed = [r for r in report.records if r["status"] != "ok"]
    if failed:
        raise RuntimeError(f"{len(failed)} run(s) failed: {failed[0].get('error')}")
    stages = {
        k: float(sum(r["timings"][k] for r in report.records))
        for k in ("decode", "clean", "compute", "write")
    }
    span = max(r["started"] + r["seconds"] for r in report.records) - min(
        r["started"] for r in report.records
    )
    matrices = {r["subject"]: read_relmat_tsv(r["outputs"][0])[0] for r in report.records}
    return {
        "timeline": _timeline(report.records, called),
        "seconds": seconds,
        "span": span,
        "stages": stages,
        "matrices": matrices,
        "notes": report.notes,
        "n_voxels": int(np.mean([r["n_voxels"] for r in report.records])),
        "n_regions": report.records[0]["n_regions"],
    }


def run_cold(
    derivatives: Path,
    atlas: Path,
    out: Path,
    *,
    device: str,
    readers: int,
    measures: tuple[str, ...],
    reports: bool,
) -> dict:
    """connscale's command line in a fresh Python process, as a user starts it.

    The same options as :func:`run_connscale`'s serial call (``threads_per_task``
    is the command line's default, 1); timed from the process's start to its
    exit: the interpreter, every import and the fork server's included.
    """
    shutil.rmtree(out, ignore_errors=True)
    name = _atlas_name(atlas)
    command = [sys.executable, "-m", "connscale.cli.main", "bids", str(derivatives), str(out)]
    command += ["participant", "--atlas", str(atlas), "--atlas-name", name, "--denoise", "simple"]
    command += ["--measures", ",".join(measures), "--backend", "serial", "--n-jobs", str(readers)]
    command += ["--device", device, "-q"] + ([] if reports else ["--no-reports"])
    tic = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - tic
    if done.returncode:
        raise RuntimeError(f"connscale bids exited {done.returncode}: {done.stderr[-2000:]}")
    return {"seconds": round(seconds, 2)}


def _inflate(path: str) -> int:
    """Decode one ``.nii.gz`` whole with ISA-L; return the decoded bytes."""
    from isal import igzip, isal_zlib

    total, buffer = 0, bytearray(16 * 1024**2)
    with open(path, "rb") as raw:  # ISA-L's C reader, straight into the buffer
        reader = isal_zlib._GzipReader(raw, igzip.READ_BUFFER_SIZE)
        while n := reader.readinto(buffer):
            total += n
    return total


def run_decode_floor(derivatives: Path, *, jobs: int) -> dict:
    """The decode floor: every BOLD decoded with ISA-L, one process per core, nothing else."""
    from concurrent.futures import ProcessPoolExecutor

    bolds = sorted(str(p) for p in derivatives.rglob("*_desc-preproc_bold.nii.gz"))
    with ProcessPoolExecutor(jobs) as pool:
        list(pool.map(_inflate, bolds[:jobs]))  # the processes started and warm
        tic = time.perf_counter()
        decoded = sum(pool.map(_inflate, bolds))
        seconds = time.perf_counter() - tic
    return {
        "jobs": jobs,
        "seconds": round(seconds, 2),
        "runs_per_minute": round(len(bolds) / seconds * 60, 2),
        "decoded_gb_per_second": round(decoded / seconds / 1e9, 3),
    }


def _timeline(records: list[dict], called: float) -> dict:
    """Where the computing process's time went: waiting for reads, or its own work; and
    when, after the call began (``called``, epoch seconds), the first read started and the
    last run ended (before the first read: the layout's index and the readers' start)."""
    waited = own = 0.0
    for r in records:
        ready = r["read_started"] + r["timings"]["decode"] + r["timings"]["clean"]
        end = r["started"] + r["seconds"]
        waited += max(0.0, min(ready, end) - r["started"])
        own += end - max(ready, r["started"])
    first = min(r["started"] for r in records)
    reads = min(r["read_started"] for r in records)
    last = max(r["started"] + r["seconds"] for r in records)
    return {
        "computing_process_waiting_s": round(waited, 2),
        "computing_process_own_work_s": round(own, 2),
        "first_read_started_after_first_task_s": round(reads - first, 2),
        "first_read_after_call_start_s": round(reads - called, 2),
        "last_run_ended_after_call_start_s": round(last - called, 2),
    }


def _summary(runs: int, ours: dict) -> dict:
    return {
        "seconds": round(ours["seconds"], 2),
        "runs_per_minute": round(runs / (ours["seconds"] / 60), 2),
        "runs_span_seconds": round(ours["span"], 2),
        "runs_per_minute_in_span": round(runs / (ours["span"] / 60), 2),
        "stages_seconds": {k: round(v, 2) for k, v in ours["stages"].items()},
        "timeline": ours["timeline"],
    }


def _print(label: str, runs: int, summary: dict) -> None:
    print(
        f"{label}: {runs} runs in {summary['seconds']:.1f} s = "
        f"{summary['runs_per_minute']:.2f} runs/min ({summary['runs_per_minute_in_span']:.2f} "
        f"over the runs' span of {summary['runs_span_seconds']:.1f} s); stages summed over "
        "runs (s): "
        + ", ".join(f"{k} {v:.2f}" for k, v in summary["stages_seconds"].items())
        + "; "
        + ", ".join(f"{k} {v}" for k, v in summary["timeline"].items()),
        flush=True,
    )


def _call_options(args) -> dict:
    """The options that the warm call and the cold command line share."""
    return {
        "device": args.device,
        "readers": args.readers,
        "measures": tuple(args.measures.split(",")),
        "reports": args.reports,
    }


def _time_cold(args, derivatives: Path, atlas: Path, result: dict) -> None:
    """Add the command line's cold rate to ``result`` and print it beside the floor."""
    if args.gpus_sweep is not None or args.workers is not None:
        raise SystemExit("--cold times the serial backend only (no --gpus-sweep, --workers).")
    if args.threads != 1:
        raise SystemExit("--cold runs the command line, one torch thread a run: give --threads 1.")
    cold = run_cold(derivatives, atlas, args.work / "connscale_cold", **_call_options(args))
    cold["runs_per_minute"] = round(args.runs / (cold["seconds"] / 60), 2)
    cold["ratio_to_floor"] = round(
        cold["runs_per_minute"] / result["decode_floor"]["runs_per_minute"], 3
    )
    result["connscale_cold"] = cold
    print(
        f"connscale, the command line in a fresh process (start and imports timed): "
        f"{args.runs} runs in {cold['seconds']:.1f} s = {cold['runs_per_minute']:.2f} runs/min, "
        f"{cold['ratio_to_floor']:.2f}x the floor",
        flush=True,
    )


def run_gpu_sweep(args, derivatives: Path, atlas: Path, counts: list[int]) -> tuple[dict, dict]:
    """connscale's participant level once per GPU count, on the same tree.

    Returns the sweep's results (per count: runs/min, the reader plan, the
    ratio to one GPU) and the last count's full result.
    """
    if args.stand_in:  # the node shows this many GPUs; the runs compute on the CPU
        from connscale.bidsapp import gpus

        gpus._cuda_count = lambda: max(counts)
    device = "cpu" if args.stand_in else "cuda"
    sweep: dict = {"device": device, "measures": args.measures, "counts": {}}
    ours = None
    for count in counts:
        out = args.work / f"connscale_{count}gpu"
        ours = run_connscale(
            derivatives,
            atlas,
            out,
            device=device,
            threads=args.threads,
            readers=args.gpu_readers,
            gpus=count,
            measures=tuple(args.measures.split(",")),
            reports=args.reports,
        )
        if ours["notes"]:
            raise RuntimeError(f"--gpus {count}: {ours['notes'][0]}")
        log = json.loads(sorted((out / "logs").glob("participant_*_report.json"))[-1].read_text())
        # A GPU worker's run starts once read: its span begins with the first read.
        records = log["records"]
        ours["span"] = max(r["started"] + r["seconds"] for r in records) - min(
            r["read_started"] for r in records
        )
        summary = {"gpus": count, **_summary(args.runs, ours)}
        summary["timeline"] = {"span_from_first_read_s": round(ours["span"], 2)}
        summary["readers"] = log["gpu_readers"]
        sweep["counts"][str(count)] = summary
        _print(
            f"connscale (--gpus {count}, {summary['readers']['readers_per_worker']} readers "
            "per GPU worker)",
            args.runs,
            summary,
        )
    base = 1 if 1 in counts else min(counts)
    sweep["ratio_to"] = f"{base} GPU"
    for count in counts:
        this = sweep["counts"][str(count)]
        one = sweep["counts"][str(base)]
        this["ratio_to_base"] = round(this["runs_per_minute"] / one["runs_per_minute"], 2)
        this["ratio_to_base_in_span"] = round(
            this["runs_per_minute_in_span"] / one["runs_per_minute_in_span"], 2
        )
        print(
            f"--gpus {count}: {this['runs_per_minute']:.2f} runs/min, "
            f"{this['ratio_to_base']:.2f}x {base} GPU over the whole call, "
            f"{this['ratio_to_base_in_span']:.2f}x over the runs' span",
            flush=True,
        )
    return sweep, ours


def _sweep_to_floor(sweep: dict, floor: dict) -> None:
    """Add each GPU count's ratio to the decode floor, and print it."""
    for count, this in sweep["counts"].items():
        this["ratio_to_floor"] = round(this["runs_per_minute"] / floor["runs_per_minute"], 3)
        print(f"--gpus {count}: {this['ratio_to_floor']:.2f}x the decode floor", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="A small grid (T = 200).")
    parser.add_argument(
        "--volumes",
        type=int,
        default=None,
        help="T of each run instead of the grid's (400 full, 200 quick).",
    )
    parser.add_argument("--device", default="cpu", help="connscale's device without --gpus.")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="Torch threads of connscale's compute (the region series are small; the "
        "other cores read runs).",
    )
    parser.add_argument(
        "--readers",
        type=int,
        default=max((os.cpu_count() or 2) - 1, 1),
        help="connscale's n_jobs without --gpus-sweep: readers of the runs ahead (serial "
        "backend; processes when more than one) (default: a reader per core but one, which "
        "computes).",
    )
    parser.add_argument(
        "--gpus-sweep",
        "--gpus",
        dest="gpus_sweep",
        default=None,
        metavar="N[,M...]",
        help="GPU counts to run connscale's participant level with, one after the other on "
        "the same tree in this call (e.g. '1,2,4'): one Dask worker per GPU, device cuda, "
        "each worker's readers its share of the host's cores (--gpu-readers to fix them); "
        "reports runs/min per count, the ratio to one GPU and to the decode floor.",
    )
    parser.add_argument(
        "--gpu-readers",
        type=int,
        default=None,
        help="With --gpus-sweep: reader processes of each GPU worker (default: the host's "
        "cores less one per GPU, shared out among the GPUs).",
    )
    parser.add_argument(
        "--stand-in",
        action="store_true",
        help="With --gpus-sweep: stand-in GPUs computing on the CPU (as many as the largest "
        "count; the workers and their readers as on GPUs), to try the sweep without a GPU.",
    )
    parser.add_argument(
        "--work",
        "--work-dir",
        dest="work",
        type=Path,
        default=Path("/tmp/connscale_bench_bids"),
        help="Where the synthetic tree and the outputs go (a local disk).",
    )
    parser.add_argument(
        "--tree-jobs",
        type=int,
        default=min(8, os.cpu_count() or 1),
        help="Processes writing the synthetic tree.",
    )
    parser.add_argument(
        "--atlas",
        choices=sorted(ATLASES),
        default="blocks",
        help="The atlas of the tree (the runs' signals follow it): 'blocks', the mask's "
        "bounding box cut into 100 blocks (favourable to the region sums: a few long runs of "
        "voxels each), or 'parcels', 400 compact parcels interleaved in memory as a "
        "cortical parcellation's are (the realistic layout).",
    )
    parser.add_argument(
        "--measures",
        default="fc,timeseries",
        help="connscale's --measures (e.g. fc,timeseries,maps: voxel degree, ECM and "
        "global correlation maps too; nilearn computes fc and timeseries only).",
    )
    parser.add_argument(
        "--reports",
        action="store_true",
        help="Write each run's report and figures, as the command line does by default "
        "(off: the measures alone).",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="Dask workers computing runs side by side (--backend dask --n-jobs N), "
        "instead of one computing process with --readers reading ahead.",
    )
    parser.add_argument("--skip-nilearn", action="store_true")
    parser.add_argument(
        "--cold",
        action="store_true",
        help="Also time connscale's command line in a fresh process on the same tree, "
        "interpreter start and imports included (the rate of a user's first call; the "
        "call above runs in this warm process). Serial backend only.",
    )
    parser.add_argument(
        "--nilearn-jobs",
        type=int,
        default=os.cpu_count() or 1,
        help="joblib processes of the nilearn pipeline (default: one per core, as users run it).",
    )
    parser.add_argument(
        "--nilearn-runs",
        type=int,
        default=None,
        help="Time nilearn on the first N runs only (its runs/min from those).",
    )
    parser.add_argument("--keep", action="store_true", help="Keep the synthetic tree.")
    parser.add_argument(
        "--reuse-tree",
        action="store_true",
        help="Use the tree an earlier call left in --work (--keep) when it holds --runs runs "
        "of this grid and T (two commands then time the same files); else write one.",
    )
    parser.add_argument("--json", type=Path, default=None, help="Write the results here.")
    args = parser.parse_args()
    # Both pipelines start warm: the imports (nilearn, pybids, torch) are not timed.
    import bids  # noqa: F401
    import nilearn.connectome
    import nilearn.image
    import nilearn.interfaces.fmriprep
    import nilearn.maskers
    import nilearn.signal  # noqa: F401
    import torch

    import connscale.bidsapp.participant
    import connscale.fc.static  # noqa: F401

    grid = dict(QUICK if args.quick else FULL)
    if args.volumes is not None:
        grid["t"] = args.volumes
    grid["atlas"] = args.atlas
    gpu_counts = [] if args.gpus_sweep is None else [int(n) for n in args.gpus_sweep.split(",")]
    tic = time.perf_counter()
    tree = _existing_tree(args.work, args.runs, grid) if args.reuse_tree else None
    if tree is None:
        shutil.rmtree(args.work, ignore_errors=True)
        args.work.mkdir(parents=True)
        tree = make_tree(args.work, args.runs, grid, jobs=args.tree_jobs)
        how = f"{time.perf_counter() - tic:.0f} s to write with {args.tree_jobs} processes"
    else:
        how = "reused"
    derivatives, atlas = tree
    print(f"tree: {args.runs} runs, grid {grid['shape']}, T = {grid['t']} ({how})", flush=True)
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "torch_threads": args.threads,
        "measures": args.measures,
        "reports": args.reports,
        "workers": args.workers,
        "runs": args.runs,
        "grid": grid,
    }
    ours = None
    if not gpu_counts:
        ours = run_connscale(
            derivatives,
            atlas,
            args.work / "connscale",
            threads=args.threads,
            workers=args.workers,
            **_call_options(args),
        )
        result["connscale"] = {
            "device": args.device,
            "readers": args.readers if args.workers is None else None,
            **_summary(args.runs, ours),
        }
        who = f"{args.readers} readers" if args.workers is None else f"{args.workers} Dask workers"
        _print(f"connscale ({args.device}, {who})", args.runs, result["connscale"])
    if gpu_counts:
        result["gpu_sweep"], ours = run_gpu_sweep(args, derivatives, atlas, gpu_counts)
    floor = run_decode_floor(derivatives, jobs=os.cpu_count() or 1)
    result["decode_floor"] = floor
    ours_per_minute = args.runs / (ours["seconds"] / 60)
    result["ratio_to_floor"] = round(ours_per_minute / floor["runs_per_minute"], 3)
    print(
        f"decode floor (ISA-L, {floor['jobs']} processes, nothing else): "
        f"{floor['runs_per_minute']:.2f} runs/min, {floor['decoded_gb_per_second']:.2f} GB/s "
        f"decoded; connscale at {result['ratio_to_floor']:.2f}x the floor",
        flush=True,
    )
    if gpu_counts:
        _sweep_to_floor(result["gpu_sweep"], floor)
    if args.cold:
        _time_cold(args, derivatives, atlas, result)
    result["voxels_in_mask"] = ours["n_voxels"]
    result["regions"] = ours["n_regions"]
    if not args.skip_nilearn:
        torch.set_num_threads(os.cpu_count() or 1)
        theirs = run_nilearn(
            derivatives,
            atlas,
            args.work / "nilearn",
            jobs=args.nilearn_jobs,
            runs=args.nilearn_runs,
        )
        diff = max(
            float(np.abs(ours["matrices"][s] - m).max()) for s, m in theirs["matrices"].items()
        )
        per_minute = theirs["runs"] / (theirs["seconds"] / 60)
        result["nilearn"] = {
            "jobs": args.nilearn_jobs,
            "runs_timed": theirs["runs"],
            "seconds": round(theirs["seconds"], 2),
            "runs_per_minute": round(per_minute, 2),
            "max_abs_difference": diff,
        }
        result["speedup"] = round(ours_per_minute / per_minute, 2)
        print(
            f"nilearn ({args.nilearn_jobs} job(s)): {theirs['runs']} runs in "
            f"{theirs['seconds']:.1f} s = {per_minute:.2f} runs/min; connscale "
            f"{result['speedup']:.2f}x; max |FC difference| {diff:.2e}"
        )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    if not args.keep:
        shutil.rmtree(args.work, ignore_errors=True)


if __name__ == "__main__":
    main()
