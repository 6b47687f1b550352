"""Voxel-wise maps benchmark: degree and eigenvector centrality at HCP size.

P = 204,492 voxels (nilearn's MNI152 2 mm grey-matter mask), T = 1,200 (one
HCP run), synthetic block-factor series generated on the device (20 networks,
76 % of the series in networks, c = 0.6), in the layouts of ``_layouts.py``
(``--layout``; every row names its layout):

* ``block``: networks in contiguous index blocks (favourable to the exact
  scheme, which skips tiles far from θ);
* ``permuted``: the same series, permuted by a fixed seed (results checked
  against ``block``'s permuted back);
* ``random``: a network drawn at random per voxel (the hardest case);
* ``raster``: the mask's voxels in raster order with spatially smooth
  networks, as real data (P from the mask).

Per layout (``--parts layouts``): the public ``compute_degree`` call, binary
+ weighted at two thresholds in one pass, for each of ``--precisions``
(exact, fp32, TF32) side by side, best of ``--repeats`` after a warm-up, the
device synchronised around each timing; the exact path's confirmation
counts as the call reports them; counts against fp32's and (``--float64``)
against float64's, lower and higher separately (an unbiased path errs both
ways).

    floor = P²·T flop (the upper triangle, 2·T flop per pair) at the fp32 GEMM
            rate measured in the same run (cuBLAS, a 8192-row block × all P)

Beside it (``--parts methods``, per layout): the upper triangle by cuBLAS row
blocks alone (what any method that stores blocks pays before thresholding),
the fused Triton kernel in a few tile configurations, cuBLAS blocks + a
Triton epilogue that reads each block once, the plain torch row-block path,
the sparsity threshold search, ECM; and (``--parts reference``, once, on the
first layout) a blocked numpy implementation as C-PAC's and DPABI's (full
rows of R per block, numpy's threaded BLAS on every core of the machine) at
reduced P, scaled by (P/p)².

    python benchmarks/bench_maps.py --device cuda --layout block        # H100: ~3 min
    python benchmarks/bench_maps.py --device cuda --parts layouts       # issue 26's table
    python benchmarks/bench_maps.py --device cpu --quick                # reduced P
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass

import _layouts
import numpy as np
import torch

from connscale._compute import allow_tf32
from connscale.fc import _tiles
from connscale.fc.normalize import normalize_series
from connscale.maps.degree import compute_degree
from connscale.maps.ecm import power_iteration
from connscale.maps.prepare import NormalizedSeries

THRESHOLDS = (0.25, 0.5)
LAYOUTS = ("block", "permuted", "random", "raster")
PRECISIONS = ("exact", "fp32", "tf32")
PARTS = ("layouts", "methods", "reference")
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


def simulate(labels, t, device, seed=0):
    """Normalised (N, T) series of the networks ``labels`` (-1: none), made on ``device``.

    Returns the float32 series and their float64 normalisation (the float32
    ones are its rounding). ``block_labels`` gives the block simulation.
    """
    gen = torch.Generator(device=device).manual_seed(seed)
    n = len(labels)
    signals = torch.randn((t, _layouts.N_NETWORKS), generator=gen, device=device)
    x = torch.randn((t, n), generator=gen, device=device) * np.sqrt(0.4)
    labels = torch.as_tensor(labels, device=device)
    inside = labels >= 0
    x[:, inside] += np.sqrt(0.6) * signals[:, labels[inside]]
    u64, _ = normalize_series(x, dtype=torch.float64)
    return u64.float(), u64


@dataclass
class Series:
    """One layout's normalised series (float32 and float64), and how they were made."""

    layout: str
    u: torch.Tensor
    u64: torch.Tensor
    note: str
    perm: np.ndarray | None = None  # permuted series a is block series perm[a]


def layout_series(layout, args, device, block=None):
    """The series of ``layout``; ``permuted`` permutes ``block``'s (a Series)."""
    if layout == "permuted":
        perm = _layouts.permutation(args.n)
        index = torch.as_tensor(perm, device=device)
        note = f"block's series permuted (seed {_layouts.PERMUTATION_SEED})"
        return Series(layout, block.u[index], block.u64[index], note, perm)
    labels, note = _layouts.labels_for(layout, args.n, seed=0, stride=args.mask_stride)
    u, u64 = simulate(labels, args.t, device)
    return Series(layout, u, u64, note)


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


def degree_maps(u, precision, weighted=True):
    """compute_degree at THRESHOLDS: (binary, weighted) maps (weighted None if not asked)."""
    constant = torch.zeros(u.shape[0], dtype=torch.bool, device=u.device)
    maps, info = compute_degree(
        NormalizedSeries(u, constant), list(THRESHOLDS), both=weighted, precision=precision
    )
    return (maps if weighted else (maps, None)), info


def time_precisions(series, row, args):
    """Time each of ``--precisions`` on one layout; return their maps."""
    device = series.u.device
    found = {}
    for precision in args.precisions:
        seconds, (maps, info) = timed(
            lambda p=precision: degree_maps(series.u, p), device, args.repeats
        )
        found[precision] = maps
        confirmation = _layouts.confirmation_counts(info.get("confirmation"))
        row[f"{precision}_s"] = seconds
        row[f"{precision}_method"] = info.get("method")
        row[f"{precision}_confirmation"] = confirmation
        _print(
            f"  [{series.layout}] {precision}: binary + weighted at {len(THRESHOLDS)} thresholds "
            f"{seconds:.3f} s ({seconds / row['floor_s']:.2f}x the fp32 floor), method "
            f"{info.get('method')}; confirmation {confirmation}"
        )
    if "exact" in args.precisions:
        seconds, _ = timed(
            lambda: degree_maps(series.u, "exact", weighted=False), device, args.repeats
        )
        row["exact_binary_only_s"] = seconds
        _print(f"  [{series.layout}] exact, binary only: {seconds:.3f} s")
    return found


def compare_precisions(series, found, row, args):
    """Counts of each precision against fp32's and float64's (lower and higher apart)."""
    reference = {}
    if "fp32" in found:
        reference["fp32"] = found["fp32"]
        row["mean_degree"] = [float(v) for v in np.mean(found["fp32"][0], axis=-1)]
        _print(f"  [{series.layout}] mean degree (fp32) per threshold: {row['mean_degree']}")
    if args.float64:
        reference["float64"], _ = degree_maps(series.u64, "fp32")
    for precision, (binary, weighted) in found.items():
        for name, (ref_binary, ref_weighted) in reference.items():
            if name == precision:
                continue
            errors = _layouts.degree_errors(binary, ref_binary)
            errors["weighted_max_abs"] = float(np.nanmax(np.abs(weighted - ref_weighted)))
            row[f"{precision}_vs_{name}"] = errors
            _print(
                f"  [{series.layout}] {precision} vs {name}, per threshold {list(THRESHOLDS)}: "
                f"voxels counted lower {errors['lower']}, higher {errors['higher']}; weighted "
                f"max |difference| {errors['weighted_max_abs']:.3g}"
            )


def check_permuted(series, found, block_found, row):
    """Permuted layout's maps, permuted back, against block's (each precision)."""
    checks = {}
    for precision, (binary, weighted) in found.items():
        if precision not in block_found:
            continue
        block_binary, block_weighted = block_found[precision]
        scale = float(np.nanmax(np.abs(block_weighted))) or 1.0
        checks[precision] = {
            "binary": _layouts.compare_maps(block_binary, binary, series.perm, atol=0.5),
            "weighted": _layouts.compare_maps(
                block_weighted, weighted, series.perm, atol=1e-5 * scale
            ),
        }
        verdict = "agree" if all(c["agree"] for c in checks[precision].values()) else "DIFFER"
        _print(
            f"  [permuted] {precision} maps permuted back vs block: {verdict} "
            f"({json.dumps(checks[precision])})"
        )
    row["check_vs_block"] = checks


def layout_part(series, row, args, block_found):
    """The precisions side by side on one layout, compared and (permuted) checked."""
    found = time_precisions(series, row, args)
    compare_precisions(series, found, row, args)
    if series.perm is not None and block_found:
        check_permuted(series, found, block_found, row)
    return found


def triton_methods(u, thr, row, args):
    """The fused kernel's and the BLAS blocks + epilogue's tile configurations (CUDA)."""
    device, n, floor = u.device, u.shape[0], row["floor_s"]
    reference = None
    configs, block_configs = CONFIGS, BLOCK_CONFIGS
    if args.configs == "default":
        configs, block_configs = (), ((64, 128, 4),)
    for block, block_k, warps, stages in configs:
        seconds, (counts, sums) = timed(
            lambda block=block, block_k=block_k, warps=warps, stages=stages: _tiles.degree_triton(
                u,
                thr,
                absolute=False,
                weighted=True,
                block=block,
                block_k=block_k,
                num_warps=warps,
                num_stages=stages,
            ),
            device,
            args.repeats,
        )
        key = f"fused_{block}x{block_k}_w{warps}_s{stages}_s"
        row[key] = seconds
        reference = counts if reference is None else reference
        _print(
            f"  fused Triton degree {key[6:-2]}: {seconds:.3f} s "
            f"({seconds / floor:.2f}x floor); mean degree "
            f"{counts.double().mean(1).tolist()}"
        )
    stored_rows = _tiles.plan_block_rows_stored(n, 0, 12 << 30, item=4).block_rows
    for block_m, block_n, warps in block_configs:
        seconds, (counts, sums) = timed(
            lambda block_m=block_m, block_n=block_n, warps=warps: _tiles.degree_blocks_triton(
                u,
                thr,
                absolute=False,
                weighted=True,
                block_rows=stored_rows,
                block_m=block_m,
                block_n=block_n,
                num_warps=warps,
            ),
            device,
            args.repeats,
        )
        key = f"blocks_{block_m}x{block_n}_w{warps}_s"
        row[key] = seconds
        reference = counts if reference is None else reference
        agree = float((counts - reference).abs().sum() / reference.sum().clamp(min=1))
        _print(
            f"  BLAS blocks ({stored_rows} rows) + Triton epilogue {key[7:-2]}, "
            f"overlapped: {seconds:.3f} s ({seconds / floor:.2f}x floor); relative "
            f"count difference to the first method {agree:.1e}; mean degree "
            f"{counts.double().mean(1).tolist()}"
        )
    return stored_rows


def sparsity_methods(u, row, args, stored_rows, torch_rows):
    """sparsity=: the exact threshold of the top fraction (histogram + boundary passes)."""
    device, n, floor = u.device, u.shape[0], row["floor_s"]
    kept = [max(1, round(args.sparsity * n * (n - 1) / 2))]
    if stored_rows is not None:
        seconds, found = timed(
            lambda: _tiles.top_threshold(
                u, kept, absolute=False, block_rows=stored_rows, use_triton=True
            ),
            device,
            args.repeats,
        )
        row["sparsity_passes_triton_s"], row["sparsity_threshold"] = seconds, found[0]
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
    row["sparsity_passes_torch_s"] = seconds
    _print(
        f"  sparsity={args.sparsity}: exact threshold {found[0]:.6f} by torch row blocks: "
        f"{seconds:.3f} s ({seconds / floor:.2f}x floor)"
    )


def methods_part(u, row, args):
    """The kernels compared on one layout (fp32 products, TF32 off)."""
    device, n, floor = u.device, u.shape[0], row["floor_s"]
    thr = torch.tensor(THRESHOLDS)
    block_rows = max(1, min(n, (1 << 30) // n))
    seconds, _ = timed(lambda: upper_blocks_gemm(u, block_rows), device, args.repeats)
    row["cublas_upper_blocks_s"] = seconds
    _print(
        f"  upper triangle by BLAS row blocks ({block_rows} rows), GEMM only: "
        f"{seconds:.3f} s ({seconds / floor:.2f}x floor)"
    )
    stored_rows = None
    if device.type == "cuda" and _tiles.HAS_TRITON:
        stored_rows = triton_methods(u, thr, row, args)
    torch_rows = _tiles.plan_block_rows(n, 0, 8 << 30, item=4, device=device).block_rows
    seconds, _ = timed(
        lambda: _tiles.degree_torch(u, thr, absolute=False, weighted=True, block_rows=torch_rows),
        device,
        1,
        warmup=device.type == "cpu",
    )  # one cold run on the GPU (2.4 s)
    row["torch_blocks_s"] = seconds
    _print(
        f"  plain torch row blocks ({torch_rows} rows): {seconds:.3f} s "
        f"({seconds / floor:.2f}x floor)"
    )
    sparsity_methods(u, row, args, stored_rows, torch_rows)
    seconds, (_, n_iter, _) = timed(lambda: power_iteration(u, 1e-6, 1000), device, args.repeats)
    row["ecm_s"], row["ecm_iterations"] = seconds, n_iter
    _print(f"  ECM (fastECM power iteration): {seconds * 1e3:.1f} ms, {n_iter} iterations")


def reference_part(u, row, args):
    """The CPU reference (numpy, every core), on the host."""
    n = u.shape[0]
    p = min(args.cpu_n, n)
    z = u[:p].cpu().numpy()
    start = time.perf_counter()
    numpy_blocked_degree(z, THRESHOLDS)
    cpu_degree = time.perf_counter() - start
    scaled = cpu_degree * (n / p) ** 2
    row["numpy_degree_s_at_p"], row["numpy_p"] = cpu_degree, p
    row["numpy_degree_scaled_s"] = scaled
    z_full = u.cpu().numpy()
    start = time.perf_counter()
    _, cpu_iter = numpy_ecm(z_full)
    row["numpy_ecm_s"] = time.perf_counter() - start
    row["numpy_ecm_iterations"] = cpu_iter
    ours = [
        v
        for k, v in row.items()
        if k.startswith(("fused_", "blocks_", "torch_blocks", "exact_s")) and isinstance(v, float)
    ]
    best = f"{scaled / min(ours):.1f}x our best" if ours else "ours not run"
    ecm = f"{row['numpy_ecm_s'] / row['ecm_s']:.1f}x" if "ecm_s" in row else "ours not run"
    _print(
        f"  numpy blocked degree, {os.cpu_count()} cores: {cpu_degree:.2f} s at P={p}, "
        f"scaled to P={n}: {scaled:.1f} s ({best}); "
        f"numpy ECM at P={n}: {row['numpy_ecm_s']:.2f} s ({cpu_iter} iterations, {ecm})"
    )


def _csv(choices):
    def parse(value):
        return _layouts.parse_layouts(value, choices)

    return parse


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--n", type=int, default=204_492, help="P (raster: from the mask).")
    parser.add_argument("--t", type=int, default=1200)
    parser.add_argument(
        "--cpu-n", type=int, default=20_000, help="P of the numpy reference (scaled by (P/p)²)."
    )
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="CPU sizes for a small machine.")
    parser.add_argument(
        "--layout",
        type=_csv(LAYOUTS),
        default=list(LAYOUTS),
        help=f"Comma-separated of {', '.join(LAYOUTS)}, or all (default).",
    )
    parser.add_argument(
        "--mask-stride",
        type=int,
        default=1,
        help="raster: keep every k-th voxel of the mask per axis (small tests; P shrinks ~k³).",
    )
    parser.add_argument(
        "--parts",
        type=_csv(PARTS),
        default=list(PARTS),
        help="layouts (precisions side by side), methods (kernels compared), reference "
        "(numpy, once); comma-separated, or all (default).",
    )
    parser.add_argument(
        "--precisions",
        type=_csv(PRECISIONS),
        default=list(PRECISIONS),
        help="Precisions timed side by side per layout (comma-separated, or all).",
    )
    parser.add_argument(
        "--float64",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Count in float64 too (per layout), the reference of the errors.",
    )
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
    parser.add_argument("--json", default=None, help="Also write the rows (a list) as JSON here.")
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.t, args.cpu_n = 3000, 300, 3000
    return args


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    common = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "t": args.t,
        "cpu_threads": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "thresholds": THRESHOLDS,
    }
    rows = []
    with allow_tf32(False), torch.no_grad():
        rate = None
        block = block_found = None
        for layout in sorted(args.layout, key=LAYOUTS.index):  # block before permuted
            if layout == "permuted" and block is None:  # block's series and maps, untimed
                block = layout_series("block", args, device)
                if "layouts" in args.parts:
                    block_found = {p: degree_maps(block.u, p)[0] for p in args.precisions}
            series = layout_series(layout, args, device, block)
            n = series.u.shape[0]
            rate = rate or gemm_rate(series.u, device)
            row = {**common, "layout": layout, "layout_note": series.note, "n": n}
            row["gemm_tflops"], row["floor_s"] = rate / 1e12, n**2 * args.t / rate
            _print(
                f"{row['device']} [{layout}: {series.note}]: P={n} T={args.t}; fp32 GEMM "
                f"{rate / 1e12:.1f} TFLOP/s; upper-triangle floor {row['floor_s']:.3f} s"
            )
            if "layouts" in args.parts:
                found = layout_part(series, row, args, block_found)
                block_found = found if layout == "block" else block_found
            block = series if layout == "block" else block
            if "methods" in args.parts:
                methods_part(series.u, row, args)
            if "reference" in args.parts and not rows:
                reference_part(series.u, row, args)
            rows.append(row)
            if layout == "permuted":  # the last layout that needs block's
                block = block_found = None
            del series
            if args.json:  # after each layout: a run cut short keeps what it measured
                with open(args.json, "w") as fh:
                    json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()
