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
    connscale side by side on the same file, ``--repeat`` times each, both
    times, the speed-up and the agreement (max |difference| over the whole
    matrix), the load average before each pair (other processes share the
    machine), and connscale's floors measured in the same run: the GEMM of
    the triangle (N² T (1 + 1/16) FLOP: 16 row blocks) at the rate measured
    for one block's product, and the fsynced sequential write of the file's
    size. connscale's time ends with its file fsynced and published;
    Workbench returns before its file reaches the disk, so its time is also
    given with an fsync of its file.
(c) ``--part c`` (the CPU): the pconn of a 400-parcel atlas from a 91k
    dtseries (T = 1,200), per run: read (the dtseries evicted from the page
    cache first, then read whole), parcellate (``parcellate_cifti``, label
    file read included), correlate (``parcel_correlation``) and write
    (``write_pconn``, atomic). The atlas: each structure of the 91k brain
    model split into parcels in proportion to its size, as runs of
    consecutive grayordinates (vertex order on the surfaces, voxel order in
    the volume) - roughly coherent in space; the times do not depend on the
    shapes of the parcels.

    python benchmarks/bench_cifti.py --part a --device cuda --folder /scratch
    python benchmarks/bench_cifti.py --part a --device cpu --n 2000 --timepoints 100  # a check
    python benchmarks/bench_cifti.py --part b --sizes 10000,20000 --repeat 2
    python benchmarks/bench_cifti.py --part c --repeat 3
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

from connscale._compute.gemm import gemm_nt
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
    """FLOP/s of a (B x T)(T x N) product like one block's, through connscale's GEMM.

    B = 8192 rows on CUDA; N / 16 on the CPU (the triangle's 16 row blocks).
    """
    cuda = str(device).startswith("cuda")
    rows = min(8192, n_cols) if cuda else -(-n_cols // 16)
    a = torch.randn(rows, t, device=device)
    b = torch.randn(n_cols, t, device=device)
    out = torch.empty(rows, n_cols, device=device)
    gemm_nt(a, b, out)
    _sync(device)
    reps = 5 if cuda else 3
    start = time.perf_counter()
    for _ in range(reps):
        gemm_nt(a, b, out)
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


def _wb_version(wb_command: str) -> str:
    version = subprocess.run([wb_command, "-version"], capture_output=True, text=True).stdout
    return next((line for line in version.splitlines() if "Version" in line), "").strip()


def _run_wb(wb_command: str, dtseries: Path, out: Path) -> tuple[float, float]:
    """Time ``wb_command -cifti-correlation``: as it returns, and with its file fsynced."""
    start = time.perf_counter()
    subprocess.run([wb_command, "-cifti-correlation", dtseries, out], check=True)
    returned = time.perf_counter() - start
    with open(out, "rb+") as fh:
        os.fsync(fh.fileno())
    return returned, time.perf_counter() - start


def part_b(args) -> list[dict]:
    wb_command = shutil.which("wb_command")
    if wb_command is None:
        raise SystemExit("wb_command (Connectome Workbench) is needed for part b.")
    version = _wb_version(wb_command)
    rows = []
    for n in args.sizes:
        folder = Path(tempfile.mkdtemp(prefix="bench_cifti_", dir=args.folder))
        try:
            dtseries = write_dtseries(folder, n, args.timepoints)
            rate = gemm_rate("cpu", n, args.timepoints)
            floors = {
                "gemm_floor_s": n * n * args.timepoints * (1 + 1 / 16) / rate,
                "write_floor_s": n * n * 4 / write_rate(folder, n * n * 4),
            }
            for repeat in range(args.repeat):
                load = os.getloadavg()[0]
                wb_seconds, wb_durable = _run_wb(wb_command, dtseries, folder / "wb.dconn.nii")
                start = time.perf_counter()
                cifti_correlation(dtseries, folder / "ours.dconn.nii", device="cpu")
                seconds = time.perf_counter() - start
                row = {
                    "part": "b",
                    "n": n,
                    "timepoints": args.timepoints,
                    "repeat": repeat,
                    "load_average_1min": load,
                    "wb_command": version,
                    "wb_command_s": wb_seconds,
                    "wb_command_fsynced_s": wb_durable,
                    "connscale_cpu_s": seconds,
                    "speedup": wb_seconds / seconds,
                    "speedup_both_fsynced": wb_durable / seconds,
                    **floors,
                    "gemm_gflops": rate / 1e9,
                    "max_abs_diff": max_difference(folder / "ours.dconn.nii",
                                                   folder / "wb.dconn.nii"),
                    "cpu_threads": torch.get_num_threads(),
                }  # fmt: skip
                print(json.dumps(row), flush=True)
                rows.append(row)
                for name in ("wb.dconn.nii", "ours.dconn.nii"):
                    (folder / name).unlink()
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return rows


def atlas_labels(brain_model, n_parcels: int = 400) -> tuple[np.ndarray, dict[int, str]]:
    """Split each structure into parcels in proportion to its size (part c's atlas).

    Parcels are runs of consecutive grayordinates of a structure (vertex
    order on the surfaces, voxel order in the volume): keys 1 .. n_parcels.
    """
    structures = list(brain_model.iter_structures())
    sizes = np.array([len(model) for _, _, model in structures], dtype=float)
    counts = np.maximum(1, np.round(sizes / sizes.sum() * n_parcels)).astype(int)
    counts[np.argmax(counts)] += n_parcels - counts.sum()
    labels = np.zeros(len(brain_model), dtype=np.int32)
    names: dict[int, str] = {}
    key = 1
    for (name, place, _), count in zip(structures, counts):
        short = str(name).removeprefix("CIFTI_STRUCTURE_")
        members_of = np.arange(len(brain_model))[place]
        for part, members in enumerate(np.array_split(members_of, count)):
            labels[members] = key
            names[key] = f"{short}_{part + 1}"
            key += 1
    return labels, names


def _evict(path: Path) -> None:
    """Drop a file's pages from the page cache (the next read comes from disk)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def part_c(args) -> list[dict]:
    from dataclasses import replace

    from connscale.cifti import parcel_correlation, parcellate_cifti
    from connscale.io.cifti import read_cifti_series, write_dlabel, write_pconn

    folder = Path(tempfile.mkdtemp(prefix="bench_cifti_", dir=args.folder))
    rows = []
    try:
        dtseries = write_dtseries(folder, args.n, args.timepoints)
        brain_model = nib.load(ONES_DSCALAR).header.get_axis(1)[: args.n]
        labels, names = atlas_labels(brain_model, args.parcels)
        dlabel = write_dlabel(folder / "atlas.dlabel.nii", brain_model, labels, names)
        for repeat in range(args.repeat):
            _evict(dtseries)
            times = {}
            start = time.perf_counter()
            series = read_cifti_series(dtseries)
            series = replace(series, data=np.array(series.data))  # read whole
            times["read_s"] = time.perf_counter() - start
            mark = time.perf_counter()
            parcels = parcellate_cifti(series, dlabel, device=args.device)
            times["parcellate_s"] = time.perf_counter() - mark
            mark = time.perf_counter()
            matrix = parcel_correlation(parcels.data, device=args.device)
            times["correlate_s"] = time.perf_counter() - mark
            mark = time.perf_counter()
            write_pconn(folder / "atlas.pconn.nii", parcels.parcels, matrix)
            times["write_s"] = time.perf_counter() - mark
            row = {
                "part": "c",
                "device": args.device,
                "n": args.n,
                "timepoints": args.timepoints,
                "n_parcels": len(parcels.names),
                "repeat": repeat,
                "load_average_1min": os.getloadavg()[0],
                "seconds": time.perf_counter() - start,
                **times,
                "dtseries_gb": dtseries.stat().st_size / 1e9,
            }
            print(json.dumps(row), flush=True)
            rows.append(row)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return rows


def _print_table(part: str, rows: list[dict]) -> None:
    if part == "a":
        print("| device | N | T | GB | time s | GEMM s | PCIe s | write s | binds | ratio |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            pcie = f"{r['pcie_copy_s']:.2f}" if "pcie_copy_s" in r else "-"
            print(f"| {r['device']} | {r['n']} | {r['timepoints']} | {r['output_gb']:.1f} | "
                  f"{r['seconds']:.2f} | {r['gemm_s']:.2f} | {pcie} | {r['write_s']:.2f} | "
                  f"{r['binds']} | {r['ratio_to_floor']:.2f} |")  # fmt: skip
    elif part == "b":
        print("| N | T | load | wb_command s (+fsync) | connscale CPU s | speed-up (both fsynced) "
              "| GEMM floor s (GF/s) | write floor s | max abs diff |")  # fmt: skip
        print("|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['n']} | {r['timepoints']} | {r['load_average_1min']:.1f} | "
                  f"{r['wb_command_s']:.1f} ({r['wb_command_fsynced_s']:.1f}) | "
                  f"{r['connscale_cpu_s']:.2f} | {r['speedup']:.1f}x "
                  f"({r['speedup_both_fsynced']:.1f}x) | {r['gemm_floor_s']:.2f} "
                  f"({r['gemm_gflops']:.0f}) | {r['write_floor_s']:.2f} | "
                  f"{r['max_abs_diff']:.1e} |")  # fmt: skip
    else:
        print("| device | N | T | parcels | load | total s | read s | parcellate s | correlate s "
              "| write s |")  # fmt: skip
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['device']} | {r['n']} | {r['timepoints']} | {r['n_parcels']} | "
                  f"{r['load_average_1min']:.1f} | {r['seconds']:.2f} | {r['read_s']:.2f} | "
                  f"{r['parcellate_s']:.2f} | {r['correlate_s']:.3f} | "
                  f"{r['write_s']:.3f} |")  # fmt: skip


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--part", choices=("a", "b", "c"), required=True)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--n", type=int, default=91_282, help="(a, c) grayordinates.")
    parser.add_argument("--sizes", type=lambda s: [int(v) for v in s.split(",")],
                        default=[10_000, 20_000], help="(b) grayordinates.")  # fmt: skip
    parser.add_argument("--timepoints", type=int, default=1200)
    parser.add_argument("--repeat", type=int, default=2, help="(b, c) runs of each size.")
    parser.add_argument("--parcels", type=int, default=400, help="(c) parcels of the atlas.")
    parser.add_argument("--memory-limit", default=None, help="(a) connscale's memory_limit.")
    parser.add_argument("--folder", default=None, help="Where the files go (33 GB for (a)).")
    parser.add_argument("--json", default=None, help="Also write the rows as JSON here.")
    args = parser.parse_args(argv)
    rows = {"a": lambda: [part_a(args)], "b": lambda: part_b(args), "c": lambda: part_c(args)}
    rows = rows[args.part]()
    print()
    _print_table(args.part, rows)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()
