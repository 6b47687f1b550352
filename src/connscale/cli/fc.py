"""``connscale fc``: static functional connectivity of one scan."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from connscale import _fields
from connscale._choices import CORRELATION_KINDS
from connscale._params import Flag, add_arguments, entry, keywords_from_args, param
from connscale._validation import StrOptions
from connscale.cli import _types
from connscale.cli._common import (
    RunRecord,
    configure_logging,
    input_files,
    logger,
    output_set,
)
from connscale.cli._inputs import check_input_arguments, load_input, output_place
from connscale.io.bids import dataset_relative

# Region matrices up to this size are written as TSV, larger ones as HDF5.
TSV_MAX_NODES = 1000


@dataclass(frozen=True, kw_only=True)
class FcConfig:
    """The options of ``connscale fc``, each declared once (:mod:`connscale._params`)."""

    input: Path = _fields.input_file()
    mask: Path | None = _fields.mask()
    atlas: Path | None = _fields.atlas()
    atlas_name: str | None = _fields.atlas_name()
    kind: str | None = param(
        None,
        constraints=[StrOptions(set(CORRELATION_KINDS)), None],
        doc="The output's form (:func:`connscale.correlation`'s ``kind``); None:\n"
        f"``'dense'`` for up to {TSV_MAX_NODES} series, ``'triu'`` above, ``'sparse'``\n"
        "with a ``threshold``.",
        flag=Flag(("--kind",), choices=CORRELATION_KINDS,
                  help=f"Output form (default: dense for up to {TSV_MAX_NODES} series, "
                  "triu above)."),
    )  # fmt: skip
    threshold: float | None = _fields.threshold(
        "Keep r >= threshold: a sparse result (``kind='sparse'``).",
        flag_help="Keep r >= THRESHOLD (sparse output; implies --kind sparse).",
    )
    absolute: bool = _fields.absolute()
    precision: str = _fields.precision()
    out: Path = _fields.out()
    device: str = _fields.device()
    dtype: str = _fields.dtype()
    memory_limit: str | int | None = _fields.memory_limit()
    verbose: int = _fields.verbose()
    wait: bool = _fields.wait()
    overwrite: bool = _fields.overwrite()


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``fc`` command to ``subparsers`` and return its parser.

    Its options are derived from :class:`FcConfig`'s fields.
    """
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
    groups = {
        None: parser,
        _fields.MASK_OR_ATLAS: parser.add_mutually_exclusive_group(),
        _fields.COMPUTATION: parser.add_argument_group(_fields.COMPUTATION),
    }
    add_arguments(parser, FcConfig, groups, _types)
    parser.set_defaults(func=run)
    return parser


def check_arguments(args) -> None:
    """Check the options that go together, and that INPUT is of a kind read."""
    check_input_arguments(args)
    if args.threshold is not None and args.kind not in (None, "sparse"):
        raise ValueError(
            f"--threshold gives a sparse result (--kind sparse); got --kind {args.kind}."
        )


def run(args) -> int:
    """Run ``connscale fc`` from its parsed command line; return the exit status."""
    return run_fc(**keywords_from_args(args, FcConfig))


@entry(FcConfig)
def run_fc(config: FcConfig) -> int:
    """Compute the correlation matrix of INPUT and publish it; return 0.

    The matrix (a ``.tsv`` relmat for small dense region matrices, ``.h5``
    otherwise), its sidecar, figure, log and report are published as one set.

    Parameters
    ----------
    %(parameters)s

    Returns
    -------
    int
        The exit status, 0.
    """
    from connscale.fc.static import compute_correlation
    from connscale.io.bids import write_dataset_description
    from connscale.io.fingerprint import run_fingerprint
    from connscale.io.hdf5 import load_relmat
    from connscale.io.relmat import sidecar, write_relmat_tsv, write_sidecar

    configure_logging(config.verbose)
    kind = config.kind or ("sparse" if config.threshold is not None else None)
    folder, stem = output_place(config, suffix="relmat", extension=".tsv")
    fingerprint = run_fingerprint(
        input_files(config),
        {
            "command": "fc",
            "kind": config.kind,
            "threshold": config.threshold,
            "absolute": config.absolute,
            "dtype": config.dtype,
            "precision": config.precision,
        },
    )
    record = RunRecord("fc", config.out, vars(config))
    # The matrix, its sidecar, figure, log and report are one set: written in
    # a hidden staging folder under the set's lock, published together.
    with output_set(config, folder, stem, command="fc", fingerprint=fingerprint) as outputs:
        with record.timer("load"):
            timeseries, labels, nodes, _ = load_input(config)
        n_timepoints, n = timeseries.shape
        if kind is None:
            kind = "dense" if n <= TSV_MAX_NODES else "triu"
        logger.info("Loaded %d %s x %d time points from %s", n, nodes, n_timepoints, config.input)
        as_tsv = kind == "dense" and n <= TSV_MAX_NODES
        path = folder / f"{stem}{'.tsv' if as_tsv else '.h5'}"
        staged = outputs.path(path.name)
        with record.timer("correlation"):
            result, (plan, n_constant, confirmation) = compute_correlation(
                timeseries,
                kind=kind,
                threshold=config.threshold,
                absolute=config.absolute,
                device=config.device,
                dtype=config.dtype,
                memory_limit=config.memory_limit,
                out=None if as_tsv else staged,
                precision=config.precision,
                verbose=config.verbose,
                attrs={"source": str(config.input)},
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
                threshold=config.threshold,
                absolute=config.absolute,
                source=dataset_relative(config.input, config.out),
                dtype=config.dtype,
                nodes=nodes,
            ),
        )
        outputs.path(side.name)
        record.add_output(folder / side.name)
        from connscale._compute import resolve_device

        record.device = str(resolve_device(config.device))
        record.results.update(
            {
                "n_series": n,
                "n_timepoints": n_timepoints,
                "nodes": nodes,
                "kind": kind,
                "n_constant_series": n_constant,
                **plan.as_dict(),
                "precision": config.precision,
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
    write_dataset_description(config.out)
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
