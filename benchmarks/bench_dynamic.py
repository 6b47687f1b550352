"""Dynamic FC benchmark (GPU-DFC workloads, Tables I, II, III and V).

Times ``connscale.dynamic_correlation`` over the span the peer times: time
series in host memory -> every window's result in host memory. As for the
peer, the output memory is allocated beforehand and excluded (one pinned
host buffer, passed as ``host_buffer=``, reused by every run); the ``out=``
variant (HDF5 on local disk, bounded by the disk) is timed too for the two
headline cases. Each case runs once to warm up, then ``--repeats`` times
(best reported).

    floor = max(GEMM time at the measured batched GEMM rate,
                device->host copy of the output at the measured pinned bandwidth)

(upper-triangle GEMM only for the sparse case). Synthetic data: planted
block-factor structure, 20 networks, 76 % of the series in networks, so that
~2.9 % of pairs have r >= 0.5 at w = 150 (as in shared/PERFORMANCE.md).

Table II (thresholded) runs on each layout of ``--layout`` (``_layouts.py``):
``block``, the simulation's order (networks in contiguous index blocks,
favourable to the exact scheme), and ``permuted``, the same array with its
series permuted by a fixed seed (as real masks spread every network over
the index range); every row names its layout. Its w = 150, θ = 0.5 case
also times fp32 (and TF32 on CUDA) beside the default ``precision='exact'``,
reports the exact run's confirmation counts, and checks a few windows
(``--check-windows``, not timed): each path's kept pairs against float64's
r >= θ (pairs dropped and added, and how far from θ), fp32's against
exact's, and ``permuted``'s, mapped back, against ``block``'s.

    python benchmarks/bench_dynamic.py --device cuda          # full sizes, H100
    python benchmarks/bench_dynamic.py --device cuda --tables 2 --cases 150:0.5  # issue 26
    python benchmarks/bench_dynamic.py --device cpu --quick   # reduced sizes
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from dataclasses import dataclass, field

import _layouts
import numpy as np
import torch
from _measure import copy_bandwidth

import connscale
from connscale._compute import available_host_memory
from connscale.datasets import simulate_timeseries
from connscale.fc import _sparse_cuda
from connscale.fc.triu import n_pairs

# GPU-DFC paper (Tesla K40), seconds: Table I (GPU-DFC column), Table II, Table V.
PAPER_TABLE1 = {
    (500, 50): 0.34,
    (500, 100): 0.31,
    (500, 150): 0.25,
    (1000, 50): 0.54,
    (1000, 100): 0.47,
    (1000, 150): 0.28,
    (2000, 50): 1.44,
    (2000, 100): 1.09,
    (2000, 150): 0.36,
    (3000, 50): 2.9,
    (3000, 100): 1.6,
    (3000, 150): 0.68,
    (5000, 50): 7.8,
    (5000, 100): 2.9,
    (5000, 150): 2.04,
}
# ... and its sequential CPU column (two Xeon E5-2620, one core).
PAPER_TABLE1_CPU = {
    (500, 50): 3.1,
    (500, 100): 4.07,
    (500, 150): 3.049,
    (1000, 50): 12.8,
    (1000, 100): 16.3,
    (1000, 150): 12.21,
    (2000, 50): 51.43,
    (2000, 100): 65.31,
    (2000, 150): 48.88,
    (3000, 50): 115.06,
    (3000, 100): 147.06,
    (3000, 150): 110,
    (5000, 50): 319.79,
    (5000, 100): 408.24,
    (5000, 150): 305.59,
}
PAPER_TABLE2 = {
    (50, 0.3): 148,
    (100, 0.3): 86.33,
    (150, 0.3): 53.561,
    (50, 0.5): 81.56,
    (100, 0.5): 53.19,
    (150, 0.5): 40.54,
    (50, 0.7): 63.46,
    (100, 0.7): 51.76,
    (150, 0.7): 38.92,
}
PAPER_TABLE3 = {64: (0.002, 239), 85: (1.3e-7, 180), 128: (5.8e-8, 119), 257: (3.77e-8, 59)}
PAPER_TABLE5 = {50: 125.8, 75: 137.16, 100: 142.2}
# GPU-DFC run on the same H100 (shared/PERFORMANCE.md), seconds.
PEER_H100 = {("triu", 5000, 50): 5.74, ("triu", 5000, 150): 2.29, ("sparse", 150, 0.5): 11.32}


def _sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _print(*args):
    print(*args, flush=True)


def simulate(t, n, seed=0):
    x, _ = simulate_timeseries(
        t, n, n_blocks=20, block_correlation=0.6, fraction_in_blocks=0.76, random_state=seed
    )
    return x


def measure_gemm_rate(device, n, w, batch):
    """FLOP/s of a batched U Uᵀ like ours (B windows of N x w)."""
    rows = min(n, 8192)
    batch = max(1, min(batch, (1 << 28) // (rows * n)))
    u = torch.randn(batch, rows, w, device=device)
    v = torch.randn(batch, n, w, device=device)
    torch.bmm(u, v.transpose(1, 2))
    _sync(device)
    reps = 5 if device.startswith("cuda") else 2
    start = time.perf_counter()
    for _ in range(reps):
        torch.bmm(u, v.transpose(1, 2))
    _sync(device)
    return 2.0 * batch * rows * n * w * reps / (time.perf_counter() - start)


def allocate_arena(nbytes, device):
    """One host buffer for every run (pinned on CUDA), touched once."""
    cuda = device.startswith("cuda")
    start = time.perf_counter()
    nbytes = int(nbytes)
    while True:
        try:
            arena = torch.empty(nbytes, dtype=torch.uint8, pin_memory=cuda)
            break
        except RuntimeError as exc:  # pinned allocations can be limited
            if nbytes < (1 << 30):
                raise
            _print(
                f"# could not allocate {nbytes / 1e9:.1f} GB ({exc}); halving "
                "(windows that do not fit go to ordinary arrays)"
            )
            nbytes //= 2
    arena.zero_()
    _print(
        f"# host buffer: {nbytes / 1e9:.2f} GB {'pinned ' if cuda else ''}allocated in "
        f"{time.perf_counter() - start:.1f} s (excluded from the timings)"
    )
    return arena


def time_run(x, w, s, device, repeats, **kwargs):
    times = []
    result = None
    for _ in range(repeats + 1):  # the first run warms up
        result = None
        _sync(device)
        start = time.perf_counter()
        result = connscale.dynamic_correlation(x, w, s, device=device, **kwargs)
        _sync(device)
        times.append(time.perf_counter() - start)
    return min(times[1:]), result


def time_out_variant(x, w, s, device, **kwargs):
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        path = os.path.join(tmp, "dfc.h5")
        _sync(device)
        start = time.perf_counter()
        result = connscale.dynamic_correlation(x, w, s, device=device, out=path, **kwargs)
        seconds = time.perf_counter() - start
        size = os.path.getsize(path)
        result.close()
    return seconds, size


def table1(args, device, d2h, rows_out):
    cuda = device.startswith("cuda")
    sizes = args.regions or ([500, 1000, 2000, 3000, 5000] if not args.quick else [200, 500, 1000])
    windows = [50, 100, 150]
    t = 200
    biggest = max(((t - w) + 1) * n_pairs(n) * 4 for n in sizes for w in windows)
    arena = allocate_arena(biggest, device)
    _print(f"\n## Table I: region DFC, T={t}, s=1, kind='triu' (device={device})")
    rows = []
    for n in sizes:
        x = simulate(t, n)
        for w in windows:
            k = t - w + 1
            out_bytes = k * n_pairs(n) * 4
            rate = measure_gemm_rate(device, n, w, batch=k)
            gemm_s = k * 2.0 * n * n * w / rate
            floor = max(gemm_s, out_bytes / d2h) if cuda else gemm_s
            seconds, result = time_run(
                x, w, 1, device, args.repeats, kind="triu", host_buffer=arena
            )
            row = {
                "table": "I",
                "N": n,
                "T": t,
                "w": w,
                "windows": k,
                "out_GB": out_bytes / 1e9,
                "seconds": seconds,
                "out_GBps": out_bytes / seconds / 1e9,
                "floor_s": floor,
                "ratio_to_floor": seconds / floor,
                "gemm_TFLOPs": rate / 1e12,
                "batch": result.plan.batch,
                "paper_K40_s": PAPER_TABLE1.get((n, w)),
                "paper_cpu_s": PAPER_TABLE1_CPU.get((n, w)),
            }
            peer = PEER_H100.get(("triu", n, w))
            if peer and cuda:
                row["peer_H100_s"] = peer
                row["speedup_vs_peer"] = peer / seconds
            if n == max(sizes) and w == 50 and not args.skip_out:
                row["out_h5_s"], _ = time_out_variant(x, w, 1, device, kind="triu")
            del result
            rows.append(row)
            _print(json.dumps(row))
    del arena
    _print(
        "\n| N | w | windows | output GB | time (s) | output GB/s | floor (s) | time / floor "
        "| paper CPU (s) | paper K40 (s) | GPU-DFC on H100 (s) | speed-up vs peer | out= HDF5 (s) |"
    )
    _print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        _print(
            f"| {r['N']:,} | {r['w']} | {r['windows']} | {r['out_GB']:.2f} | {r['seconds']:.3f} "
            f"| {r['out_GBps']:.1f} | {r['floor_s']:.3f} | {r['ratio_to_floor']:.2f} "
            f"| {_fmt(r['paper_cpu_s'])} | {_fmt(r['paper_K40_s'])} | {_fmt(r.get('peer_H100_s'))} "
            f"| {_fmt(r.get('speedup_vs_peer'), 'x')} | {_fmt(r.get('out_h5_s'))} |"
        )
    rows_out.extend(rows)


@dataclass
class Table2Run:
    """What the cases of Table II share: the host buffer and the layouts' checks."""

    args: argparse.Namespace
    device: str
    d2h: float | None
    arena: torch.Tensor
    x: np.ndarray  # the block layout
    perm: np.ndarray  # permuted series a is block series perm[a]
    references: dict = field(default_factory=dict)  # (w, θ, start) -> float64 keys, U
    snapshots: dict = field(default_factory=dict)  # (w, θ, layout, precision) -> kept pairs

    def layout_series(self, layout):
        return self.x if layout == "block" else np.ascontiguousarray(self.x[:, self.perm])


def check_windows(k, count):
    """``count`` windows spread over the run (first and last included)."""
    return sorted({int(v) for v in np.linspace(0, k - 1, max(1, min(count, k))).round()})


def record_run(run, layout, precision, w, theta, result, row):
    """Check a run's kept pairs before the host buffer is reused (not timed).

    The pairs of a few windows (``--check-windows``) are mapped to block
    order and compared with float64's r ≥ θ (entries dropped and added, and
    how far from θ), with the exact path's on the same layout and, for
    ``permuted``, with ``block``'s of the same precision.
    """
    perm = run.perm if layout == "permuted" else None
    k = len(result)
    windows = check_windows(k, run.args.check_windows)
    kept = [_layouts.pattern_keys(result[i], perm, run.device) for i in windows]
    run.snapshots[(w, theta, layout, precision)] = kept
    errors = []
    for i, (keys, _) in zip(windows, kept):
        start = int(result.window_starts[i])
        if (w, theta, start) not in run.references:
            run.references[(w, theta, start)] = _layouts.float64_keys(
                run.x[start : start + w], theta, run.device
            )
        reference, u64 = run.references[(w, theta, start)]
        errors.append({"window": i, **_layouts.errors_against_float64(reference, u64, keys, theta)})
    row[f"{precision}_vs_float64"] = errors
    _print(f"  [{layout}] {precision} vs float64 (r >= θ), windows {windows}: {json.dumps(errors)}")
    comparisons = []  # (name, row key, the other run's kept pairs)
    if precision != "exact":
        exact = run.snapshots.get((w, theta, layout, "exact"))
        comparisons.append(("exact", f"{precision}_vs_exact", exact))
    if layout != "block":
        block = run.snapshots.get((w, theta, "block", precision))
        comparisons.append(("block", "check_vs_block", block))
    for other, key, against in comparisons:
        if against is None:
            continue
        found = [_layouts.compare_patterns(*a, *b, atol=1e-5) for a, b in zip(against, kept)]
        if other == "exact":
            row[key] = found
        else:
            row.setdefault(key, {})[precision] = found
        verdict = "agree" if all(f["agree"] for f in found) else "DIFFER"
        _print(f"  [{layout}] {precision} vs {other}: {verdict} {json.dumps(found)}")


def side_by_side(run, layout, x, w, theta, result, row):
    """The headline case's exact run checked, then fp32 (and TF32 on CUDA) timed beside it."""
    cuda = run.device.startswith("cuda")
    row["nnz_exact"] = int(sum(m.nnz for m in result))
    record_run(run, layout, "exact", w, theta, result, row)
    del result
    precisions = ("fp32", "tf32") if cuda else ("fp32",)
    for precision in precisions:  # tf32: opt-in (can flip values next to the threshold)
        seconds, other = time_run(
            x,
            w,
            1,
            run.device,
            run.args.repeats,
            kind="sparse",
            threshold=theta,
            host_buffer=run.arena,
            precision=precision,
        )
        row[f"{precision}_s"] = seconds
        row[f"nnz_{precision}"] = int(sum(m.nnz for m in other))
        record_run(run, layout, precision, w, theta, other, row)
        del other
    if cuda:
        row["copy_floor_s"] = row["out_GB"] * 1e9 / run.d2h


def headline_extras(run, layout, x, w, theta, row):
    """HDF5 ``out=`` and GEMM block-row variants of the w = 150, θ = 0.5 case."""
    cuda = run.device.startswith("cuda")
    if not run.args.skip_out:
        row["out_h5_s"], _ = time_out_variant(x, w, 1, run.device, kind="sparse", threshold=theta)
    for block_rows in run.args.sparse_block_rows if cuda else ():
        default = _sparse_cuda._BLOCK_ROWS
        _sparse_cuda._BLOCK_ROWS = block_rows
        try:
            row[f"block_rows_{block_rows}_s"], _ = time_run(
                x,
                w,
                1,
                run.device,
                run.args.repeats,
                kind="sparse",
                threshold=theta,
                host_buffer=run.arena,
            )
        finally:
            _sparse_cuda._BLOCK_ROWS = default


def table2_case(run, layout, w, theta, rate):
    """One (layout, w, θ) row of Table II."""
    cuda = run.device.startswith("cuda")
    x = run.layout_series(layout)
    t, n = x.shape
    k = t - w + 1
    seconds, result = time_run(
        x, w, 1, run.device, run.args.repeats, kind="sparse", threshold=theta, host_buffer=run.arena
    )
    out_bytes = result.nbytes
    gemm_s = k * n * n * w / rate  # upper triangle: half of 2·N²·w
    floor = max(gemm_s, out_bytes / run.d2h) if cuda else gemm_s
    row = {
        "table": "II",
        "layout": layout,
        "N": n,
        "T": t,
        "w": w,
        "theta": theta,
        "windows": k,
        "kept_fraction": float((out_bytes - k * (n + 1) * 8) / 8 / (k * n_pairs(n))),
        "out_GB": out_bytes / 1e9,
        "seconds": seconds,
        "floor_s": floor,
        "ratio_to_floor": seconds / floor,
        "gemm_TFLOPs": rate / 1e12,
        "tile_rows": result.plan.block_rows,
        "sparse_method": _sparse_cuda.METHOD,
        # False: the buffer was too small, later windows went to fresh arrays
        "all_in_host_buffer": bool(
            np.shares_memory(result._backend.sparse[-1][0], run.arena.numpy())
        ),
        "paper_K40_s": PAPER_TABLE2.get((w, theta)) if n == 30697 else None,
    }
    # What the exact path had to confirm, under whatever names the result gives them.
    row["exact_confirmation"] = _layouts.confirmation_counts(getattr(result, "confirmation", None))
    _print(f"  [{layout}] w={w} θ={theta} exact confirmation: {row['exact_confirmation']}")
    peer = PEER_H100.get(("sparse", w, theta))
    if peer and cuda and n == 30697:
        row["peer_H100_s"] = peer
        row["speedup_vs_peer"] = peer / seconds
    if w == 150 and theta == 0.5:
        side_by_side(run, layout, x, w, theta, result, row)
        headline_extras(run, layout, x, w, theta, row)
    return row


def table2(args, device, d2h, rows_out):
    n = args.voxels or (30697 if not args.quick else 1000)
    t = 257
    cases = args.cases or [(w, theta) for w in (50, 100, 150) for theta in (0.3, 0.5, 0.7)]
    x = simulate(t, n)
    # Size the host buffer from one window per case (+20 % margin).
    needed = 0
    for w, theta in cases:
        probe = connscale.dynamic_correlation(
            x[:w], w, 1, kind="sparse", threshold=theta, device=device
        )
        needed = max(needed, int(1.2 * (t - w + 1) * (probe[0].nnz * 8 + 4096)))
    arena = allocate_arena(min(needed, 0.45 * available_host_memory()), device)
    run = Table2Run(args, device, d2h, arena, x, _layouts.permutation(n))
    _print(
        f"\n## Table II: voxel DFC, N={n:,}, T={t}, s=1, kind='sparse' (r >= θ), device={device}, "
        f"layouts {', '.join(args.layout)}"
    )
    rows = []
    rates = {}
    for layout in args.layout:
        for w, theta in cases:
            if w not in rates:
                rates[w] = measure_gemm_rate(device, n, w, batch=1)
            row = table2_case(run, layout, w, theta, rates[w])
            rows.append(row)
            _print(json.dumps(row))
    del arena, run
    _print(
        "\n| layout | w | θ | windows | kept % | output GB | time (s) | floor (s) | time / floor "
        "| fp32 (s) | confirmation | paper K40 (s) | GPU-DFC on H100 (s) | speed-up vs peer "
        "| out= HDF5 (s) | TF32 opt-in (s) |"
    )
    _print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        _print(
            f"| {r['layout']} | {r['w']} | {r['theta']} | {r['windows']} "
            f"| {100 * r['kept_fraction']:.2f} | {r['out_GB']:.2f} | {r['seconds']:.3f} "
            f"| {r['floor_s']:.3f} | {r['ratio_to_floor']:.2f} | {_fmt(r.get('fp32_s'))} "
            f"| {_confirmed(r.get('exact_confirmation'))} | {_fmt(r['paper_K40_s'])} "
            f"| {_fmt(r.get('peer_H100_s'))} | {_fmt(r.get('speedup_vs_peer'), 'x')} "
            f"| {_fmt(r.get('out_h5_s'))} | {_fmt(r.get('tf32_s'))} |"
        )
    rows_out.extend(rows)


def _confirmed(counts):
    """A confirmation dict in a table cell: its fractions (whatever the names)."""
    if not counts:
        return ""
    shares = {k: v for k, v in counts.items() if "fraction" in k or "share" in k}
    if counts.get("n_tiles"):
        shares["corrected tiles"] = counts.get("n_corrected_tiles", 0) / counts["n_tiles"]
    return ", ".join(f"{k} {v:.2e}" for k, v in (shares or counts).items())


def table3_and_5(args, device, d2h, rows_out):
    cuda = device.startswith("cuda")
    n = args.voxels or (30697 if not args.quick else 1000)
    t = 257
    ranks = [50, 64, 75, 85, 100, 128]
    x = simulate(t, n)
    variants = [
        ("lowrank", {"method": "randomized", "random_state": 0}, "Alg. 4 (randomized)"),
        (
            "lowrank",
            {"method": "randomized", "random_state": 0, "power_iterations": 2},
            "Alg. 4 + 2 power it.",
        ),
        ("factor", {}, "factor (truncated SVD)"),
    ]
    _print(f"\n## Table III: MAE and compression ratio vs rank, N={n:,}, device={device}")
    _print(
        "Static: the whole series (w = T = 257), as the paper's Table III; dynamic: w=150, "
        "windows every 27 points (4 windows), MAE over off-diagonal pairs."
    )
    rows = []
    for rank in ranks:
        for kind, extra, label in variants:
            static = connscale.dynamic_correlation(
                x, t, 1, kind=kind, rank=rank, device=device, compute_error=True, **extra
            )
            dynamic = connscale.dynamic_correlation(
                x, 150, 27, kind=kind, rank=rank, device=device, compute_error=True, **extra
            )
            paper = (
                PAPER_TABLE3.get(rank, (None, None))
                if kind == "lowrank" and "power_iterations" not in extra
                else (None, None)
            )
            row = {
                "table": "III",
                "N": n,
                "rank": rank,
                "variant": label,
                "mae_static": float(static.mae[0]),
                "cr_static": static.compression_ratio,
                "mae_w150": float(np.mean(dynamic.mae)),
                "cr_w150": dynamic.compression_ratio,
                "bytes_per_window": int(dynamic.nbytes_per_window[0]),
                "paper_mae": paper[0] if n == 30697 else None,
                "paper_cr": paper[1] if n == 30697 else None,
            }
            rows.append(row)
            _print(json.dumps(row))
    _print(
        "\n| l | form | bytes / window | MAE static (w=T) | CR | MAE w=150 | paper MAE | paper CR |"
    )
    _print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        _print(
            f"| {r['rank']} | {r['variant']} | {r['bytes_per_window'] / 1e6:.1f} MB "
            f"| {r['mae_static']:.3g} | {r['cr_static']:.0f} | {r['mae_w150']:.3g} "
            f"| {_fmt(r['paper_mae'], fmt='.2g')} | {_fmt(r['paper_cr'], fmt='.0f')} |"
        )
    rows_out.extend(rows)

    # Table V: time of the whole DFC (w = 150, s = 1) with compressed storage.
    w = 150
    k = t - w + 1
    arena = allocate_arena(k * 2 * n * max(ranks) * 4 * 1.05, device)
    rate = measure_gemm_rate(device, n, w, batch=8)
    _print(f"\n## Table V: DFC time with compressed storage, N={n:,}, w={w}, s=1, {k} windows")
    rows5 = []
    for rank in [50, 75, 100, 128]:
        for kind, extra, label in variants[:1] + variants[2:]:
            seconds, result = time_run(
                x, w, 1, device, args.repeats, kind=kind, rank=rank, host_buffer=arena, **extra
            )
            out_bytes = result.nbytes
            # Alg. 4 through U: Y = U(UᵀΩ) and B = (QᵀU)Uᵀ, 8·N·w·l flops; factor: U·V_l.
            flops = k * (8.0 * n * w * rank if kind == "lowrank" else 2.0 * n * w * (w + rank))
            floor = max(flops / rate, out_bytes / d2h) if cuda else flops / rate
            row = {
                "table": "V",
                "N": n,
                "w": w,
                "rank": rank,
                "variant": label,
                "seconds": seconds,
                "out_GB": out_bytes / 1e9,
                "floor_s": floor,
                "ratio_to_floor": seconds / floor,
                "paper_K40_s": PAPER_TABLE5.get(rank) if kind == "lowrank" and n == 30697 else None,
            }
            del result
            rows5.append(row)
            _print(json.dumps(row))
    del arena
    _print("\n| l | form | output GB | time (s) | floor (s) | time / floor | paper K40 (s) |")
    _print("|---|---|---|---|---|---|---|")
    for r in rows5:
        _print(
            f"| {r['rank']} | {r['variant']} | {r['out_GB']:.2f} | {r['seconds']:.3f} "
            f"| {r['floor_s']:.3f} | {r['ratio_to_floor']:.2f} | {_fmt(r['paper_K40_s'])} |"
        )
    rows_out.extend(rows5)


def _fmt(value, suffix="", fmt=".3f"):
    if value is None:
        return ""
    if suffix == "x":
        return f"{value:.1f}x"
    return f"{value:{fmt}}"


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--quick", action="store_true", help="Reduced sizes for a small CPU.")
    parser.add_argument("--tables", default="1,2,3", help="Which of 1 (I), 2 (II), 3 (III+V).")
    parser.add_argument("--regions", type=lambda s: [int(v) for v in s.split(",")], default=None)
    parser.add_argument("--voxels", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument(
        "--cases",
        default=None,
        type=lambda s: [(int(c.split(":")[0]), float(c.split(":")[1])) for c in s.split(",")],
        help="Table II cases as w:θ,... (e.g. 150:0.5); default all nine.",
    )
    parser.add_argument(
        "--sparse-method",
        default=None,
        choices=("two-reads", "two-reads-side", "one-read", "lookback"),
        help="Compaction of sparse windows on CUDA (default: connscale.fc._sparse_cuda.METHOD).",
    )
    parser.add_argument(
        "--sparse-block-rows",
        default=[],
        type=lambda s: [int(v) for v in s.split(",")],
        help="Also time the w=150, θ=0.5 case with these GEMM block rows (one-read method).",
    )
    parser.add_argument(
        "--layout",
        default="all",
        type=lambda s: _layouts.parse_layouts(s, ("block", "permuted")),
        help="Table II's layouts: block, permuted (its series permuted) or all (default).",
    )
    parser.add_argument(
        "--check-windows",
        type=int,
        default=1,
        help="Windows of the w=150, θ=0.5 case checked against float64 and across layouts.",
    )
    parser.add_argument("--skip-out", action="store_true", help="Skip the HDF5 out= timings.")
    parser.add_argument("--json", default=None, help="Also write every row as JSON here.")
    args = parser.parse_args(argv)
    device = args.device
    cuda = device.startswith("cuda")
    if args.sparse_method:
        _sparse_cuda.METHOD = args.sparse_method
    if args.repeats is None:
        args.repeats = 2 if cuda else 1
    start = time.perf_counter()
    _print(
        f"# dynamic FC benchmark: device={device} "
        f"({torch.cuda.get_device_name() if cuda else f'{os.cpu_count()} cores'}), float32, "
        f"TF32 off, torch {torch.__version__}{', quick sizes' if args.quick else ''}"
    )
    connscale.dynamic_correlation(simulate(60, 300), 20, 5, device=device)  # warm up
    d2h = copy_bandwidth("d2h", device=device) if device.startswith("cuda") else None
    if d2h:
        _print(f"# measured device->host into pinned memory: {d2h / 1e9:.1f} GB/s")
    rows: list[dict] = []
    tables = set(args.tables.split(","))
    if "1" in tables:
        table1(args, device, d2h, rows)
    if "2" in tables:
        table2(args, device, d2h, rows)
    if "3" in tables:
        table3_and_5(args, device, d2h, rows)
    _print(f"\n# total benchmark time {time.perf_counter() - start:.0f} s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()
