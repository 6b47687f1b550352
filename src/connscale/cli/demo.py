"""``connscale demo``: the main jobs end to end on bundled, offline data."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "demo",
        help="Run connscale end to end on bundled data (nitime, nibabel) and simulations.",
        description="Runs the main jobs on data that installs offline and says where "
                    "the results are.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--out", type=Path, default=Path("demo_output"), help="Output folder.")
    parser.add_argument("--device", default="auto", help="'auto', 'cpu' or 'cuda'.")
    parser.add_argument("--n-voxels", type=int, default=20000,
                        help="Size of the simulated voxel-scale scan.")
    parser.set_defaults(func=run)
    return parser


def run(args) -> int:
    from connscale.cli.main import main
    from connscale.datasets import (
        compute_brain_mask,
        load_nitime_fmri,
        nibabel_functional_path,
        nitime_fmri_path,
        nitime_roi_path,
        simulate_timeseries,
    )

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    device = ["--device", args.device, "-q"]
    steps = []

    def step(title, argv):
        print(f"\n== {title}", flush=True)
        start = time.perf_counter()
        status = main(argv)
        if status:
            raise RuntimeError(f"demo step '{title}' failed with status {status}")
        steps.append((title, time.perf_counter() - start))

    step("Static FC of nitime's 31 ROI series (250 time points)",
         ["fc", str(nitime_roi_path()), "--out", str(out / "fc_roi"), *device])

    mask_path = out / "inputs" / "fmri1_brainmask.nii.gz"
    mask_path.parent.mkdir(parents=True, exist_ok=True)
    compute_brain_mask(load_nitime_fmri(1)).to_filename(mask_path)
    step("Voxel-level FC of nitime's fmri1 scan, sparse |r| >= 0.5",
         ["fc", str(nitime_fmri_path(1)), "--mask", str(mask_path), "--threshold", "0.5",
          "--absolute", "--out", str(out / "fc_voxels"), *device])
    step("Voxel-level FC of nibabel's functional.nii (upper triangle, HDF5)",
         ["fc", str(nibabel_functional_path()), "--kind", "triu",
          "--out", str(out / "fc_nibabel"), *device])

    n_voxels = args.n_voxels
    simulated = out / "inputs" / f"sub-sim_desc-{n_voxels}voxels_timeseries.npy"
    data, _ = simulate_timeseries(257, n_voxels, random_state=0)
    np.save(simulated, data)
    step(f"Voxel-scale FC of a simulated scan: {n_voxels} series x 257, out of core "
         "(memory limit 1GB) into HDF5",
         ["fc", str(simulated), "--kind", "triu", "--memory-limit", "1GB",
          "--out", str(out / "fc_simulated"), *device])

    print("\n== connscale demo finished")
    for title, seconds in steps:
        print(f"  {seconds:7.2f} s  {title}")
    print(f"Results, logs and figures are in {out.resolve()}/")
    return 0
