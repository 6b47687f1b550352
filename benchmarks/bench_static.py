"""Static FC benchmark (Fast-GPU-PCC workload): all-pairs Pearson correlation.

Times ``connscale.correlation(kind="triu")`` from time series in host memory
to the full upper triangle in host memory (the output array is allocated
beforehand and excluded, as the peer is timed), for N series of T = 257
points, and prints it beside the device floor:

    floor = max(GEMM time of the triangle at the measured GEMM rate,
                device->host copy of the output at the measured bandwidth)

On the CPU the baseline is ``np.corrcoef`` (float64, full matrix) where it
fits in memory, and a streamed run (HDF5 ``out=``, ``memory_limit='2GB'``)
is measured for peak memory in a child process.

    python benchmarks/bench_static.py --device cuda
    python benchmarks/bench_static.py --device cpu --quick
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from _measure import copy_bandwidth

import connscale
from connscale.datasets import simulate_timeseries
from connscale.fc.triu import n_pairs

# Fast-GPU-PCC measured on the same H100 (shared/PERFORMANCE.md), seconds.
PEER = {30000: 0.426, 90000: 3.12}


def _sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def measure_gemm_rate(device, n_cols, t, dtype=torch.float32):
    """FLOP/s of a (B x T)(T x N) product like one round's."""
    rows = min(8192, n_cols)
    a = torch.randn(rows, t, device=device, dtype=dtype)
    b = torch.randn(n_cols, t, device=device, dtype=dtype)
    out = torch.empty(rows, n_cols, device=device, dtype=dtype)
    torch.mm(a, b.T, out=out)
    _sync(device)
    reps = 5 if device.startswith("cuda") else 2
    start = time.perf_counter()
    for _ in range(reps):
        torch.mm(a, b.T, out=out)
    _sync(device)
    seconds = (time.perf_counter() - start) / reps
    return 2.0 * rows * n_cols * t / seconds


def time_ours(x, device, out, repeats):
    times = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        connscale.correlation(x, kind="triu", device=device, out=out)
        _sync(device)
        times.append(time.perf_counter() - start)
    return min(times), times


def peak_memory_child(n, t, memory_limit, device):
    """Run one streamed correlation in a child process; return (s, peak RSS bytes)."""
    code = f"""
import time, tempfile, os, numpy as np, connscale
from connscale.datasets import simulate_timeseries
x, _ = simulate_timeseries({t}, {n}, random_state=0)
with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as d:
    start = time.perf_counter()
    connscale.correlation(x, kind="triu", device="{device}", out=os.path.join(d, "r_relmat.h5"),
                          memory_limit="{memory_limit}")
    seconds = time.perf_counter() - start
# VmHWM: this process's own peak (ru_maxrss would include the forked parent's).
peak = [int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM")][0]
print(seconds, peak)
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    seconds, peak = result.stdout.split()
    return float(seconds), int(peak)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--sizes", type=lambda s: [int(v) for v in s.split(",")], default=None)
    parser.add_argument("--timepoints", type=int, default=257)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="CPU sizes for a 2-core machine.")
    parser.add_argument("--skip-streamed", action="store_true")
    parser.add_argument("--json", default=None, help="Also write the rows as JSON here.")
    args = parser.parse_args(argv)
    device, t = args.device, args.timepoints
    cuda = device.startswith("cuda")
    sizes = args.sizes or (
        [5000, 20000, 30000, 50000, 90000]
        if cuda
        else [5000, 10000, 20000]
        if args.quick
        else [5000, 20000, 50000, 90000]
    )
    print(
        f"# static FC benchmark: device={device} "
        f"({torch.cuda.get_device_name() if cuda else os.cpu_count()} "
        f"{'' if cuda else 'cores'}), T={t}, float32, TF32 off, torch {torch.__version__}",
        flush=True,
    )
    # warm up (CUDA context, Triton compilation, BLAS threads)
    warm, _ = simulate_timeseries(t, 2000, random_state=1)
    connscale.correlation(warm, kind="triu", device=device)
    d2h = copy_bandwidth("d2h") if cuda else None
    if cuda:
        print(f"# measured device->host into pinned memory: {d2h / 1e9:.1f} GB/s", flush=True)
    rows = []
    for n in sizes:
        out_bytes = n_pairs(n) * 4
        if not cuda and out_bytes > 0.5 * connscale._compute.available_host_memory():
            print(
                f"# N={n}: triangle ({out_bytes / 1e9:.1f} GB) does not fit host memory; "
                "see the streamed run",
                flush=True,
            )
            continue
        x, _ = simulate_timeseries(t, n, random_state=0)
        rate = measure_gemm_rate(device, n, t)
        gemm_s = n * n * t / rate  # triangle: N(N-1)/2 dot products of 2T flops
        floor = max(gemm_s, out_bytes / d2h) if cuda else gemm_s
        out = torch.empty(n_pairs(n), dtype=torch.float32, pin_memory=cuda)
        best, _ = time_ours(
            x, device, out, args.repeats if n <= 50000 else max(2, args.repeats - 1)
        )
        row = {
            "N": n,
            "T": t,
            "device": device,
            "seconds": best,
            "gflops": n * n * t / best / 1e9,
            "out_GBps": out_bytes / best / 1e9,
            "floor_s": floor,
            "ratio_to_floor": best / floor,
            "gemm_TFLOPs_measured": rate / 1e12,
        }
        if n in PEER and cuda:
            row["peer_s"] = PEER[n]
            row["speedup_vs_peer"] = PEER[n] / best
        if not cuda and n * n * 8 * 3 < 0.6 * connscale._compute.available_host_memory():
            x64 = x.astype(np.float64)
            start = time.perf_counter()
            np.corrcoef(x64.T)
            row["corrcoef_s"] = time.perf_counter() - start
            row["speedup_vs_corrcoef"] = row["corrcoef_s"] / best
        del out
        rows.append(row)
        print(json.dumps(row), flush=True)
    streamed = None
    if not args.skip_streamed:
        n = 50000
        with tempfile.TemporaryDirectory() as tmp:
            os.environ.setdefault("BENCH_TMP", tmp)
            seconds, peak = peak_memory_child(n, t, "2GB", device)
        streamed = {
            "N": n,
            "seconds": seconds,
            "peak_rss_GB": peak / 1e9,
            "out_GB": n_pairs(n) * 4 / 1e9,
        }
        print(json.dumps({"streamed_hdf5": streamed}), flush=True)

    print()
    print(
        "| N | T | device | time (s) | GFLOP/s | output GB/s | floor (s) | time / floor "
        "| peer or np.corrcoef (s) | speed-up |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        base = r.get("peer_s", r.get("corrcoef_s"))
        speed = r.get("speedup_vs_peer", r.get("speedup_vs_corrcoef"))
        print(
            f"| {r['N']:,} | {r['T']} | {r['device']} | {r['seconds']:.3f} | {r['gflops']:.0f} "
            f"| {r['out_GBps']:.1f} | {r['floor_s']:.3f} | {r['ratio_to_floor']:.2f} "
            f"| {'' if base is None else f'{base:.3f}'} "
            f"| {'' if speed is None else f'{speed:.1f}x'} |"
        )
    if streamed:
        print(
            f"\nStreamed to HDF5 (N={streamed['N']:,}, memory_limit=2GB, "
            f"{streamed['out_GB']:.1f} GB written): {streamed['seconds']:.1f} s, "
            f"peak RSS {streamed['peak_rss_GB']:.2f} GB"
        )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"rows": rows, "streamed": streamed}, fh, indent=2)


if __name__ == "__main__":
    main()
