"""DFC states benchmark: Lloyd iterations of k-means on a cohort's windows.

Workload (issue 15): 300 subjects × 150 windows × 19,900 edges (200
regions) = 45,000 × 19,900 float32 (3.6 GB), k = 5, 100 Lloyd iterations
from the same initial centres (all 100 are run: no early stop). Windows are
drawn around 5 planted states with noise.

Rows of the table:

* ``fused``: connscale's Lloyd loop with the fused Triton pass (CUDA);
* ``half``: the same loop with the half-precision assignment (a float16
  copy of the windows decides, the float32 pass confirms the near ties:
  ``connscale.states._half``, its 'fma' kernel); its confirmed rows per
  iteration and whether its labels equal ``fused``'s are reported;
* ``int8``: the same loop reading an int8 copy with a scale per row (exact
  integer dot products on the tensor cores: ``connscale.states._int8``, the
  default); ``int8-eager``: the same without the CUDA graph of an
  iteration (``_kmeans.GRAPHS = False``: Python launches every kernel);
  ``half-dot`` (with ``--half-dot``): the half pass's tensor-core kernel
  (``_half.KERNEL = 'dot'``);
* ``torch``: the same loop through the pure-torch path (GEMM distances,
  ``min``, float64 ``index_add_``);
* ``sklearn``: ``sklearn.cluster.KMeans(init=centres, n_init=1, tol=0,
  algorithm='lloyd')`` on the host's cores, fitted at the two
  ``--sklearn-iters`` counts (2 and 32, the better of two fits each): the
  difference of the times over the
  difference of the iterations run (``n_iter_`` is checked to equal the
  count asked for). Planted states converge within a few iterations, where
  sklearn stops, so this is measured on unclustered windows (noise of the
  same size), whose labels keep changing; our loop is timed on both.

Floor: one read of the windows per iteration at the device's measured read
bandwidth (an ``amax`` or ``sum`` over the same array). Labels are compared
with scikit-learn's after the larger count of iterations from the same
centres (identical labels and inertia within 1e-4 relative are required).

    python benchmarks/bench_states.py --device cuda               # H100: ~5 min
    python benchmarks/bench_states.py --device cpu --subjects 20 --regions 60
"""

from __future__ import annotations

import argparse
import os
import time
from contextlib import contextmanager

import numpy as np
import torch

from connscale.states import _kmeans as km

#: The half pass's kernel of each half-precision row of the table.
HALF_KERNELS = {"half": "fma", "half-dot": "dot"}
#: Rows of the table: (name, use_triton, assign, CUDA graphs).
VARIANTS = {
    "fused": (True, "fp32", True),
    "half": (True, "half", True),
    "half-dot": (True, "half", True),
    "int8": (True, "int8", True),
    "int8-eager": (True, "int8", False),
    "torch": (False, "fp32", False),
}


def log(*args):
    print(*args, flush=True)


@contextmanager
def half_kernel(name):
    """``_half.KERNEL`` and ``_kmeans.GRAPHS`` set for the table's row
    ``name`` inside the block."""
    saved = km._half.KERNEL, km.GRAPHS
    km._half.KERNEL = HALF_KERNELS.get(name, saved[0])
    km.GRAPHS = VARIANTS.get(name, (None, None, saved[1]))[2]
    try:
        yield
    finally:
        km._half.KERNEL, km.GRAPHS = saved


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
    cuda = torch.cuda.is_available()
    fn()
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    if cuda:
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeats


def one_pass(run, centres):
    """One fused assignment pass (labels, scores, change count); the coarse
    pass (and its confirmations) when ``run`` has a coarse copy."""
    return run.assign(
        centres,
        torch.zeros(1, dtype=torch.int32, device=centres.device),
        distances=run.coarse is None,
    )


def replayed(run, repeats=50):
    """Seconds of one Lloyd iteration of ``run`` replayed from its CUDA graph
    (the state converged: no label moves), after an eager iteration."""
    device = run.prepared.x.device
    dtypes = (torch.int32, torch.float64, torch.bool)
    outputs = tuple(torch.zeros(1, dtype=dtype, device=device) for dtype in dtypes)
    run.step(*outputs, relocate=False)
    graph = km._StepGraph(run)
    return timed(lambda: graph.step(*outputs), repeats)


def dense_sums(prepared, labels, k):
    """The float64 centre sums of all rows through the moved-rows kernel."""
    n = labels.shape[0]
    index = torch.arange(n, dtype=torch.int32, device=labels.device)
    count = torch.full((1,), n, dtype=torch.int32, device=labels.device)
    return km.fused.moved_sums(prepared.x, index, count, labels, torch.full_like(labels, -1), k)


def tune(prepared, centres, n_bytes):
    """Time the fused pass and the centre sums over launch configurations;
    keep the fastest in km.fused.CONFIG."""
    k = centres.shape[0]
    run = km._Run(prepared, centres, use_triton=True)
    labels = one_pass(run, centres)[0]
    c32 = centres.to(torch.float32)
    gemm = timed(lambda: prepared.x @ c32.T)
    log(f"cuBLAS x @ C.T: {1e3 * gemm:.2f} ms = {n_bytes / gemm / 1e12:.2f} TB/s")
    half = prepared.half()
    half_run = km._Run(prepared, centres, use_triton=True, coarse=("half", half))
    int8 = prepared.int8()
    int8_run = km._Run(prepared, centres, use_triton=True, coarse=("int8", int8))
    half_bytes = n_bytes // 2
    for key, configs, fn in (
        (
            "int8",
            [
                (128, 256, 8, 2),
                (128, 256, 4, 2),
                (128, 512, 8, 3),
                (64, 512, 4, 3),
                (64, 256, 4, 4),
                (128, 128, 8, 3),
            ]
            if int8 is not None
            else [],
            lambda: one_pass(int8_run, centres),
        ),
        (
            "dot",
            [
                (64, 64, 4, 3),
                (64, 128, 4, 3),
                (64, 128, 4, 4),
                (64, 256, 4, 3),
                (64, 128, 8, 3),
                (64, 256, 8, 3),
                (128, 64, 4, 4),
                (128, 64, 8, 3),
                (128, 128, 4, 3),
                (128, 128, 8, 3),
                (128, 128, 8, 4),
                (128, 256, 8, 3),
            ]
            if half is not None
            else [],
            lambda: one_pass(half_run, centres),
        ),
        (
            "half",
            [
                (16, 128, 4, 1),
                (32, 128, 4, 1),
                (32, 128, 8, 1),
                (32, 256, 8, 1),
                (64, 128, 8, 1),
                (16, 256, 4, 1),
            ]
            if half is not None
            else [],
            lambda: one_pass(half_run, centres),
        ),
        (
            "assign",
            [
                (8, 128, 4, 1),
                (16, 64, 4, 1),
                (16, 128, 4, 1),
                (16, 128, 4, 3),
                (32, 64, 4, 1),
                (32, 64, 4, 3),
                (32, 128, 8, 1),
                (16, 256, 8, 1),
                (64, 64, 8, 1),
            ],
            lambda: one_pass(run, centres),
        ),
        (
            "sums",
            [
                (4, 128, 4, 1),
                (8, 64, 4, 1),
                (8, 128, 4, 1),
                (16, 64, 4, 1),
                (8, 256, 8, 1),
                (16, 128, 8, 1),
            ],
            lambda: dense_sums(prepared, labels, k),
        ),
    ):
        if not configs:
            continue
        half_pass = key in ("half", "dot")
        table = km._half.CONFIG if half_pass else km.fused.CONFIG
        found = {}
        with half_kernel("half-dot" if key == "dot" else "half"):
            for config in configs:
                if key == "int8":
                    km._int8.CONFIG = config
                else:
                    table[key] = config
                try:
                    found[config] = timed(fn, 5)
                except Exception as exc:  # noqa: BLE001 - a configuration that does not compile
                    log(f"  {key} {config}: failed ({type(exc).__name__}: {exc})"[:300])
        for config, sec in sorted(found.items(), key=lambda item: item[1]):
            log(
                f"  {key} {config}: {1e3 * sec:.2f} ms = {n_bytes / sec / 1e12:.2f} TB/s of "
                "float32 windows"
                + (f", {half_bytes / sec / 1e12:.2f} TB/s of float16" if half_pass else "")
                + (f", {n_bytes / 4 / sec / 1e12:.2f} TB/s of int8" if key == "int8" else "")
            )
        if key == "int8":
            km._int8.CONFIG = min(found, key=found.get)
        else:
            table[key] = min(found, key=found.get)
    log(
        f"CONFIG = {km.fused.CONFIG}, half CONFIG = {km._half.CONFIG}, "
        f"int8 CONFIG = {km._int8.CONFIG}"
    )


def confirmation(result, fused):
    """The half-precision run's confirmations and agreement with the fused run."""
    if result.confirmed is None:
        return ""
    text = (
        f"; {result.coarse} copy, {result.confirmed:,} rows confirmed in float32 over "
        f"{result.coarse_passes} passes "
        f"({result.confirmed / max(result.coarse_passes, 1):,.0f} per pass)"
    )
    if fused is not None:
        text += (
            f"; labels = fused {torch.equal(result.labels, fused.labels)}, inertia "
            f"rel. diff {abs(result.inertia / fused.inertia - 1):.1e}"
        )
    return text


def time_lloyd(prepared, init, iters, use_triton, assign="fp32", name=""):
    options = dict(use_triton=use_triton, assign=assign, check_convergence=False)
    with half_kernel(name):
        km.lloyd(prepared, init, max_iter=2, **options)  # warm (and the float16 copy, once)
        synchronize(prepared.x.device)
        start = time.perf_counter()
        result = km.lloyd(prepared, init, max_iter=iters, **options)
        synchronize(prepared.x.device)
    return time.perf_counter() - start, result


def sklearn_per_iteration(data, init, counts, k):
    """Seconds per Lloyd iteration of sklearn's KMeans: fits of ``counts``
    (two) iterations from ``init``, the difference over the difference of
    their ``n_iter_`` (the one-off validation, copy and centring cancel)."""
    from sklearn.cluster import KMeans

    KMeans(k, init=init, n_init=1, max_iter=1).fit(data[:1000])  # imports, thread pool
    fits = {}
    for iters in counts:
        best = None
        for _ in range(2):  # the one-off work varies: the better of two fits
            start = time.perf_counter()
            sk = KMeans(k, init=init, n_init=1, max_iter=iters, tol=0.0, algorithm="lloyd").fit(
                data
            )
            seconds = time.perf_counter() - start
            best = seconds if best is None else min(best, seconds)
        fits[iters] = (best, sk.n_iter_, sk)
        log(f"sklearn max_iter={iters}: {fits[iters][0]:.2f} s, n_iter_={sk.n_iter_}")
    (t0, n0, _), (t1, n1, sk) = fits[counts[0]], fits[counts[1]]
    honest = (n0, n1) == tuple(counts)
    if not honest:
        log("WARNING: sklearn stopped early: per iteration from the n_iter_ it ran")
    return (t1 - t0) / (n1 - n0) if n1 - n0 >= 4 else None, honest, sk


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--subjects", type=int, default=300)
    parser.add_argument("--windows", type=int, default=150)
    parser.add_argument("--regions", type=int, default=200)
    parser.add_argument("--states", type=int, default=5)
    parser.add_argument("--iters", type=int, default=100)
    parser.add_argument(
        "--sklearn-iters",
        type=int,
        nargs=2,
        default=(2, 32),
        help="The two iteration counts of the sklearn fits (default 2 32).",
    )
    parser.add_argument("--l1-iters", type=int, default=3)
    parser.add_argument("--no-sklearn", action="store_true")
    parser.add_argument(
        "--half-dot", action="store_true", help="Also time the half pass's tensor-core kernel."
    )
    parser.add_argument(
        "--tune",
        action="store_true",
        help="Time the fused kernels' launch configurations first; keep the best.",
    )
    args = parser.parse_args()

    device = torch.device(args.device)
    n = args.subjects * args.windows
    e = args.regions * (args.regions - 1) // 2
    k = args.states
    n_bytes = n * e * 4
    log(
        f"# {n:,} windows x {e:,} edges float32 ({n_bytes / 1e9:.2f} GB), k={k}, "
        f"device={device}"
        + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else "")
        + f", host threads {torch.get_num_threads()}, cpu_count {os.cpu_count()}"
    )
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
    floor = args.iters * n_bytes / bandwidth
    log(
        f"upload {upload:.3f} s; read bandwidth {bandwidth / 1e12:.2f} TB/s; floor for "
        f"{args.iters} iterations {floor:.3f} s"
    )

    start = time.perf_counter()
    prepared = km.Prepared(x, "euclidean", owned=True)
    synchronize(device)
    log(f"prepare (centre the columns, row norms): {time.perf_counter() - start:.3f} s")
    init_p = prepared.to_prepared(init.to(device))
    names = ["torch"]
    if km.fused.usable(prepared.x, k):
        names[:0] = ["fused", "half"] + ["half-dot"] * args.half_dot + ["int8", "int8-eager"]
        copies = {}
        for kind in ("half", "int8"):
            start = time.perf_counter()
            copies[kind] = prepared.coarse(kind)
            synchronize(device)
            log(
                f"{kind} copy of the windows: {time.perf_counter() - start:.3f} s"
                if copies[kind] is not None
                else f"no {kind} copy (memory or range): its rows fall back"
            )
        if args.tune:
            tune(prepared, init_p, n_bytes)
    variants = [(name, *VARIANTS[name][:2]) for name in names]
    results = {}
    for name, use_triton, assign in variants:
        seconds, result = time_lloyd(prepared, init_p, args.iters, use_triton, assign, name)
        results[name] = result
        rows.append(("planted", name, "euclidean", args.iters, seconds, floor, result))
        log(
            f"{name}: {args.iters} iterations in {seconds:.3f} s "
            f"({1e3 * seconds / args.iters:.2f} ms each), inertia {result.inertia:.6e}"
            + confirmation(result, results.get("fused"))
        )
        if use_triton and not name.endswith("-eager"):
            kind = result.coarse
            run = km._Run(
                prepared,
                result.centres,
                use_triton=True,
                coarse=None if kind is None else (kind, copies[kind]),
            )
            with half_kernel(name):
                if kind is None:
                    one = timed(lambda r=run, c=result.centres: one_pass(r, c), 10)
                    log(
                        f"one {name} assignment pass: {1e3 * one:.2f} ms = "
                        f"{n_bytes / one / 1e12:.2f} TB/s of float32 windows"
                    )
                log(f"one converged {name} iteration, replayed: {1e3 * replayed(run):.3f} ms")
            if kind is not None:
                continue
            dense = timed(lambda r=result: dense_sums(prepared, r.labels, k), 5)
            log(
                f"centre sums of all rows: {1e3 * dense:.2f} ms = {n_bytes / dense / 1e12:.2f} TB/s"
            )
    if "fused" in results:
        same = torch.equal(results["fused"].labels, results["torch"].labels)
        log(
            f"fused vs torch after {args.iters} iterations: labels identical {same}, inertia "
            f"rel. diff {abs(results['fused'].inertia / results['torch'].inertia - 1):.2e}"
        )
    converged = km.lloyd(prepared, init_p, max_iter=args.iters)
    log(f"planted data: labels stop changing at iteration {converged.n_iter}")
    if not args.no_sklearn:
        from sklearn.cluster import KMeans

        sk = KMeans(
            k,
            init=init.numpy().astype(np.float32),
            n_init=1,
            max_iter=args.iters,
            tol=0.0,
            algorithm="lloyd",
        ).fit(host.numpy())
        centres = prepared.from_prepared(converged.centres).cpu().numpy()
        log(
            f"planted data vs sklearn (n_iter {converged.n_iter} / {sk.n_iter_}): labels "
            f"identical {bool((converged.labels.cpu().numpy() == sk.labels_).all())}, inertia "
            f"rel. diff {abs(converged.inertia / sk.inertia_ - 1):.2e}, centres max abs diff "
            f"{np.abs(centres - sk.cluster_centers_).max():.2e}"
        )
    del prepared, results, x

    # Unclustered windows (noise): labels keep changing, so sklearn runs every
    # iteration asked for and our centre sums follow many moved rows.
    gen = torch.Generator().manual_seed(2)
    noise = torch.randn(n, e, generator=gen)
    init_noise = noise[init_rows].to(torch.float64)
    prepared = km.Prepared(noise.to(device, copy=True), "euclidean", owned=True)
    init_p = prepared.to_prepared(init_noise.to(device))
    results = {}
    for name, use_triton, assign in variants:
        seconds, result = time_lloyd(prepared, init_p, args.iters, use_triton, assign, name)
        results[name] = result
        rows.append(("noise", name, "euclidean", args.iters, seconds, floor, result))
        log(
            f"noise {name}: {args.iters} iterations in {seconds:.3f} s "
            f"({1e3 * seconds / args.iters:.2f} ms each)"
            + confirmation(result, results.get("fused"))
        )
    sk_per_iter = None
    if not args.no_sklearn:
        counts = tuple(args.sklearn_iters)
        sk_per_iter, honest, sk = sklearn_per_iteration(
            noise.numpy(), init_noise.numpy().astype(np.float32), counts, k
        )
        if sk_per_iter is not None:
            log(
                f"sklearn: {sk_per_iter:.3f} s per iteration on {os.cpu_count()} cores "
                f"(n_iter_ as asked: {honest})"
            )
        ours = km.lloyd(prepared, init_p, max_iter=counts[1])  # sklearn's loop semantics
        labels = ours.labels.cpu().numpy()
        centres = prepared.from_prepared(ours.centres).cpu().numpy()
        log(
            f"vs sklearn after {counts[1]} iterations (n_iter {ours.n_iter} / {sk.n_iter_}): "
            f"labels identical {bool((labels == sk.labels_).all())} "
            f"({int((labels != sk.labels_).sum())} differ), inertia rel. diff "
            f"{abs(ours.inertia / sk.inertia_ - 1):.2e}, centres max abs diff "
            f"{np.abs(centres - sk.cluster_centers_).max():.2e}"
        )
        if sk_per_iter is not None:
            rows.append(
                (
                    "noise",
                    "sklearn",
                    "euclidean",
                    counts[1] - counts[0],
                    sk_per_iter * (counts[1] - counts[0]),
                    None,
                    None,
                )
            )
    del prepared, noise, results

    prepared = km.Prepared(host.to(device, copy=True), "l1", owned=True)
    init_p = prepared.to_prepared(init.to(device))
    floor_l1 = args.l1_iters * n_bytes / bandwidth
    for name, use_triton, assign in variants:
        if assign != "fp32":  # no coarse pass for L1
            continue
        seconds, result = time_lloyd(prepared, init_p, args.l1_iters, use_triton)
        rows.append(("planted", name, "l1", args.l1_iters, seconds, floor_l1, result))
        log(f"l1 {name}: {args.l1_iters} iterations in {seconds:.3f} s")
        run = km._Run(prepared, init_p, use_triton=use_triton)
        one = timed(lambda r=run: one_pass(r, init_p), 3)
        log(f"l1 {name}: one assignment pass {1e3 * one:.2f} ms")
    labels = result.labels
    medians = timed(lambda: km.medians(prepared.x, labels, k, init_p), 3)
    log(f"l1: the medians of one iteration {1e3 * medians:.1f} ms")

    log("")
    log(
        "| data | n × E | k | metric | device | path | iterations | time (s) | per iteration (ms) "
        "| floor (s) | time / floor | speed-up vs sklearn per iteration "
        "| confirmed rows per iteration | labels = fused |"
    )
    log("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    fused_labels = {(row[0], row[2]): row[6].labels for row in rows if row[1] == "fused"}
    for data, name, metric, iters, seconds, fl, result in rows:
        per_iter = seconds / iters
        ratio = f"{seconds / fl:.2f}" if fl else ""
        speed = (
            f"{sk_per_iter / per_iter:.0f}×"
            if sk_per_iter and name != "sklearn" and metric == "euclidean"
            else ""
        )
        where = "host" if name == "sklearn" else str(device.type)
        confirmed = (
            f"{result.confirmed / max(result.coarse_passes, 1):,.0f}"
            if result is not None and result.confirmed is not None
            else ""
        )
        reference = fused_labels.get((data, metric))
        same = (
            str(torch.equal(result.labels, reference))
            if result is not None and reference is not None and name != "fused"
            else ""
        )
        log(
            f"| {data} | {n:,} × {e:,} | {k} | {metric} | {where} | {name} | {iters} | "
            f"{seconds:.3f} | {1e3 * per_iter:.2f} | {fl if fl is None else round(fl, 3)} | "
            f"{ratio} | {speed} | {confirmed} | {same} |"
        )


if __name__ == "__main__":
    main()
