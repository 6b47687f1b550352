"""``connscale classify``: patients vs controls from a cohort's connectomes."""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass
from numbers import Integral, Real
from pathlib import Path

import numpy as np

from connscale import _fields
from connscale._choices import CLASSIFIERS, CV_INTERVALS, PAIR_STATISTICS
from connscale._params import Flag, add_arguments, entry, keywords_from_args, param
from connscale._validation import Interval, SequenceOf, StrOptions, make_constraint
from connscale.cli import _types
from connscale.cli._common import RunRecord, configure_logging

logger = logging.getLogger("connscale")

_PREFIX = "classify"
_COUNT = Interval(Integral, 1, None, closed="left")


@dataclass(frozen=True, kw_only=True)
class ClassifyConfig:
    """The options of ``connscale classify``, each declared once (:mod:`connscale._params`)."""

    features: tuple = param(
        constraints=[SequenceOf(make_constraint("path"))],
        doc_type="sequence of str or path",
        doc="One connectome or pair-level file per subject (the subject read from\n"
        "``sub-<label>`` in its name), or the group feature table of the\n"
        "BIDS-App's group level alone (:func:`connscale.classify.load_features`).",
        flag=Flag(("features",), type="input_file", metavar="FEATURES", nargs="+",
                  help="One connectome or pair-level file per subject, or the group feature "
                  "table."),
    )  # fmt: skip
    participants: Path = param(
        constraints=["path"],
        doc="BIDS ``participants.tsv`` with a ``participant_id`` column.",
        flag=Flag(("--participants",), type="input_file", required=True,
                  help="BIDS participants.tsv with a participant_id column."),
    )  # fmt: skip
    label: str = param(
        constraints=[str],
        doc="Column of the participants table holding the two classes.",
        flag=Flag(("--label",), metavar="COLUMN", required=True,
                  help="Column of the participants table holding the two classes."),
    )  # fmt: skip
    positive: str | None = param(
        None,
        constraints=[str, None],
        doc="Value of ``label`` of the positive class (patients); None: the larger\n"
        "of the two values in sorted order.",
        flag=Flag(("--positive",), metavar="VALUE",
                  help="Label value of the positive class (patients); default: the "
                  "larger of the two values in sorted order."),
    )  # fmt: skip
    model: str = param(
        "svm",
        constraints=[StrOptions(set(CLASSIFIERS))],
        doc="``'svm'``: a linear SVM (C=1); ``'mlp'``: a multi-layer perceptron.",
        flag=Flag(("--model",), choices=CLASSIFIERS,
                  help="Linear SVM (C=1) or multi-layer perceptron."),
    )  # fmt: skip
    folds: int = param(
        5,
        constraints=[Interval(Integral, 2, None, closed="left")],
        doc="Folds of each repeat of the stratified k-fold split.",
        flag=Flag(("--folds",), type=("integer", 2), help="Folds per repeat."),
    )
    repeats: int = param(
        10,
        constraints=[_COUNT],
        doc="Repeats of the k-fold split.",
        flag=Flag(("--repeats",), type="count", help="Repeats of the k-fold split."),
    )
    rfe: bool = param(
        False,
        constraints=["boolean"],
        doc="Recursive feature elimination inside each fold.",
        flag=Flag(("--rfe",), action="store_true",
                  help="Recursive feature elimination inside each fold."),
    )  # fmt: skip
    n_features: int | float | str | None = param(
        None,
        constraints=[_COUNT, Interval(Real, 0, 1, closed="neither"), StrOptions({"cv"}), None],
        doc="Features kept by RFE: a count, a fraction of them, or ``'cv'`` (chosen\n"
        "by an inner cross-validation); None: half.",
        flag=Flag(("--n-features",), type="n_features", metavar="K",
                  help="Features kept by RFE: a count, a fraction, or 'cv' (inner "
                  "cross-validation); default half."),
    )  # fmt: skip
    fisher_z: bool = param(
        False,
        constraints=["boolean"],
        doc="Fisher z-transform the correlations (arctanh) first.",
        flag=Flag(("--fisher-z",), action="store_true",
                  help="Fisher z-transform correlations (arctanh) first."),
    )  # fmt: skip
    statistics: tuple = param(
        ("mean", "std"),
        constraints=[SequenceOf(StrOptions(set(PAIR_STATISTICS)))],
        doc="The summaries used from pair-level files (pair summaries,\n"
        "``_pairs.h5``, ``_dfc.h5``).",
        flag=Flag(("--statistics",), nargs="+", choices=PAIR_STATISTICS,
                  default=("mean", "std"),
                  help="Summaries used from pair-level files (pair summaries, _pairs.h5, "
                  "_dfc.h5)."),
    )  # fmt: skip
    permutations: int = param(
        0,
        constraints=[Interval(Integral, 0, None, closed="left")],
        doc="Label permutations for a p-value of the accuracy (0: none).",
        flag=Flag(("--permutations",), type="natural", metavar="N",
                  help="Label permutations for a p-value of the accuracy (0: none)."),
    )  # fmt: skip
    interval: str = param(
        "subjects",
        constraints=[StrOptions(set(CV_INTERVALS))],
        doc="Counts of the Clopper-Pearson interval: ``'subjects'``, one pass over\n"
        "the subjects; ``'predictions'``, all repeated predictions.",
        flag=Flag(("--interval",), choices=CV_INTERVALS,
                  help="Counts of the Clopper-Pearson interval: one pass over the "
                  "subjects (default) or all repeated predictions."),
    )  # fmt: skip
    top: int = param(
        50,
        constraints=[_COUNT],
        doc="Features listed in ``classify_features.tsv``.",
        flag=Flag(("--top",), type="count", help="Features listed in classify_features.tsv."),
    )
    seed: int = _fields.seed()
    n_jobs: int | None = param(
        None,
        constraints=["n_jobs", None],
        doc="Folds fitted in parallel (None: one at a time; -1: every core, -2:\n"
        "all but one, ...).",
        flag=Flag(("--n-jobs",), type="n_jobs",
                  help="Folds fitted in parallel (default: one at a time; -1: every core, "
                  "-2: all but one, ...)."),
    )  # fmt: skip
    out: Path = _fields.out(
        "Output folder (new, or an existing folder): the metrics, predictions,\n"
        "top features, figures, log and report are written in it."
    )
    verbose: int = _fields.verbose(
        "0: silent; 1: the subjects, classes and accuracy; 2: also debug logs\nand tracebacks.",
        group=None,
        quiet_help="No messages.",
    )


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``classify`` command to ``subparsers`` and return its parser.

    Its options are derived from :class:`ClassifyConfig`'s fields.
    """
    parser = subparsers.add_parser(
        "classify",
        help="Cross-validated classification of subjects from their connectomes.",
        description=(
            "Classify subjects (e.g. patients vs controls) from one connectome file per "
            "subject (.npy, _relmat.tsv, _relmat.h5, 'connscale pairs' summaries, or the "
            "_pairs.h5 and _dfc.h5 stores of pairs, dfc, cohort and bids, summarised per "
            "region pair; the subject is read from 'sub-<label>' in the file name), or from "
            "the group feature table of 'bids ... group' (one row per participant), with a "
            "linear SVM or an "
            "MLP, fitted inside repeated stratified k-fold cross-validation. Writes "
            "metrics with Clopper-Pearson 95%% intervals, the top features as region "
            "pairs, a confusion matrix, ROC curves, a JSON log and report.html."
        ),
    )
    add_arguments(parser, ClassifyConfig, {None: parser}, _types)
    parser.set_defaults(func=run)
    return parser


def _write_tsv(path: Path, header: list, rows: list) -> Path:
    from connscale.io.atomic import write_text_atomic

    def cell(value):
        if isinstance(value, float):
            return "n/a" if not np.isfinite(value) else f"{value:.6g}"
        return str(value)

    lines = ["\t".join(header)] + ["\t".join(cell(v) for v in row) for row in rows]
    return write_text_atomic(path, "\n".join(lines) + "\n")


def _feature_rows(features, result, top: int) -> list:
    weights = result["feature_weights"]
    importance = np.asarray(weights["importance"])
    coef = weights["coef_mean"]
    frequency = np.asarray(weights["selected_frequency"])
    order = np.argsort(-importance, kind="stable")[:top]
    table = features.feature_table()
    rows = []
    for rank, k in enumerate(order, start=1):
        entry = table[k]
        rows.append(
            [
                rank,
                entry["feature"],
                entry["name"],
                entry["statistic"],
                entry["i"],
                entry["j"],
                entry["label_i"],
                entry["label_j"],
                float(importance[k]),
                float(coef[k]) if coef is not None else float("nan"),
                float(frequency[k]),
            ]
        )
    return rows


_SUMMARY_KEYS = ("mean", "ci_low", "ci_high", "k", "n", "fold_mean", "fold_std")


def _load(config: ClassifyConfig):
    """Return the features aligned with the labels (the positive class last)."""
    from connscale.classify import align_labels, load_features

    features = load_features(
        config.features, fisher_z_transform=config.fisher_z, statistics=config.statistics
    )
    classes = None
    if config.positive is not None:
        from connscale.classify.features import read_participants

        mapping = read_participants(config.participants, label=config.label)
        values = sorted({mapping.get(s) for s in features.subjects} - {None})
        if config.positive not in values:
            raise ValueError(
                f"--positive {config.positive!r} is not a value of column "
                f"{config.label!r}; found {values}."
            )
        classes = [v for v in values if v != config.positive] + [config.positive]
    return align_labels(features, config.participants, label=config.label, classes=classes)


def _write_metrics(record: RunRecord, config: ClassifyConfig, features, result: dict) -> dict:
    """Write the metrics (JSON and TSV) and the per-fold scores; return the summary."""
    from connscale.classify.cross_validation import METRICS
    from connscale.io.atomic import write_json_atomic

    out = record.out_dir
    negative, positive = features.y_classes
    summary = {name: {k: result[name][k] for k in _SUMMARY_KEYS} for name in METRICS}
    metrics = {
        "classes": {"negative": negative, "positive": positive},
        "n_subjects": result["n_subjects"],
        "n_features": result["n_features"],
        "model": config.model,
        "folds": config.folds,
        "repeats": config.repeats,
        "interval": config.interval,
        **summary,
        "auc": result["auc"],
        "confusion_matrix": result["confusion_matrix"],
        "n_not_converged": result["n_not_converged"],
        "fold_scores": result["fold_scores"],
    }
    if "permutation" in result:
        metrics["permutation"] = result["permutation"]
    record.add_output(write_json_atomic(out / f"{_PREFIX}_metrics.json", metrics))
    record.add_output(
        _write_tsv(
            out / f"{_PREFIX}_metrics.tsv",
            ["metric", *_SUMMARY_KEYS],
            [[name] + [summary[name][k] for k in _SUMMARY_KEYS] for name in METRICS],
        )
    )
    record.add_output(
        _write_tsv(
            out / f"{_PREFIX}_folds.tsv",
            ["repeat", "fold", *METRICS],
            [
                [index // config.folds, index % config.folds]
                + [result["fold_scores"][name][index] for name in METRICS]
                for index in range(config.folds * config.repeats)
            ],
        )
    )
    return summary


def _write_subjects(record: RunRecord, config: ClassifyConfig, features, result: dict) -> list:
    """Write the per-subject predictions and the top features; return the feature rows."""
    out = record.out_dir
    oof = np.asarray(result["oof_scores"])
    predicted_positive = (oof > 0) if config.model == "svm" else (oof > 0.5)
    correct = (predicted_positive == features.y[None, :].astype(bool)).mean(axis=0)
    record.add_output(
        _write_tsv(
            out / f"{_PREFIX}_predictions.tsv",
            ["participant_id", config.label, "mean_score", "fraction_correct"],
            [
                [
                    f"sub-{s}",
                    features.y_classes[features.y[r]],
                    float(oof[:, r].mean()),
                    float(correct[r]),
                ]
                for r, s in enumerate(features.subjects)
            ],
        )
    )
    rows = _feature_rows(features, result, config.top)
    record.add_output(
        _write_tsv(
            out / f"{_PREFIX}_features.tsv",
            [
                "rank",
                "feature",
                "name",
                "statistic",
                "i",
                "j",
                "label_i",
                "label_j",
                "importance",
                "coef_mean",
                "selected_frequency",
            ],
            rows,
        )
    )
    return rows


def _write_figures(record: RunRecord, config: ClassifyConfig, features, result: dict) -> None:
    """Draw the confusion matrix, the ROC curves and the edges' importance."""
    from connscale.report import plots

    out = record.out_dir
    record.add_figure(
        plots.plot_confusion_matrix(
            result["confusion_matrix"],
            out / f"{_PREFIX}_confusion.png",
            class_names=tuple(features.y_classes),
            title=f"Confusion matrix ({config.repeats} repeats pooled)",
        )
    )
    oof = np.asarray(result["oof_scores"])
    record.add_figure(plots.plot_roc(features.y, oof, out / f"{_PREFIX}_roc.png"))
    edges = [k for k, s in enumerate(features.statistic) if s == "edge"]
    if edges and len(features.region_labels) <= 400:
        n = len(features.region_labels)
        matrix = np.zeros((n, n))
        importance = np.asarray(result["feature_weights"]["importance"])
        matrix[features.pair_i[edges], features.pair_j[edges]] = importance[edges]
        matrix = matrix + matrix.T
        record.add_figure(
            plots.plot_correlation_matrix(
                matrix,
                out / f"{_PREFIX}_feature_importance.png",
                labels=features.region_labels,
                vmin=0.0,
                vmax=float(matrix.max() or 1.0),
                cmap="viridis",
                title=f"Feature importance ({config.model})",
            )
        )


def _results(config: ClassifyConfig, features, result: dict, summary: dict, rows: list) -> dict:
    """Return the run log's results: metrics, interval, AUC and the top features."""
    negative, positive = features.y_classes
    results = {
        "n_subjects": result["n_subjects"],
        "n_features": result["n_features"],
        "classes": f"{negative} (negative) vs {positive} (positive)",
        "metrics": summary,
        "interval": (
            "Clopper-Pearson 95% on counts pooled over all test predictions"
            + (
                f", divided by the {config.repeats} repeats (one pass over the subjects)"
                if config.interval == "subjects"
                else ""
            )
        ),
        "auc": {"mean": result["auc"]["mean"], "std": result["auc"]["std"]},
        "confusion_matrix [[TN, FP], [FN, TP]]": result["confusion_matrix"],
        "top_features": [f"{row[2]} ({row[8]:.3g})" for row in rows[:10]],
    }
    if "permutation" in result:
        results["permutation_p_value"] = result["permutation"]["p_value"]
    return results


def run(args) -> int:
    """Run ``connscale classify`` from its parsed command line; return the exit status."""
    return run_classify(**keywords_from_args(args, ClassifyConfig))


@entry(ClassifyConfig)
def run_classify(config: ClassifyConfig) -> int:
    """Cross-validate a classifier of the subjects; write tables, figures and the log; return 0.

    The features are aligned with the participants' labels (the positive class
    last), cross-validated (:func:`connscale.classify.cross_validate`), and the
    metrics, per-fold scores, predictions, top features, figures, log and
    report written in ``out``.

    Parameters
    ----------
    %(parameters)s

    Returns
    -------
    int
        The exit status, 0.
    """
    from connscale.classify import cross_validate

    configure_logging(config.verbose)
    parameters = {**vars(config), "features": [str(p) for p in config.features]}
    record = RunRecord(_PREFIX, config.out, parameters)
    record.device = "cpu (scikit-learn)"

    with record.timer("load"):
        features = _load(config)
    negative, positive = features.y_classes
    logger.info(
        "%d subjects (%d %s, %d %s), %d features",
        len(features.subjects),
        int((features.y == 0).sum()),
        negative,
        int((features.y == 1).sum()),
        positive,
        features.n_features,
    )

    with record.timer("cross_validate"):
        result = cross_validate(
            features.X,
            features.y,
            model=config.model,
            folds=config.folds,
            repeats=config.repeats,
            rfe=config.rfe,
            n_features_to_select=config.n_features,
            permutation_test=config.permutations,
            interval=config.interval,
            random_state=config.seed,
            n_jobs=config.n_jobs,
        )

    with record.timer("write"):
        summary = _write_metrics(record, config, features, result)
        rows = _write_subjects(record, config, features, result)
    with record.timer("figures"):
        _write_figures(record, config, features, result)

    record.results = _results(config, features, result, summary, rows)
    log = record.finish(_PREFIX)
    accuracy = summary["accuracy"]
    logger.info(
        "accuracy %.3f [%.3f, %.3f]; log %s; report %s",
        accuracy["mean"],
        accuracy["ci_low"],
        accuracy["ci_high"],
        log,
        record.report_path,
    )
    return 0
