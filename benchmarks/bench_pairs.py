"""Region-pair DFC benchmark (Akgün et al.): the paper's grid.

Scans x regions x T = 316 time points, every region pair's sliding-window
correlation course for w in {32, 64} and s in {1, 2, 4, 8}, with 234 or 468
scans of 30 or 60 regions (32 configurations).

Columns
-------
* sequential: the paper's Algorithm 1 on one core - a Python loop over
  scans, pairs and windows with ``np.corrcoef`` per window. Far too slow to
  run in full (hours), so the cost of one call is measured per window length
  on a few thousand windows and multiplied by the number of correlations
  (marked "extrap."; every correlation is the same work, so the estimate is
  linear by construction). The paper's baseline was compiled C++, roughly
  two orders of magnitude faster per correlation than this Python loop, so
  speed-ups over it are NOT comparable with the paper's; the "1 core" column
  is the fair analogue of a compiled sequential code.
* ours, 1 core: ``pairwise_dfc`` with ``torch.set_num_threads(1)`` on the
  first scans (``--one-core-scans``), extrapolated linearly in scans
  (scans are independent).
* ours, CPU: ``pairwise_dfc(device='cpu')``, all cores.
* ours, CUDA: ``pairwise_dfc(device='cuda')`` from numpy input to numpy
  output (host->device, compute, device->host; as the paper timed its GPU
  runs), and with ``as_tensor=True`` (courses left on the GPU).
* floor (CUDA): output bytes over the measured device->host bandwidth.

The paper's speed-ups (GTX 660 over one AMD FX 8320 core): up to 157x
(block-based kernel, w = 64, s = 1); combined kernels 18.5-66x (w = 32) and
28-139x (w = 64); OpenMP on 8 cores 7.0-7.7x.

    python benchmarks/bench_pairs.py --device cuda
    python benchmarks/bench_pairs.py --device cpu --quick
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import time
from functools import partial

import numpy as np
import torch
from _measure import copy_bandwidth

from connscale.fc.pairs import pairwise_dfc
from connscale.fc.triu import n_pairs

N_TIMEPOINTS = 316
PAPER_RANGE = {32: "18.5-66x", 64: "28-139x (max 157x)"}


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def n_windows(t: int, w: int, s: int) -> int:
    return (t - w) // s + 1


def corrcoef_seconds_per_call(w: int, n_calls: int, rng) -> float:
    """Seconds per np.corrcoef of two length-w windows (the sequential loop's body)."""
    x = rng.standard_normal((N_TIMEPOINTS, 8))
    pairs = list(itertools.combinations(range(8), 2))
    calls = 0
    start = time.perf_counter()
    while calls < n_calls:
        for i, j in pairs:
            for onset in range(0, N_TIMEPOINTS - w + 1, 1):
                np.corrcoef(x[onset : onset + w, i], x[onset : onset + w, j])[0, 1]
                calls += 1
                if calls >= n_calls:
                    break
            if calls >= n_calls:
                break
    return (time.perf_counter() - start) / calls


def check_against_sequential(rng) -> float:
    """Max |ours - sequential loop| on a small case (float32 default)."""
    x = rng.standard_normal((2, N_TIMEPOINTS, 6)).astype(np.float32)
    ours = pairwise_dfc(x, 32, 4, device="cpu").courses
    worst = 0.0
    for s in range(2):
        for p, (i, j) in enumerate(itertools.combinations(range(6), 2)):
            for k, onset in enumerate(range(0, N_TIMEPOINTS - 32 + 1, 4)):
                ref = np.corrcoef(
                    x[s, onset : onset + 32, i].astype(np.float64),
                    x[s, onset : onset + 32, j].astype(np.float64),
                )[0, 1]
                worst = max(worst, abs(float(ours[s, p, k]) - ref))
    return worst


def time_call(fn, device: str, repeats: int) -> float:
    fn()  # warm-up (allocator, kernels, threads)
    _sync(device)
    times = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--device",
        default="cuda" if torch.cuda.is_available() else "cpu",
        help="'cpu' or 'cuda' (the CPU columns are measured either way).",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="A corner of the grid (234 scans, 30 regions, s in {1, 8}) for a small CPU machine.",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--one-core-scans",
        type=int,
        default=24,
        help="Scans timed on one core (then extrapolated).",
    )
    parser.add_argument(
        "--corrcoef-calls",
        type=int,
        default=4000,
        help="np.corrcoef calls timed per window length.",
    )
    parser.add_argument(
        "--skip-cpu", action="store_true", help="Skip the all-core CPU column (faster GPU runs)."
    )
    parser.add_argument("--json", default=None, help="Also write the rows as JSON here.")
    args = parser.parse_args(argv)
    device = args.device
    if device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("--device cuda but CUDA is not available")
    rng = np.random.default_rng(0)

    scans_grid = [234] if args.quick else [234, 468]
    regions_grid = [30] if args.quick else [30, 60]
    windows_grid = [32, 64]
    steps_grid = [1, 8] if args.quick else [1, 2, 4, 8]
    threads = torch.get_num_threads()
    gpu = torch.cuda.get_device_name() if device.startswith("cuda") else None
    print(
        f"# region-pair DFC benchmark: device={device}{f' ({gpu})' if gpu else ''}, "
        f"T={N_TIMEPOINTS}, float32, CPU threads={threads} (os.cpu_count={os.cpu_count()})",
        flush=True,
    )
    print(
        f"# max |ours - sequential np.corrcoef loop| (2 scans, 6 regions, w=32, s=4): "
        f"{check_against_sequential(rng):.2e}",
        flush=True,
    )
    per_call = {w: corrcoef_seconds_per_call(w, args.corrcoef_calls, rng) for w in windows_grid}
    for w, sec in per_call.items():
        print(f"# sequential loop: {sec * 1e6:.1f} us per np.corrcoef call (w={w})", flush=True)
    d2h = copy_bandwidth("d2h") if device.startswith("cuda") else None
    if d2h:
        print(f"# measured device->host into pinned memory: {d2h / 1e9:.1f} GB/s", flush=True)

    data = {
        (s, n): rng.standard_normal((s, N_TIMEPOINTS, n)).astype(np.float32)
        for s in scans_grid
        for n in regions_grid
    }
    rows = []
    for n_scans, n_regions, w, step in itertools.product(
        scans_grid, regions_grid, windows_grid, steps_grid
    ):
        x = data[(n_scans, n_regions)]
        k = n_windows(N_TIMEPOINTS, w, step)
        n_corr = n_scans * n_pairs(n_regions) * k
        row = {
            "scans": n_scans,
            "regions": n_regions,
            "w": w,
            "s": step,
            "windows": k,
            "correlations": n_corr,
            "sequential_s": n_corr * per_call[w],
        }
        # One core, on the first scans, extrapolated in scans.
        sub = x[: min(args.one_core_scans, n_scans)]
        torch.set_num_threads(1)
        try:
            one = time_call(
                partial(pairwise_dfc, sub, w, step, device="cpu"),
                "cpu",
                args.repeats if args.quick else 1,
            )
        finally:
            torch.set_num_threads(threads)
        row["one_core_s"] = one * n_scans / sub.shape[0]
        if not args.skip_cpu:
            row["cpu_s"] = time_call(
                partial(pairwise_dfc, x, w, step, device="cpu"),
                "cpu",
                1 if not args.quick else args.repeats,
            )
        if device.startswith("cuda"):
            row["cuda_s"] = time_call(
                partial(pairwise_dfc, x, w, step, device=device), device, args.repeats
            )
            row["cuda_on_device_s"] = time_call(
                partial(pairwise_dfc, x, w, step, device=device, as_tensor=True),
                device,
                args.repeats,
            )
            row["floor_s"] = n_corr * 4 / d2h
        rows.append(row)
        print(json.dumps(row), flush=True)
        if device.startswith("cuda"):
            torch.cuda.empty_cache()

    print()
    head = (
        "| scans | regions | w | s | windows | correlations | sequential loop, 1 core "
        "(extrap.) (s) | ours, 1 core (s) |"
    )
    sep = "|---|---|---|---|---|---|---|---|"
    if not args.skip_cpu:
        head += " ours, CPU all cores (s) | CPU vs loop | CPU vs ours 1 core |"
        sep += "---|---|---|"
    if device.startswith("cuda"):
        head += (
            " ours, CUDA host->host (s) | CUDA on-device (s) | floor (s) | CUDA vs loop "
            "| CUDA vs ours 1 core |"
        )
        sep += "---|---|---|---|---|"
    head += " paper GPU speed-up (range for this w) |"
    sep += "---|"
    print(head)
    print(sep)
    for r in rows:
        line = (
            f"| {r['scans']} | {r['regions']} | {r['w']} | {r['s']} | {r['windows']} | "
            f"{r['correlations']:,} | {r['sequential_s']:.1f} | {r['one_core_s']:.3f} |"
        )
        if "cpu_s" in r:
            line += (
                f" {r['cpu_s']:.3f} | {r['sequential_s'] / r['cpu_s']:,.0f}x | "
                f"{r['one_core_s'] / r['cpu_s']:.1f}x |"
            )
        if "cuda_s" in r:
            line += (
                f" {r['cuda_s']:.4f} | {r['cuda_on_device_s']:.4f} | {r['floor_s']:.4f} | "
                f"{r['sequential_s'] / r['cuda_s']:,.0f}x | "
                f"{r['one_core_s'] / r['cuda_s']:,.0f}x |"
            )
        line += f" {PAPER_RANGE[r['w']]} |"
        print(line)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
