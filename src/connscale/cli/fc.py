"""``connscale fc``: static functional connectivity of one scan."""

from __future__ import annotations

import argparse

import numpy as np

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
from connscale.io.bids import dataset_relative

# Region matrices up to this size are written as TSV, larger ones as HDF5.
TSV_MAX_NODES = 1000


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``fc`` command to ``subparsers`` and return its parser."""
    parser = subparsers.add_parser(
        "fc",
        help="Static functional connectivity (all-pairs Pearson correlation).",
        description=(
            "Pearson correlation of every pair of voxels or regions, out of core when "
            "needed. Writes a BIDS-named relmat (.tsv for small dense region matrices, "
            "chunked .h5 otherwise) with a JSON sidecar, a JSON log and a report."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_input_arguments(parser)
    parser.add_argument(
        "--kind",
        choices=["dense", "triu", "sparse"],
        default=None,
        help=f"Output form (default: dense for up to {TSV_MAX_NODES} series, triu above).",
    )
    add_threshold_arguments(
        parser, threshold_help="Keep r >= THRESHOLD (sparse output; implies --kind sparse)."
    )
    add_precision_argument(parser)
    return finish_parser(parser, run)


def check_arguments(args) -> None:
    """Check the options that go together, and that INPUT is of a kind read."""
    check_input_arguments(args)
    if args.threshold is not None and args.kind not in (None, "sparse"):
        raise ValueError(
            f"--threshold gives a sparse result (--kind sparse); got --kind {args.kind}."
        )


def run(args) -> int:
    """Run ``connscale fc``; return the exit status.

    Compute the correlation matrix of INPUT and publish it (a ``.tsv`` relmat
    for small dense region matrices, ``.h5`` otherwise) with its sidecar,
    figure, log and report as one set.
    """
    from connscale.fc.static import compute_correlation
    from connscale.io.bids import write_dataset_description
    from connscale.io.fingerprint import run_fingerprint
    from connscale.io.hdf5 import load_relmat
    from connscale.io.relmat import sidecar, write_relmat_tsv, write_sidecar

    configure_logging(args.verbose)
    kind = args.kind or ("sparse" if args.threshold is not None else None)
    folder, stem = output_place(args, suffix="relmat", extension=".tsv")
    fingerprint = run_fingerprint(
        input_files(args),
        {
            "command": "fc",
            "kind": args.kind,
            "threshold": args.threshold,
            "absolute": args.absolute,
            "dtype": args.dtype,
            "precision": args.precision,
        },
    )
    record = RunRecord("fc", args.out, vars(args))
    # The matrix, its sidecar, figure, log and report are one set: written in
    # a hidden staging folder under the set's lock, published together.
    with output_set(args, folder, stem, command="fc", fingerprint=fingerprint) as outputs:
        with record.timer("load"):
            timeseries, labels, nodes, _ = load_input(args)
        n_timepoints, n = timeseries.shape
        if kind is None:
            kind = "dense" if n <= TSV_MAX_NODES else "triu"
        logger.info("Loaded %d %s x %d time points from %s", n, nodes, n_timepoints, args.input)
        as_tsv = kind == "dense" and n <= TSV_MAX_NODES
        path = folder / f"{stem}{'.tsv' if as_tsv else '.h5'}"
        staged = outputs.path(path.name)
        with record.timer("correlation"):
            result, (plan, n_constant, confirmation) = compute_correlation(
                timeseries,
                kind=kind,
                threshold=args.threshold,
                absolute=args.absolute,
                **compute_options(args),
                out=None if as_tsv else staged,
                precision=args.precision,
                verbose=args.verbose,
                attrs={"source": str(args.input)},
            )
        if as_tsv:
            with record.timer("write"):
                write_relmat_tsv(staged, result, labels)
        record.add_output(path)
        side = write_sidecar(
            staged,
            sidecar(
                kind,
                n,
                threshold=args.threshold,
                absolute=args.absolute,
                source=dataset_relative(args.input, args.out),
                dtype=args.dtype,
                nodes=nodes,
            ),
        )
        outputs.path(side.name)
        record.add_output(folder / side.name)
        from connscale._compute import resolve_device

        record.device = str(resolve_device(args.device))
        record.results.update(
            {
                "n_series": n,
                "n_timepoints": n_timepoints,
                "nodes": nodes,
                "kind": kind,
                "n_constant_series": n_constant,
                **plan.as_dict(),
                "precision": args.precision,
                "confirmation": None if confirmation is None else confirmation.as_dict(),
            }
        )
        seconds = record.timings["correlation"]
        record.results["pairs_per_second"] = n * (n - 1) / 2 / max(seconds, 1e-9)
        if n <= TSV_MAX_NODES:
            matrix = result if as_tsv else _dense_from_store(load_relmat(staged)[0], kind, n)
            from connscale.report.plots import plot_correlation_matrix

            figure = f"{stem}.png"
            plot_correlation_matrix(
                matrix,
                outputs.path(figure),
                labels=labels,
                title=f"Pearson correlation, {n} {nodes}",
            )
            record.add_figure(folder / figure)
        log = record.finish(stem, outputs)
        outputs.commit()
    write_dataset_description(args.out)
    print(
        f"connscale fc: {n} {nodes}, {n_timepoints} time points, kind={kind}, "
        f"{plan.n_rounds} round(s) on {record.device} in {seconds:.3f} s"
    )
    print(f"  wrote {path}")
    print(f"  log   {log}")
    return 0


def _dense_from_store(stored, kind, n):
    from connscale.fc.triu import vec_to_matrix

    if kind == "triu":
        return vec_to_matrix(stored, n)
    matrix = np.asarray(stored.toarray() if hasattr(stored, "toarray") else stored)
    if kind == "sparse":
        matrix = matrix + matrix.T
        np.fill_diagonal(matrix, 1.0)
    return matrix
