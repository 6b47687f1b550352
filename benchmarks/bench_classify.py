"""Time connscale.classify.cross_validate on a simulated cohort.

The full size is GPU-DFC §V.C's ABIDE NYU set-up: 173 subjects, 200 regions
(19,900 upper-triangle features), T = 175, 5-fold CV repeated 10 times.
scikit-learn runs on the CPU, so ``--device`` is accepted for a uniform
interface but only 'cpu' is meaningful.

    python benchmarks/bench_classify.py [--quick] [--n-jobs N]
"""

from __future__ import annotations

import argparse
import sys
import time

from connscale.classify import cross_validate
from connscale.datasets import simulate_cohort


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--device",
        default="cpu",
        choices=["cpu", "cuda"],
        help="Ignored: scikit-learn computes on the CPU.",
    )
    parser.add_argument("--quick", action="store_true", help="Small sizes (CI).")
    parser.add_argument("--n-jobs", type=int, default=None)
    args = parser.parse_args(argv)
    if args.quick:
        cases = [(60, 50, 120, 5, 2)]
    else:
        cases = [(60, 50, 120, 5, 2), (173, 200, 175, 5, 10)]
    print(
        "| subjects | regions | features | model | folds x repeats | fits | time (s) "
        "| s / fit | accuracy [95% CI] |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |", flush=True)
    for n_subjects, n_regions, n_timepoints, folds, repeats in cases:
        cohort = simulate_cohort(
            n_subjects, n_regions, n_timepoints, effect_edges=5, effect_size=0.3, random_state=0
        )
        X = cohort.features()
        for model in ("svm", "mlp"):
            start = time.perf_counter()
            result = cross_validate(
                X,
                cohort.y,
                model=model,
                folds=folds,
                repeats=repeats,
                random_state=0,
                n_jobs=args.n_jobs,
            )
            elapsed = time.perf_counter() - start
            fits = folds * repeats
            acc = result["accuracy"]
            print(
                f"| {n_subjects} | {n_regions} | {X.shape[1]} | {model} | {folds} x {repeats} "
                f"| {fits} | {elapsed:.2f} | {elapsed / fits:.3f} | {acc['mean']:.3f} "
                f"[{acc['ci_low']:.3f}, {acc['ci_high']:.3f}] |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
