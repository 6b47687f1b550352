"""How long a participant call takes to find its runs: the whole tree, or one participant.

``connscale.bidsapp.find_runs`` indexes the fMRIPrep tree with pybids. A call
for one participant (a SLURM array task) indexes only that participant's
folder, so its cost does not grow with the cohort. RESULTS §25.

Run: ``python benchmarks/bench_find_runs.py --work DIR`` with ``DIR`` a tree
kept by ``bench_bids.py --keep --work DIR`` (its ``fmriprep`` folder).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import bids  # noqa: F401 - imported before the timings

from connscale.bidsapp import find_runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--participant", default="07")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    root = args.work / "fmriprep"
    for label in (None, [args.participant]) * args.repeats:
        tic = time.perf_counter()
        runs = find_runs(root, participant_label=label)
        seconds = time.perf_counter() - tic
        who = "whole tree" if label is None else f"participant {label[0]}"
        print(f"{who}: {len(runs)} run(s) in {seconds:.3f} s", flush=True)


if __name__ == "__main__":
    main()
