"""``connscale dfc``: dynamic (sliding-window) functional connectivity."""

from __future__ import annotations

import argparse

import numpy as np

from connscale._validation import check_kind_options
from connscale.cli import _types
from connscale.cli._common import (
    RunRecord,
    add_precision_argument,
    add_threshold_arguments,
    compute_options,
    configure_logging,
    finish_parser,
    input_files,
    logger,
    output_set,
)
from connscale.cli._inputs import (
    add_input_arguments,
    check_input_arguments,
    load_input,
    output_place,
)
from connscale.cli._windows import add_window_arguments, resolve_window
from connscale.io.atomic import write_json_atomic
from connscale.io.bids import dataset_relative

# Plots of windows and edge time courses are drawn for at most this many series.
PLOT_MAX_NODES = 200


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``dfc`` command to ``subparsers`` and return its parser."""
    parser = subparsers.add_parser(
        "dfc",
        help="Dynamic functional connectivity (sliding-window correlation, GPU-DFC).",
        description=(
            "Pearson correlation of every pair of voxels or regions in each sliding "
            "window, stored as upper triangles, thresholded CSR, low-rank (Q, B) or "
            "factored form in one resumable HDF5 file, with a JSON log and plots."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_input_arguments(parser)
    add_window_arguments(parser)
    parser.add_argument(
        "--kind",
        choices=["triu", "sparse", "lowrank", "factor"],
        default=None,
        help="Stored form (default: sparse with --threshold, triu otherwise).",
    )
    add_threshold_arguments(parser, threshold_help="Keep r >= THRESHOLD (kind sparse).")
    parser.add_argument(
        "--rank",
        type=_types.count,
        default=None,
        help="Rank l (lowrank: required; factor: default exact).",
    )
    parser.add_argument(
        "--method",
        choices=["randomized", "svd"],
        default="randomized",
        help="lowrank: GPU-DFC's randomized range finder or exact SVD.",
    )
    parser.add_argument(
        "--power-iterations",
        type=_types.natural,
        default=0,
        help="lowrank randomized: power iterations.",
    )
    parser.add_argument("--seed", type=_types.natural, default=0, help="Random seed (lowrank).")
    parser.add_argument(
        "--error",
        action="store_true",
        help="lowrank/factor: record each window's MAE against the exact matrix.",
    )
    add_precision_argument(parser)
    return finish_parser(parser, run)


def check_arguments(args) -> None:
    """Check that the options of a --kind go together, and INPUT is of a kind read."""
    check_input_arguments(args)
    kind = args.kind or ("sparse" if args.threshold is not None else "triu")
    check_kind_options(kind, args.threshold, args.absolute, args.rank, args.error)


def run(args) -> int:
    """Run ``connscale dfc``; return the exit status.

    Compute the sliding-window correlations of INPUT into a resumable
    ``_dfc.h5`` store with its JSON sidecar, plots, log and report, published
    together as one set (nothing is done when the folder already holds the
    complete result of this input and these parameters).
    """
    from connscale._compute import resolve_device
    from connscale.fc.dynamic import dynamic_correlation
    from connscale.io.bids import write_dataset_description
    from connscale.io.fingerprint import run_fingerprint

    configure_logging(args.verbose)
    kind = args.kind or ("sparse" if args.threshold is not None else "triu")
    # The window, step, taper and kind are in the sidecar, not the name: a
    # result already there with other parameters is replaced only with --overwrite.
    folder, stem = output_place(args, suffix="dfc", extension=".h5")
    fingerprint = run_fingerprint(input_files(args), _parameters(args, kind))
    record = RunRecord("dfc", args.out, vars(args))
    # The windows file, plots, log and report are one set, written in a hidden
    # staging folder under the set's lock (where an interrupted run's
    # unfinished windows file waits to be resumed) and published together.
    with output_set(args, folder, stem, command="dfc", fingerprint=fingerprint) as outputs:
        if outputs.complete():
            print(
                f"connscale dfc: {folder} holds the complete {stem} result for this "
                "input and these parameters; nothing to do"
            )
            return 0
        with record.timer("load"):
            timeseries, labels, nodes, _ = load_input(args)
        n_timepoints, n = timeseries.shape
        logger.info("Loaded %d %s x %d time points from %s", n, nodes, n_timepoints, args.input)
        window, step, t_r = resolve_window(args, args.input)
        name = f"{stem}.h5"
        path = folder / name
        record.device = str(resolve_device(args.device))
        with record.timer("dynamic_correlation"):
            result = dynamic_correlation(
                timeseries,
                window,
                step,
                kind=kind,
                threshold=args.threshold,
                absolute=args.absolute,
                rank=args.rank,
                method=args.method,
                power_iterations=args.power_iterations,
                random_state=args.seed,
                **compute_options(args),
                out=outputs.path(name),
                compute_error=args.error,
                precision=args.precision,
                taper=args.taper,
                taper_sigma=args.taper_sigma,
                verbose=args.verbose,
                attrs={"source": str(args.input)},
            )
        with result:
            record.add_output(path)
            seconds = record.timings["dynamic_correlation"]
            record.results.update(
                {
                    "n_series": n,
                    "n_timepoints": n_timepoints,
                    "nodes": nodes,
                    "kind": kind,
                    "n_windows": len(result),
                    "window_length": window,
                    "step": step,
                    "window_support": result.window_length,
                    "t_r": t_r,
                    "nbytes": result.nbytes,
                    "compression_ratio": result.compression_ratio,
                    "windows_with_constant_series": int(result.constant.any(axis=1).sum()),
                    "windows_per_second": len(result) / max(seconds, 1e-9),
                    "plan": None
                    if result.plan is None
                    else {  # the keys of earlier logs
                        "batch": result.plan.batch,
                        "tile_rows": result.plan.block_rows,
                        "device_budget": result.plan.device_budget,
                    },
                    "precision": args.precision,
                    "confirmation": None
                    if result.confirmation is None
                    else result.confirmation.as_dict(),
                }
            )
            if result.mae is not None:
                record.results["mae_mean"] = float(np.nanmean(result.mae))
                record.results["mae_max"] = float(np.nanmax(result.mae))
            if n <= PLOT_MAX_NODES:
                _plots(record, result, outputs, stem, labels)
            n_windows, nbytes, ratio = len(result), result.nbytes, result.compression_ratio
            write_json_atomic(
                outputs.path(f"{stem}.json"),
                _sidecar(
                    args,
                    kind=kind,
                    n=n,
                    nodes=nodes,
                    window=window,
                    step=step,
                    t_r=t_r,
                    n_windows=n_windows,
                    window_support=result.window_length,
                ),
            )
            record.add_output(folder / f"{stem}.json")
        log = record.finish(stem, outputs)
        outputs.commit()
    write_dataset_description(args.out)
    print(
        f"connscale dfc: {n} {nodes}, {n_timepoints} time points, {n_windows} windows "
        f"(w={window}, s={step}), kind={kind} on {record.device} in {seconds:.3f} s"
    )
    print(f"  stored {nbytes / 1e6:.2f} MB (compression ratio {ratio:.1f})")
    print(f"  wrote {path}")
    print(f"  log   {log}")
    return 0


def _parameters(args, kind: str) -> dict:
    """Return what the result depends on besides the input (the set's fingerprint)."""
    return {
        "command": "dfc",
        "window": args.window,
        "step": args.step,
        "t_r": args.t_r,
        "taper": args.taper,
        "taper_sigma": args.taper_sigma,
        "kind": kind,
        "threshold": args.threshold,
        "absolute": args.absolute,
        "rank": args.rank,
        "method": args.method,
        "power_iterations": args.power_iterations,
        "seed": args.seed,
        "error": args.error,
        "dtype": args.dtype,
        "precision": args.precision,
    }


def _plots(record, result, outputs, stem: str, labels) -> None:
    """Draw the windows and the most variable edges into the set, as the record's figures."""
    from connscale.report.plots import plot_dfc_windows, plot_edge_timecourses

    with record.timer("plots"):
        plot_dfc_windows(result, outputs.path(f"{stem}_windows.png"))
        plot_edge_timecourses(
            result,
            outputs.path(f"{stem}_edges.png"),
            node_labels=labels,
            max_edges=6,
            title="Edges with the most variable correlation",
        )
        for figure in (f"{stem}_windows.png", f"{stem}_edges.png"):
            record.add_figure(outputs.out_dir / figure)


def _sidecar(
    args,
    *,
    kind: str,
    n: int,
    nodes: str,
    window: int,
    step: int,
    t_r,
    n_windows: int,
    window_support: int,
) -> dict:
    """Return the JSON sidecar of a ``_dfc.h5`` store: the window parameters live here."""
    from connscale._version import __version__

    return {
        "Measure": "Pearson correlation",
        "MeasureDescription": f"Sliding-window Pearson correlation of every pair of {nodes}",
        "Weighted": True,
        "Directed": False,
        "StorageFormat": f"HDF5 (connscale-dfc-1), kind {kind}",
        "Kind": kind,
        "Threshold": args.threshold,
        "AbsoluteThreshold": bool(args.absolute),
        "Rank": args.rank,
        "WindowLength": int(window),
        "WindowStep": int(step),
        "WindowSupport": int(window_support),
        "Taper": args.taper,
        "TaperSigma": args.taper_sigma,
        "NumberOfWindows": int(n_windows),
        "RepetitionTime": t_r,
        "NumberOfNodes": int(n),
        "DataType": str(args.dtype),
        "Sources": [dataset_relative(args.input, args.out)],
        "Code": f"connscale {__version__}",
    }
