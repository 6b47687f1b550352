"""The region sums of a read by atlas layout: blocks against compact parcels.

A labels-only read (``bidsapp.decode._Gather``) takes each volume's labelled
voxels region by region and sums each region in one float64 reduction. Its
cost depends on how the regions interleave in memory only through the take;
the former gather (a reduction per run of voxels of one label along the
file's fastest axis) cost in proportion to those runs. Compared here on one
tree's mask: ``bench_bids.py``'s 96 rectangular blocks (long runs), the same
number of Voronoi cells of random seeds, and 400 of them (``bench_bids.py
--atlas parcels``, a stand-in for a 400-parcel cortical atlas). RESULTS §23
and §26.

Run: ``python benchmarks/bench_atlas_layout.py --work DIR`` with ``DIR`` a tree kept
by ``bench_bids.py --keep --work DIR``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import nibabel as nib
import numpy as np
from bench_bids import parcels_atlas

from connscale.bidsapp.decode import _Gather


def runs_of_labels(mask: np.ndarray, atlas: np.ndarray) -> int:
    """Return the runs of consecutive in-mask voxels of one label in memory (Fortran) order."""
    labels = np.where(mask, atlas, 0).ravel(order="F")
    inside = np.flatnonzero(labels > 0)
    values = labels[inside]
    new = np.ones(values.size, dtype=bool)
    new[1:] = (values[1:] != values[:-1]) | (inside[1:] != inside[:-1] + 1)
    return int(new.sum())


def time_sums(mask: np.ndarray, atlas: np.ndarray, repeats: int) -> float:
    """Return the region sums' milliseconds a volume (labels only)."""
    gather = _Gather(mask, atlas, voxels=False)
    volume = np.random.default_rng(1).standard_normal((1, mask.size), dtype=np.float32) + 100
    sums = np.zeros((1, gather.regions.size))
    gather(volume, "F", None, sums, slice(0, 1))  # the indices made once
    tic = time.perf_counter()
    for _ in range(repeats):
        gather(volume, "F", None, sums, slice(0, 1))
    return (time.perf_counter() - tic) / repeats * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True, help="bench_bids.py's kept tree.")
    parser.add_argument("--repeats", type=int, default=300)
    args = parser.parse_args()
    mask_path = next(args.work.glob("fmriprep/sub-*/func/*_desc-brain_mask.nii.gz"))
    mask = np.asarray(nib.load(mask_path).dataobj) > 0
    blocks = np.asarray(nib.load(next(args.work.glob("*_dseg.nii.gz"))).dataobj).astype(np.int64)
    n_blocks = int(np.unique(blocks[mask & (blocks > 0)]).size)
    atlases = {
        "tree's atlas": blocks,
        f"voronoi {n_blocks}": parcels_atlas(mask, n_blocks),
        "voronoi 400": parcels_atlas(mask, 400),
    }
    for name, atlas in atlases.items():
        ms = time_sums(mask, atlas, args.repeats)
        regions = int(np.unique(atlas[mask & (atlas > 0)]).size)
        runs = runs_of_labels(mask, atlas)
        print(f"{name}: {regions} regions, {runs} runs, {ms:.3f} ms a volume")


if __name__ == "__main__":
    main()
