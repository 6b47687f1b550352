"""``connscale dfc``: dynamic (sliding-window) functional connectivity."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from numbers import Integral
from pathlib import Path

import numpy as np

from connscale import _fields
from connscale._choices import DFC_KINDS, DFC_METHODS
from connscale._params import Flag, add_arguments, entry, keywords_from_args, param
from connscale._validation import Interval, StrOptions, check_kind_options
from connscale.cli import _types
from connscale.cli._common import (
    RunRecord,
    compute_options,
    configure_logging,
    input_files,
    logger,
    output_set,
)
from connscale.cli._inputs import check_input_arguments, load_input, output_place
from connscale.cli._windows import resolve_window
from connscale.io.atomic import write_json_atomic
from connscale.io.bids import dataset_relative

# Plots of windows and edge time courses are drawn for at most this many series.
PLOT_MAX_NODES = 200

_NATURAL = Interval(Integral, 0, None, closed="left")


@dataclass(frozen=True, kw_only=True)
class DfcConfig:
    """The options of ``connscale dfc``, each declared once (:mod:`connscale._params`)."""

    input: Path = _fields.input_file()
    mask: Path | None = _fields.mask()
    atlas: Path | None = _fields.atlas()
    atlas_name: str | None = _fields.atlas_name()
    window: str | int = _fields.window()
    step: str | int = _fields.step()
    t_r: float | None = _fields.t_r()
    taper: str = _fields.taper()
    taper_sigma: float = _fields.taper_sigma()
    kind: str | None = param(
        None,
        constraints=[StrOptions(set(DFC_KINDS)), None],
        doc="The stored form (:func:`connscale.dynamic_correlation`'s ``kind``);\n"
        "None: ``'sparse'`` with a ``threshold``, ``'triu'`` otherwise.",
        flag=Flag(("--kind",), choices=DFC_KINDS,
                  help="Stored form (default: sparse with --threshold, triu otherwise)."),
    )  # fmt: skip
    threshold: float | None = _fields.threshold(
        "Keep r >= threshold in each window (``kind='sparse'``).",
        flag_help="Keep r >= THRESHOLD (kind sparse).",
    )
    absolute: bool = _fields.absolute()
    rank: int | None = param(
        None,
        constraints=[Interval(Integral, 1, None, closed="left"), None],
        doc="The rank l: required for ``kind='lowrank'``; for ``'factor'``, None\n"
        "keeps the exact factorization.",
        flag=Flag(("--rank",), type="count",
                  help="Rank l (lowrank: required; factor: default exact)."),
    )  # fmt: skip
    method: str = param(
        "randomized",
        constraints=[StrOptions(set(DFC_METHODS))],
        doc="``kind='lowrank'``: GPU-DFC's randomized range finder or an exact SVD.",
        flag=Flag(("--method",), choices=DFC_METHODS,
                  help="lowrank: GPU-DFC's randomized range finder or exact SVD."),
    )  # fmt: skip
    power_iterations: int = param(
        0,
        constraints=[_NATURAL],
        doc="``kind='lowrank'``, ``method='randomized'``: the power iterations.",
        flag=Flag(("--power-iterations",), type="natural",
                  help="lowrank randomized: power iterations."),
    )  # fmt: skip
    seed: int = _fields.seed(
        "Seed of the randomized range finder (the API's ``random_state``).",
        flag_help="Random seed (lowrank).",
    )
    error: bool = param(
        False,
        constraints=["boolean"],
        doc="``kind='lowrank'`` or ``'factor'``: record each window's mean absolute\n"
        "error against the exact matrix.",
        flag=Flag(("--error",), action="store_true",
                  help="lowrank/factor: record each window's MAE against the exact matrix."),
    )  # fmt: skip
    precision: str = _fields.precision()
    out: Path = _fields.out()
    device: str = _fields.device()
    dtype: str = _fields.dtype()
    memory_limit: str | int | None = _fields.memory_limit()
    verbose: int = _fields.verbose()
    wait: bool = _fields.wait()
    overwrite: bool = _fields.overwrite()


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``dfc`` command to ``subparsers`` and return its parser.

    Its options are derived from :class:`DfcConfig`'s fields.
    """
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
    groups = {
        None: parser,
        _fields.MASK_OR_ATLAS: parser.add_mutually_exclusive_group(),
        _fields.COMPUTATION: parser.add_argument_group(_fields.COMPUTATION),
    }
    add_arguments(parser, DfcConfig, groups, _types)
    parser.set_defaults(func=run)
    return parser


def check_arguments(args) -> None:
    """Check that the options of a --kind go together, and INPUT is of a kind read."""
    check_input_arguments(args)
    kind = args.kind or ("sparse" if args.threshold is not None else "triu")
    check_kind_options(kind, args.threshold, args.absolute, args.rank, args.error)


def run(args) -> int:
    """Run ``connscale dfc`` from its parsed command line; return the exit status."""
    return run_dfc(**keywords_from_args(args, DfcConfig))


@entry(DfcConfig)
def run_dfc(config: DfcConfig) -> int:
    """Compute the sliding-window correlations of INPUT and publish them; return 0.

    The resumable ``_dfc.h5`` store, its JSON sidecar, plots, log and report
    are published together as one set (nothing is done when the folder
    already holds the complete result of this input and these parameters).

    Parameters
    ----------
    %(parameters)s

    Returns
    -------
    int
        The exit status, 0.
    """
    from connscale._compute import resolve_device
    from connscale.fc.dynamic import dynamic_correlation
    from connscale.io.bids import write_dataset_description
    from connscale.io.fingerprint import run_fingerprint

    configure_logging(config.verbose)
    kind = config.kind or ("sparse" if config.threshold is not None else "triu")
    # The window, step, taper and kind are in the sidecar, not the name: a
    # result already there with other parameters is replaced only with --overwrite.
    folder, stem = output_place(config, suffix="dfc", extension=".h5")
    fingerprint = run_fingerprint(input_files(config), _parameters(config, kind))
    record = RunRecord("dfc", config.out, vars(config))
    # The windows file, plots, log and report are one set, written in a hidden
    # staging folder under the set's lock (where an interrupted run's
    # unfinished windows file waits to be resumed) and published together.
    with output_set(config, folder, stem, command="dfc", fingerprint=fingerprint) as outputs:
        if outputs.complete():
            print(
                f"connscale dfc: {folder} holds the complete {stem} result for this "
                "input and these parameters; nothing to do"
            )
            return 0
        with record.timer("load"):
            timeseries, labels, nodes, _ = load_input(config)
        n_timepoints, n = timeseries.shape
        logger.info("Loaded %d %s x %d time points from %s", n, nodes, n_timepoints, config.input)
        window, step, t_r = resolve_window(config, config.input)
        name = f"{stem}.h5"
        path = folder / name
        record.device = str(resolve_device(config.device))
        with record.timer("dynamic_correlation"):
            result = dynamic_correlation(
                timeseries,
                window,
                step,
                kind=kind,
                threshold=config.threshold,
                absolute=config.absolute,
                rank=config.rank,
                method=config.method,
                power_iterations=config.power_iterations,
                random_state=config.seed,
                **compute_options(config),
                out=outputs.path(name),
                compute_error=config.error,
                precision=config.precision,
                taper=config.taper,
                taper_sigma=config.taper_sigma,
                verbose=config.verbose,
                attrs={"source": str(config.input)},
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
                    "precision": config.precision,
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
                    config,
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
    write_dataset_description(config.out)
    print(
        f"connscale dfc: {n} {nodes}, {n_timepoints} time points, {n_windows} windows "
        f"(w={window}, s={step}), kind={kind} on {record.device} in {seconds:.3f} s"
    )
    print(f"  stored {nbytes / 1e6:.2f} MB (compression ratio {ratio:.1f})")
    print(f"  wrote {path}")
    print(f"  log   {log}")
    return 0


def _parameters(config: DfcConfig, kind: str) -> dict:
    """Return what the result depends on besides the input (the set's fingerprint)."""
    return {
        "command": "dfc",
        "window": config.window,
        "step": config.step,
        "t_r": config.t_r,
        "taper": config.taper,
        "taper_sigma": config.taper_sigma,
        "kind": kind,
        "threshold": config.threshold,
        "absolute": config.absolute,
        "rank": config.rank,
        "method": config.method,
        "power_iterations": config.power_iterations,
        "seed": config.seed,
        "error": config.error,
        "dtype": config.dtype,
        "precision": config.precision,
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
    config: DfcConfig,
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
        "Threshold": config.threshold,
        "AbsoluteThreshold": bool(config.absolute),
        "Rank": config.rank,
        "WindowLength": int(window),
        "WindowStep": int(step),
        "WindowSupport": int(window_support),
        "Taper": config.taper,
        "TaperSigma": config.taper_sigma,
        "NumberOfWindows": int(n_windows),
        "RepetitionTime": t_r,
        "NumberOfNodes": int(n),
        "DataType": str(config.dtype),
        "Sources": [dataset_relative(config.input, config.out)],
        "Code": f"connscale {__version__}",
    }
