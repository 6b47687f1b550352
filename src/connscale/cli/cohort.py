"""``connscale cohort``: one per-scan job over a whole cohort, on any engine."""

from __future__ import annotations

import argparse

from connscale._params import add_arguments, keywords_from_args
from connscale._validation import check_kind_options
from connscale.cli import _types
from connscale.cli._common import RunRecord, configure_logging
from connscale.cohort_config import (
    COMPUTATION,
    EXECUTION,
    JOB_OPTIONS,
    OPTIONS_LAST,
    CohortConfig,
    CohortJobParams,
    job_defaults,
)


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``cohort`` command to ``subparsers`` and return its parser.

    The positional ``inputs`` and ``--job`` (fc, dfc or pairs) choose what
    runs on which scans; the argument groups job options (window, threshold,
    kind, atlas or mask...) and execution (backend, cluster, workers,
    retries, overwrite) and the computation options complete it. Every
    option is derived from its field's declaration: the run's in
    :class:`~connscale.cohort_config.CohortConfig`, the job's in
    :class:`~connscale.cohort_config.CohortJobParams`.

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
    groups = {None: parser, OPTIONS_LAST: parser}
    groups.update({t: parser.add_argument_group(t) for t in (JOB_OPTIONS, EXECUTION, COMPUTATION)})
    # In the order of --help: positional INPUT, --job and --out; the job options;
    # the execution; the job's then the run's computation options; --wait.
    for config, title in [
        (CohortConfig, None),
        (CohortJobParams, JOB_OPTIONS),
        (CohortConfig, EXECUTION),
        (CohortJobParams, COMPUTATION),
        (CohortConfig, COMPUTATION),
        (CohortConfig, OPTIONS_LAST),
    ]:
        add_arguments(parser, config, {title: groups[title]}, _types)
    parser.set_defaults(func=run)
    return parser


def job_params(args) -> dict:
    """Return the parameters of ``args.job`` named by the command-line options.

    An option left out (None) takes the job's default (``--threshold``:
    0.5 for pairs).
    """
    given = keywords_from_args(args, CohortJobParams)
    return {
        name: default if given[name] is None else given[name]
        for name, default in job_defaults(args.job).items()
    }


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
