"""DFC states benchmark: Lloyd iterations of k-means on a cohort's windows.

Workload (issue 15): 300 subjects × 150 windows × 19,900 edges (200
regions) = 45,000 × 19,900 float32 (3.6 GB), k = 5, 100 Lloyd iterations
from the same initial centres (all 100 are run: no early stop). Windows are
drawn around 5 planted states with noise.

Rows of the table:

* ``fused``: connscale's Lloyd loop with the fused Triton pass (CUDA);
* ``torch``: the same loop through the pure-torch path (GEMM distances,
  ``min``, float64 ``index_add_``);
* ``sklearn``: ``sklearn.cluster.KMeans(init=centres, n_init=1, tol=0,
  algorithm='lloyd')`` on the host's cores, timed at ``--sklearn-iters``
  iterations and scaled per iteration.

Floor: one read of the windows per iteration at the device's measured read
bandwidth (a ``sum`` over the same array). Labels are compared with
scikit-learn's after ``--sklearn-iters`` iterations from the same centres
(identical labels and inertia within 1e-4 relative are required).

    python benchmarks/bench_states.py --device cuda               # H100: ~1 min
    python benchmarks/bench_states.py --device cpu --subjects 20 --regions 60
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch

from connscale.states import _kmeans as km


def log(*args):
    print(*args, flush=True)


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def windows(n_rows, n_edges, k, seed=0):
    """Rows around k planted states (uniform in [-0.6, 0.6]), noise sd 0.25."""
    gen = torch.Generator().manual_seed(seed)
    states = torch.rand(k, n_edges, generator=gen) * 1.2 - 0.6
    labels = torch.randint(0, k, (n_rows,), generator=gen)
    x = torch.randn(n_rows, n_edges, generator=gen)
    x.mul_(0.25).add_(states[labels])
    return x


def read_bandwidth(x):
    """Bytes per second of one read of ``x`` (the best of an amax and a sum)."""
    best = 0.0
    for reduce in (torch.amax, torch.sum):
        reduce(x)
        synchronize(x.device)
        start = time.perf_counter()
        for _ in range(5):
            reduce(x)
        synchronize(x.device)
        best = max(best, 5 * x.numel() * x.element_size() / (time.perf_counter() - start))
    return best


def timed(fn, repeats=5):
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeats


def tune(prepared, centres, n_bytes):
    """Time the fused pass and the centre sums over launch configurations;
    keep the fastest in km.fused.CONFIG / USE_DOT."""
    n = prepared.x.shape[0]
    state = km._FusedState(n, prepared.x.device)
    labels = state.assign(prepared, centres, torch.full((n,), -1, device=prepared.x.device))[0]
    labels = labels.clone()
    c32 = centres.to(torch.float32)
    gemm = timed(lambda: prepared.x @ c32.T)
    log(f"cuBLAS x @ C.T: {1e3 * gemm:.2f} ms = {n_bytes / gemm / 1e12:.2f} TB/s")
    found = {}
    for use_dot, key, configs in (
            (True, "dot", [(bm, be, w, st) for bm in (32, 64, 128) for be in (32, 64, 128)
                           for w in (4, 8) for st in (2, 4) if bm * be <= 8192]),
            (False, "sums", [(bm, be, w, st) for bm in (8, 16, 32) for be in (64, 128, 256)
                             for w in (4,) for st in (1, 3) if bm * be <= 4096])):
        km.fused.USE_DOT = use_dot
        for config in configs:
            km.fused.CONFIG[key] = config
            try:
                seconds = timed(lambda: state.assign(prepared, centres, labels))
            except Exception as exc:  # noqa: BLE001 - a configuration that does not compile
                log(f"  {key} {config}: failed ({type(exc).__name__})")
                continue
            found[(use_dot, key, config)] = seconds
    (use_dot, key, config), seconds = min(found.items(), key=lambda item: item[1])
    for (d, kname, cfg), sec in sorted(found.items(), key=lambda item: item[1])[:8]:
        log(f"  pass {kname} {cfg}: {1e3 * sec:.2f} ms = {n_bytes / sec / 1e12:.2f} TB/s")
    km.fused.USE_DOT = use_dot
    km.fused.CONFIG[key] = config
    log(f"fused pass: best {key} {config}: {1e3 * seconds:.2f} ms = "
        f"{n_bytes / seconds / 1e12:.2f} TB/s")
    sums = {}
    for config in [(bm, be, w, st) for bm in (4, 8, 16) for be in (32, 64, 128)
                   for w in (4,) for st in (1, 2) if bm * be <= 1024]:
        km.fused.CONFIG["centre_sums"] = config
        try:
            sums[config] = timed(lambda: km.fused.centre_sums(prepared.x, labels, 5), 3)
        except Exception as exc:  # noqa: BLE001
            log(f"  centre_sums {config}: failed ({type(exc).__name__})")
    config = min(sums, key=sums.get)
    km.fused.CONFIG["centre_sums"] = config
    torch_sums = timed(lambda: km.sums_torch(prepared.x, labels, 5), 3)
    log(f"centre sums: best {config}: {1e3 * sums[config]:.2f} ms "
        f"({n_bytes / sums[config] / 1e12:.2f} TB/s); torch one-hot float64 GEMM "
        f"{1e3 * torch_sums:.2f} ms")
    log(f"CONFIG = {km.fused.CONFIG}, USE_DOT = {km.fused.USE_DOT}")


def time_lloyd(prepared, init, iters, use_triton):
    km.lloyd(prepared, init, max_iter=2, use_triton=use_triton, check_convergence=False)  # warm
    synchronize(prepared.x.device)
    start = time.perf_counter()
    result = km.lloyd(prepared, init, max_iter=iters, use_triton=use_triton,
                      check_convergence=False)
    synchronize(prepared.x.device)
    return time.perf_counter() - start, result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--subjects", type=int, default=300)
    parser.add_argument("--windows", type=int, default=150)
    parser.add_argument("--regions", type=int, default=200)
    parser.add_argument("--states", type=int, default=5)
    parser.add_argument("--iters", type=int, default=100)
    parser.add_argument("--sklearn-iters", type=int, default=3)
    parser.add_argument("--l1-iters", type=int, default=5)
    parser.add_argument("--no-sklearn", action="store_true")
    parser.add_argument("--tune", action="store_true",
                        help="Time the fused kernels' launch configurations first; keep the best.")
    args = parser.parse_args()

    device = torch.device(args.device)
    n = args.subjects * args.windows
    e = args.regions * (args.regions - 1) // 2
    k = args.states
    log(f"# {n:,} windows x {e:,} edges float32 ({n * e * 4 / 1e9:.2f} GB), k={k}, "
        f"device={device}"
        + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else "")
        + f", host threads {torch.get_num_threads()}")
    start = time.perf_counter()
    host = windows(n, e, k)
    log(f"data generated in {time.perf_counter() - start:.1f} s")
    init_rows = np.random.default_rng(1).choice(n, k, replace=False)
    init = host[init_rows].to(torch.float64)

    rows = []
    start = time.perf_counter()
    x = host.to(device, copy=True)
    synchronize(device)
    upload = time.perf_counter() - start
    bandwidth = read_bandwidth(x)
    floor = args.iters * n * e * 4 / bandwidth
    log(f"upload {upload:.3f} s; read bandwidth {bandwidth / 1e12:.2f} TB/s; floor for "
        f"{args.iters} iterations {floor:.3f} s")

    start = time.perf_counter()
    prepared = km.Prepared(x, "euclidean", owned=True)
    synchronize(device)
    log(f"prepare (centre the columns, row norms): {time.perf_counter() - start:.3f} s")
    init_p = prepared.to_prepared(init.to(device))
    variants = [("torch", False)]
    if km.fused.usable(prepared.x, k):
        variants.insert(0, ("fused", True))
        if args.tune:
            tune(prepared, init_p, n * e * 4)
    results = {}
    for name, use_triton in variants:
        seconds, result = time_lloyd(prepared, init_p, args.iters, use_triton)
        results[name] = result
        rows.append((name, "euclidean", args.iters, seconds, seconds / args.iters, floor))
        log(f"{name}: {args.iters} iterations in {seconds:.3f} s "
            f"({1e3 * seconds / args.iters:.2f} ms each), inertia {result.inertia:.6e}")
        if use_triton:
            state = km._FusedState(n, device)
            one = timed(lambda s=state, r=result: s.assign(prepared, r.centres, r.labels), 10)
            log(f"one fused assignment pass: {1e3 * one:.2f} ms = "
                f"{n * e * 4 / one / 1e12:.2f} TB/s")
    if len(results) == 2:
        same = torch.equal(results["fused"].labels, results["torch"].labels)
        log(f"fused vs torch after {args.iters} iterations: labels identical {same}, inertia "
            f"rel. diff {abs(results['fused'].inertia / results['torch'].inertia - 1):.2e}")

    sk_per_iter = None
    if not args.no_sklearn:
        from sklearn.cluster import KMeans

        m = args.sklearn_iters
        data = host.numpy()
        fits = {}
        KMeans(k, init=init.numpy().astype(np.float32), n_init=1, max_iter=1).fit(data[:1000])
        for iters in (1, 1 + m):
            start = time.perf_counter()
            sk = KMeans(k, init=init.numpy().astype(np.float32), n_init=1, max_iter=iters,
                        tol=0.0, algorithm="lloyd").fit(data)
            fits[iters] = (time.perf_counter() - start, sk.n_iter_)
        sk_seconds = fits[1 + m][0]
        # Per iteration: the difference of an m- and a 1-iteration fit (the
        # one-off validation, copy and centring of X cancel).
        sk_per_iter = (fits[1 + m][0] - fits[1][0]) / max(fits[1 + m][1] - fits[1][1], 1)
        log(f"sklearn: {fits[1][1]} iteration {fits[1][0]:.2f} s, {sk.n_iter_} iterations "
            f"{sk_seconds:.2f} s: {sk_per_iter:.3f} s per iteration on {os.cpu_count()} cores")
        ours = km.lloyd(prepared, init_p, max_iter=1 + m)  # same semantics as sklearn's loop
        labels = ours.labels.cpu().numpy()
        centres = prepared.from_prepared(ours.centres).cpu().numpy()
        log(f"vs sklearn after {1 + m} iterations: labels identical {bool((labels == sk.labels_).all())} "
            f"({int((labels != sk.labels_).sum())} differ), inertia rel. diff "
            f"{abs(ours.inertia / sk.inertia_ - 1):.2e}, centres max abs diff "
            f"{np.abs(centres - sk.cluster_centers_).max():.2e}")
        rows.append(("sklearn", "euclidean", 1 + m, sk_seconds, sk_per_iter, None))

    del prepared, results
    prepared = km.Prepared(host.to(device, copy=True), "l1", owned=True)
    init_p = prepared.to_prepared(init.to(device))
    floor_l1 = args.l1_iters * n * e * 4 / bandwidth
    for name, use_triton in variants:
        seconds, result = time_lloyd(prepared, init_p, args.l1_iters, use_triton)
        rows.append((name, "l1", args.l1_iters, seconds, seconds / args.l1_iters, floor_l1))
        log(f"l1 {name}: {args.l1_iters} iterations in {seconds:.3f} s")
        start = time.perf_counter()
        _ = (km._FusedState(n, device).assign(prepared, init_p, result.labels)[:2]
                        if use_triton else km.assign_torch(prepared, init_p))
        synchronize(device)
        log(f"l1 {name}: one assignment pass {1e3 * (time.perf_counter() - start):.1f} ms "
            f"(the rest of an iteration is the medians)")

    log("")
    log("| n × E | k | metric | device | path | iterations | time (s) | per iteration (ms) "
        "| floor (s) | time / floor | speed-up vs sklearn per iteration |")
    log("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, metric, iters, seconds, per_iter, fl in rows:
        ratio = f"{seconds / fl:.2f}" if fl else ""
        speed = f"{sk_per_iter / per_iter:.0f}×" if sk_per_iter and name != "sklearn" and \
            metric == "euclidean" else ""
        where = "host" if name == "sklearn" else str(device.type)
        log(f"| {n:,} × {e:,} | {k} | {metric} | {where} | {name} | {iters} | {seconds:.3f} | "
            f"{1e3 * per_iter:.2f} | {fl if fl is None else round(fl, 3)} | {ratio} | {speed} |")


if __name__ == "__main__":
    main()
