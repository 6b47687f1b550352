"""Gzip decoders on the BIDS benchmark's own files: zlib, ISA-L, rapidgzip, indexed_gzip.

Issue 23 asks to try, on this data, a well-kept library that decodes one
standard gzip file faster than ISA-L, and to keep it only if it wins. The
files are ``bench_bids.py``'s synthetic fMRIPrep BOLD (2 mm MNI grid
97 x 115 x 97, float32 ``.nii.gz`` written by ISA-L at level 1, ``--volumes``
T each; its tree builder writes them). Each decoder decodes every file whole
into one reused 16 MiB buffer (nothing else is done; the files are in the
page cache, as the decode floor of ``bench_bids.py`` reads them):

* ``zlib``: Python's ``gzip`` module (what nibabel reads with when
  indexed_gzip is not installed);
* ``isal``: ISA-L's C reader straight into the buffer (how
  ``connscale.bidsapp.decode`` reads, and the decode floor);
* ``isal-threaded``: ``isal.igzip_threaded`` (one thread reads the file
  while another inflates);
* ``rapidgzip``: ``rapidgzip.open(parallelization=c)``, which decodes one
  standard gzip file on ``c`` threads;
* ``indexed_gzip``: ``IndexedGzipFile`` (what nibabel reads with when it is
  installed).

Three ways of spending the host's N cores:

(i) **one file at a time** (one process; rapidgzip on 1, 2, 4 … N threads,
    the others on their one thread; the first ``--latency-files`` files):
    the latency of one reader;
(ii) **a process per core** over all files, one thread each: the throughput
    (the decode floor of ``bench_bids.py`` is the ``isal`` row);
(iii) **rapidgzip, k files at once with c threads each** (k processes, k x c
    = N).

Reported: seconds per file (wall clock; over the processes, the call's time
divided by the files), CPU seconds per file (all the decoder's threads: what
a core pays; less sensitive than the wall clock to other work on the host),
GB/s of decoded bytes and runs per minute, in one table, with the load
average before and after (other work on the host slows every row).

    python benchmarks/bench_decode.py --runs 8 --volumes 100          # 2 cores, T = 100
    python benchmarks/bench_decode.py --runs 32 --tree-jobs 16         # 16 cores, T = 400

Installed, indexed_gzip is what nibabel opens every ``.gz`` with (its header
reads then decode a 4 MiB buffer: ~20 ms a header against ~1.5 ms); remove it
after this benchmark (``pip uninstall indexed_gzip``) before timing anything
else on the host.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from bench_bids import FULL, QUICK, make_tree

_BUFFER_BYTES = 16 * 1024**2
_buffer: memoryview | None = None


def _drain(reader) -> int:
    """Read ``reader`` to its end into this process's buffer; return the bytes read."""
    global _buffer
    if _buffer is None:
        _buffer = memoryview(bytearray(_BUFFER_BYTES))
    total = 0
    while n := reader.readinto(_buffer):
        total += n
    return total


def decode_zlib(path: str, threads: int) -> int:
    with gzip.open(path, "rb") as fh:
        return _drain(fh)


def decode_isal(path: str, threads: int) -> int:
    from isal import igzip, isal_zlib

    with open(path, "rb") as raw:  # ISA-L's C reader, as bidsapp.decode reads
        return _drain(isal_zlib._GzipReader(raw, igzip.READ_BUFFER_SIZE))


def decode_isal_threaded(path: str, threads: int) -> int:
    from isal import igzip_threaded

    with igzip_threaded.open(path, "rb", threads=1) as fh:
        return _drain(fh)


def decode_rapidgzip(path: str, threads: int) -> int:
    import rapidgzip

    with rapidgzip.open(path, parallelization=threads) as fh:
        return _drain(fh)


def decode_indexed_gzip(path: str, threads: int) -> int:
    import indexed_gzip

    with indexed_gzip.IndexedGzipFile(path) as fh:
        return _drain(fh)


DECODERS: dict[str, Callable[[str, int], int]] = {
    "zlib": decode_zlib,
    "isal": decode_isal,
    "isal-threaded": decode_isal_threaded,
    "rapidgzip": decode_rapidgzip,
    "indexed_gzip": decode_indexed_gzip,
}


def _available(names: list[str]) -> list[str]:
    import importlib.util

    needs = {"isal": "isal", "isal-threaded": "isal", "rapidgzip": "rapidgzip"}
    needs["indexed_gzip"] = "indexed_gzip"
    kept = [n for n in names if importlib.util.find_spec(needs.get(n, "gzip")) is not None]
    for name in sorted(set(names) - set(kept)):
        print(f"{name}: not installed, skipped", flush=True)
    return kept


def _call(item: tuple[str, str, int]) -> tuple[int, float]:
    """Decode one file; return (decoded bytes, CPU seconds of this process's threads)."""
    name, path, threads = item
    tic = time.process_time()
    decoded = DECODERS[name](path, threads)
    return decoded, time.process_time() - tic


def _row(name: str, mode: str, processes: int, threads: int, files, seconds, done) -> dict:
    decoded = sum(d[0] for d in done)
    return {
        "decoder": name,
        "mode": mode,
        "processes": processes,
        "threads": threads,
        "seconds": round(seconds, 3),
        "seconds_per_file": round(seconds / len(files), 3),
        "cpu_seconds_per_file": round(sum(d[1] for d in done) / len(files), 3),
        "decoded_gb_per_second": round(decoded / seconds / 1e9, 3),
        "runs_per_minute": round(len(files) / seconds * 60, 1),
    }


def one_at_a_time(name: str, files: list[str], threads: int) -> dict:
    """(i) Every file in turn in this process, the decoder on ``threads`` threads."""
    _call((name, files[0], threads))  # warm: imports, buffers
    tic = time.perf_counter()
    done = [_call((name, path, threads)) for path in files]
    seconds = time.perf_counter() - tic
    return _row(name, "one file at a time", 1, threads, files, seconds, done)


def in_processes(name: str, files: list[str], processes: int, threads: int, mode: str) -> dict:
    """(ii), (iii) ``processes`` warm processes over all files, ``threads`` threads each."""
    with ProcessPoolExecutor(processes) as pool:
        list(pool.map(_call, [(name, p, threads) for p in files[:processes]]))  # warm
        tic = time.perf_counter()
        done = list(pool.map(_call, [(name, p, threads) for p in files]))
        seconds = time.perf_counter() - tic
    return _row(name, mode, processes, threads, files, seconds, done)


def _thread_counts(cores: int) -> list[int]:
    counts = [c for c in (1, 2, 4, 8, 16, 32, 64) if c < cores]
    return [*counts, cores]


def run_all(files: list[str], names: list[str], cores: int, latency_files: int) -> list[dict]:
    """The three ways of spending ``cores`` cores, for every decoder in ``names``.

    One file at a time decodes the first ``latency_files`` files only.
    """
    rows = []

    def add(row: dict) -> None:
        rows.append(row)
        print(json.dumps(row), flush=True)

    for name in names:  # (i)
        for threads in _thread_counts(cores) if name == "rapidgzip" else [1]:
            add(one_at_a_time(name, files[:latency_files], threads))
    for name in names:  # (ii)
        add(in_processes(name, files, cores, 1, "a process per core"))
    if "rapidgzip" in names:  # (iii)
        for threads in _thread_counts(cores)[1:]:
            if cores % threads == 0:
                mode = "k files at once, c threads each"
                add(in_processes("rapidgzip", files, cores // threads, threads, mode))
    return rows


def table(rows: list[dict]) -> str:
    """The rows as one Markdown table."""
    lines = [
        "| decoder | mode | processes x threads | s per file | CPU s per file | decoded GB/s "
        "| runs/min |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['decoder']} | {r['mode']} | {r['processes']} x {r['threads']} | "
            f"{r['seconds_per_file']:.3f} | {r['cpu_seconds_per_file']:.3f} | "
            f"{r['decoded_gb_per_second']:.3f} | "
            f"{r['runs_per_minute']:.1f} |"
        )
    return "\n".join(lines)


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for package in ("isal", "rapidgzip", "indexed_gzip", "nibabel"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = None
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8, help="Files (runs) in the tree.")
    parser.add_argument("--quick", action="store_true", help="bench_bids.py's small grid.")
    parser.add_argument("--volumes", type=int, default=None, help="T of each run (400 full).")
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--latency-files",
        type=int,
        default=4,
        help="Files decoded one at a time by each decoder in (i) (all files in (ii), (iii)).",
    )
    parser.add_argument(
        "--decoders",
        default=",".join(DECODERS),
        help="Comma-separated, of: " + ", ".join(DECODERS) + " (those not installed are skipped).",
    )
    parser.add_argument("--tree-jobs", type=int, default=min(8, os.cpu_count() or 1))
    parser.add_argument("--work", type=Path, default=Path("/tmp/connscale_bench_decode"))
    parser.add_argument("--keep", action="store_true", help="Keep the synthetic tree.")
    parser.add_argument(
        "--reuse", action="store_true", help="Decode the tree kept in --work (--keep) as it is."
    )
    parser.add_argument("--json", type=Path, default=None, help="Write the results here.")
    args = parser.parse_args()
    grid = dict(QUICK if args.quick else FULL)
    if args.volumes is not None:
        grid["t"] = args.volumes
    names = _available(args.decoders.split(","))
    derivatives = args.work / "fmriprep"
    if not args.reuse:
        shutil.rmtree(args.work, ignore_errors=True)
        args.work.mkdir(parents=True)
        derivatives, _ = make_tree(args.work, args.runs, grid, jobs=args.tree_jobs)
    files = sorted(str(p) for p in derivatives.rglob("*_desc-preproc_bold.nii.gz"))
    compressed = sum(os.path.getsize(p) for p in files)
    load_before = os.getloadavg()
    rows = run_all(files, names, args.cores, args.latency_files)
    load_after = os.getloadavg()
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpu": platform.processor() or platform.machine(),
        "cores": args.cores,
        "grid": grid,
        "runs": len(files),
        "compressed_mb_per_file": round(compressed / len(files) / 1e6, 1),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in load_after],
        "versions": _versions(),
        "rows": rows,
    }
    print(
        f"{len(files)} files, grid {grid['shape']}, T = {grid['t']}, "
        f"{result['compressed_mb_per_file']} MB compressed each; {args.cores} cores; "
        f"load average {result['load_average_before']} before, "
        f"{result['load_average_after']} after; {result['versions']}"
    )
    print(table(rows), flush=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    if not args.keep:
        shutil.rmtree(args.work, ignore_errors=True)


if __name__ == "__main__":
    main()
