"""Where the BIDS participant level's readers spend their time: a per-stage profile.

On ``bench_bids.py``'s synthetic fMRIPrep tree (same grid, T, masks, atlas),
each stage of reading a run is timed alone, on ``--workers`` threads and on
``--workers`` processes over the same files:

* ``inflate``: ISA-L decompression of the whole ``.nii.gz`` into one buffer
  (the decode floor: bytes of decoded data per second);
* ``masked``: :func:`connscale.bidsapp.decode.read_masked_bold` (inflate, the
  in-mask voxel gather and the region sums), what a reader does per run with
  a voxel-level measure;
* ``regions``: the same without the voxel series (the labelled voxels'
  region sums only), what a reader does per run for fc + timeseries;
* ``participant``: ``run_participant`` on the serial backend, ``--device``,
  with the reader threads it uses today, and its stage split.

Threads that scale like processes hold no lock; threads that do not, show
where the GIL (or memory bandwidth) binds.

    python benchmarks/profile_readers.py --runs 32 --workers 16 --device cuda
"""

from __future__ import annotations

import argparse
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import numpy as np
from bench_bids import FULL, QUICK, make_tree


def _inflate(path: str) -> int:
    from isal import igzip, isal_zlib

    total, buffer = 0, bytearray(16 * 1024**2)
    with open(path, "rb") as raw:  # ISA-L's C reader, straight into the buffer
        reader = isal_zlib._GzipReader(raw, igzip.READ_BUFFER_SIZE)
        while n := reader.readinto(buffer):
            total += n
    return total


def _masked(item) -> int:
    import nibabel as nib

    from connscale.bidsapp.decode import read_masked_bold

    path, mask_path, atlas = item
    mask = np.asarray(nib.load(mask_path).dataobj) > 0
    labels = np.asarray(nib.load(atlas).dataobj).astype(np.int32)
    read = read_masked_bold(path, mask, labels=labels, voxels=True)
    return read.data.nbytes


def _regions(item) -> int:
    import nibabel as nib

    from connscale.bidsapp.decode import read_masked_bold

    path, mask_path, atlas = item
    mask = np.asarray(nib.load(mask_path).dataobj) > 0
    labels = np.asarray(nib.load(atlas).dataobj).astype(np.int32)
    read = read_masked_bold(path, mask, labels=labels, voxels=False)
    # the bytes decoded, as the inflate stage counts them (no voxel series is returned)
    return int(np.prod(read.img.shape)) * read.img.get_data_dtype().itemsize


def _timed(pool_class, workers: int, func, items) -> dict:
    tic = time.perf_counter()
    with pool_class(workers) as pool:
        sizes = list(pool.map(func, items))
    seconds = time.perf_counter() - tic
    return {
        "workers": workers,
        "pool": pool_class.__name__,
        "seconds": round(seconds, 3),
        "runs_per_minute": round(len(items) / seconds * 60, 2),
        "gb_per_second": round(sum(sizes) / seconds / 1e9, 3),
    }


def _participant(derivatives: Path, atlas: Path, out: Path, device: str, readers: int) -> dict:
    from connscale.bidsapp.participant import run_participant

    tic = time.perf_counter()
    report = run_participant(
        derivatives,
        out,
        atlas=atlas,
        atlas_name="Blocks",
        measures=["fc", "timeseries"],
        backend="serial",
        n_jobs=readers,
        device=device,
        reports=False,
        verbose=0,
    )
    seconds = time.perf_counter() - tic
    stages = {
        k: round(float(sum(r["timings"][k] for r in report.records)), 2)
        for k in ("decode", "clean", "compute", "write")
    }
    runs = len(report.records)
    return {
        "readers": readers,
        "seconds": round(seconds, 2),
        "runs_per_minute": round(runs / seconds * 60, 2),
        "stages_summed_s": stages,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=32)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--workers", type=int, default=os.cpu_count())
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--work", type=Path, default=Path("/tmp/connscale_profile_readers"))
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    grid = QUICK if args.quick else FULL
    derivatives, atlas = make_tree(args.work, args.runs, grid, jobs=args.workers)
    bolds = sorted(str(p) for p in derivatives.rglob("*desc-preproc_bold.nii.gz"))
    masks = [b.replace("desc-preproc_bold", "desc-brain_mask") for b in bolds]
    items = [(b, m, str(atlas)) for b, m in zip(bolds, masks)]
    result = {"runs": len(bolds), "grid": grid, "cores": os.cpu_count()}
    one = _timed(ThreadPoolExecutor, 1, _inflate, bolds[:2])
    result["inflate_1_thread"] = one
    stages = (
        ("inflate", _inflate, bolds),
        ("masked", _masked, items),
        ("regions", _regions, items),
    )
    for name, func, work in stages:
        for pool in (ThreadPoolExecutor, ProcessPoolExecutor):
            entry = _timed(pool, args.workers, func, work)
            result[f"{name}_{pool.__name__}"] = entry
            print(name, entry, flush=True)
    result["masked_1_thread"] = _timed(ThreadPoolExecutor, 1, _masked, items[:2])
    result["regions_1_thread"] = _timed(ThreadPoolExecutor, 1, _regions, items[:2])
    for readers in (2, args.workers - 1):
        entry = _participant(derivatives, atlas, args.work / f"out{readers}", args.device, readers)
        result[f"participant_{readers}_readers"] = entry
        print("participant", entry, flush=True)
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
