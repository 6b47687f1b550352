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
    """Bytes per second of one read of ``x`` (a float64 sum over it)."""
    torch.sum(x, dtype=torch.float64)
    synchronize(x.device)
    start = time.perf_counter()
    for _ in range(5):
        torch.sum(x, dtype=torch.float64)
    synchronize(x.device)
    return 5 * x.numel() * x.element_size() / (time.perf_counter() - start)


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
        # The other product of the fused pass (per-centre sums instead of tl.dot).
        km.fused.USE_DOT = not km.fused.USE_DOT
        seconds, result = time_lloyd(prepared, init_p, args.iters, True)
        other = "fused-dot" if km.fused.USE_DOT else "fused-sums"
        km.fused.USE_DOT = not km.fused.USE_DOT
        rows.append((other, "euclidean", args.iters, seconds, seconds / args.iters, floor))
        log(f"{other}: {args.iters} iterations in {seconds:.3f} s")
    results = {}
    for name, use_triton in variants:
        seconds, result = time_lloyd(prepared, init_p, args.iters, use_triton)
        results[name] = result
        rows.append((name, "euclidean", args.iters, seconds, seconds / args.iters, floor))
        log(f"{name}: {args.iters} iterations in {seconds:.3f} s "
            f"({1e3 * seconds / args.iters:.2f} ms each), inertia {result.inertia:.6e}")
        if use_triton:
            state = km._FusedState(n, device)
            state.assign(prepared, result.centres, result.labels, None, None)
            synchronize(device)
            start = time.perf_counter()
            for _ in range(10):
                state.assign(prepared, result.centres, result.labels, None, None)
            synchronize(device)
            one = (time.perf_counter() - start) / 10
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
        for iters in (1, m):
            start = time.perf_counter()
            sk = KMeans(k, init=init.numpy().astype(np.float32), n_init=1, max_iter=iters,
                        tol=0.0, algorithm="lloyd").fit(data)
            fits[iters] = (time.perf_counter() - start, sk.n_iter_)
        sk_seconds = fits[m][0]
        # Per iteration: the difference of an m- and a 1-iteration fit (the
        # one-off validation, copy and centring of X cancel).
        sk_per_iter = (fits[m][0] - fits[1][0]) / max(fits[m][1] - fits[1][1], 1)
        log(f"sklearn: 1 iteration {fits[1][0]:.2f} s, {sk.n_iter_} iterations "
            f"{sk_seconds:.2f} s: {sk_per_iter:.3f} s per iteration on {os.cpu_count()} cores")
        ours = km.lloyd(prepared, init_p, max_iter=m)  # same semantics as sklearn's loop
        labels = ours.labels.cpu().numpy()
        centres = prepared.from_prepared(ours.centres).cpu().numpy()
        log(f"vs sklearn after {m} iterations: labels identical {bool((labels == sk.labels_).all())} "
            f"({int((labels != sk.labels_).sum())} differ), inertia rel. diff "
            f"{abs(ours.inertia / sk.inertia_ - 1):.2e}, centres max abs diff "
            f"{np.abs(centres - sk.cluster_centers_).max():.2e}")
        rows.append(("sklearn", "euclidean", m, sk_seconds, sk_per_iter, None))

    del prepared, results
    prepared = km.Prepared(host.to(device, copy=True), "l1", owned=True)
    init_p = prepared.to_prepared(init.to(device))
    floor_l1 = args.l1_iters * n * e * 4 / bandwidth
    for name, use_triton in variants:
        seconds, result = time_lloyd(prepared, init_p, args.l1_iters, use_triton)
        rows.append((name, "l1", args.l1_iters, seconds, seconds / args.l1_iters, floor_l1))
        log(f"l1 {name}: {args.l1_iters} iterations in {seconds:.3f} s")
        start = time.perf_counter()
        labels, dist = (km._FusedState(n, device).assign(prepared, init_p, result.labels, None,
                                                         None)[:2]
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
