"""r1DL benchmark (D-r1DL workload): K sparse networks from S (T x P).

Cases (the paper's HCP sizes; its file sizes imply ~0.42M voxels):
T in {176, 405, 1200} x P = 420,000 resident, and P = 2,000,000 streamed
from a memory-mapped ``.npy`` on disk; K = 80 atoms, r = 0.07 P. Data are
planted networks (20 networks, 5% of the voxels each, noise sd 1).

For every case and backend it prints time per update (= two reads of S),
time per atom, mean updates per atom (the paper: ~6), setup time (loading
S onto the device / workers, and the one-off capture of the update's CUDA
graphs, which the per-update and per-atom times exclude), peak memory, and on CUDA the ratio of the
update time to the floor = time to read S twice at the measured device
memory read bandwidth (resident) or at the measured pinned host-to-device
bandwidth (host: Sᵀ in pinned host memory read by the kernels over PCIe;
streamed: the .npy read in full for Sᵀu, only the chosen columns for Sv).
Every mode's second read touches only the r chosen voxels, so ratios below
1 are possible.

Peers (same planted data, reduced sizes because they would take far too
long at 420k voxels, said in the table): scikit-learn
``MiniBatchDictionaryLearning`` on Sᵀ (voxels as samples, K atoms, one
pass) and nilearn ``DictLearning`` on a NIfTI of the same data (1 epoch).

    python benchmarks/bench_r1dl.py --device cuda            # H100: < 6 min
    python benchmarks/bench_r1dl.py --device cpu --quick     # 2 cores: < 5 min
    python benchmarks/bench_r1dl.py --device cpu --backends local,dask,spark
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import warnings

import numpy as np
import torch
from _measure import copy_bandwidth

import connscale
from connscale.networks import match_networks

K_TRUE = 20  # planted networks
NET_FRACTION = 0.05  # voxels per planted network
NOISE = 1.0


def log(*args):
    print(*args, flush=True)


# ---------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------


def planted(n_timepoints, n_voxels, seed=0, device="cpu", out=None, chunk_rows=64):
    """Planted-network S (T x P float32) built in row chunks with torch.

    Returns (S or ``out``, maps (K_TRUE x P) as a scipy CSR).
    """
    import scipy.sparse as sp

    gen = torch.Generator(device=device).manual_seed(seed)
    rng = np.random.default_rng(seed)
    tc = torch.randn(n_timepoints, K_TRUE, generator=gen, device=device)
    tc = torch.linalg.qr(tc - tc.mean(0))[0]
    tc = tc / tc.std(0)
    size = int(NET_FRACTION * n_voxels)
    order = rng.permutation(n_voxels)[: size * K_TRUE].reshape(K_TRUE, size)
    weights = rng.uniform(0.5, 1.5, (K_TRUE, size)).astype(np.float32)
    maps = sp.csr_matrix(
        (weights.ravel(), order.ravel(), np.arange(0, size * K_TRUE + 1, size)),
        shape=(K_TRUE, n_voxels),
    )
    dense_maps = torch.zeros(K_TRUE, n_voxels, device=device)
    dense_maps[
        torch.arange(K_TRUE).repeat_interleave(size), torch.as_tensor(order.ravel(), device=device)
    ] = torch.as_tensor(weights.ravel(), device=device)
    S = np.empty((n_timepoints, n_voxels), dtype=np.float32) if out is None else out
    for a in range(0, n_timepoints, chunk_rows):
        b = min(n_timepoints, a + chunk_rows)
        block = tc[a:b] @ dense_maps
        block += NOISE * torch.randn(b - a, n_voxels, generator=gen, device=device)
        S[a:b] = block.cpu().numpy()
    return S, maps


# ---------------------------------------------------------------------------
# Measurements
# ---------------------------------------------------------------------------


class PeakRSS:
    """Sampled peak resident memory (bytes) of this process, and with
    ``tree=True`` of its descendants too (cluster workers). Walking /proc for
    the tree holds the GIL for milliseconds, which stalls a driver that
    launches work from Python: use it only where workers exist."""

    def __init__(self, interval=0.05, tree=False):
        self.interval = interval
        self.tree = tree
        self.peak = 0
        self._stop = threading.Event()

    @staticmethod
    def _rss(pid):
        try:
            with open(f"/proc/{pid}/statm") as fh:
                return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            return 0

    @classmethod
    def _tree_rss(cls):
        parents = {}
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    with open(f"/proc/{pid}/stat") as fh:
                        fields = fh.read().rsplit(")", 1)[1].split()
                    parents[int(pid)] = int(fields[1])
                except (OSError, IndexError, ValueError):
                    pass
        mine, frontier = {os.getpid()}, [os.getpid()]
        while frontier:
            p = frontier.pop()
            for child, parent in parents.items():
                if parent == p and child not in mine:
                    mine.add(child)
                    frontier.append(child)
        return sum(cls._rss(pid) for pid in mine)

    def _sample(self):
        return self._tree_rss() if self.tree else self._rss(os.getpid())

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self._sample())
            self._stop.wait(self.interval)

    @staticmethod
    def _reset_high_water_mark():
        """Reset this process's VmHWM (Linux >= 4.0); False where not possible."""
        try:
            with open("/proc/self/clear_refs", "w") as fh:
                fh.write("5")
            return True
        except OSError:
            return False

    @staticmethod
    def _high_water_mark():
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        return 0

    def __enter__(self):
        self.base = self._sample()
        # One process: the kernel's own peak (no sampling thread, which takes
        # the GIL from a driver that launches GPU work from Python).
        self._thread = None
        if self.tree or not self._reset_high_water_mark():
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self._thread is None:
            self.peak = self._high_water_mark()
            return
        self._stop.set()
        self._thread.join()


def read_bandwidth(device, nbytes=1 << 31):
    """Device memory read bandwidth (B/s) from a sum over a large tensor."""
    x = torch.ones(nbytes // 4, device=device)
    x.sum()
    torch.cuda.synchronize()
    reps = 10
    start = time.perf_counter()
    for _ in range(reps):
        x.sum()
    torch.cuda.synchronize()
    return reps * nbytes / (time.perf_counter() - start)


def warm_up(S, n_atoms, device, **kwargs):
    """Compile the Triton kernels for this shape outside the timed runs (they
    specialise on sizes, e.g. the number of atoms and P; cached on disk after)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        connscale.r1dl(S, n_atoms, 0.07, max_iter=1, random_state=0, device=device, **kwargs)


def quality(loadings, maps):
    _, _, sim = match_networks(loadings, maps)
    return float(np.mean(sim))


def fmt_bytes(n):
    return "-" if n is None else f"{n / 1e9:.2f} GB"


# ---------------------------------------------------------------------------
# Runs
# ---------------------------------------------------------------------------


def run_r1dl(
    S,
    maps,
    *,
    label,
    backend,
    device,
    n_atoms,
    memory_limit=None,
    engine=None,
    block_size=None,
    storage="auto",
):
    kwargs = dict(
        random_state=0,
        backend=engine if engine is not None else backend,
        device=device,
        memory_limit=memory_limit,
        block_size=block_size,
    )
    if backend == "local":
        kwargs["storage"] = storage
    cuda = backend == "local" and str(device).startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    with PeakRSS(tree=backend != "local") as rss:
        start = time.perf_counter()
        res = connscale.r1dl(S, n_atoms, 0.07, **kwargs)
        total = time.perf_counter() - start
    peak_host = max(0, rss.peak - rss.base)
    peak_dev = torch.cuda.max_memory_allocated() if cuda else None
    n_updates = int(res.n_iter.sum())
    # The one-off capture of the update's CUDA graphs counts as setup.
    capture = res.info.get("graph_capture_s", 0.0)
    learn = res.info.get("learn_s", total) - capture
    row = {
        "case": label,
        "backend": backend if backend != "local" else f"local {device}",
        "mode": res.info.get("mode"),
        "K": n_atoms,
        "update_ms": 1e3 * learn / n_updates,
        "atom_s": learn / n_atoms,
        "mean_iter": res.mean_iterations,
        "setup_s": res.info.get("setup_s", 0.0) + capture,
        "capture_s": capture,
        "n_updates": n_updates,
        "total_s": total,
        "peak_host": peak_host,
        "peak_dev": peak_dev,
        "quality": quality(res.loadings, maps) if n_atoms >= K_TRUE else None,
    }
    return row, res


def run_sklearn(S, maps, n_atoms, label):
    from sklearn.decomposition import MiniBatchDictionaryLearning

    X = connscale.networks._blocks.standardize_np(S, np.float32).T  # voxels as samples
    est = MiniBatchDictionaryLearning(
        n_components=n_atoms, alpha=0.1, batch_size=1024, max_iter=1, random_state=0, n_jobs=1
    )
    with PeakRSS() as rss:
        start = time.perf_counter()
        code = est.fit_transform(X)
        total = time.perf_counter() - start
    return {
        "case": label,
        "backend": "sklearn MiniBatchDictionaryLearning (1 epoch)",
        "mode": "peer",
        "K": n_atoms,
        "update_ms": None,
        "atom_s": total / n_atoms,
        "mean_iter": None,
        "setup_s": 0.0,
        "total_s": total,
        "peak_host": max(0, rss.peak - rss.base),
        "peak_dev": None,
        "quality": quality(code.T, maps) if n_atoms >= K_TRUE else None,
    }


def run_nilearn(S, maps, n_atoms, label):
    import nibabel as nib
    from nilearn.decomposition import DictLearning

    n_timepoints, n_voxels = S.shape
    side = int(np.ceil(n_voxels ** (1 / 3)))
    mask = np.zeros((side, side, side), dtype=bool)
    mask.flat[:n_voxels] = True
    data = np.zeros(mask.shape + (n_timepoints,), dtype=np.float32)
    data[mask] = S.T
    affine = np.eye(4)
    img = nib.Nifti1Image(data, affine)
    mask_img = nib.Nifti1Image(mask.astype(np.uint8), affine)
    est = DictLearning(
        n_components=n_atoms,
        mask=mask_img,
        n_epochs=1,
        random_state=0,
        standardize="zscore_sample",
        memory_level=0,
        verbose=0,
    )
    with PeakRSS() as rss:
        start = time.perf_counter()
        est.fit(img)
        total = time.perf_counter() - start
    comps = est.masker_.transform(est.components_img_)
    return {
        "case": label,
        "backend": "nilearn DictLearning (1 epoch)",
        "mode": "peer",
        "K": n_atoms,
        "update_ms": None,
        "atom_s": total / n_atoms,
        "mean_iter": None,
        "setup_s": 0.0,
        "total_s": total,
        "peak_host": max(0, rss.peak - rss.base),
        "peak_dev": None,
        "quality": quality(np.where(np.abs(comps) > 1e-6, comps, 0), maps)
        if n_atoms >= K_TRUE
        else None,
    }


def table(rows, floors):
    head = (
        "| case | backend | mode | K | ms / update | s / atom | updates / atom | setup s "
        "| peak host | peak device | match to planted | update / floor |"
    )
    lines = [head, "|" + " --- |" * 12]
    for r in rows:
        floor = floors.get((r["case"], r["mode"])) if r["update_ms"] is not None else None
        ratio = f"{r['update_ms'] / 1e3 / floor:.2f}" if floor else "-"
        lines.append(
            f"| {r['case']} | {r['backend']} | {r['mode']} | {r['K']} | "
            + (f"{r['update_ms']:.2f}" if r["update_ms"] is not None else "-")
            + " | "
            + f"{r['atom_s']:.3f} | "
            + (f"{r['mean_iter']:.2f}" if r["mean_iter"] is not None else "-")
            + " | "
            + f"{r['setup_s']:.2f} | {fmt_bytes(r['peak_host'])} | {fmt_bytes(r['peak_dev'])} | "
            + (f"{r['quality']:.2f}" if r["quality"] is not None else "-")
            + f" | {ratio} |"
        )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--quick", action="store_true", help="Reduced sizes (CPU smoke run).")
    parser.add_argument(
        "--backends",
        default=None,
        help="Comma list of local,dask,spark (default: local, plus dask and "
        "spark on the CPU when installed).",
    )
    parser.add_argument(
        "--atoms",
        type=int,
        default=None,
        help="K for the timed runs (default 80; fewer in quick / streamed).",
    )
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument("--no-stream", action="store_true")
    parser.add_argument("--workdir", default=None, help="Where the streamed .npy is written.")
    args = parser.parse_args(argv)
    device = args.device
    cuda = device.startswith("cuda")
    torch.manual_seed(0)

    if args.quick:
        sizes, n_voxels, stream_shape = [176, 405], 100_000, (176, 400_000)
        k_default, k_stream, peer_voxels = 20, 3, 20_000
    else:
        sizes, n_voxels, stream_shape = [176, 405, 1200], 420_000, (405, 2_000_000)
        k_default, k_stream, peer_voxels = 80, 4, 50_000
    n_atoms = args.atoms or k_default
    if args.backends:
        backends = args.backends.split(",")
    else:
        backends = ["local"]
        if not cuda:
            for name, module in (("dask", "distributed"), ("spark", "pyspark")):
                try:
                    __import__(module)
                    backends.append(name)
                except ImportError:
                    pass
    log(
        f"# r1DL benchmark: device={device}, quick={args.quick}, backends={backends}, "
        f"K={n_atoms}, r=0.07 P, torch threads={torch.get_num_threads()}"
    )
    floors, rows = {}, []
    gen_device = device if cuda else "cpu"
    engines = {}
    for name in backends:
        if name != "local":
            from connscale.engines import get_engine

            start = time.perf_counter()
            engines[name] = get_engine(name, n_jobs=torch.get_num_threads())
            log(f"{name} engine started in {time.perf_counter() - start:.1f} s ({engines[name]!r})")

    bandwidth = read_bandwidth(device) if cuda else None
    h2d = copy_bandwidth("h2d", device=device) if cuda else None
    if cuda:
        log(f"device read bandwidth {bandwidth / 1e9:.0f} GB/s, pinned H2D {h2d / 1e9:.1f} GB/s")

    workdir = args.workdir or tempfile.gettempdir()
    for i, t in enumerate(sizes):
        label = f"T={t}, P={n_voxels:,}"
        log(f"## {label}: generating...")
        S, maps = planted(t, n_voxels, seed=t, device=gen_device)
        if cuda:
            floors[(label, "resident")] = 2 * S.nbytes / bandwidth
        path = None
        for backend in backends:
            if backend != "local" and args.quick and i > 0:
                continue  # quick: clusters on the first size only
            data = S
            if backend != "local":
                # Workers load their own blocks from a shared .npy.
                if path is None:
                    path = os.path.join(workdir, f"connscale_r1dl_bench_{os.getpid()}_{t}.npy")
                    np.save(path, S)
                data = path
            # Clusters on a small machine: fewer atoms, per-update figures.
            k = n_atoms if backend == "local" else max(1, n_atoms // (20 if args.quick else 10))
            if cuda and backend == "local":
                start = time.perf_counter()
                warm_up(S, k, device)
                log(f"  warm-up (Triton JIT for T={t}) {time.perf_counter() - start:.2f} s")
            row, _ = run_r1dl(
                data,
                maps,
                label=label,
                backend=backend,
                device=device,
                n_atoms=k,
                engine=engines.get(backend),
            )
            rows.append(row)
            log(
                f"  {row['backend']}: {row['update_ms']:.2f} ms/update, "
                f"{row['mean_iter']:.2f} updates/atom, setup {row['setup_s']:.2f} s "
                f"(graph capture {row['capture_s']:.3f} s)"
            )
        if path is not None:
            os.remove(path)
        del S

    if not args.no_stream:
        t, p = stream_shape
        label = f"T={t}, P={p:,} streamed from disk"
        path = os.path.join(workdir, f"connscale_r1dl_bench_{os.getpid()}_{t}x{p}.npy")
        log(f"## {label}: writing {path} ({t * p * 4 / 1e9:.1f} GB)...")
        out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(t, p))
        _, maps = planted(t, p, seed=1, device=gen_device, out=out)
        out.flush()
        del out
        if cuda:
            start = time.perf_counter()
            for storage in ("host", "file"):
                warm_up(path, k_stream, device, storage=storage, memory_limit="1GB")
            log(f"  warm-up (Triton JIT for this shape) {time.perf_counter() - start:.2f} s")
            # Pinned host->device bandwidth again, now: on these virtual machines
            # it can differ later in a long process (where the host pages land).
            h2d_now = copy_bandwidth("h2d", device=device)
            log(f"  pinned H2D now {h2d_now / 1e9:.1f} GB/s (at start {h2d / 1e9:.1f})")
            for mode in ("streamed", "host"):
                floors[(label, mode)] = 2 * t * p * 4 / h2d
        limit = "1GB" if cuda else "256MB"
        try:
            stream_backends = ["local"] if (cuda or args.quick) else backends
            runs = [(b, "file") for b in stream_backends]
            if cuda:
                # S (3.2 GB) exceeds the 1 GB device limit: 'auto' keeps Sᵀ in
                # pinned host memory, read by the kernels over PCIe; 'file'
                # re-reads the memory-mapped .npy every pass.
                runs.insert(0, ("local", "auto"))
            for backend, storage in runs:
                row, _ = run_r1dl(
                    path,
                    maps,
                    label=label,
                    backend=backend,
                    device=device,
                    n_atoms=k_stream,
                    engine=engines.get(backend),
                    memory_limit=limit if backend == "local" else None,
                    storage=storage if backend == "local" else "auto",
                )
                rows.append(row)
                log(
                    f"  {row['backend']} ({row['mode']}): {row['update_ms']:.2f} ms/update, "
                    f"setup {row['setup_s']:.2f} s"
                )
        finally:
            os.remove(path)

    if not args.no_peers:
        t = 176
        label = f"T={t}, P={peer_voxels:,} (peer size)"
        log(f"## {label}: peers...")
        S, maps = planted(t, peer_voxels, seed=7, device=gen_device)
        k = K_TRUE
        row, _ = run_r1dl(S, maps, label=label, backend="local", device=device, n_atoms=k)
        rows.append(row)
        for runner in (run_sklearn, run_nilearn):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    rows.append(runner(S, maps, k, label))
                log(f"  {rows[-1]['backend']}: {rows[-1]['total_s']:.2f} s")
            except ImportError as exc:
                log(f"  peer skipped ({exc})")

    for engine in engines.values():
        engine.close()
    log("")
    log(table(rows, floors))
    log(
        "\nmatch to planted: mean spatial similarity of the 20 planted maps to their "
        "Hungarian-matched learned maps (only when K >= 20). update / floor: CUDA only; "
        "floor = 2 reads of S at the measured device read bandwidth (resident) or pinned "
        "H2D bandwidth (host, streamed)."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
