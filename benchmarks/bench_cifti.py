"""CIFTI benchmark: the dense connectome of grayordinates, dtseries on disk to a published dconn.

(a) ``--part a`` (a GPU host): the 91,282 x 91,282 dconn of an HCP-sized run
    (T = 1,200 simulated series on the exact 91k brain model of
    ``tests/data/cifti/ones.dscalar.nii``), from the ``.dtseries.nii`` on disk
    to the published ``.dconn.nii`` (written, fsynced, renamed), beside its
    floors measured in the same run:

        floor = max(GEMM of the matrix at the measured GEMM rate,
                    device->host copy of the 33.3 GB at the measured pinned bandwidth,
                    sequential write of a same-size file with fsync at the measured rate)

    and which of them binds, and the ratio time / floor.
(b) ``--part b`` (the CPU): N = 10,000 and 20,000 grayordinates (the first N
    of the 91k model), T = 1,200: ``wb_command -cifti-correlation`` and
    connscale side by side on the same file, both times, the speed-up and the
    agreement (max |difference| over the whole matrix). connscale's time ends with
    its file fsynced and published; Workbench returns before its file reaches
    the disk, so its time is also given with an fsync of its file.

(c), the pconn of a 400-parcel atlas, needs ``connscale.cifti.parcellate``
(another branch) and is not measured here.

    python benchmarks/bench_cifti.py --part a --device cuda --folder /scratch
    python benchmarks/bench_cifti.py --part a --device cpu --n 2000 --timepoints 100  # a check
    python benchmarks/bench_cifti.py --part b --sizes 10000,20000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import nibabel as nib
import numpy as np
import torch
from nibabel.cifti2 import Cifti2Image, SeriesAxis

from connscale.cifti import cifti_correlation
from connscale.datasets import simulate_timeseries

ONES_DSCALAR = Path(__file__).resolve().parents[1] / "tests" / "data" / "cifti" / "ones.dscalar.nii"


def _sync(device):
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def write_dtseries(folder: Path, n: int, t: int, seed: int = 0) -> Path:
    """Write T simulated series on the first ``n`` grayordinates of the 91k brain model."""
    brain_model = nib.load(ONES_DSCALAR).header.get_axis(1)[:n]
    x, _ = simulate_timeseries(t, n, n_blocks=40, random_state=seed)
    path = folder / f"sim_n{n}_t{t}.dtseries.nii"
    Cifti2Image(x, header=(SeriesAxis(0, 0.72, t, unit="SECOND"), brain_model)).to_filename(path)
    return path


def gemm_rate(device, n_cols: int, t: int) -> float:
    """FLOP/s of a (B x T)(T x N) product like one block's."""
    rows = min(8192, n_cols)
    a = torch.randn(rows, t, device=device)
    b = torch.randn(n_cols, t, device=device)
    out = torch.empty(rows, n_cols, device=device)
    torch.mm(a, b.T, out=out)
    _sync(device)
    reps = 5 if str(device).startswith("cuda") else 2
    start = time.perf_counter()
    for _ in range(reps):
        torch.mm(a, b.T, out=out)
    _sync(device)
    return 2.0 * rows * n_cols * t * reps / (time.perf_counter() - start)


def copy_rate(nbytes: int = 1 << 30) -> float:
    """Bytes/s of a device->host copy into pinned memory."""
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    host.copy_(dev, non_blocking=True)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(3):
        host.copy_(dev, non_blocking=True)
    torch.cuda.synchronize()
    return 3 * nbytes / (time.perf_counter() - start)


def write_rate(folder: Path, nbytes: int, chunk: int = 1 << 28) -> float:
    """Bytes/s of a sequential write of ``nbytes`` (a same-size file) with fsync."""
    buffer = np.full(chunk // 4, 0.5, dtype=np.float32).view(np.uint8)
    path = folder / "write_floor.bin"
    start = time.perf_counter()
    with open(path, "wb", buffering=0) as fh:
        left = nbytes
        while left > 0:
            fh.write(memoryview(buffer)[: min(chunk, left)])
            left -= chunk
        os.fsync(fh.fileno())
    seconds = time.perf_counter() - start
    path.unlink()
    return nbytes / seconds


def max_difference(a_path: Path, b_path: Path, rows: int = 2048) -> float:
    """Max |a - b| over two matrix files of the same shape, read in row blocks."""
    a, b = nib.load(a_path).dataobj, nib.load(b_path).dataobj
    worst = 0.0
    for r0 in range(0, a.shape[0], rows):
        diff = np.abs(np.asarray(a[r0 : r0 + rows], np.float64) - np.asarray(b[r0 : r0 + rows]))
        worst = max(worst, float(np.nanmax(diff)))
    return worst


def sampled_difference(dconn: Path, dtseries: Path, n_rows: int = 8) -> float:
    """Max |dconn - numpy float64| over a few sampled rows."""
    x = np.asarray(nib.load(dtseries).dataobj, np.float64)
    x = (x - x.mean(0)) / np.linalg.norm(x - x.mean(0), axis=0)
    rows = np.linspace(0, x.shape[1] - 1, n_rows).astype(int)
    expected = np.clip(x[:, rows].T @ x, -1, 1)
    expected[np.arange(n_rows), rows] = 1.0
    data = nib.load(dconn).dataobj
    got = np.stack([np.asarray(data[:, row], np.float64) for row in rows])
    return float(np.abs(got - expected).max())


def part_a(args) -> dict:
    folder = Path(tempfile.mkdtemp(prefix="bench_cifti_", dir=args.folder))
    try:
        dtseries = write_dtseries(folder, args.n, args.timepoints)
        out_bytes = args.n * args.n * 4
        device = torch.device(args.device)
        cuda = device.type == "cuda"
        rate = gemm_rate(device, args.n, args.timepoints)
        # CUDA computes full rows; the CPU the triangle once (half the products).
        flops = (2.0 if cuda else 1.0) * args.n * args.n * args.timepoints
        floors = {"gemm_s": flops / rate, "write_s": out_bytes / write_rate(folder, out_bytes)}
        if cuda:
            floors["pcie_copy_s"] = out_bytes / copy_rate()
        start = time.perf_counter()
        result = cifti_correlation(dtseries, folder / "sim.dconn.nii", device=args.device,
                                   memory_limit=args.memory_limit)  # fmt: skip
        seconds = time.perf_counter() - start
        floor_name = max(floors, key=floors.get)
        row = {
            "part": "a",
            "device": torch.cuda.get_device_name(device) if cuda else "cpu",
            "n": args.n,
            "timepoints": args.timepoints,
            "output_gb": out_bytes / 1e9,
            "seconds": seconds,
            **floors,
            "gemm_tflops": rate / 1e12,
            "binds": floor_name,
            "ratio_to_floor": seconds / floors[floor_name],
            "n_rounds": result.plan.n_rounds,
            "max_abs_diff_sampled_rows_vs_numpy": sampled_difference(result.path, dtseries),
        }
        print(json.dumps(row), flush=True)
        return row
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def part_b(args) -> list[dict]:
    wb_command = shutil.which("wb_command")
    if wb_command is None:
        raise SystemExit("wb_command (Connectome Workbench) is needed for part b.")
    version = subprocess.run([wb_command, "-version"], capture_output=True, text=True).stdout
    version = next((line for line in version.splitlines() if "Version" in line), "").strip()
    rows = []
    for n in args.sizes:
        folder = Path(tempfile.mkdtemp(prefix="bench_cifti_", dir=args.folder))
        try:
            dtseries = write_dtseries(folder, n, args.timepoints)
            start = time.perf_counter()
            subprocess.run([wb_command, "-cifti-correlation", dtseries, folder / "wb.dconn.nii"],
                           check=True)  # fmt: skip
            wb_seconds = time.perf_counter() - start
            # connscale publishes a durable file (fsync); Workbench returns before that.
            with open(folder / "wb.dconn.nii", "rb+") as fh:
                os.fsync(fh.fileno())
            wb_durable = time.perf_counter() - start
            start = time.perf_counter()
            cifti_correlation(dtseries, folder / "ours.dconn.nii", device="cpu")
            seconds = time.perf_counter() - start
            row = {
                "part": "b",
                "n": n,
                "timepoints": args.timepoints,
                "wb_command": version,
                "wb_command_s": wb_seconds,
                "wb_command_fsynced_s": wb_durable,
                "connscale_cpu_s": seconds,
                "speedup": wb_seconds / seconds,
                "speedup_both_fsynced": wb_durable / seconds,
                "max_abs_diff": max_difference(folder / "ours.dconn.nii", folder / "wb.dconn.nii"),
                "cpu_threads": torch.get_num_threads(),
            }
            print(json.dumps(row), flush=True)
            rows.append(row)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--part", choices=("a", "b"), required=True)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--n", type=int, default=91_282, help="(a) grayordinates.")
    parser.add_argument("--sizes", type=lambda s: [int(v) for v in s.split(",")],
                        default=[10_000, 20_000], help="(b) grayordinates.")  # fmt: skip
    parser.add_argument("--timepoints", type=int, default=1200)
    parser.add_argument("--memory-limit", default=None, help="(a) connscale's memory_limit.")
    parser.add_argument("--folder", default=None, help="Where the files go (33 GB for (a)).")
    parser.add_argument("--json", default=None, help="Also write the rows as JSON here.")
    args = parser.parse_args(argv)
    rows = [part_a(args)] if args.part == "a" else part_b(args)
    print()
    if args.part == "a":
        print("| device | N | T | GB | time s | GEMM s | PCIe s | write s | binds | ratio |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            pcie = f"{r['pcie_copy_s']:.2f}" if "pcie_copy_s" in r else "-"
            print(f"| {r['device']} | {r['n']} | {r['timepoints']} | {r['output_gb']:.1f} | "
                  f"{r['seconds']:.2f} | {r['gemm_s']:.2f} | {pcie} | {r['write_s']:.2f} | "
                  f"{r['binds']} | {r['ratio_to_floor']:.2f} |")  # fmt: skip
    else:
        print("| N | T | wb_command s (+fsync) | connscale CPU s | speed-up (both fsynced) | "
              "max abs diff |")  # fmt: skip
        print("|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['n']} | {r['timepoints']} | {r['wb_command_s']:.1f} "
                  f"({r['wb_command_fsynced_s']:.1f}) | {r['connscale_cpu_s']:.1f} | "
                  f"{r['speedup']:.1f}x ({r['speedup_both_fsynced']:.1f}x) | "
                  f"{r['max_abs_diff']:.1e} |")  # fmt: skip
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()
