"""``connscale pairs``: region-pair DFC courses and summary features of ROI series."""

from __future__ import annotations

import argparse
from contextlib import ExitStack
from dataclasses import dataclass
from numbers import Integral
from pathlib import Path

import numpy as np

from connscale import _fields
from connscale._params import Flag, add_arguments, entry, keywords_from_args, param
from connscale._validation import (
    MIN_WINDOW_LENGTH,
    Interval,
    SequenceOf,
    StrOptions,
    make_constraint,
)
from connscale._version import __version__
from connscale.cli import _types
from connscale.cli._common import (
    RunRecord,
    compute_options,
    configure_logging,
    logger,
    output_set,
)
from connscale.io.atomic import write_json_atomic
from connscale.io.bids import dataset_relative

#: How the pair courses are written (``--format``): one HDF5 store, or NPY + TSV tables.
PAIR_FORMATS = ("h5", "npy")


@dataclass(frozen=True, kw_only=True)
class PairsConfig:
    """The options of ``connscale pairs``, each declared once (:mod:`connscale._params`)."""

    inputs: tuple[Path, ...] = param(
        constraints=[SequenceOf(make_constraint("path"))],
        doc_type="sequence of path",
        doc="ROI time-series tables (``.tsv``/``.csv``/``.npy``), each of shape\n"
        "(n_timepoints, n_regions), all with the same regions: computed together.",
        flag=Flag(("inputs",), type="input_file", metavar="INPUT", nargs="+",
                  help="ROI time-series files (.tsv/.csv/.npy), (n_timepoints, n_regions)."),
    )  # fmt: skip
    window: int = param(
        constraints=[Interval(Integral, MIN_WINDOW_LENGTH, None, closed="left")],
        doc="Window length in time points.",
        flag=Flag(("--window",), type="window_length", required=True,
                  help="Window length (time points)."),
    )  # fmt: skip
    step: int = param(
        1,
        constraints=[Interval(Integral, 1, None, closed="left")],
        doc="Between window starts, in time points.",
        flag=Flag(("--step",), type="count", help="Window step (time points)."),
    )
    threshold: float = _fields.threshold(
        "The summary's third statistic: each pair's fraction of windows with\n``r > threshold``.",
        flag_help="Summary feature: fraction of windows with r > THRESHOLD.",
        default=0.5,
    )
    format: str = param(
        "h5",
        constraints=[StrOptions(set(PAIR_FORMATS))],
        doc="How an input's courses are written: ``'h5'``, one HDF5 store; ``'npy'``,\n"
        "a ``.npy`` array with a ``_windows.tsv`` table of the window onsets.",
        flag=Flag(("--format",), choices=PAIR_FORMATS,
                  help="Courses as one HDF5 file, or NPY + TSV tables."),
    )  # fmt: skip
    out: Path = _fields.out()
    device: str = _fields.device()
    dtype: str = _fields.dtype()
    memory_limit: str | int | None = _fields.memory_limit()
    verbose: int = _fields.verbose()
    wait: bool = _fields.wait()
    overwrite: bool = _fields.overwrite()


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``pairs`` command to ``subparsers`` and return its parser.

    Its options are derived from :class:`PairsConfig`'s fields.
    """
    parser = subparsers.add_parser(
        "pairs",
        help="Sliding-window correlation course of every region pair of every scan.",
        description=(
            "For ROI time-series files (TSV/CSV/NPY, one column per region), computes "
            "the windowed correlation of every region pair in every window, all scans "
            "batched together. Writes, as BIDS derivatives, per input "
            "sub-<s>/[ses-<t>/]func/<entities>_meas-PearsonCorrelation_pairs.h5 (or "
            "_pairs.npy courses with _windows.tsv), _pairs.tsv (mean, std, fraction "
            "above threshold per pair) and a _pairs.json sidecar; at the root "
            "[<entities>_]meas-PearsonCorrelation_features.tsv (one row of summary "
            "features per input) with its sidecar, a JSON log, a report and "
            "dataset_description.json. A re-run skips inputs already done with the "
            "same parameters."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    groups = {None: parser, _fields.COMPUTATION: parser.add_argument_group(_fields.COMPUTATION)}
    add_arguments(parser, PairsConfig, groups, _types)
    parser.set_defaults(func=run)
    return parser


def check_arguments(args) -> None:
    """Every INPUT is a time-series table (told by its name)."""
    from connscale.io.timeseries import TIMESERIES_SUFFIXES

    for path in args.inputs:
        if path.suffix.lower() not in TIMESERIES_SUFFIXES:
            raise ValueError(
                f"INPUT must be a region time-series table ({', '.join(TIMESERIES_SUFFIXES)}); "
                f"got {path.name}."
            )


def run(args) -> int:
    """Run ``connscale pairs`` from its parsed command line; return the exit status."""
    return run_pairs(**keywords_from_args(args, PairsConfig))


@entry(PairsConfig)
def run_pairs(config: PairsConfig) -> int:
    """Compute the pair courses of every input and publish them; return 0.

    Publish one set per input (its pair courses, summary and sidecar) and one
    at the root (the feature table, log and report). All sets are entered
    before anything is computed, so a result of other parameters is refused
    first; nothing is done when every set is already complete.

    Parameters
    ----------
    %(parameters)s

    Returns
    -------
    int
        The exit status, 0.

    Raises
    ------
    ValueError
        Several inputs share a name, so their outputs would collide.
    """
    from connscale.io.bids import write_dataset_description
    from connscale.io.fingerprint import run_fingerprint

    configure_logging(config.verbose)
    places = [_scan_place(config.out, p) for p in config.inputs]
    names = [stem for _, _, stem in places]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"Several inputs share the name(s) {duplicates}; outputs would collide.")
    parameters = {
        "command": "pairs",
        "window": config.window,
        "step": config.step,
        "threshold": config.threshold,
        "format": config.format,
        "dtype": config.dtype,
    }
    group_stem = _group_stem([entities for entities, _, _ in places])
    # One set per input, in its sub-<s>/[ses-<t>/]func folder, and one at the
    # root for the feature table, the log and the report: each written in a
    # hidden staging folder under its lock and published with its manifest.
    # All are entered first, so a result of other parameters is refused
    # before anything is computed.
    with ExitStack() as stack:
        scan_sets = [
            stack.enter_context(
                output_set(
                    config,
                    folder,
                    stem,
                    command="pairs",
                    fingerprint=run_fingerprint([path], parameters),
                )
            )
            for path, (_, folder, stem) in zip(config.inputs, places)
        ]
        group = stack.enter_context(
            output_set(
                config,
                config.out,
                group_stem,
                command="pairs",
                fingerprint=run_fingerprint(config.inputs, parameters),
            )
        )
        if group.complete() and all(s.complete() for s in scan_sets):
            print(
                f"connscale pairs: {config.out} holds the complete result of these "
                f"{len(config.inputs)} input(s) and parameters; nothing to do"
            )
            return 0
        status = _run(config, places, scan_sets, group)
    write_dataset_description(config.out)
    return status


def _scan_place(out: Path, path: Path) -> tuple[dict, Path, str]:
    """Entities, folder and stem (``..._meas-PearsonCorrelation_pairs``) of an input's outputs."""
    from connscale.cli._inputs import bids_place, output_entities

    entities = {**output_entities(path), "meas": "PearsonCorrelation"}
    folder, stem = bids_place(out, entities, suffix="pairs", extension=".h5")
    return entities, folder, stem


def _group_stem(entities: list[dict]) -> str:
    """``[<entities every input shares but sub>_]meas-PearsonCorrelation_features``."""
    from connscale.io.bids import bids_name

    common = {
        k: v for k, v in entities[0].items() if k != "sub" and all(e.get(k) == v for e in entities)
    }
    return bids_name(common, suffix="features", extension=".tsv", require_subject=False)[
        : -len(".tsv")
    ]


def _scan_name(entities: dict) -> str:
    """Return the source entities of an input, joined (``sub-01_task-rest``).

    This names its feature-table row.
    """
    from connscale.io.bids import bids_prefix

    return bids_prefix({k: v for k, v in entities.items() if k != "meas"})


def _run(config, places, scan_sets, group) -> int:
    from connscale._compute import resolve_device
    from connscale.fc.pairs import PairSummary, pair_summary, pairwise_dfc
    from connscale.io.pairs import PAIR_STATISTICS, read_pair_summary
    from connscale.io.timeseries import load_timeseries

    record = RunRecord("pairs", config.out, vars(config))
    with record.timer("load"):
        loaded = [load_timeseries(p) for p in config.inputs]
    scans = [x for x, _ in loaded]
    n_regions = {x.shape[1] for x in scans}
    if len(n_regions) > 1:
        raise ValueError(
            f"All inputs must have the same number of regions; got {sorted(n_regions)}."
        )
    n = scans[0].shape[1]
    pairs = np.stack(np.triu_indices(n, 1), axis=1)
    todo = [k for k, outputs in enumerate(scan_sets) if not outputs.complete()]
    record.device = str(resolve_device(config.device))
    stats: list = [None] * len(scans)
    n_windows: list = [None] * len(scans)
    seconds = n_constant = 0
    if todo:
        with record.timer("pairwise_dfc"):
            result = pairwise_dfc(
                [scans[k] for k in todo], config.window, config.step, **compute_options(config)
            )
        with record.timer("summary"):
            summary = pair_summary(result.courses, threshold=config.threshold)
        seconds, n_constant = record.timings["pairwise_dfc"], result.n_constant
        ragged = isinstance(result.window_starts, list)
        group.check_space(
            sum(np.asarray(c).nbytes for c in result.courses), what="the pair courses"
        )
        with record.timer("write"):
            for t, k in enumerate(todo):
                onsets = result.window_starts[t] if ragged else result.window_starts
                stats[k] = {stat: getattr(summary, stat)[t] for stat in PAIR_STATISTICS}
                n_windows[k] = len(onsets)
                _write_scan(
                    config,
                    record,
                    config.inputs[k],
                    places[k],
                    scan_sets[k],
                    courses=result.courses[t],
                    pairs=result.pairs,
                    onsets=onsets,
                    summary=stats[k],
                    labels=loaded[k][1],
                    n_constant=result.n_constant if len(todo) == 1 else None,
                )
    # The inputs an earlier run published: their summaries are read back.
    for k in (k for k in range(len(scans)) if k not in todo):
        _, folder, stem = places[k]
        done = read_pair_summary(folder / f"{stem}.tsv")
        stats[k] = {stat: done[stat] for stat in PAIR_STATISTICS}
        n_windows[k] = (scans[k].shape[0] - config.window) // config.step + 1
    n_corr = len(pairs) * sum(n_windows[k] for k in todo)
    record.results.update(
        {
            "n_scans": len(scans),
            "n_computed": len(todo),
            "n_regions": int(n),
            "n_pairs": len(pairs),
            "n_windows": n_windows,
            "n_constant_windows": n_constant,
            "correlations_per_second": n_corr / max(seconds, 1e-9),
        }
    )
    log = group.out_dir / f"{group.prefix}_log.json"
    if not group.complete():  # else only inputs were missing: the log stays the first run's
        every = PairSummary(
            **{stat: np.stack([s[stat] for s in stats]) for stat in PAIR_STATISTICS},
            threshold=config.threshold,
        )
        _write_group(config, record, [entities for entities, _, _ in places], group, every, pairs)
        log = record.finish(group.prefix, group)
        group.commit()
    logger.info("pairs: %d correlations in %.3f s", n_corr, seconds)
    print(
        f"connscale pairs: {len(scans)} scan(s) ({len(todo)} computed), {len(pairs)} pairs, "
        f"window {config.window}, step {config.step}: {n_corr} correlations on {record.device} "
        f"in {seconds:.3f} s"
    )
    print(f"  wrote {config.out}")
    print(f"  log   {log}")
    return 0


def _write_scan(
    config, record, path, place, outputs, *, courses, pairs, onsets, summary, labels, n_constant
) -> None:
    """Write and publish the set of one input: its courses, summary and sidecars."""
    from connscale.io.pairs import write_pair_summary, write_pairs_h5, write_pairs_npy

    entities, folder, stem = place

    def output(name: str) -> Path:
        record.add_output(folder / name)
        return outputs.path(name)

    if config.format == "h5":
        write_pairs_h5(
            output(f"{stem}.h5"),
            courses=courses,
            pairs=pairs,
            window_onsets=onsets,
            window_length=config.window,
            step=config.step,
            summary=summary,
            threshold=config.threshold,
            labels=labels,
            n_constant=n_constant,
            attrs={"source": str(path)},
        )
    else:
        windows = _stem(entities, "windows")
        write_pairs_npy(
            output(f"{stem}.npy"),
            output(f"{windows}.tsv"),
            courses=courses,
            window_onsets=onsets,
            window_length=config.window,
        )
        write_json_atomic(output(f"{windows}.json"), _windows_sidecar(config, path))
    write_pair_summary(
        output(f"{stem}.tsv"),
        pairs=pairs,
        labels=labels,
        summary=summary,
        threshold=config.threshold,
    )
    write_json_atomic(
        output(f"{stem}.json"), _pairs_sidecar(config, path, labels=labels, n_windows=len(onsets))
    )
    outputs.commit()


def _write_group(config, record, entities: list, group, summary, pairs) -> None:
    """Write the feature table of every input and its sidecar into the root set."""
    from connscale.io.pairs import write_pair_features

    for name in (f"{group.prefix}.tsv", f"{group.prefix}.json"):
        record.add_output(group.out_dir / name)
    write_pair_features(
        group.path(f"{group.prefix}.tsv"),
        scans=[_scan_name(e) for e in entities],
        features=summary.features(),
        names=summary.feature_names(pairs),
    )
    write_json_atomic(group.path(f"{group.prefix}.json"), _features_sidecar(config))


def _stem(entities: dict, suffix: str) -> str:
    from connscale.io.bids import bids_name

    return bids_name(entities, suffix=suffix, extension=".tsv")[: -len(".tsv")]


def _common_sidecar(config) -> dict:
    return {
        "WindowLength": int(config.window),
        "WindowStep": int(config.step),
        "Threshold": float(config.threshold),
        "DataType": str(config.dtype),
    }


def _pairs_sidecar(config, path: Path, *, labels: list, n_windows: int) -> dict:
    """Return the JSON sidecar of an input's ``_pairs`` files (courses and summary)."""
    courses = (
        "HDF5: courses (pairs, windows), pairs (pairs, 2), window_onsets, summary/*, labels"
        if config.format == "h5"
        else ".npy: courses (pairs, windows); window onsets in the _windows.tsv"
    )
    return {
        "Measure": "Pearson correlation",
        "MeasureDescription": (
            "Sliding-window Pearson correlation of every pair of regions; the .tsv holds "
            "each pair's mean, standard deviation and fraction of windows with r > "
            f"{config.threshold} over its finite windows"
        ),
        "Weighted": True,
        "Directed": False,
        "StorageFormat": courses,
        "PairOrder": "row-major strictly-upper (i < j)",
        **_common_sidecar(config),
        "NumberOfWindows": int(n_windows),
        "NumberOfNodes": len(labels),
        "NodeNames": list(labels),
        "Sources": [dataset_relative(path, config.out)],
        "Code": f"connscale {__version__}",
    }


def _windows_sidecar(config, path: Path) -> dict:
    """Return the JSON sidecar of a ``_windows.tsv`` table (its columns)."""
    return {
        "window": {"Description": "Window index, from 0 (the column of the courses)"},
        "onset": {"Description": "First time point of the window, from 0", "Units": "volumes"},
        "end": {"Description": "One past the window's last time point", "Units": "volumes"},
        "WindowLength": int(config.window),
        "WindowStep": int(config.step),
        "Sources": [dataset_relative(path, config.out)],
        "Code": f"connscale {__version__}",
    }


def _features_sidecar(config) -> dict:
    """Return the JSON sidecar of the feature table of all inputs."""
    return {
        "scan": {"Description": "The input's BIDS entities (its outputs' folder and name)"},
        "Description": (
            "One row per input: mean_<i>-<j>, std_<i>-<j> and frac_above_<i>-<j> (fraction "
            "of windows with r > Threshold) of the sliding-window Pearson correlation of "
            "each region pair (i, j), i < j, in row-major order"
        ),
        **_common_sidecar(config),
        "Sources": [dataset_relative(p, config.out) for p in config.inputs],
        "Code": f"connscale {__version__}",
    }
