"""``connscale cohort``: one per-scan job over a whole cohort, on any engine."""

from __future__ import annotations

import argparse

from connscale._choices import DTYPES
from connscale._params import add_arguments, keywords_from_args
from connscale._validation import check_kind_options
from connscale.cli import _types
from connscale.cli._common import RunRecord, configure_logging
from connscale.cli._inputs import add_atlas_name_argument
from connscale.cohort_config import COMPUTATION, EXECUTION, OPTIONS_LAST, CohortConfig


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``cohort`` command to ``subparsers`` and return its parser.

    The positional ``inputs`` and ``--job`` (fc, dfc or pairs) choose what
    runs on which scans; the argument groups job options (window, threshold,
    kind, atlas or mask...) and execution (backend, cluster, workers,
    retries, overwrite) and the computation options complete it.

    Parameters
    ----------
    subparsers : argparse._SubParsersAction
        The sub-commands of the ``connscale`` parser.

    Returns
    -------
    argparse.ArgumentParser
        The ``cohort`` parser; its ``func`` default is :func:`run`.
    """
    parser = subparsers.add_parser(
        "cohort",
        help="Run a per-scan job (fc, dfc, pairs) over a cohort: local, Dask or Spark.",
        description=(
            "Runs one job per input scan over files, folders, glob patterns or a BIDS "
            "derivatives tree (*_bold.nii.gz, *_timeseries.tsv under sub-*), one BIDS-named "
            "output per scan (sub-<id>/[ses-<id>/]func/<entities>[_seg-<atlas>]"
            "_meas-PearsonCorrelation_<relmat|pairs|dfc>.h5), skipping scans already done "
            "with the "
            "same parameters. Failures are reported in cohort_errors.tsv without "
            "stopping the other scans (exit status 1 when any failed). --device auto "
            "computes on CUDA only with --backend serial (one scan at a time); "
            "--memory-limit covers each scan's task, the loaded scan included."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_arguments(parser, CohortConfig, {None: parser}, _types)
    group = parser.add_argument_group("job options")
    group.add_argument(
        "--window",
        type=_types.window_length,
        default=None,
        help="pairs, dfc: window length in time points (required).",
    )
    group.add_argument("--step", type=_types.count, default=1, help="pairs, dfc: window step.")
    group.add_argument(
        "--threshold",
        type=_types.correlation,
        default=None,
        help="pairs: summary feature 'fraction of windows with r > THRESHOLD' "
        "(default 0.5); dfc: keep r >= THRESHOLD (--kind sparse).",
    )
    group.add_argument(
        "--kind",
        choices=["triu", "dense", "sparse", "lowrank", "factor"],
        default="triu",
        help="fc: 'triu' or 'dense'; dfc: 'triu', 'sparse', 'lowrank' or 'factor'.",
    )
    group.add_argument(
        "--absolute", action="store_true", help="dfc --kind sparse: keep |r| >= THRESHOLD."
    )
    group.add_argument(
        "--rank",
        type=_types.count,
        default=None,
        help="dfc --kind lowrank (required) or factor: the rank.",
    )
    group.add_argument(
        "--seed", type=_types.natural, default=0, help="dfc --kind lowrank: random seed."
    )
    group.add_argument(
        "--atlas",
        type=_types.input_file,
        default=None,
        help="Labels NIfTI for NIfTI inputs (region-mean series).",
    )
    group.add_argument(
        "--mask",
        type=_types.input_file,
        default=None,
        help="Brain mask NIfTI for NIfTI inputs (voxel series).",
    )
    add_atlas_name_argument(group)
    add_arguments(parser, CohortConfig, {EXECUTION: parser.add_argument_group(EXECUTION)}, _types)
    computation = parser.add_argument_group(COMPUTATION)
    add_device_arguments(computation)
    add_arguments(parser, CohortConfig, {COMPUTATION: computation}, _types)
    add_arguments(parser, CohortConfig, {OPTIONS_LAST: parser}, _types)
    parser.set_defaults(func=run)
    return parser


def add_device_arguments(group) -> None:
    """Add --device, --dtype and --memory-limit (job parameters) to ``group``."""
    group.add_argument(
        "--device",
        type=_types.device,
        default="auto",
        help="'auto' (CUDA when present), 'cpu', 'cuda' or 'cuda:N'.",
    )
    group.add_argument(
        "--dtype", default="float32", choices=list(DTYPES), help="Working precision."
    )
    group.add_argument(
        "--memory-limit",
        type=_types.memory,
        default=None,
        metavar="SIZE",
        help="Most memory to use, e.g. '8GB' (default: 80%% of free).",
    )


def job_params(args) -> dict:
    """Return the job parameters named by the command-line options."""
    params = {
        "device": args.device,
        "dtype": args.dtype,
        "memory_limit": args.memory_limit,
        "atlas": args.atlas,
        "atlas_name": args.atlas_name,
        "mask": args.mask,
    }
    if args.job == "pairs":
        threshold = 0.5 if args.threshold is None else args.threshold
        params.update(window_length=args.window, step=args.step, threshold=threshold)
    elif args.job == "dfc":
        params.update(
            window_length=args.window,
            step=args.step,
            kind=args.kind,
            threshold=args.threshold,
            absolute=args.absolute,
            rank=args.rank,
            random_state=args.seed,
        )
    else:
        params["kind"] = args.kind
    return params


def check_arguments(args) -> None:
    """Check that the job options go together.

    The job checks their values against the data.

    Raises
    ------
    ValueError
        A missing ``--window``, an option the job (or the dfc ``--kind``)
        does not take, or one that the dfc ``--kind`` needs and lacks.
    """
    if args.job in ("pairs", "dfc") and args.window is None:
        raise ValueError(f"--job {args.job} needs --window (in time points, e.g. 32).")
    if args.job == "dfc":
        check_kind_options(args.kind, args.threshold, args.absolute, args.rank)
    elif args.absolute or args.rank is not None:
        raise ValueError(f"--absolute and --rank apply to --job dfc only; got --job {args.job}.")
    if args.job == "fc":
        if args.threshold is not None:
            raise ValueError("--threshold applies to --job pairs and dfc only.")
        if args.kind not in ("triu", "dense"):
            raise ValueError(f"--job fc writes --kind triu or dense; got --kind {args.kind}.")
    elif args.job == "pairs" and args.kind != "triu":
        raise ValueError(f"--kind applies to --job fc and dfc only; got --kind {args.kind}.")


def run(args) -> int:
    """Run ``connscale cohort``; return the exit status (1 when any scan failed).

    Calls :func:`~connscale.cohort.run_cohort` with the job parameters of
    :func:`job_params`, publishes the run's log with the cohort report and
    errors table, and prints the counts of the scans and where the report,
    errors and log are.
    """
    from connscale.cohort import run_cohort
    from connscale.io.publish import OutputSet

    configure_logging(args.verbose)
    record = RunRecord("cohort", args.out, vars(args))
    params = job_params(args)
    with record.timer("cohort"):
        report = run_cohort(**keywords_from_args(args, CohortConfig), params=params)
    record.device = report.device
    record.results.update({"engine": report.engine, **report.counts})
    for r in report.records:
        if r["status"] == "ok":
            record.add_output(r["output"])
    record.add_output(report.report_path)
    record.add_output(report.errors_path)
    # The run's log and HTML report are published together.
    with OutputSet(args.out, "cohort", command="cohort", wait=args.wait) as outputs:
        log = record.finish("cohort", outputs)
        outputs.commit()
    print(
        f"connscale cohort: {len(report.records)} scans, job={args.job}, "
        f"backend={args.backend}: {report.n_ok} done, {report.n_skipped} already "
        f"complete, {report.n_failed} failed ({report.seconds:.2f} s)"
    )
    if report.n_failed:
        print(f"  errors {report.errors_path}")
    print(f"  report {report.report_path}")
    print(f"  log    {log}")
    return 1 if report.n_failed else 0
