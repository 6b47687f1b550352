"""``connscale bids``: a BIDS-App over fMRIPrep derivatives (participant and group levels)."""

from __future__ import annotations

import argparse
import sys

from connscale._choices import GROUP_FEATURES, MEASURES, STRATEGIES
from connscale.cli import _types
from connscale.cli._bids_states import (
    ALIASES,
    add_state_arguments,
    group_options,
    participant_measures,
)
from connscale.cli._common import add_compute_arguments, add_wait_argument, configure_logging


def add_parser(subparsers) -> argparse.ArgumentParser:
    from connscale.engines import ENGINES

    parser = subparsers.add_parser(
        "bids",
        help="BIDS-App: denoised atlas connectivity from fMRIPrep derivatives.",
        description=(
            "participant: for every fMRIPrep run matching the filters, removes confounds as "
            "nilearn does (load_confounds_strategy + signal.clean), extracts the atlas region "
            "series and writes BIDS derivatives (sub-*/[ses-*/]func/<source>_seg-<NAME>_meas-"
            "PearsonCorrelation_desc-<STRATEGY>_relmat.tsv, ..._timeseries.tsv, JSON "
            "sidecars), one task per run; a failing run, a run refused for too few degrees of "
            "freedom (--min-dof) and a failing measure are reported in logs/participant_"
            "errors.tsv and the others complete (exit status 1). group: reads those outputs "
            "back, writes the group-average connectome and the feature table in group/, and "
            "classifies participants when --participants and --target are given."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "derivatives",
        type=_types.input_folder,
        metavar="DERIVATIVES",
        help="fMRIPrep output folder.",
    )
    parser.add_argument(
        "output", type=_types.output_folder, metavar="OUTPUT", help="Output folder."
    )
    parser.add_argument("level", choices=["participant", "group"], help="Analysis level.")
    atlas = parser.add_argument_group("atlas and denoising")
    atlas.add_argument(
        "--atlas",
        type=_types.input_file,
        default=None,
        help="participant: 3-D labels NIfTI (0 = background).",
    )
    atlas.add_argument(
        "--atlas-name",
        type=_types.bids_label,
        default=None,
        help="The seg- entity of the outputs (letters and digits); group: which atlas to read.",
    )
    atlas.add_argument(
        "--atlas-space",
        type=_types.bids_label,
        default=None,
        metavar="SPACE",
        help="participant: the atlas's space (e.g. MNI152NLin2009cAsym, T1w; native for runs "
        "without a space- entity); default: the space- or tpl- entity of its file name. Runs "
        "in another space are refused.",
    )
    atlas.add_argument(
        "--atlas-labels",
        type=_types.input_file,
        default=None,
        help="Region names, a BIDS dseg.tsv (index, name): matrix headers.",
    )
    atlas.add_argument(
        "--denoise",
        choices=list(STRATEGIES),
        default=None,
        help="participant: denoising strategy (nilearn's presets, or none); "
        "group: which strategy to read.",
    )
    atlas.add_argument(
        "--measures",
        default="fc,timeseries",
        help=f"Comma-separated, among {', '.join(MEASURES)}: fc and timeseries "
        "(atlas level, TSV), dfc (sliding-window FC of all region pairs) "
        "and pairs (each region pair's windowed course and summaries), "
        "HDF5; voxelfc: the voxel level, every pair of in-mask voxels "
        "(_relmat.h5 with the mask and voxel coordinates); maps: degree "
        "(binary, weighted), eigenvector centrality and global correlation "
        "maps of the voxels (_boldmap.nii.gz); networks: r1DL spatial maps "
        "(_components.nii.gz) and time courses (_mixing.tsv). states: participant, an "
        "alias of dfc; group, requires every run's DFC and clusters it into --states "
        "DFC states (done anyway when every run has DFC).",
    )
    atlas.add_argument(
        "--window-length",
        type=_types.window_length,
        default=None,
        help="dfc, pairs: window length in (kept) volumes.",
    )
    atlas.add_argument(
        "--step", type=_types.count, default=1, help="dfc, pairs: window step (volumes)."
    )
    atlas.add_argument(
        "--pairs-threshold",
        type=_types.correlation,
        default=0.5,
        help="pairs: threshold of the fraction-of-windows-above summary.",
    )
    atlas.add_argument(
        "--degree-thresholds",
        type=_types.numbers(_types.correlation),
        default="0.25",
        metavar="R[,R...]",
        help="maps: degree centrality counts the voxels with r above each threshold.",
    )
    atlas.add_argument(
        "--precision",
        choices=["exact", "fp32", "tf32"],
        default="exact",
        help="maps: arithmetic of the degree's thresholded correlations on CUDA (exact: TF32 "
        "tensor cores with the pairs near a threshold confirmed; the CPU computes in fp32).",
    )
    atlas.add_argument(
        "--n-atoms", type=_types.count, default=10, help="networks: number of r1DL networks."
    )
    atlas.add_argument(
        "--sparsity",
        type=_types.sparsity,
        default=0.07,
        help="networks: voxels per network, a count (e.g. 500) or a fraction (e.g. 0.07).",
    )
    atlas.add_argument(
        "--low-pass", type=_types.positive, default=None, help="Low-pass cutoff (Hz)."
    )
    atlas.add_argument(
        "--high-pass",
        type=_types.positive,
        default=None,
        help="High-pass cutoff (Hz), Butterworth (the presets already regress "
        "fMRIPrep's cosine drifts).",
    )
    atlas.add_argument(
        "--fd-threshold",
        type=_types.positive,
        default=None,
        help="scrubbing: framewise displacement threshold (mm).",
    )
    atlas.add_argument(
        "--min-dof",
        type=_types.number(0.0),
        default=10.0,
        help="participant: a run with fewer residual degrees of freedom (kept volumes minus "
        "the mean, trend, confounds and filter) is refused, not cleaned, and recorded in "
        "logs/participant_errors.tsv with its numbers.",
    )
    atlas.add_argument(
        "--t-r",
        type=_types.positive,
        default=None,
        help="Repetition time (s) for runs whose sidecar has none.",
    )
    filters = parser.add_argument_group("filters")
    filters.add_argument("--participant-label", nargs="+", default=None, metavar="LABEL")
    filters.add_argument("--session-label", nargs="+", default=None, metavar="LABEL")
    filters.add_argument("--task", nargs="+", default=None)
    filters.add_argument("--run", nargs="+", default=None)
    filters.add_argument("--space", nargs="+", default=None)
    group = parser.add_argument_group("group level")
    group.add_argument(
        "--participants",
        type=_types.input_file,
        default=None,
        help="participants.tsv (participant_id and the target column).",
    )
    group.add_argument("--target", default=None, help="Column of participants.tsv to classify.")
    group.add_argument("--folds", type=_types.integer(2), default=5, help="Cross-validation folds.")
    group.add_argument("--repeats", type=_types.count, default=10, help="Cross-validation repeats.")
    group.add_argument(
        "--group-features",
        default="edges,states",
        metavar="KIND[,KIND...]",
        help="Columns of the group feature table (and of the classification), among "
        "edges, dfc, states, maps: Fisher-z edges, DFC summaries (each edge's mean and "
        "standard deviation of Fisher z over windows; every run needs --measures dfc), "
        "DFC state features (when states are "
        "computed), the voxel maps inside the runs' common mask (every run needs "
        "--measures maps; one column per voxel and map, large).",
    )
    add_state_arguments(group)
    execution = parser.add_argument_group("execution")
    execution.add_argument(
        "--backend",
        choices=list(ENGINES),
        default="local",
        help="serial (this process), local (process pool), dask or spark.",
    )
    execution.add_argument(
        "--n-jobs",
        type=_types.n_jobs,
        default=None,
        help="Worker processes (default: every core; -1: every core, -2: all but one, "
        "...); with --backend serial, threads "
        "reading the next runs (default 1); with --gpus, threads of each GPU worker "
        "(default 2).",
    )
    execution.add_argument(
        "--gpus",
        type=_types.gpus,
        default=None,
        metavar="all|N",
        help="participant: every GPU of the node (or the first N), one Dask "
        "worker per GPU (CUDA_VISIBLE_DEVICES per worker); without a "
        "GPU the runs go to --backend on the CPU, with a note.",
    )
    execution.add_argument(
        "--no-reports", action="store_true", help="participant: skip the per-run HTML reports."
    )
    execution.add_argument(
        "--overwrite",
        action="store_true",
        help="Replace outputs made with other parameters: a run's (participant) or the "
        "group's, states included (without it such a run fails, naming what differs).",
    )
    execution.add_argument(
        "--work-dir",
        type=_types.output_folder,
        default=None,
        help="Scratch folder (the pybids index); default: none kept.",
    )
    add_compute_arguments(parser)
    add_wait_argument(execution, overwrite=False)
    parser.set_defaults(func=run, device="cpu")
    return parser


def check_arguments(args) -> None:
    """What the level needs, and the options that go together."""
    unknown = [
        m.strip()
        for m in args.measures.split(",")
        if m.strip() and m.strip() not in (*MEASURES, *ALIASES)
    ]
    if unknown:
        raise ValueError(
            f"argument --measures: unknown measure(s) {', '.join(unknown)}; expected "
            f"some of {', '.join((*MEASURES, *ALIASES))}, separated by commas."
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
            ("--denoise", args.denoise),
        )
        if value is None
    ]
    if missing:
        raise ValueError(f"The participant level needs {', '.join(missing)}.")
    if args.fd_threshold is not None and args.denoise != "scrubbing":
        raise ValueError("--fd-threshold applies to --denoise scrubbing only.")
    windowed = [m for m in participant_measures(args.measures) if m in ("dfc", "pairs")]
    if windowed and args.window_length is None:
        raise ValueError(
            f"--measures {','.join(windowed)} needs --window-length (in kept volumes)."
        )


def run(args) -> int:
    configure_logging(args.verbose)
    if args.level == "group":
        return _group(args)
    from connscale.bidsapp.participant import run_participant

    params = {}
    if args.fd_threshold is not None:
        params["fd_threshold"] = args.fd_threshold
    report = run_participant(
        args.derivatives,
        args.output,
        atlas=args.atlas,
        atlas_name=args.atlas_name,
        atlas_labels=args.atlas_labels,
        atlas_space=args.atlas_space,
        strategy=args.denoise,
        strategy_params=params,
        measures=participant_measures(args.measures),
        window_length=args.window_length,
        step=args.step,
        pairs_threshold=args.pairs_threshold,
        degree_thresholds=args.degree_thresholds,
        precision=args.precision,
        n_atoms=args.n_atoms,
        network_sparsity=args.sparsity,
        participant_label=args.participant_label,
        session_label=args.session_label,
        task=args.task,
        run=args.run,
        space=args.space,
        t_r=args.t_r,
        min_dof=args.min_dof,
        low_pass=args.low_pass,
        high_pass=args.high_pass,
        backend=args.backend,
        n_jobs=args.n_jobs,
        gpus=args.gpus,
        device=args.device,
        dtype=args.dtype,
        memory_limit=args.memory_limit,
        work_dir=args.work_dir,
        reports=not args.no_reports,
        overwrite=args.overwrite,
        wait=args.wait,
        verbose=args.verbose,
    )
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
        result = run_group(
            args.output,
            atlas_name=args.atlas_name,
            strategy=args.denoise,
            participants=args.participants,
            target=args.target,
            folds=args.folds,
            repeats=args.repeats,
            features=args.group_features.split(","),
            **group_options(args),
        )
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
