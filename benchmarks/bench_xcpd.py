"""XCP-D's voxel maps on the device: ReHo (27 neighbours), ALFF and fALFF of one run.

One simulated 2 mm MNI run: an ellipsoid mask of ~244,000 voxels in the
97 x 115 x 97 grid (radii 36, 45, 36 voxels), its voxels in raster order
(``data[mask]``), T = 1,200 volumes (an HCP run), t_r = 0.72 s; each voxel is
the signal of its block of the mask (80 blocks) plus its own noise, float32.

- connscale: ``reho_series`` (27 neighbours, AFNI 3dReHo's W with its tie
  correction) and ``alff`` (XCP-D's periodogram ALFF and fALFF) on the device,
  the series already there (as the BIDS-App's cleaned series are), best of
  ``--repeats`` after a warm-up, synchronised. The neighbour list
  (``voxel_neighbours``, host) and the host-to-device copy of the series are
  timed beside them.
- the numpy/scipy reference: the same maps (``scipy.stats.rankdata`` ranks and
  the tie sums, W from the rank sums of each neighbourhood,
  ``scipy.signal.periodogram`` for ALFF/fALFF) parallelised as a user would:
  one process per core (fork) over chunks of voxels, the ranks in shared
  memory between the two ReHo passes.

    python benchmarks/bench_xcpd.py --device cuda             # H100: full size
    python benchmarks/bench_xcpd.py --device cpu --quick      # the 2-core machine
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from multiprocessing import get_context, shared_memory
from pathlib import Path

import numpy as np

FULL = {"shape": (97, 115, 97), "radii": (36, 45, 36), "t": 1200, "blocks": (5, 4, 4)}
QUICK = {"shape": (48, 57, 48), "radii": (18, 23, 18), "t": 300, "blocks": (4, 4, 3)}
T_R = 0.72
LOW_PASS, HIGH_PASS = 0.08, 0.01

# The reference's data, set before the pool forks (the workers inherit them).
_SHARED: dict = {}


def _print(*args):
    print(*args, flush=True)


def make_run(grid: dict, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Return the mask (X, Y, Z) and the in-mask series (T, N), float32, raster order."""
    grids = np.ogrid[tuple(slice(0, n) for n in grid["shape"])]
    centre = [n / 2 for n in grid["shape"]]
    mask = sum(((g - c) / r) ** 2 for g, c, r in zip(grids, centre, grid["radii"])) <= 1.0
    coords = np.argwhere(mask)
    lo, hi = coords.min(0), coords.max(0) + 1
    cell = [(coords[:, d] - lo[d]) * b // (hi[d] - lo[d]) for d, b in enumerate(grid["blocks"])]
    labels = (cell[0] * grid["blocks"][1] + cell[1]) * grid["blocks"][2] + cell[2]
    rng = np.random.default_rng(seed)
    t = grid["t"]
    signals = np.cumsum(rng.standard_normal((t, int(labels.max()) + 1), dtype=np.float32), 0)
    x = rng.standard_normal((t, len(labels)), dtype=np.float32)
    x *= 4.0
    x += signals[:, labels]
    return mask, x


# ----------------------------------------------------------------- reference
def _ranks_chunk(bounds):
    """Ranks (average for ties) and Σ (t³ - t) of the series c0:c1, into shared memory."""
    from scipy.stats import rankdata

    c0, c1 = bounds
    x = _SHARED["x"][:, c0:c1]
    _SHARED["ranks"][c0:c1] = rankdata(x, axis=0).T
    ordered = np.sort(x, axis=0)
    tied_columns = np.flatnonzero((ordered[1:] == ordered[:-1]).any(axis=0))
    for j in tied_columns:
        _, counts = np.unique(ordered[:, j], return_counts=True)
        _SHARED["ties"][c0 + j] = float((counts**3 - counts).sum())


def _w_chunk(bounds):
    """AFNI's ReHoIt for the neighbourhoods r0:r1 (rank sums over each neighbourhood)."""
    r0, r1 = bounds
    ranks, ties, pad = _SHARED["ranks"], _SHARED["ties"], _SHARED["ranks"].shape[0] - 1
    nb = _SHARED["neighbours"][r0:r1]
    nb = np.where(nb < 0, pad, nb)
    sums = ranks[nb[:, 0]].copy()
    for k in range(1, nb.shape[1]):
        sums += ranks[nb[:, k]]
    t = ranks.shape[1]
    members = (nb != pad).sum(axis=1).astype(np.float64)
    spread = ((sums - (members * (t + 1) / 2)[:, None]) ** 2).sum(axis=1)
    denominator = members**2 * (t**3 - t) - members * ties[nb].sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denominator > 0, 12 * spread / denominator, np.nan)


def _alff_chunk(bounds):
    """XCP-D's compute_alff (periodogram branch), vectorised over the series c0:c1."""
    from scipy.signal import periodogram

    c0, c1 = bounds
    x = _SHARED["x"][:, c0:c1].astype(np.float64)
    sd = x.std(axis=0)
    safe = np.where(sd > 0, sd, 1.0)
    frequencies, power = periodogram(
        (x - x.mean(axis=0)) / safe, 1 / T_R, scaling="spectrum", axis=0
    )
    amplitude = np.sqrt(power)
    band = slice(
        int(np.argmin(np.abs(frequencies - HIGH_PASS))),
        int(np.argmin(np.abs(frequencies - LOW_PASS))),
    )
    alff = 2 * amplitude[band].mean(axis=0) * sd
    with np.errstate(invalid="ignore", divide="ignore"):
        falff = np.where(sd > 0, amplitude[band].sum(0) / amplitude[1:].sum(0), 0.0)
    return alff, falff


def _chunks(n: int, parts: int) -> list[tuple[int, int]]:
    edges = np.linspace(0, n, parts + 1).astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:]) if b > a]


def run_reference(x: np.ndarray, neighbours: np.ndarray, processes: int) -> dict:
    """The reference maps and their wall times on ``processes`` processes."""
    n_timepoints, n = x.shape
    memory = shared_memory.SharedMemory(create=True, size=(n + 1) * (n_timepoints + 1) * 8)
    try:
        shared = np.ndarray((n + 1) * (n_timepoints + 1), dtype=np.float64, buffer=memory.buf)
        shared[:] = 0
        _SHARED.update(
            x=x,
            neighbours=neighbours,
            ranks=shared[: (n + 1) * n_timepoints].reshape(n + 1, n_timepoints),
            ties=shared[(n + 1) * n_timepoints :],
        )
        chunks = _chunks(n, 8 * processes)
        with get_context("fork").Pool(processes) as pool:
            pool.map(abs, range(processes))  # the workers are up
            start = time.perf_counter()
            pool.map(_ranks_chunk, chunks)
            ranked = time.perf_counter()
            w = np.concatenate(pool.map(_w_chunk, chunks))
            reho_done = time.perf_counter()
            maps = pool.map(_alff_chunk, chunks)
            done = time.perf_counter()
        alff = np.concatenate([m[0] for m in maps])
        falff = np.concatenate([m[1] for m in maps])
    finally:
        _SHARED.clear()
        del shared
        memory.close()
        memory.unlink()
    return {
        "maps": (w, alff, falff),
        "seconds": {
            "rank": ranked - start,
            "w": reho_done - ranked,
            "reho": reho_done - start,
            "alff": done - reho_done,
            "total": done - start,
        },
    }


# ----------------------------------------------------------------- connscale
def run_connscale(x: np.ndarray, mask: np.ndarray, device: str, repeats: int) -> dict:
    import torch

    import connscale
    from connscale._compute import resolve_device, synchronize
    from connscale.maps import reho_series, voxel_neighbours

    dev = resolve_device(device)
    start = time.perf_counter()
    neighbours = voxel_neighbours(mask, 27)
    neighbour_seconds = time.perf_counter() - start
    start = time.perf_counter()
    series = torch.from_numpy(x).to(dev)
    synchronize(dev)
    copy_seconds = time.perf_counter() - start

    def timed(fn):
        result = fn()  # warm-up
        best = float("inf")
        for _ in range(repeats):
            synchronize(dev)
            begin = time.perf_counter()
            result = fn()
            synchronize(dev)
            best = min(best, time.perf_counter() - begin)
        return result, best

    w, reho_seconds = timed(lambda: reho_series(series, neighbours))
    (alff, falff), alff_seconds = timed(lambda: connscale.alff(series, T_R))
    peak = torch.cuda.max_memory_allocated(dev) if dev.type == "cuda" else None
    return {
        "maps": (w, alff, falff),
        "neighbours": neighbours,
        "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "seconds": {
            "reho": reho_seconds,
            "alff": alff_seconds,
            "total": reho_seconds + alff_seconds,
            "neighbours_host": neighbour_seconds,
            "copy_to_device": copy_seconds,
        },
        "peak_device_bytes": peak,
    }


def agreement(ours, reference) -> dict:
    w, alff, falff = ours
    ref_w, ref_alff, ref_falff = reference

    def relative(a, b):
        return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-12)))

    return {
        "reho_max_abs": float(np.nanmax(np.abs(w - ref_w))),
        "reho_nan_equal": bool(np.array_equal(np.isnan(w), np.isnan(ref_w))),
        "alff_max_rel": relative(alff, ref_alff),
        "falff_max_rel": relative(falff, ref_falff),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="connscale's device (auto: CUDA if any).")
    parser.add_argument("--quick", action="store_true", help="A reduced grid (T = 300).")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--processes", type=int, default=os.cpu_count(), help="Reference processes (every core)."
    )
    parser.add_argument("--skip-reference", action="store_true")
    parser.add_argument("--json", type=Path, default=None, help="Write the results here.")
    args = parser.parse_args()

    grid = QUICK if args.quick else FULL
    load_at_start = [round(v, 2) for v in os.getloadavg()]
    start = time.perf_counter()
    mask, x = make_run(grid)
    n_timepoints, n = x.shape
    _print(f"run: {n} voxels x {n_timepoints} volumes ({time.perf_counter() - start:.1f} s)")
    ours = run_connscale(x, mask, args.device, args.repeats)
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "device": ours["device_name"],
        "host": {
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "load_average_at_start": load_at_start,
        },
        "sizes": {"voxels": n, "timepoints": n_timepoints, "grid": grid["shape"], "t_r": T_R},
        "connscale_seconds": ours["seconds"],
        "peak_device_bytes": ours["peak_device_bytes"],
    }
    rows = [
        ("ReHo (27)", ours["seconds"]["reho"]),
        ("ALFF + fALFF", ours["seconds"]["alff"]),
        ("total", ours["seconds"]["total"]),
    ]
    reference_seconds = {}
    if not args.skip_reference:
        reference = run_reference(x, ours["neighbours"], args.processes)
        reference_seconds = reference["seconds"]
        result["reference_processes"] = args.processes
        result["reference_seconds"] = reference_seconds
        result["ratio"] = {
            key: reference_seconds[key] / ours["seconds"][key] for key in ("reho", "alff", "total")
        }
        result["agreement"] = agreement(ours["maps"], reference["maps"])
    _print(f"\n{'map':<14} {'connscale (s)':>14} {'numpy/scipy (s)':>16} {'ratio':>8}")
    for (name, ours_s), key in zip(rows, ("reho", "alff", "total")):
        ref = reference_seconds.get(key)
        ref_text = f"{ref:16.3f} {ref / ours_s:7.1f}x" if ref is not None else f"{'-':>16}"
        _print(f"{name:<14} {ours_s:14.4f} {ref_text}")
    _print(
        f"(connscale on {result['device']}: series already on the device; neighbour list "
        f"{ours['seconds']['neighbours_host']:.2f} s on the host, series copy "
        f"{ours['seconds']['copy_to_device']:.2f} s; reference: {args.processes} processes)"
    )
    result["host"]["load_average_at_end"] = [round(v, 2) for v in os.getloadavg()]
    text = json.dumps(result, indent=2)
    _print(text)
    if args.json:
        args.json.write_text(text)


if __name__ == "__main__":
    main()
