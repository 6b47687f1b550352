"""``connscale dfc-states``: recurring DFC states of a cohort.

The states come with dwell times, fractions of time and transitions
(Allen et al. 2014).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from connscale._choices import STATE_METRICS
from connscale.cli import _types
from connscale.cli._common import (
    RunRecord,
    add_compute_arguments,
    add_wait_argument,
    configure_logging,
    logger,
    output_set,
)
from connscale.cli._sets import command_fingerprint, publish
from connscale.cli._windows import add_window_arguments, resolve_window
from connscale.io.bids import dataset_relative

#: States are written as TSV up to this many nodes, as HDF5 above.
TSV_MAX_NODES = 1000
#: State matrices are plotted up to this many nodes.
PLOT_MAX_NODES = 400


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``dfc-states`` command to ``subparsers`` and return its parser."""
    parser = subparsers.add_parser(
        "dfc-states",
        help="Recurring DFC states of a cohort: k-means of the windows, dwell times, transitions.",
        description=(
            "Sliding-window correlations of every input (or DFC files written by "
            "'connscale dfc') are pooled and clustered into states; each subject's state "
            "sequence and its features (fraction of time, mean dwell time, transitions) are "
            "written as TSV, the states as relmat files with JSON sidecars, with a report."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "inputs",
        nargs="+",
        type=_types.input_file,
        metavar="INPUT",
        help="ROI time series (.tsv/.csv/.npy), 4-D NIfTI with --atlas, or "
        "_dfc.h5 files of kind triu from 'connscale dfc'.",
    )
    parser.add_argument(
        "--atlas",
        type=_types.input_file,
        default=None,
        help="Labels NIfTI for NIfTI inputs (region-mean series).",
    )
    add_window_arguments(parser, required=False)
    parser.add_argument("--states", type=_types.count, default=5, help="Number of states k.")
    parser.add_argument(
        "--metric",
        choices=list(STATE_METRICS),
        default="l1",
        help="Distance between windows (l1: medians, as Allen et al.).",
    )
    parser.add_argument(
        "--no-exemplars",
        action="store_true",
        help="Cluster all windows from k-means++ seeds directly (default: "
        "first the windows at local maxima of FC variance).",
    )
    parser.add_argument("--n-init", type=_types.count, default=10, help="k-means++ restarts.")
    parser.add_argument("--max-iter", type=_types.count, default=300, help="Most Lloyd iterations.")
    parser.add_argument(
        "--fisher-z", action="store_true", help="Cluster arctanh of the correlations."
    )
    parser.add_argument("--seed", type=_types.natural, default=0, help="Random seed.")
    parser.add_argument("--out", type=_types.output_folder, required=True, help="Output folder.")
    add_compute_arguments(parser)
    add_wait_argument(parser)
    parser.set_defaults(func=run)
    return parser


def check_arguments(args) -> None:
    """--window for time-series inputs; every input of a kind read."""
    from connscale.cli._inputs import check_input_arguments

    for path in args.inputs:
        if not _is_dfc_file(path):
            if args.window is None:
                raise ValueError(f"--window is needed for the time-series input {path.name}.")
            check_input_arguments(argparse.Namespace(input=path, mask=None, atlas=args.atlas))


def _is_dfc_file(path: Path) -> bool:
    return path.name.endswith("_dfc.h5") or path.suffix == ".h5"


def _load_windows(args):
    """Per input: source name, (n_windows, n_edges) windows, window starts, labels, TR, w, s."""
    from connscale.cli._inputs import load_input
    from connscale.fc.dynamic import dynamic_correlation, load_dynamic
    from connscale.io.relmat import source_entities
    from connscale.states.estimator import _dfc_edges

    loaded = []
    for path in args.inputs:
        if _is_dfc_file(path):
            with load_dynamic(path) as result:
                edges = _dfc_edges(result)
                loaded.append(
                    {
                        "source": source_entities(path).removesuffix("_dfc"),
                        "windows": edges,
                        "starts": result.window_starts,
                        "labels": None,
                        "t_r": args.t_r,
                        "window": result.window_length,
                        "step": result.step,
                        "n_series": result.n_series,
                    }
                )
            continue
        one = argparse.Namespace(input=path, mask=None, atlas=args.atlas)
        timeseries, labels, _, _ = load_input(one)
        window, step, t_r = resolve_window(args, path)
        result = dynamic_correlation(
            timeseries,
            window,
            step,
            device=args.device,
            dtype=args.dtype,
            memory_limit=args.memory_limit,
            taper=args.taper,
            taper_sigma=args.taper_sigma,
        )
        loaded.append(
            {
                "source": source_entities(path),
                "windows": _dfc_edges(result),
                "starts": result.window_starts,
                "labels": labels,
                "t_r": t_r,
                "window": window,
                "step": step,
                "n_series": result.n_series,
            }
        )
    sizes = {item["n_series"] for item in loaded}
    if len(sizes) > 1:
        raise ValueError(f"All inputs must have the same number of series; got {sorted(sizes)}.")
    return loaded


def run(args) -> int:
    """Run ``connscale dfc-states``; return the exit status.

    Fit the states and publish them with the sequences, features, figures and
    log as one set (nothing is done when the folder already holds this run's
    complete states).
    """
    configure_logging(args.verbose)
    inputs = [*args.inputs, *([args.atlas] if args.atlas is not None else [])]
    # The states, sequences, features, figures and log are one set: written in
    # a hidden staging folder under the set's lock, published together with a
    # manifest (dfcstates_manifest.json).
    with output_set(
        args,
        args.out,
        "dfcstates",
        command="dfc-states",
        fingerprint=command_fingerprint(args, inputs),
    ) as outputs:
        if outputs.complete():
            print(
                f"connscale dfc-states: {args.out} already holds this run's complete states "
                "(same input contents and parameters); nothing to do."
            )
            return 0
        record, fractions, log = _states(args, outputs)
    seconds = record.timings["states"]
    logger.info("states in %.3f s", seconds)
    print(
        f"connscale dfc-states: {record.results['n_subjects']} subjects, "
        f"{record.results['n_windows']} windows, {args.states} states ({args.metric}) on "
        f"{record.device} in {seconds:.3f} s"
    )
    print(f"  fractions of windows: {', '.join(f'{f:.2f}' for f in fractions)}")
    print(f"  log   {log}")
    return 0


def _states(args, outputs):
    """Fit the states, write every file into the staging folder of ``outputs``, publish the set.

    Return the run's record, the fractions of windows per state and the
    log's path.
    """
    from connscale._compute import resolve_device
    from connscale.io.states import write_state_features, write_state_sequence
    from connscale.states import DFCStates

    record = RunRecord("dfc-states", args.out, vars(args))
    record.device = str(resolve_device(args.device))
    with record.timer("windows"):
        loaded = _load_windows(args)
    n = loaded[0]["n_series"]
    labels = loaded[0]["labels"] or [str(i) for i in range(n)]
    estimator = DFCStates(
        args.states,
        metric=args.metric,
        exemplars=not args.no_exemplars,
        n_init=args.n_init,
        max_iter=args.max_iter,
        fisher_z=args.fisher_z,
        random_state=args.seed,
        device=args.device,
        memory_limit=args.memory_limit,
        verbose=args.verbose,
    )
    with record.timer("states"):
        estimator.fit([item["windows"] for item in loaded])
    sources = [item["source"] for item in loaded]
    staging = outputs.staging

    def add(path: Path, *, figure: bool = False) -> None:
        outputs.path(path.name)
        (record.add_figure if figure else record.add_output)(args.out / path.name)

    with record.timer("write"):
        fractions = np.concatenate(estimator.labels_)
        fractions = np.bincount(fractions, minlength=args.states) / fractions.size
        for path in _write_states(estimator, staging, labels, fractions, args):
            add(path)
        for item, sequence in zip(loaded, estimator.labels_):
            add(
                write_state_sequence(
                    staging / f"{item['source']}_dfcstates.tsv",
                    starts=item["starts"],
                    states=sequence,
                    t_r=item["t_r"],
                )
            )
        features = estimator.state_features(subjects=sources)
        add(
            write_state_features(
                staging / "dfcstates_features.tsv",
                subjects=features.subjects,
                X=features.X,
                names=features.feature_names,
            )
        )
    with record.timer("plots"):
        from connscale.report.plots import (
            plot_state_matrices,
            plot_state_sequence,
            plot_transition_matrix,
        )

        if n <= PLOT_MAX_NODES:
            add(
                plot_state_matrices(
                    estimator.state_matrices(),
                    staging / "dfcstates_states.png",
                    fractions=fractions,
                ),
                figure=True,
            )
        first = loaded[0]
        times = None if first["t_r"] is None else first["starts"] * first["t_r"]
        add(
            plot_state_sequence(
                estimator.labels_[0],
                staging / f"{first['source']}_dfcstates_sequence.png",
                n_states=args.states,
                window_times=times,
                title=f"{first['source']}: states",
            ),
            figure=True,
        )
        add(
            plot_transition_matrix(
                estimator.transition_matrix_.mean(axis=0),
                staging / "dfcstates_transitions.png",
                title="Transition probabilities (mean over subjects)",
            ),
            figure=True,
        )
    record.results.update(
        {
            "n_subjects": len(loaded),
            "n_series": n,
            "n_windows": int(sum(item["windows"].shape[0] for item in loaded)),
            "n_states": args.states,
            "metric": args.metric,
            "inertia": estimator.inertia_,
            "n_iter": estimator.n_iter_,
            "fraction_of_windows": fractions.round(4).tolist(),
            "mean_dwell_time_windows": estimator.mean_dwell_time_.mean(axis=0).round(3).tolist(),
            "mean_transitions": float(estimator.n_transitions_.mean()),
        }
    )
    return record, fractions, publish(outputs, record, "dfcstates")


def _write_states(estimator, out: Path, labels, fractions, args) -> list[Path]:
    from connscale.io.hdf5 import write_relmat_h5
    from connscale.io.relmat import (
        relmat_path,
        sidecar,
        write_relmat_tsv,
        write_sidecar,
    )

    written = []
    centroid = {
        "l1": "component-wise median",
        "euclidean": "mean",
        "correlation": "mean of the windows centred and scaled to unit norm",
    }
    matrices = estimator.state_matrices()
    n = matrices.shape[1]
    for j, matrix in enumerate(matrices):
        source = f"dfcstates_state-{j + 1:02d}"
        if n <= TSV_MAX_NODES:
            path = write_relmat_tsv(relmat_path(out, source, extension=".tsv"), matrix, labels)
            kind = "dense"
        else:
            path = write_relmat_h5(
                relmat_path(out, source, extension=".h5"),
                np.asarray(estimator.cluster_centers_[j], dtype=np.float64),
            )
            kind = "triu"
        metadata = sidecar(kind, n, nodes="regions", dtype="float64")
        metadata.update(
            {
                "ValidDiagonal": False,
                "MeasureDescription": (
                    f"DFC state {j + 1} of {len(matrices)}: the {centroid[args.metric]} of the "
                    f"sliding-window {'Fisher z of the ' if args.fisher_z else ''}Pearson "
                    f"correlations assigned to it by k-means ({args.metric} distance)"
                ),
                "State": j + 1,
                "FractionOfWindows": float(fractions[j]),
                "Sources": [dataset_relative(p, args.out) for p in args.inputs],
            }
        )
        written += [path, write_sidecar(path, metadata)]
    return written
