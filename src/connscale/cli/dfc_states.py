"""``connscale dfc-states``: recurring DFC states of a cohort.

The states come with dwell times, fractions of time and transitions
(Allen et al. 2014).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from numbers import Integral
from pathlib import Path

import numpy as np

from connscale import _fields
from connscale._choices import STATE_METRICS
from connscale._params import Flag, add_arguments, entry, keywords_from_args, param
from connscale._validation import Interval, SequenceOf, StrOptions, make_constraint
from connscale.cli import _types
from connscale.cli._common import RunRecord, configure_logging, logger, output_set
from connscale.cli._sets import command_fingerprint, publish
from connscale.cli._windows import resolve_window
from connscale.io.bids import dataset_relative

#: States are written as TSV up to this many nodes, as HDF5 above.
TSV_MAX_NODES = 1000
#: State matrices are plotted up to this many nodes.
PLOT_MAX_NODES = 400

_COUNT = Interval(Integral, 1, None, closed="left")


@dataclass(frozen=True, kw_only=True)
class DfcStatesConfig:
    """The options of ``connscale dfc-states``, each declared once (:mod:`connscale._params`)."""

    inputs: list[Path] = param(
        constraints=[SequenceOf(make_constraint("path"))],
        doc_type="sequence of path",
        doc="ROI time series (``.tsv``/``.csv``/``.npy``), 4-D NIfTI with ``atlas``,\n"
        "or ``_dfc.h5`` files of kind ``'triu'`` written by ``connscale dfc``: one\n"
        "per subject.",
        flag=Flag(("inputs",), nargs="+", type="input_file", metavar="INPUT",
                  help="ROI time series (.tsv/.csv/.npy), 4-D NIfTI with --atlas, or "
                  "_dfc.h5 files of kind triu from 'connscale dfc'."),
    )  # fmt: skip
    atlas: Path | None = param(
        None,
        constraints=["path", None],
        doc="Labels NIfTI for the NIfTI inputs (region-mean series).",
        flag=Flag(("--atlas",), type="input_file",
                  help="Labels NIfTI for NIfTI inputs (region-mean series)."),
    )  # fmt: skip
    window: str | int | None = _fields.window(required=False)
    step: str | int = _fields.step()
    t_r: float | None = _fields.t_r()
    taper: str = _fields.taper()
    taper_sigma: float = _fields.taper_sigma()
    states: int = param(
        5,
        constraints=[_COUNT],
        doc="The number of states k.",
        flag=Flag(("--states",), type="count", help="Number of states k."),
    )
    metric: str = param(
        "l1",
        constraints=[StrOptions(set(STATE_METRICS))],
        doc="Distance between windows (``'l1'``: the states are medians, as Allen\n"
        "et al.'s).",
        flag=Flag(("--metric",), choices=STATE_METRICS,
                  help="Distance between windows (l1: medians, as Allen et al.)."),
    )  # fmt: skip
    no_exemplars: bool = param(
        False,
        constraints=["boolean"],
        doc="Cluster all windows from k-means++ seeds directly, without first\n"
        "clustering the windows at local maxima of FC variance.",
        flag=Flag(("--no-exemplars",), action="store_true",
                  help="Cluster all windows from k-means++ seeds directly (default: "
                  "first the windows at local maxima of FC variance)."),
    )  # fmt: skip
    n_init: int = param(
        10,
        constraints=[_COUNT],
        doc="The k-means++ restarts.",
        flag=Flag(("--n-init",), type="count", help="k-means++ restarts."),
    )
    max_iter: int = param(
        300,
        constraints=[_COUNT],
        doc="The most Lloyd iterations.",
        flag=Flag(("--max-iter",), type="count", help="Most Lloyd iterations."),
    )
    fisher_z: bool = param(
        False,
        constraints=["boolean"],
        doc="Cluster the arctanh (Fisher z) of the correlations.",
        flag=Flag(("--fisher-z",), action="store_true",
                  help="Cluster arctanh of the correlations."),
    )  # fmt: skip
    seed: int = _fields.seed(
        "Seed of the k-means++ initializations (the API's ``random_state``).",
        flag_help="Random seed.",
    )
    out: Path = _fields.out()
    device: str = _fields.device()
    dtype: str = _fields.dtype()
    memory_limit: str | int | None = _fields.memory_limit()
    verbose: int = _fields.verbose()
    wait: bool = _fields.wait()
    overwrite: bool = _fields.overwrite()


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``dfc-states`` command to ``subparsers`` and return its parser.

    Its options are derived from :class:`DfcStatesConfig`'s fields.
    """
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
    groups = {None: parser, _fields.COMPUTATION: parser.add_argument_group(_fields.COMPUTATION)}
    add_arguments(parser, DfcStatesConfig, groups, _types)
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


def _load_windows(config: DfcStatesConfig):
    """Per input: source name, (n_windows, n_edges) windows, window starts, labels, TR, w, s."""
    from connscale.cli._inputs import load_input
    from connscale.fc.dynamic import dynamic_correlation, load_dynamic
    from connscale.io.relmat import source_entities
    from connscale.states.estimator import _dfc_edges

    loaded = []
    for path in config.inputs:
        if _is_dfc_file(path):
            with load_dynamic(path) as result:
                edges = _dfc_edges(result)
                loaded.append(
                    {
                        "source": source_entities(path).removesuffix("_dfc"),
                        "windows": edges,
                        "starts": result.window_starts,
                        "labels": None,
                        "t_r": config.t_r,
                        "window": result.window_length,
                        "step": result.step,
                        "n_series": result.n_series,
                    }
                )
            continue
        one = argparse.Namespace(input=path, mask=None, atlas=config.atlas)
        timeseries, labels, _, _ = load_input(one)
        window, step, t_r = resolve_window(config, path)
        result = dynamic_correlation(
            timeseries,
            window,
            step,
            device=config.device,
            dtype=config.dtype,
            memory_limit=config.memory_limit,
            taper=config.taper,
            taper_sigma=config.taper_sigma,
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
    """Run ``connscale dfc-states`` from its parsed command line; return the exit status."""
    return run_dfc_states(**keywords_from_args(args, DfcStatesConfig))


@entry(DfcStatesConfig)
def run_dfc_states(config: DfcStatesConfig) -> int:
    """Fit the DFC states of the inputs and publish them; return 0.

    The states, each subject's state sequence, the features, figures and log
    are published as one set (nothing is done when the folder already holds
    this run's complete states).

    Parameters
    ----------
    %(parameters)s

    Returns
    -------
    int
        The exit status, 0.
    """
    configure_logging(config.verbose)
    inputs = [*config.inputs, *([config.atlas] if config.atlas is not None else [])]
    # The states, sequences, features, figures and log are one set: written in
    # a hidden staging folder under the set's lock, published together with a
    # manifest (dfcstates_manifest.json).
    with output_set(
        config,
        config.out,
        "dfcstates",
        command="dfc-states",
        fingerprint=command_fingerprint(config, inputs),
    ) as outputs:
        if outputs.complete():
            print(
                f"connscale dfc-states: {config.out} already holds this run's complete states "
                "(same input contents and parameters); nothing to do."
            )
            return 0
        record, fractions, log = _states(config, outputs)
    seconds = record.timings["states"]
    logger.info("states in %.3f s", seconds)
    print(
        f"connscale dfc-states: {record.results['n_subjects']} subjects, "
        f"{record.results['n_windows']} windows, {config.states} states ({config.metric}) on "
        f"{record.device} in {seconds:.3f} s"
    )
    print(f"  fractions of windows: {', '.join(f'{f:.2f}' for f in fractions)}")
    print(f"  log   {log}")
    return 0


def _states(config: DfcStatesConfig, outputs):
    """Fit the states, write every file into the staging folder of ``outputs``, publish the set.

    Return the run's record, the fractions of windows per state and the
    log's path.
    """
    from connscale._compute import resolve_device
    from connscale.io.states import write_state_features, write_state_sequence
    from connscale.states import DFCStates

    record = RunRecord("dfc-states", config.out, vars(config))
    record.device = str(resolve_device(config.device))
    with record.timer("windows"):
        loaded = _load_windows(config)
    n = loaded[0]["n_series"]
    labels = loaded[0]["labels"] or [str(i) for i in range(n)]
    estimator = DFCStates(
        config.states,
        metric=config.metric,
        exemplars=not config.no_exemplars,
        n_init=config.n_init,
        max_iter=config.max_iter,
        fisher_z=config.fisher_z,
        random_state=config.seed,
        device=config.device,
        memory_limit=config.memory_limit,
        verbose=config.verbose,
    )
    with record.timer("states"):
        estimator.fit([item["windows"] for item in loaded])
    sources = [item["source"] for item in loaded]
    staging = outputs.staging

    def add(path: Path, *, figure: bool = False) -> None:
        outputs.path(path.name)
        (record.add_figure if figure else record.add_output)(config.out / path.name)

    with record.timer("write"):
        fractions = np.concatenate(estimator.labels_)
        fractions = np.bincount(fractions, minlength=config.states) / fractions.size
        for path in _write_states(estimator, staging, labels, fractions, config):
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
                n_states=config.states,
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
            "n_states": config.states,
            "metric": config.metric,
            "inertia": estimator.inertia_,
            "n_iter": estimator.n_iter_,
            "fraction_of_windows": fractions.round(4).tolist(),
            "mean_dwell_time_windows": estimator.mean_dwell_time_.mean(axis=0).round(3).tolist(),
            "mean_transitions": float(estimator.n_transitions_.mean()),
        }
    )
    return record, fractions, publish(outputs, record, "dfcstates")


def _write_states(estimator, out: Path, labels, fractions, config: DfcStatesConfig) -> list[Path]:
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
                    f"DFC state {j + 1} of {len(matrices)}: the {centroid[config.metric]} of the "
                    f"sliding-window {'Fisher z of the ' if config.fisher_z else ''}Pearson "
                    f"correlations assigned to it by k-means ({config.metric} distance)"
                ),
                "State": j + 1,
                "FractionOfWindows": float(fractions[j]),
                "Sources": [dataset_relative(p, config.out) for p in config.inputs],
            }
        )
        written += [path, write_sidecar(path, metadata)]
    return written
