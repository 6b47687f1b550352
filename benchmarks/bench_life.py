"""LiFE benchmark: dipy's FiberModel (the Python peer) vs connscale.life on
the CPU and on CUDA, 500 SBB iterations (reference maxit semantics: 499
updates), fixed iterations (no tolerance stop).

Sizes: 0.04M fibres (real tracking of dipy's bundled small_64D when dipy is
installed, otherwise the phantom; the table says which) and 0.5M, 1M, 3M
fibres of the scaled tractography phantom (connscale.datasets.
simulate_life_phantom: half true bundled streamlines, half false random
segments, 64 directions at b = 1000, 64 × 72 × 60 voxels of 2 mm, node
step 0.5 voxel).

Columns: set-up (ENCODE build + preconditioner), solve (the iterations),
peak memory (CUDA: torch.cuda.max_memory_allocated; CPU: peak RSS growth
over the run, sampled), final objective ½‖Mw − b‖², the model size, and a
memory-traffic floor of the solve at 3.0 TB/s (H100 HBM; see
PERFORMANCE.md) with our ratio to it.

    python benchmarks/bench_life.py --device cpu,cuda        # GPU run (< 6 min on an H100;
                                                             # CPU only up to --cpu-max fibres)
    python benchmarks/bench_life.py --device cpu --quick     # CPU, < 5 min on 2 cores

``--quick``: sizes 0.04M and 0.1M only, 50 iterations instead of 500.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from connscale.datasets.phantom import simulate_life_phantom
from connscale.life import build_model, solve
from connscale.life.operators import LiFEOperator
from connscale.life.streamlines import StreamlineArray

HBM_BYTES_PER_S = 3.0e12
SCALED_SHAPE = (64, 72, 60)


def log(msg):
    print(msg, flush=True)


class PeakRSS:
    """Peak resident memory growth of this process during a block (sampled)."""

    def __init__(self, interval=0.02):
        self.interval = interval

    @staticmethod
    def _rss():
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def __enter__(self):
        self.start = self._rss()
        self.peak = self.start
        self._stop = threading.Event()

        def poll():
            while not self._stop.wait(self.interval):
                self.peak = max(self.peak, self._rss())

        self._thread = threading.Thread(target=poll, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._rss())

    @property
    def growth(self):
        return self.peak - self.start


def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def real_small64d(n_max=40_000):
    """dipy tracking on small_64D (tensor peaks, FA > 0.15 seeds, density 4)."""
    import nibabel as nib
    from dipy.core.gradients import gradient_table
    from dipy.data import default_sphere, get_fnames
    from dipy.direction import peaks_from_model
    from dipy.reconst.dti import TensorModel
    from dipy.tracking import utils
    from dipy.tracking.local_tracking import LocalTracking
    from dipy.tracking.stopping_criterion import ThresholdStoppingCriterion
    from dipy.tracking.streamline import Streamlines

    fimg, fbval, fbvec = get_fnames(name="small_64D")
    img = nib.load(fimg)
    data = np.asarray(img.dataobj).astype(np.float32)
    bvals, bvecs = np.loadtxt(fbval), np.loadtxt(fbvec)
    gtab = gradient_table(bvals, bvecs=bvecs)
    tm = TensorModel(gtab)
    fa = tm.fit(data).fa
    peaks = peaks_from_model(
        tm,
        data,
        default_sphere,
        relative_peak_threshold=0.5,
        min_separation_angle=25,
        mask=fa > 0.1,
    )
    seeds = utils.seeds_from_mask(fa > 0.15, img.affine, density=4)
    sl = Streamlines(
        LocalTracking(peaks, ThresholdStoppingCriterion(fa, 0.1), seeds, img.affine, step_size=0.5)
    )
    sl = [s for s in sl if len(s) >= 2][:n_max]
    return data, bvals, bvecs, img.affine, StreamlineArray.from_list(sl), gtab


def floor_seconds(model, n_iter):
    """Memory traffic of the solve at HBM speed: ~3.5 products per iteration."""
    E, A, nd = model.n_entries, int(model.av_atom.numel()), model.n_directions
    per_product = 28 * E + A * (12 + 8 * nd) + model.n_voxels * nd * 8
    return 3.5 * n_iter * per_product / HBM_BYTES_PER_S


def run_ours(data, bvals, bvecs, affine, sl, *, device, n_iter, formulation="encode", options=None):
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    with PeakRSS() as mem:
        sync(device)
        t0 = time.perf_counter()
        model = build_model(
            data,
            bvals,
            bvecs,
            sl,
            affine=affine,
            sphere=None,
            device=device,
            formulation=formulation,
        )
        LiFEOperator(model).column_norms_sq()  # the preconditioner (solve repeats it: cheap)
        sync(device)
        t1 = time.perf_counter()
        start = time.perf_counter()

        def progress(k, x, objective):
            if k % 100 == 0:
                log(
                    f"    iteration {k}: objective {objective:.6g} "
                    f"({time.perf_counter() - start:.1f} s)"
                )

        fit = solve(model, n_iter=n_iter, tol=None, operator_options=options, callback=progress)
        sync(device)
        t2 = time.perf_counter()
    peak = torch.cuda.max_memory_allocated() if device.startswith("cuda") else mem.growth
    return {
        "setup": t1 - t0,
        "solve": t2 - t1,
        "peak": peak,
        "objective": fit.data_term[-1],
        "n_iter": fit.n_iter,
        "model": model,
        "fit": fit,
        "floor": floor_seconds(model, n_iter),
    }


def run_dipy(data, gtab, affine, sl, model):
    """dipy's FiberModel.fit (its own solver and stopping), objective evaluated
    on our 'dipy'-formulation model of the same streamlines."""
    from dipy.tracking.life import FiberModel

    inv = np.linalg.inv(affine)
    vox = [s @ inv[:3, :3].T + inv[:3, 3] for s in sl]
    with PeakRSS() as mem:
        t0 = time.perf_counter()
        fm = FiberModel(gtab)
        fit = fm.fit(data, vox, np.eye(4))
        t1 = time.perf_counter()
    w = torch.as_tensor(fit.beta[model.fibre_index], device=model.device)
    r = LiFEOperator(model).matvec(w) - model.signal
    obj = 0.5 * float((r.double() ** 2).sum())
    return {"total": t1 - t0, "peak": mem.growth, "objective": obj}


def fmt_bytes(n):
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--device",
        default="cuda" if torch.cuda.is_available() else "cpu",
        help="cpu, cuda, or cpu,cuda for both",
    )
    parser.add_argument("--quick", action="store_true", help="0.04M and 0.1M fibres, 50 iterations")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument(
        "--cpu-max",
        type=int,
        default=100_000,
        help="largest fibre count run on the CPU (500 iterations at 0.5M take many minutes)",
    )
    parser.add_argument("--sizes", default=None, help="comma-separated fibre counts (overrides)")
    parser.add_argument("--iters", type=int, default=None)
    parser.add_argument("--no-dipy", action="store_true", help="skip the dipy peer")
    parser.add_argument(
        "--entry-method",
        choices=["auto", "spmv", "scatter"],
        default="auto",
        help="Φ-entry reduction kernel (auto: spmv on CUDA, scatter on the CPU)",
    )
    parser.add_argument(
        "--pair-method",
        choices=["sddmm", "gather"],
        default="sddmm",
        help="(voxel, atom) dot products of Mᵀy",
    )
    args = parser.parse_args(argv)
    devices = [d.strip() for d in args.device.split(",")]
    n_iter = args.iters or (50 if args.quick else 500)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.sizes:
        sizes = [int(float(s)) for s in args.sizes.split(",")]
    else:
        sizes = [40_000, 100_000] if args.quick else [40_000, 500_000, 1_000_000, 3_000_000]
    try:
        import dipy  # noqa: F401

        have_dipy = not args.no_dipy
    except ImportError:
        have_dipy = False
    log(
        f"# LiFE benchmark: devices {devices}, {n_iter} iterations (maxit; {n_iter - 1} updates), "
        f"sizes {sizes}{' (quick)' if args.quick else ''}"
    )
    if torch.cuda.is_available():
        log(f"GPU: {torch.cuda.get_device_name()}")
    log(
        f"CPU threads: {torch.get_num_threads()}; kernels: entry {args.entry_method}, "
        f"pairs {args.pair_method}"
    )
    rows = []
    for n in sizes:
        gen_dev = "cuda" if torch.cuda.is_available() else "cpu"
        t = time.perf_counter()
        gtab = None
        if n == 40_000 and have_dipy:
            data, bvals, bvecs, affine, sl, gtab = real_small64d(n)
            source = f"small_64D, dipy tracking ({len(sl)} streamlines)"
        else:
            n_true = n // 2
            small = n <= 40_000
            ph = simulate_life_phantom(
                n_true,
                n - n_true,
                shape=(20, 20, 20) if small else SCALED_SHAPE,
                n_bundles=3 if small else 60,
                bundle_radius=2.0 if small else 5.0,
                step=0.25 if small else 0.5,
                random_state=0,
                device=gen_dev,
            )
            data, bvals, bvecs, affine, sl = ph.dwi, ph.bvals, ph.bvecs, ph.affine, ph.streamlines
            source = f"phantom {'20³' if small else '×'.join(map(str, SCALED_SHAPE))}"
        log(
            f"\n## {n:,} fibres — {source}: data ready in {time.perf_counter() - t:.1f} s "
            f"({len(sl.points):,} nodes)"
        )
        formulation = "dipy" if gtab is not None else "encode"
        ref_obj = None
        for dev in devices:
            if dev == "cpu" and n > args.cpu_max:
                log(f"  ours {dev}: skipped above --cpu-max {args.cpu_max:,} fibres")
                continue
            try:
                res = run_ours(
                    data,
                    bvals,
                    bvecs,
                    affine,
                    sl,
                    device=dev,
                    n_iter=n_iter,
                    formulation=formulation,
                    options={"entry_method": args.entry_method, "pair_method": args.pair_method},
                )
            except Exception as exc:  # noqa: BLE001 - report and go on with the next case
                log(f"  ours {dev}: FAILED: {type(exc).__name__}: {str(exc)[:500]}")
                if dev.startswith("cuda"):
                    torch.cuda.empty_cache()
                continue
            m = res["model"]
            ref_obj = res["objective"] if ref_obj is None else ref_obj
            log(
                f"  ours {dev}: set-up {res['setup']:.2f} s, solve {res['solve']:.2f} s "
                f"({1e3 * res['solve'] / max(n_iter - 1, 1):.2f} ms/it), peak "
                f"{fmt_bytes(res['peak'])}, "
                f"objective {res['objective']:.6g}; {m.n_fibres:,} fibres, {m.n_voxels:,} voxels, "
                f"{m.n_entries:,} Φ entries, {int(m.av_atom.numel()):,} (voxel, atom) pairs"
            )
            rows.append(
                {
                    "n": n,
                    "source": source,
                    "who": f"connscale {dev}",
                    **res,
                    "entries": m.n_entries,
                    "voxels": m.n_voxels,
                }
            )
            del res, m
        if gtab is not None and have_dipy:
            model = (
                rows[-1]["model"]
                if rows and rows[-1]["n"] == n
                else build_model(
                    data, bvals, bvecs, sl, affine=affine, device="cpu", formulation="dipy"
                )
            )
            log("  dipy FiberModel: running (its own solver and stopping rule) ...")
            peer = run_dipy(data, gtab, affine, sl, model)
            log(
                f"  dipy: {peer['total']:.2f} s (set-up + solve), peak {fmt_bytes(peer['peak'])}, "
                f"objective {peer['objective']:.6g}"
            )
            rows.append(
                {
                    "n": n,
                    "source": source,
                    "who": "dipy FiberModel",
                    "setup": float("nan"),
                    "solve": float("nan"),
                    "total": peer["total"],
                    "peak": peer["peak"],
                    "objective": peer["objective"],
                    "n_iter": None,
                    "floor": float("nan"),
                    "entries": None,
                    "voxels": None,
                }
            )
        for r in rows:
            r.pop("model", None)
            r.pop("fit", None)

    log(
        "\n| fibres | data | who | set-up (s) | solve (s) | total (s) | iterations | peak memory | "
        "final objective | Φ entries | solve floor @3 TB/s (s) | solve / floor |"
    )
    log("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        total = r.get("total", r["setup"] + r["solve"])
        ratio = (
            r["solve"] / r["floor"] if r["floor"] == r["floor"] and r["floor"] > 0 else float("nan")
        )
        it = "own stop" if r["n_iter"] is None else f"{r['n_iter']}"
        log(
            f"| {r['n']:,} | {r['source']} | {r['who']} | {r['setup']:.2f} | "
            f"{r['solve']:.2f} | {total:.2f} | "
            f"{it} | {fmt_bytes(r['peak'])} | {r['objective']:.6g} | "
            f"{'' if r['entries'] is None else format(r['entries'], ',')} | "
            f"{r['floor']:.3f} | {ratio:.0f}× |"
        )
    by = {(r["n"], r["who"]): r for r in rows}
    for n in sizes:
        cpu, gpu, peer = (
            by.get((n, "connscale cpu")),
            by.get((n, "connscale cuda")),
            by.get((n, "dipy FiberModel")),
        )
        if cpu and gpu:
            log(
                f"- {n:,} fibres: CUDA vs CPU total "
                f"{(cpu['setup'] + cpu['solve']) / (gpu['setup'] + gpu['solve']):.1f}×"
            )
        if peer and (gpu or cpu):
            ours = gpu or cpu
            log(
                f"- {n:,} fibres: dipy {peer['total']:.1f} s vs ours ({ours['who']}) "
                f"{ours['setup'] + ours['solve']:.1f} s for {n_iter} iterations"
            )
    log(
        "Reference points: ReAl-LiFE 50–100× over 1-core CPU LiFE (98× at 2M fibres, GTX 1080 Ti); "
        "encode 131 min and 10–12 GB for 500k streamlines."
    )


if __name__ == "__main__":
    main()
