"""The region sums of a read by atlas layout: the bench tree's block atlas against Voronoi parcels.

A labels-only read (``bidsapp.decode._Gather``) sums each region's voxels run by run
(runs of one label along the file's fastest axis): its cost grows with the number of
runs. ``benchmarks/bench_bids.py``'s atlas is 96 rectangular blocks, long runs; 96
Voronoi cells of random seeds in the same mask stand for compact parcels. RESULTS §23.

Run: ``python benchmarks/bench_atlas_layout.py --work DIR`` with ``DIR`` a tree kept
by ``bench_bids.py --keep --work DIR``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import nibabel as nib
import numpy as np
from scipy.spatial import cKDTree

from connscale.bidsapp.decode import _Gather


def voronoi_atlas(mask: np.ndarray, n_regions: int, seed: int = 0) -> np.ndarray:
    """Labels 1..n: each in-mask voxel's nearest of ``n_regions`` random in-mask seeds."""
    inside = np.argwhere(mask)
    seeds = inside[np.random.default_rng(seed).choice(len(inside), n_regions, replace=False)]
    _, nearest = cKDTree(seeds).query(inside)
    atlas = np.zeros(mask.shape, np.int64)
    atlas[tuple(inside.T)] = nearest + 1
    return atlas


def time_sums(mask: np.ndarray, atlas: np.ndarray, repeats: int) -> tuple[int, float]:
    """Return the atlas's runs and the region sums' milliseconds a volume."""
    gather = _Gather(mask, atlas, voxels=False)
    starts = gather._indices("F")[2][0]
    volume = np.random.default_rng(1).standard_normal((1, mask.size), dtype=np.float32) + 100
    sums = np.zeros((1, gather.regions.size))
    gather(volume, "F", None, sums, slice(0, 1))  # the indices made once
    tic = time.perf_counter()
    for _ in range(repeats):
        gather(volume, "F", None, sums, slice(0, 1))
    return starts.size, (time.perf_counter() - tic) / repeats * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True, help="bench_bids.py's kept tree.")
    parser.add_argument("--repeats", type=int, default=300)
    args = parser.parse_args()
    mask_path = next(args.work.glob("fmriprep/sub-*/func/*_desc-brain_mask.nii.gz"))
    mask = np.asarray(nib.load(mask_path).dataobj) > 0
    blocks = np.asarray(nib.load(next(args.work.glob("*_dseg.nii.gz"))).dataobj).astype(np.int64)
    n_regions = int(np.unique(blocks[blocks > 0]).size)
    for name, atlas in (("blocks", blocks), ("voronoi", voronoi_atlas(mask, n_regions))):
        runs, ms = time_sums(mask, atlas, args.repeats)
        print(f"{name}: {n_regions} regions, {runs} runs, {ms:.3f} ms a volume")


if __name__ == "__main__":
    main()
