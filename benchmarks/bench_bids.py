"""BIDS-App benchmark: fMRIPrep derivatives to denoised atlas connectivity.

A synthetic fMRIPrep tree (``--runs`` runs, 2 mm MNI grid 97 x 115 x 97,
~200k in-mask voxels, T = 400, float32 ``.nii.gz`` as fMRIPrep writes them,
each run with its own brain mask, BOLD sidecar and a confounds TSV with
fMRIPrep's column names) is processed twice on the same cores:

* connscale: ``connscale bids ... participant --denoise simple --measures
  fc,timeseries`` (``run_participant``, serial backend with the one-run-ahead
  decode prefetch, reports off): runs per minute and the per-stage split
  (decode, clean, compute, write) from each run's record;
* nilearn: the same pipeline as users write it: ``load_confounds_strategy(
  bold, 'simple')``, ``NiftiLabelsMasker(labels_img, mask_img, detrend=True,
  standardize='zscore_sample', t_r).fit_transform(bold, confounds,
  sample_mask)``, ``ConnectivityMeasure(kind='correlation',
  cov_estimator=EmpiricalCovariance())``, matrix and series written as TSV.

Both pipelines' matrices are compared (max |difference|). Both start warm
(imports done before timing); connscale's time includes the pybids index. Voxel degree maps
are not measured: ``connscale.degree_centrality`` is not in this tree.

    python benchmarks/bench_bids.py                      # 20 runs at full size
    python benchmarks/bench_bids.py --quick --runs 4     # a small grid for a laptop
    python benchmarks/bench_bids.py --device cuda
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
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


def _atlas(mask: np.ndarray, blocks) -> np.ndarray:
    """Labels 1..n: the mask's bounding box cut into blocks (empty blocks dropped)."""
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


def make_tree(root: Path, n_runs: int, grid: dict, seed: int = 0) -> tuple[Path, Path]:
    """The synthetic fMRIPrep tree and its atlas; returns (derivatives, atlas path)."""
    import nibabel as nib

    rng = np.random.default_rng(seed)
    affine = np.diag([2.0, 2.0, 2.0, 1.0])
    affine[:3, 3] = [-96.0, -132.0, -78.0]
    mask = _mask(grid["shape"], grid["radii"])
    atlas = _atlas(mask, grid["regions"])
    atlas_path = root / "atlas.nii.gz"
    derivatives = root / "fmriprep"
    derivatives.mkdir(parents=True, exist_ok=True)
    nib.save(nib.Nifti1Image(atlas, affine[:]), atlas_path)
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
    t = grid["t"]
    labels = atlas[mask]
    n_regions = int(labels.max())
    for i in range(n_runs):
        func = derivatives / f"sub-{i + 1:02d}" / "func"
        func.mkdir(parents=True, exist_ok=True)
        stem = f"sub-{i + 1:02d}_task-rest"
        run_mask = mask.copy()
        run_mask[tuple(np.argwhere(mask)[rng.integers(0, mask.sum(), 50)].T)] = False
        confounds = _confounds(t, rng)
        regions = rng.standard_normal((t, n_regions)).astype(np.float32)
        drift = confounds[["trans_x", "white_matter", "csf"]].to_numpy(np.float32)
        drift = (drift - drift.mean(0)) / drift.std(0)
        inside = (
            1000.0
            + 8.0 * regions[:, labels - 1]
            + drift @ rng.uniform(-3, 3, (3, labels.size)).astype(np.float32)
            + 4.0 * rng.standard_normal((t, labels.size), dtype=np.float32)
        )
        data = np.zeros((*grid["shape"], t), dtype=np.float32)
        data[mask] = inside.T
        nib.save(
            nib.Nifti1Image(data, affine),
            func / f"{stem}_space-MNI152NLin2009cAsym_res-2_desc-preproc_bold.nii.gz",
        )
        del data, inside
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
    return derivatives, atlas_path


def run_nilearn(derivatives: Path, atlas: Path, out: Path) -> dict:
    """The same pipeline written with nilearn, one run after the other."""
    from nilearn.connectome import ConnectivityMeasure
    from nilearn.interfaces.fmriprep import load_confounds_strategy
    from nilearn.maskers import NiftiLabelsMasker
    from sklearn.covariance import EmpiricalCovariance

    out.mkdir(parents=True, exist_ok=True)
    times, matrices = [], {}
    for bold in sorted(derivatives.glob("sub-*/func/*_desc-preproc_bold.nii.gz")):
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
        times.append(time.perf_counter() - tic)
        matrices[name.split("_")[0].removeprefix("sub-")] = fc
    return {"seconds": float(sum(times)), "per_run": times, "matrices": matrices}


def run_connscale(derivatives: Path, atlas: Path, out: Path, *, device: str, threads: int) -> dict:
    from connscale.bidsapp.participant import run_participant
    from connscale.io.relmat import read_relmat_tsv

    tic = time.perf_counter()
    report = run_participant(
        derivatives,
        out,
        atlas=atlas,
        atlas_name="Blocks",
        strategy="simple",
        measures=["fc", "timeseries"],
        backend="serial",
        device=device,
        threads_per_task=threads,
        reports=False,
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
    matrices = {r["subject"]: read_relmat_tsv(r["outputs"][0])[0] for r in report.records}
    return {
        "seconds": seconds,
        "stages": stages,
        "matrices": matrices,
        "n_voxels": int(np.mean([r["n_voxels"] for r in report.records])),
        "n_regions": report.records[0]["n_regions"],
    }


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
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--threads",
        type=int,
        default=os.cpu_count(),
        help="Torch threads of connscale (nilearn uses numpy's BLAS threads).",
    )
    parser.add_argument("--work", type=Path, default=Path("/tmp/connscale_bench_bids"))
    parser.add_argument("--skip-nilearn", action="store_true")
    parser.add_argument("--keep", action="store_true", help="Keep the synthetic tree.")
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
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    tic = time.perf_counter()
    derivatives, atlas = make_tree(args.work, args.runs, grid)
    print(
        f"tree: {args.runs} runs, grid {grid['shape']}, T = {grid['t']} "
        f"({time.perf_counter() - tic:.0f} s to write)"
    )
    ours = run_connscale(
        derivatives, atlas, args.work / "connscale", device=args.device, threads=args.threads
    )
    minutes = ours["seconds"] / 60
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "device": args.device,
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "torch_threads": args.threads,
        "runs": args.runs,
        "grid": grid,
        "voxels_in_mask": ours["n_voxels"],
        "regions": ours["n_regions"],
        "connscale": {
            "seconds": round(ours["seconds"], 2),
            "runs_per_minute": round(args.runs / minutes, 2),
            "stages_seconds": {k: round(v, 2) for k, v in ours["stages"].items()},
        },
    }
    print(
        f"connscale: {args.runs} runs in {ours['seconds']:.1f} s = "
        f"{args.runs / minutes:.2f} runs/min; stages (s): "
        + ", ".join(f"{k} {v:.2f}" for k, v in ours["stages"].items())
    )
    if not args.skip_nilearn:
        torch.set_num_threads(args.threads)
        theirs = run_nilearn(derivatives, atlas, args.work / "nilearn")
        diff = max(
            float(np.abs(ours["matrices"][s] - m).max()) for s, m in theirs["matrices"].items()
        )
        result["nilearn"] = {
            "seconds": round(theirs["seconds"], 2),
            "runs_per_minute": round(args.runs / (theirs["seconds"] / 60), 2),
            "max_abs_difference": diff,
        }
        result["speedup"] = round(theirs["seconds"] / ours["seconds"], 2)
        print(
            f"nilearn:   {args.runs} runs in {theirs['seconds']:.1f} s = "
            f"{result['nilearn']['runs_per_minute']:.2f} runs/min; connscale "
            f"{result['speedup']:.2f}x; max |FC difference| {diff:.2e}"
        )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    if not args.keep:
        shutil.rmtree(args.work, ignore_errors=True)


if __name__ == "__main__":
    main()
