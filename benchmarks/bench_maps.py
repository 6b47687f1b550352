"""Voxel-wise maps benchmark: degree and eigenvector centrality at HCP size.

P = 204,492 voxels (nilearn's MNI152 2 mm grey-matter mask), T = 1,200 (one
HCP run), synthetic block-factor series generated on the device (20 networks,
76 % of the series in networks, c = 0.6). Binary and weighted degree at two
thresholds come out of one pass (the Triton kernel accumulates counts and
sums together). Everything is timed on the device (series already there,
maps left there), fp32 with TF32 off, best of ``--repeats`` after a warm-up:

    floor = P²·T flop (the upper triangle, 2·T flop per pair) at the fp32 GEMM
            rate measured in the same run (cuBLAS, a 8192-row block × all P)

Beside it: the upper triangle by cuBLAS row blocks alone (what any method
that stores blocks pays before thresholding), the fused Triton kernel in a
few tile configurations, cuBLAS blocks + a Triton epilogue that reads each
block once, the plain torch row-block path, and a blocked numpy
implementation as C-PAC's and DPABI's (full rows of R per block, numpy's
threaded BLAS on every core of the machine) at reduced P, scaled by (P/p)².

    python benchmarks/bench_maps.py --device cuda            # H100: ~3 min
    python benchmarks/bench_maps.py --device cpu --quick     # reduced P
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import torch

from connscale._compute import allow_tf32
from connscale.fc import _exact, _exact_triton, _tiles
from connscale.fc.normalize import normalize_series
from connscale.maps.ecm import power_iteration

THRESHOLDS = (0.25, 0.5)
# (block, block_k, num_warps, num_stages) of the fused kernel.
CONFIGS = ((128, 32, 4, 3), (128, 32, 8, 3))
# (block_m, block_n, num_warps) of the epilogue over BLAS blocks.
BLOCK_CONFIGS = ((64, 64, 4), (32, 128, 4), (64, 128, 4), (64, 128, 8), (128, 128, 8))


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _print(*args):
    print(*args, flush=True)


def timed(fn, device, repeats, warmup=True):
    """Best wall time of ``repeats`` calls (after one untimed call) and the last result."""
    if warmup:
        result = fn()
        _sync(device)
    best = float("inf")
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        result = fn()
        _sync(device)
        best = min(best, time.perf_counter() - start)
    return best, result


def simulate(n, t, device, seed=0):
    """Normalised (N, T) block-factor series made on ``device``."""
    gen = torch.Generator(device=device).manual_seed(seed)
    n_in = int(round(0.76 * n))
    labels = torch.arange(n_in, device=device) * 20 // n_in
    signals = torch.randn((t, 20), generator=gen, device=device)
    x = torch.randn((t, n), generator=gen, device=device) * np.sqrt(0.4)
    x[:, :n_in] += np.sqrt(0.6) * signals[:, labels]
    u, _ = normalize_series(x, dtype=torch.float32)
    return u


def gemm_rate(u, device, rows=8192):
    """fp32 flop/s of one cuBLAS/BLAS block: ``rows`` rows of U against all of U."""
    block = u[:rows]
    seconds, _ = timed(lambda: block @ u.T, device, 3)
    return 2 * block.shape[0] * u.shape[0] * u.shape[1] / seconds


def upper_blocks_gemm(u, block_rows):
    """The upper triangle by row blocks, GEMM only (results dropped)."""
    n = u.shape[0]
    for r0 in range(0, n, block_rows):
        tile = u[r0 : r0 + block_rows] @ u[r0:].T
        del tile


def numpy_blocked_degree(z, thresholds, block_rows=1024):
    """C-PAC/DPABI style: full rows of R per block, thresholded in numpy."""
    n = z.shape[0]
    counts = np.zeros((len(thresholds), n), dtype=np.int64)
    sums = np.zeros((len(thresholds), n))
    for r0 in range(0, n, block_rows):
        r = z[r0 : r0 + block_rows] @ z.T
        r[np.arange(r.shape[0]), np.arange(r0, r0 + r.shape[0])] = 0.0  # no self pairs
        for i, theta in enumerate(thresholds):
            keep = r > theta
            counts[i, r0 : r0 + r.shape[0]] = keep.sum(1)
            sums[i, r0 : r0 + r.shape[0]] = np.where(keep, r, 0).sum(1)
    return counts, sums


def numpy_ecm(z, tol=1e-6, max_iter=1000):
    """fastECM's power iteration in numpy (C-PAC's 'fast' eigenvector centrality)."""
    x = np.full(z.shape[0], 1 / np.sqrt(z.shape[0]), dtype=z.dtype)
    for i in range(max_iter):  # noqa: B007 - the count is returned
        y = z @ (z.T @ x) + x.sum()
        y /= np.linalg.norm(y)
        done = np.linalg.norm(y - x) < tol
        x = y
        if done:
            break
    return x, i + 1


def exact_degree(u, thr, floor, reference, stored_rows, rows, args):
    """precision='exact' (TF32 decisions confirmed near θ, connscale.fc._exact_triton)
    against the fp32 counts (``reference``), and TF32 alone (the disagreement)."""
    device = u.device

    def run():
        stats = _exact.new_stats(device)
        split = _exact_triton.padded_split(u)
        counts, sums = _exact_triton.degree_exact_triton(
            u,
            thr,
            absolute=False,
            weighted=True,
            margin=_exact.decision_margin_tensor(u),
            stats=stats,
            split=split,
        )
        return counts, sums, stats

    seconds, (counts, sums, stats) = timed(run, device, args.repeats)
    binary_s, _ = timed(
        lambda: _exact_triton.degree_exact_triton(
            u,
            thr,
            absolute=False,
            weighted=False,
            margin=_exact.decision_margin(u),
            stats=_exact.new_stats(device),
        ),
        device,
        args.repeats,
    )
    pairs = args.n * (args.n - 1) // 2
    confirmed, corrected, tiles = stats.tolist()
    differ = int((counts != reference).sum())
    rows.update(
        exact_degree_s=seconds,
        exact_binary_only_s=binary_s,
        exact_counts_differ_from_fp32=differ,
        exact_confirmed_entries=confirmed,
        exact_confirmed_fraction=confirmed / pairs,
        exact_corrected_tiles=corrected,
        exact_tiles=tiles,
    )
    _print(
        f"  exact (TF32 decide + confirm, one kernel), binary + weighted at {len(thr)} "
        f"thresholds: {seconds:.3f} s ({seconds / floor:.2f}x the fp32 floor); binary only "
        f"{binary_s:.3f} s; counts differing from fp32: {differ}; confirmed entries "
        f"{confirmed} ({confirmed / pairs:.2e} of the pairs), corrected tiles {corrected} of "
        f"{tiles}"
    )
    with allow_tf32(True):
        seconds, (counts, _) = timed(
            lambda: _tiles.degree_blocks_triton(
                u, thr, absolute=False, weighted=True, block_rows=stored_rows
            ),
            device,
            args.repeats,
        )
    differ = int((counts != reference).sum())
    moved = int((counts - reference).abs().sum())
    rows.update(tf32_degree_s=seconds, tf32_counts_differ=differ, tf32_count_moves=moved)
    _print(
        f"  TF32 alone (cuBLAS blocks): {seconds:.3f} s; {differ} of {reference.numel()} counts "
        f"differ from fp32 (total |difference| {moved})"
    )


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--n", type=int, default=204_492)
    parser.add_argument("--t", type=int, default=1200)
    parser.add_argument(
        "--cpu-n", type=int, default=20_000, help="P of the numpy reference (scaled by (P/p)²)."
    )
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="CPU sizes for a small machine.")
    parser.add_argument(
        "--configs",
        choices=("all", "default"),
        default="all",
        help="'default': only the default epilogue (no fused kernel, no other tile sizes).",
    )
    parser.add_argument(
        "--sparsity",
        type=float,
        default=0.01,
        help="Time finding the exact threshold of this fraction of all pairs.",
    )
    parser.add_argument("--json", default=None, help="Also write the rows as JSON here.")
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.t, args.cpu_n = 3000, 300, 3000
    device = torch.device(args.device)
    rows = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "n": args.n,
        "t": args.t,
        "cpu_threads": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "thresholds": THRESHOLDS,
    }
    thr = torch.tensor(THRESHOLDS)
    with allow_tf32(False), torch.no_grad():
        u = simulate(args.n, args.t, device)
        rate = gemm_rate(u, device)
        floor = args.n**2 * args.t / rate
        rows["gemm_tflops"] = rate / 1e12
        rows["floor_s"] = floor
        _print(
            f"{rows['device']}: P={args.n} T={args.t}; fp32 GEMM {rate / 1e12:.1f} TFLOP/s; "
            f"upper-triangle floor {floor:.3f} s"
        )
        block_rows = max(1, min(args.n, (1 << 30) // args.n))
        seconds, _ = timed(lambda: upper_blocks_gemm(u, block_rows), device, args.repeats)
        rows["cublas_upper_blocks_s"] = seconds
        _print(
            f"  upper triangle by BLAS row blocks ({block_rows} rows), GEMM only: "
            f"{seconds:.3f} s ({seconds / floor:.2f}x floor)"
        )
        reference = None
        configs, block_configs = CONFIGS, BLOCK_CONFIGS
        if args.configs == "default":
            configs, block_configs = (), ((64, 128, 4),)
        if device.type == "cuda" and _tiles.HAS_TRITON:
            for block, block_k, warps, stages in configs:
                seconds, (counts, sums) = timed(
                    lambda block=block, block_k=block_k, warps=warps, stages=stages: (
                        _tiles.degree_triton(
                            u,
                            thr,
                            absolute=False,
                            weighted=True,
                            block=block,
                            block_k=block_k,
                            num_warps=warps,
                            num_stages=stages,
                        )
                    ),
                    device,
                    args.repeats,
                )
                key = f"fused_{block}x{block_k}_w{warps}_s{stages}_s"
                rows[key] = seconds
                reference = counts if reference is None else reference
                _print(
                    f"  fused Triton degree {key[6:-2]}: {seconds:.3f} s "
                    f"({seconds / floor:.2f}x floor); mean degree "
                    f"{counts.double().mean(1).tolist()}"
                )
            stored_rows = _tiles.plan_block_rows_stored(args.n, 0, 12 << 30, item=4).block_rows
            for block_m, block_n, warps in block_configs:
                seconds, (counts, sums) = timed(
                    lambda block_m=block_m, block_n=block_n, warps=warps: (
                        _tiles.degree_blocks_triton(
                            u,
                            thr,
                            absolute=False,
                            weighted=True,
                            block_rows=stored_rows,
                            block_m=block_m,
                            block_n=block_n,
                            num_warps=warps,
                        )
                    ),
                    device,
                    args.repeats,
                )
                key = f"blocks_{block_m}x{block_n}_w{warps}_s"
                rows[key] = seconds
                reference = counts if reference is None else reference
                agree = float((counts - reference).abs().sum() / reference.sum().clamp(min=1))
                _print(
                    f"  BLAS blocks ({stored_rows} rows) + Triton epilogue {key[7:-2]}, "
                    f"overlapped: {seconds:.3f} s ({seconds / floor:.2f}x floor); relative "
                    f"count difference to the first method {agree:.1e}; mean degree "
                    f"{counts.double().mean(1).tolist()}"
                )
        if device.type == "cuda" and _tiles.HAS_TRITON:
            exact_degree(u, thr, floor, reference, stored_rows, rows, args)
        torch_rows = _tiles.plan_block_rows(args.n, 0, 8 << 30, item=4, device=device).block_rows
        seconds, (counts, sums) = timed(
            lambda: _tiles.degree_torch(
                u, thr, absolute=False, weighted=True, block_rows=torch_rows
            ),
            device,
            1,
            warmup=device.type == "cpu",
        )  # one cold run on the GPU (2.4 s)
        rows["torch_blocks_s"] = seconds
        _print(
            f"  plain torch row blocks ({torch_rows} rows): {seconds:.3f} s "
            f"({seconds / floor:.2f}x floor)"
        )
        # sparsity=: the exact threshold of the top fraction (histogram + boundary passes).
        kept = [max(1, round(args.sparsity * args.n * (args.n - 1) / 2))]
        if device.type == "cuda" and _tiles.HAS_TRITON:
            seconds, found = timed(
                lambda: _tiles.top_threshold(
                    u, kept, absolute=False, block_rows=stored_rows, use_triton=True
                ),
                device,
                args.repeats,
            )
            rows["sparsity_passes_triton_s"], rows["sparsity_threshold"] = seconds, found[0]
            _print(
                f"  sparsity={args.sparsity}: exact threshold {found[0]:.6f} by BLAS blocks + "
                f"Triton histogram and collect: {seconds:.3f} s ({seconds / floor:.2f}x floor)"
            )
        seconds, found = timed(
            lambda: _tiles.top_threshold(u, kept, absolute=False, block_rows=torch_rows),
            device,
            1,
            warmup=False,
        )
        rows["sparsity_passes_torch_s"] = seconds
        _print(
            f"  sparsity={args.sparsity}: exact threshold {found[0]:.6f} by torch row blocks: "
            f"{seconds:.3f} s ({seconds / floor:.2f}x floor)"
        )
        seconds, (ecm, n_iter, _) = timed(
            lambda: power_iteration(u, 1e-6, 1000), device, args.repeats
        )
        rows["ecm_s"], rows["ecm_iterations"] = seconds, n_iter
        _print(f"  ECM (fastECM power iteration): {seconds * 1e3:.1f} ms, {n_iter} iterations")

        # The CPU reference (numpy, every core), on the host.
        p = min(args.cpu_n, args.n)
        z = u[:p].cpu().numpy()
        start = time.perf_counter()
        numpy_blocked_degree(z, THRESHOLDS)
        cpu_degree = time.perf_counter() - start
        scaled = cpu_degree * (args.n / p) ** 2
        rows["numpy_degree_s_at_p"], rows["numpy_p"] = cpu_degree, p
        rows["numpy_degree_scaled_s"] = scaled
        z_full = u.cpu().numpy()
        start = time.perf_counter()
        _, cpu_iter = numpy_ecm(z_full)
        rows["numpy_ecm_s"] = time.perf_counter() - start
        rows["numpy_ecm_iterations"] = cpu_iter
        best = min(
            v
            for k, v in rows.items()
            if k.startswith(("fused_", "blocks_", "torch_blocks", "exact_degree_s"))
        )
        _print(
            f"  numpy blocked degree, {os.cpu_count()} cores: {cpu_degree:.2f} s at P={p}, "
            f"scaled to P={args.n}: {scaled:.1f} s ({scaled / best:.1f}x our best); "
            f"numpy ECM at P={args.n}: {rows['numpy_ecm_s']:.2f} s ({cpu_iter} iterations, "
            f"{rows['numpy_ecm_s'] / rows['ecm_s']:.1f}x)"
        )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()
