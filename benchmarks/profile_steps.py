"""Where the BIDS participant level's computing process spends a run: a per-step profile.

On a tree ``bench_bids.py --keep`` left (its ``--work`` folder), the first
``--runs`` runs go through ``run_participant`` (serial backend, ``--readers``
reader processes, ``--device``) with the computing process's steps wrapped:
each call is timed with the device synchronised before and after it, so a
step's time is its own (GPU work included), not the next step's. Printed per
step: milliseconds a run, calls, the first call (which holds one-time costs:
CUDA's start, Triton's compilation) and the median call. The synchronisation
stops the overlap of steps, so the sum is an upper bound of the run's time.

    python benchmarks/bench_bids.py --runs 64 --device cuda --keep --work /tmp/bb
    python benchmarks/profile_steps.py --work /tmp/bb --runs 16 --measures fc,timeseries,maps
"""

from __future__ import annotations

import argparse
import functools
import importlib
import shutil
import statistics
import time
from collections import defaultdict
from pathlib import Path

#: (module, function) wrapped: the run's task, its sets, and the steps of the maps set.
STEPS = (
    ("connscale.bidsapp.participant", "_process"),
    ("connscale.bidsapp.participant", "_despike_and_measure"),
    ("connscale.bidsapp.participant", "output_sets"),
    ("connscale.bidsapp.participant", "write_region"),
    ("connscale.bidsapp.qc_outputs", "write_qc"),
    ("connscale.bidsapp.qc_outputs", "_final_dvars"),
    ("connscale.bidsapp.voxel_measures", "write_maps"),
    ("connscale.bidsapp.voxel_measures", "_image"),
    ("connscale.bidsapp.voxel_measures", "_publish"),
    ("connscale.denoise", "clean_signals"),
    ("connscale.maps.prepare", "normalize_once"),
    ("connscale.maps.degree", "compute_degree"),
    ("connscale.maps", "eigenvector_centrality"),
    ("connscale.maps", "global_correlation"),
    ("connscale.io.maps", "write_map"),
)


def _wrap(module_name: str, name: str, calls: dict) -> None:
    """Replace ``module.name`` by a timed call (the device synchronised around it)."""
    import torch

    module = importlib.import_module(module_name)
    real = getattr(module, name)
    key = f"{module_name.rsplit('.', 1)[-1]}.{name}"

    def sync() -> None:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()

    @functools.wraps(real)
    def timed(*args, **kwargs):
        sync()
        tic = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            sync()
            calls[key].append(time.perf_counter() - tic)

    setattr(module, name, timed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True, help="bench_bids.py's --work.")
    parser.add_argument("--runs", type=int, default=16)
    parser.add_argument("--readers", type=int, default=15)
    parser.add_argument("--measures", default="fc,timeseries,maps")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    import bids  # noqa: F401 - warm, as bench_bids.py
    import nilearn.interfaces.fmriprep  # noqa: F401
    import nilearn.signal  # noqa: F401

    from connscale.bidsapp.participant import run_participant

    calls: dict[str, list[float]] = defaultdict(list)
    for module_name, name in STEPS:
        _wrap(module_name, name, calls)
    out = args.work / "profile_steps"
    shutil.rmtree(out, ignore_errors=True)
    tic = time.perf_counter()
    report = run_participant(
        args.work / "fmriprep",
        out,
        atlas=sorted(args.work.glob("*_dseg.nii.gz"))[0],
        atlas_name="Blocks",
        strategy="simple",
        measures=args.measures.split(","),
        backend="serial",
        n_jobs=args.readers,
        device=args.device,
        reports=False,
        verbose=0,
        participant_label=[f"{i + 1:02d}" for i in range(args.runs)],
    )
    seconds = time.perf_counter() - tic
    statuses = sorted({r["status"] for r in report.records})
    print(f"{args.runs} runs ({', '.join(statuses)}), {args.measures}: {seconds:.1f} s", flush=True)
    for key in sorted(calls, key=lambda k: -sum(calls[k])):
        times = calls[key]
        print(
            f"  {key:40s} {sum(times) / args.runs * 1e3:8.1f} ms a run  ({len(times)} calls; "
            f"first {times[0] * 1e3:.1f} ms, median {statistics.median(times) * 1e3:.1f} ms)"
        )
    shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
