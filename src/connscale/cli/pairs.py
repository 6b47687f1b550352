"""``connscale pairs``: region-pair DFC courses and summary features of ROI series."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from connscale.cli._common import (
    RunRecord,
    compute_options,
    configure_logging,
    finish_parser,
    logger,
    output_set,
)


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "pairs",
        help="Sliding-window correlation course of every region pair of every scan.",
        description=(
            "For ROI time-series files (TSV/CSV/NPY, one column per region), computes "
            "the windowed correlation of every region pair in every window, all scans "
            "batched together. Writes per input <name>_pairs.h5 (or .npy courses with "
            "<name>_pairs.tsv and <name>_windows.tsv) and <name>_pairs-summary.tsv "
            "(mean, std, fraction above threshold per pair), plus pairs_features.tsv "
            "(one row of summary features per input) and a JSON log."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "inputs",
        nargs="+",
        type=Path,
        metavar="INPUT",
        help="ROI time-series files (.tsv/.csv/.npy), (n_timepoints, n_regions).",
    )
    parser.add_argument("--window", type=int, required=True, help="Window length (time points).")
    parser.add_argument("--step", type=int, default=1, help="Window step (time points).")
    parser.add_argument(
        "--threshold",
        type=float,
        default=0.5,
        help="Summary feature: fraction of windows with r > THRESHOLD.",
    )
    parser.add_argument(
        "--format",
        choices=["h5", "npy"],
        default="h5",
        help="Courses as one HDF5 file, or NPY + TSV tables.",
    )
    return finish_parser(parser, run)


def run(args) -> int:
    from connscale.io._fingerprint import run_fingerprint
    from connscale.io.relmat import source_entities

    configure_logging(args.verbose)
    names = [source_entities(p) for p in args.inputs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"Several inputs share the name(s) {duplicates}; outputs would collide.")
    missing = [p for p in args.inputs if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"No time-series file at {missing[0]}.")
    fingerprint = run_fingerprint(
        args.inputs,
        {
            "command": "pairs",
            "window": args.window,
            "step": args.step,
            "threshold": args.threshold,
            "format": args.format,
            "dtype": args.dtype,
        },
    )
    # Every file of the run (courses, tables, features, log, report) is one
    # set: written in a hidden staging folder under the set's lock, published
    # together with a manifest.
    with output_set(args, args.out, "pairs", command="pairs", fingerprint=fingerprint) as outputs:
        return _run(args, names, outputs)


def _run(args, names, outputs) -> int:
    from connscale._compute import resolve_device
    from connscale.fc.pairs import pair_summary, pairwise_dfc
    from connscale.io.pairs import (
        PAIR_STATISTICS,
        write_pair_features,
        write_pair_summary,
        write_pairs_h5,
        write_pairs_npy,
    )
    from connscale.io.timeseries import load_timeseries

    record = RunRecord("pairs", args.out, vars(args))
    with record.timer("load"):
        loaded = [load_timeseries(p) for p in args.inputs]
    scans = [x for x, _ in loaded]
    n_regions = {x.shape[1] for x in scans}
    if len(n_regions) > 1:
        raise ValueError(
            f"All inputs must have the same number of regions; got {sorted(n_regions)}."
        )
    with record.timer("pairwise_dfc"):
        result = pairwise_dfc(
            scans,
            args.window,
            args.step,
            **compute_options(args),
        )
    with record.timer("summary"):
        summary = pair_summary(result.courses, threshold=args.threshold)
    record.device = str(resolve_device(args.device))

    ragged = isinstance(result.window_starts, list)
    courses_bytes = sum(np.asarray(c).nbytes for c in result.courses)
    outputs.check_space(courses_bytes, what="the pair courses")

    def output(name: str) -> Path:
        record.add_output(args.out / name)
        return outputs.path(name)

    with record.timer("write"):
        for s, (path, name, (_, labels)) in enumerate(zip(args.inputs, names, loaded)):
            courses = result.courses[s]
            onsets = result.window_starts[s] if ragged else result.window_starts
            scan_summary = {stat: getattr(summary, stat)[s] for stat in PAIR_STATISTICS}
            if args.format == "h5":
                write_pairs_h5(
                    output(f"{name}_pairs.h5"),
                    courses=courses,
                    pairs=result.pairs,
                    window_onsets=onsets,
                    window_length=args.window,
                    step=args.step,
                    summary=scan_summary,
                    threshold=args.threshold,
                    labels=labels,
                    n_constant=result.n_constant if len(scans) == 1 else None,
                    attrs={"source": str(path)},
                )
            else:
                write_pairs_npy(
                    output(f"{name}_pairs-courses.npy"),
                    output(f"{name}_pairs.tsv"),
                    output(f"{name}_windows.tsv"),
                    courses=courses,
                    pairs=result.pairs,
                    labels=labels,
                    window_onsets=onsets,
                    window_length=args.window,
                )
            write_pair_summary(
                output(f"{name}_pairs-summary.tsv"),
                pairs=result.pairs,
                labels=labels,
                summary=scan_summary,
                threshold=args.threshold,
            )
        write_pair_features(
            output("pairs_features.tsv"),
            scans=names,
            features=summary.features(),
            names=summary.feature_names(result.pairs),
        )

    n_windows = [len(o) for o in result.window_starts] if ragged else [len(result.window_starts)]
    record.results.update(
        {
            "n_scans": len(scans),
            "n_regions": int(scans[0].shape[1]),
            "n_pairs": result.n_pairs,
            "n_windows": n_windows,
            "n_constant_windows": result.n_constant,
        }
    )
    seconds = record.timings["pairwise_dfc"]
    n_corr = result.n_pairs * sum(
        len(o) for o in (result.window_starts if ragged else [result.window_starts] * len(scans))
    )
    record.results["correlations_per_second"] = n_corr / max(seconds, 1e-9)
    log = record.finish("pairs", outputs)
    outputs.commit()
    logger.info("pairs: %d correlations in %.3f s", n_corr, seconds)
    print(
        f"connscale pairs: {len(scans)} scan(s), {result.n_pairs} pairs, window "
        f"{args.window}, step {args.step}: {n_corr} correlations on {record.device} "
        f"in {seconds:.3f} s"
    )
    print(f"  wrote {args.out}")
    print(f"  log   {log}")
    return 0
