"""Start-up time of the ``connscale`` command (hyperfine-like).

Each command runs ``--runs`` times in a fresh interpreter (after one
untimed warm-up run, so the file cache is warm); the median and the minimum
wall time are printed as a Markdown table. ``--src`` picks the source tree
put first on ``PYTHONPATH``, so a checkout before a change (``git stash``,
or ``git worktree add``) and one after it are timed with the same
interpreter::

    python benchmarks/bench_startup.py                       # this checkout's src/
    python benchmarks/bench_startup.py --src /work/main/src  # another tree
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

#: (label, arguments of the interpreter) of each timed command.
COMMANDS = (
    ("connscale --help", ["-m", "connscale", "--help"]),
    ("connscale --version", ["-m", "connscale", "--version"]),
    ("connscale fc --help", ["-m", "connscale", "fc", "--help"]),
    ("connscale bids --help", ["-m", "connscale", "bids", "--help"]),
    ("import connscale", ["-c", "import connscale"]),
    ("python (no import)", ["-c", "pass"]),
)


def time_command(argv: list[str], *, runs: int, env: dict) -> list[float]:
    """Wall times (s) of ``runs`` runs of ``python argv``, after one warm-up."""
    times = []
    for i in range(runs + 1):
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, *argv],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        if i:
            times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--src",
        type=Path,
        default=Path(__file__).resolve().parents[1] / "src",
        help="Source tree whose connscale is timed.",
    )
    parser.add_argument("--runs", type=int, default=10, help="Timed runs per command.")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(args.src.resolve())}
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"# {args.src.resolve()}: {args.runs} runs per command, python "
        f"{sys.version.split()[0]}, {os.cpu_count()} cores, load average {load:.2f}"
    )
    print("| command | median (s) | min (s) |")
    print("|---|---|---|")
    for label, argv in COMMANDS:
        times = time_command(argv, runs=args.runs, env=env)
        print(f"| `{label}` | {statistics.median(times):.3f} | {min(times):.3f} |", flush=True)


if __name__ == "__main__":
    main()
