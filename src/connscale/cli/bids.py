"""``connscale bids``: a BIDS-App over fMRIPrep derivatives (participant and group levels)."""

from __future__ import annotations

import argparse
import sys

from connscale._choices import GROUP_FEATURES, MEASURES
from connscale._params import add_arguments, keywords_from_args
from connscale.bidsapp.config import (
    ATLAS,
    COMPUTATION,
    EXECUTION,
    FILTERS,
    GROUP,
    MEASURE_ALIASES,
    WINDOWED,
    GroupConfig,
    ParticipantConfig,
    participant_measures,
)
from connscale.cli import _types
from connscale.cli._common import configure_logging


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``bids`` command to ``subparsers`` and return its parser.

    The options are the flags declared by the fields of
    :class:`~connscale.bidsapp.config.ParticipantConfig` and
    :class:`~connscale.bidsapp.config.GroupConfig`, in the argument groups
    atlas and denoising, filters, group level, execution and computation;
    the positional ``level`` chooses between participant and group.

    Parameters
    ----------
    subparsers : argparse._SubParsersAction
        The sub-commands of the ``connscale`` parser.

    Returns
    -------
    argparse.ArgumentParser
        The ``bids`` parser; its ``func`` default is :func:`run`.
    """
    parser = subparsers.add_parser(
        "bids",
        help="BIDS-App: denoised atlas connectivity from fMRIPrep derivatives.",
        description=(
            "participant: for every fMRIPrep run matching the filters, removes confounds as "
            "nilearn does (load_confounds_strategy + signal.clean), extracts the atlas region "
            "series and writes BIDS derivatives (sub-*/[ses-*/]func/<source>_seg-<NAME>_meas-"
            "PearsonCorrelation_desc-<STRATEGY>_relmat.tsv, ..._timeseries.tsv, JSON "
            "sidecars), one task per run; a failing run, a run refused for too few degrees of "
            "freedom (--min-dof) and a failing measure are reported in logs/participant_*_"
            "errors.tsv and the others complete (exit status 1). group: reads those outputs "
            "back, writes the group-average connectome and the feature table in group/, and "
            "classifies participants when --participants and --target are given."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    groups = {None: parser}
    for title in (ATLAS, FILTERS, GROUP, EXECUTION, COMPUTATION):
        groups[title] = parser.add_argument_group(title)
    # In the usage line's order: the paths, the level, the atlas and the
    # filters, the group level's own options, execution and computation.
    add_arguments(parser, ParticipantConfig, {None: parser}, _types)
    parser.add_argument("level", choices=["participant", "group"], help="Analysis level.")
    add_arguments(parser, ParticipantConfig, _only(groups, ATLAS, FILTERS), _types)
    add_arguments(parser, GroupConfig, _only(groups, GROUP), _types)
    add_arguments(parser, ParticipantConfig, _only(groups, EXECUTION, COMPUTATION), _types)
    parser.set_defaults(func=run)
    return parser


def _only(groups: dict, *titles: str) -> dict:
    return {title: groups[title] for title in titles}


def check_arguments(args) -> None:
    """Check what the level needs, and the options that go together.

    Raises
    ------
    ValueError
        On an unknown measure (``--measures``) or group feature
        (``--group-features``); at the participant level, when --atlas,
        --atlas-name or --denoise is missing, or a windowed measure without
        --window-length.
    """
    unknown = [
        m.strip()
        for m in args.measures.split(",")
        if m.strip() and m.strip() not in (*MEASURES, *MEASURE_ALIASES)
    ]
    if unknown:
        raise ValueError(
            f"argument --measures: unknown measure(s) {', '.join(unknown)}; expected "
            f"some of {', '.join((*MEASURES, *MEASURE_ALIASES))}, separated by commas."
        )
    kinds = [k for k in args.group_features.split(",") if k not in GROUP_FEATURES]
    if kinds:
        raise ValueError(
            f"argument --group-features: unknown kind(s) {', '.join(kinds)}; expected some of "
            f"{', '.join(GROUP_FEATURES)}, separated by commas."
        )
    if args.level == "group":
        return
    missing = [
        opt
        for opt, value in (
            ("--atlas", args.atlas),
            ("--atlas-name", args.atlas_name),
            ("--denoise", args.strategy),
        )
        if value is None
    ]
    if missing:
        raise ValueError(f"The participant level needs {', '.join(missing)}.")
    windowed = [m for m in participant_measures(args.measures) if m in WINDOWED]
    if windowed and args.window_length is None:
        raise ValueError(
            f"--measures {','.join(windowed)} needs --window-length (in kept volumes)."
        )


def run(args) -> int:
    """Run ``connscale bids`` at the level ``args.level``; return the exit status.

    The participant level calls
    :func:`~connscale.bidsapp.participant.run_participant` with the parsed
    options and prints the counts of its runs and where its report (and
    errors) are; the group level runs :func:`~connscale.bidsapp.group.run_group`
    under the output folder's lock (waiting for it with --wait) and prints
    what it wrote.

    Parameters
    ----------
    args : argparse.Namespace
        The parsed command line.

    Returns
    -------
    int
        1 when a participant-level run failed, else 0.
    """
    configure_logging(args.verbose)
    if args.level == "group":
        return _group(args)
    from connscale.bidsapp.participant import run_participant

    report = run_participant(**keywords_from_args(args, ParticipantConfig))
    c = report.counts
    for note in report.notes:
        print(f"connscale bids: {note}", file=sys.stderr)
    print(
        f"connscale bids participant: {len(report.records)} runs, backend={args.backend}: "
        f"{c['ok']} done, {c['skipped']} already complete, {c['error']} failed"
        + "".join(f", {c[s]} {s}" for s in ("partial", "refused") if s in c)
        + f" ({report.seconds:.2f} s)"
    )
    if report.n_failed:
        print(f"  errors {report.errors_path}")
    print(f"  report {report.report_path}")
    return 1 if report.n_failed else 0


def _group(args) -> int:
    from connscale.bidsapp.group import left_out_lines, run_group
    from connscale.bidsapp.participant import output_lock

    # Not while a participant run writes the outputs the group level reads.
    with output_lock(args.output, wait=args.wait):
        result = run_group(**keywords_from_args(args, GroupConfig))
    print(
        f"connscale bids group: {len(result.runs)} runs of {len(result.subjects)} "
        f"participants, seg-{result.atlas_name} desc-{result.strategy}, "
        f"{len(result.labels)} regions"
    )
    if result.classification is not None:
        acc = result.classification["accuracy"]
        print(f"  accuracy {acc['mean']:.3f} [{acc['ci_low']:.3f}, {acc['ci_high']:.3f}]")
    if result.states is not None:
        print(
            f"  {result.states.n_states} DFC states ({result.states.metric})"
            + (", already published" if result.states.resumed else "")
        )
    if result.maps is not None:
        print(
            f"  {len(result.maps.names)} group mean maps over "
            f"{int(result.maps.mask.sum())} voxels"
            + (", already published" if result.maps.resumed else "")
        )
    for path in result.outputs:
        print(f"  {path}")
    for line in left_out_lines(result.left_out):
        print(f"  {line}")
    return 0
