"""Sparse DFC on CUDA (GPU-DFC's Table II case): every compaction method of
``connscale.fc._sparse_cuda`` per window (CUDA events), checked against the
two-read kernels entry for entry on one window, then end to end.

``python benchmarks/sweep_sparse_dfc.py [--methods NAME ...] [--full] [--layout L]``
(N = 30,697, T = 257, w = 150, θ = 0.5; ``--voxels`` for less). Variants:
``two-reads``, ``two-reads-side``, ``one-read:BM:WARPS``,
``lookback:CHUNK:WARPS:LOOK``. Each layout of ``--layout`` (``block``: the
simulation's order; ``permuted``: its series permuted by a fixed seed; default
both, see ``_layouts.py``) is swept in turn; every row names its layout, and
whole runs (``--full``) report the exact path's confirmation counts.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
import _layouts  # noqa: E402
import bench_dynamic  # noqa: E402

from connscale.fc import _sparse_cuda, _tiles  # noqa: E402
from connscale.fc.normalize import normalize_series  # noqa: E402

DEFAULT = [
    "two-reads",
    "two-reads-side",
    "one-read:64:4",
    "one-read:16:4",
    "one-read:32:8",
    "lookback:4096:4:32",
    "lookback:2048:4:32",
    "lookback:8192:8:32",
    "lookback:4096:8:32",
]


def select(variant, max_spins):
    name, *args = variant.split(":")
    _sparse_cuda.METHOD = name
    if name == "one-read":
        _sparse_cuda.OPTIONS["one-read"] = {"block_m": int(args[0]), "num_warps": int(args[1])}
    elif name == "lookback":
        _sparse_cuda.OPTIONS["lookback"] = {
            "chunk": int(args[0]),
            "num_warps": int(args[1]),
            "look": int(args[2]),
            "max_spins": max_spins,
        }


def one_window(u, variant, tile_rows, threshold, reps, max_spins):
    select(variant, max_spins)
    windows = _sparse_cuda.SparseWindowsCUDA(u.shape[0], tile_rows, threshold, False, submit=None)
    capacity = u.shape[0] * (u.shape[0] - 1) // 2 // 8
    for _ in range(2):  # compile, warm up
        out = windows._queue(u, capacity)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        out = windows._queue(u, capacity)
    end.record()
    torch.cuda.synchronize()
    values, columns, row_counts, nnz_host, _ = out
    nnz = int(nnz_host[0])
    assert int(nnz_host[1]) == 0, "look-back gave up"
    return start.elapsed_time(end) / reps, (
        values[:nnz].clone(),
        columns[:nnz].clone(),
        row_counts.clone(),
    )


def gemm_only(u, block_rows, reps):
    buffers = _tiles.block_buffers(u.shape[0], block_rows, dtype=u.dtype, device=u.device)
    side = torch.cuda.Stream()
    for _ in range(2):
        _tiles.walk_row_blocks(u, block_rows, lambda *a: None, buffers=buffers, side=side)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        _tiles.walk_row_blocks(u, block_rows, lambda *a: None, buffers=buffers, side=side)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--methods", nargs="*", default=DEFAULT)
    parser.add_argument("--voxels", type=int, default=30697)
    parser.add_argument("--full", action="store_true", help="Also time whole runs.")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--max-spins", type=int, default=1 << 16)
    parser.add_argument(
        "--layout",
        default="all",
        type=lambda s: _layouts.parse_layouts(s, ("block", "permuted")),
        help="block, permuted (the series permuted by a fixed seed) or all (default).",
    )
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    x = bench_dynamic.simulate(257, args.voxels)
    perm = _layouts.permutation(args.voxels)
    for layout in args.layout:
        series = x if layout == "block" else np.ascontiguousarray(x[:, perm])
        sweep(series, layout, args)


def sweep(x, layout, args):
    """Every variant on one window, then (``--full``) whole runs, of one layout."""
    t, n = x.shape
    w, theta = 150, 0.5
    u, _ = normalize_series(torch.from_numpy(x[:w]).cuda(), dtype=torch.float32)
    tile_rows = 4096
    print(
        json.dumps(
            {
                "layout": layout,
                "gemm_only_ms_2048": gemm_only(u, 2048, args.reps),
                "gemm_only_ms_4096": gemm_only(u, 4096, args.reps),
            }
        ),
        flush=True,
    )
    reference = None
    for variant in args.methods:
        try:
            ms, csr = one_window(u, variant, tile_rows, theta, args.reps, args.max_spins)
        except Exception as exc:  # report and go on with the others
            print(
                json.dumps({"layout": layout, "variant": variant, "error": repr(exc)[:300]}),
                flush=True,
            )
            continue
        if reference is None:
            reference = csr
        same = all(torch.equal(a, b) for a, b in zip(csr, reference))
        print(
            json.dumps(
                {
                    "layout": layout,
                    "variant": variant,
                    "window_ms": round(ms, 3),
                    "nnz": csr[0].numel(),
                    "same_csr_as_first": same,
                }
            ),
            flush=True,
        )
    if not args.full:
        return
    rate = bench_dynamic.measure_gemm_rate("cuda", n, w, batch=1)
    k = t - w + 1
    floor = k * n * n * w / rate
    arena = bench_dynamic.allocate_arena(1.2 * k * (n * n // 2 * 0.0277 * 8 + 4096), "cuda")
    for variant in args.methods:
        select(variant, args.max_spins)
        try:
            seconds, result = bench_dynamic.time_run(
                x, w, 1, "cuda", 1, kind="sparse", threshold=theta, host_buffer=arena
            )
        except Exception as exc:
            print(
                json.dumps({"layout": layout, "variant": variant, "error": repr(exc)[:300]}),
                flush=True,
            )
            continue
        confirmation = getattr(result, "confirmation", None)
        print(
            json.dumps(
                {
                    "layout": layout,
                    "variant": variant,
                    "seconds": round(seconds, 4),
                    "floor_s": round(floor, 4),
                    "ratio": round(seconds / floor, 3),
                    "gemm_TFLOPs": round(rate / 1e12, 2),
                    "windows": k,
                    "nnz_last": result[k - 1].nnz,
                    "tile_rows": result.plan.block_rows,
                    "exact_confirmation": _layouts.confirmation_counts(confirmation),
                }
            ),
            flush=True,
        )
        del result


if __name__ == "__main__":
    start = time.perf_counter()
    main()
    print(f"# {time.perf_counter() - start:.1f} s", flush=True)
