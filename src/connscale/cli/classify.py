"""``connscale classify``: patients vs controls from a cohort's connectomes."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import numpy as np

from connscale._fields import SEED_HELP
from connscale.cli import _types
from connscale.cli._common import RunRecord, add_out_argument, configure_logging

logger = logging.getLogger("connscale")

_PREFIX = "classify"


def _n_features(value: str):
    """Parse ``--n-features``: a count >= 1, a fraction in (0, 1) or 'cv'."""
    allowed = "a count >= 1, a fraction in (0, 1) or 'cv'"
    if value == "cv":
        return value
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {allowed}; got {value!r}") from None
    if number >= 1 and number.is_integer():
        return int(number)
    if 0 < number < 1:
        return number
    raise argparse.ArgumentTypeError(f"expected {allowed}; got {value!r}")


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``classify`` command to ``subparsers`` and return its parser."""
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
    parser.add_argument(
        "features",
        nargs="+",
        type=_types.input_file,
        metavar="FEATURES",
        help="One connectome or pair-level file per subject, or the group feature table.",
    )
    parser.add_argument(
        "--participants",
        required=True,
        type=_types.input_file,
        help="BIDS participants.tsv with a participant_id column.",
    )
    parser.add_argument(
        "--label",
        required=True,
        metavar="COLUMN",
        help="Column of the participants table holding the two classes.",
    )
    parser.add_argument(
        "--positive",
        default=None,
        metavar="VALUE",
        help="Label value of the positive class (patients); default: the "
        "larger of the two values in sorted order.",
    )
    parser.add_argument(
        "--model",
        default="svm",
        choices=["svm", "mlp"],
        help="Linear SVM (C=1) or multi-layer perceptron.",
    )
    parser.add_argument("--folds", type=_types.integer(2), default=5, help="Folds per repeat.")
    parser.add_argument(
        "--repeats", type=_types.count, default=10, help="Repeats of the k-fold split."
    )
    parser.add_argument(
        "--rfe", action="store_true", help="Recursive feature elimination inside each fold."
    )
    parser.add_argument(
        "--n-features",
        type=_n_features,
        default=None,
        metavar="K",
        help="Features kept by RFE: a count, a fraction, or 'cv' (inner "
        "cross-validation); default half.",
    )
    parser.add_argument(
        "--fisher-z", action="store_true", help="Fisher z-transform correlations (arctanh) first."
    )
    parser.add_argument(
        "--statistics",
        nargs="+",
        default=["mean", "std"],
        choices=["mean", "std", "fraction_above"],
        help="Summaries used from pair-level files (pair summaries, _pairs.h5, _dfc.h5).",
    )
    parser.add_argument(
        "--permutations",
        type=_types.natural,
        default=0,
        metavar="N",
        help="Label permutations for a p-value of the accuracy (0: none).",
    )
    parser.add_argument(
        "--interval",
        default="subjects",
        choices=["subjects", "predictions"],
        help="Counts of the Clopper-Pearson interval: one pass over the "
        "subjects (default) or all repeated predictions.",
    )
    parser.add_argument(
        "--top", type=_types.count, default=50, help="Features listed in classify_features.tsv."
    )
    parser.add_argument("--seed", type=_types.natural, default=0, help=SEED_HELP)
    parser.add_argument(
        "--n-jobs",
        type=_types.n_jobs,
        default=None,
        help="Folds fitted in parallel (default: one at a time; -1: every core, -2: all "
        "but one, ...).",
    )
    add_out_argument(parser)
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=1,
        help="More output (-vv: debug log and tracebacks).",
    )
    parser.add_argument(
        "-q", "--quiet", action="store_const", const=0, dest="verbose", help="No messages."
    )
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


def _load(args):
    """Return the features aligned with the labels (the positive class last)."""
    from connscale.classify import align_labels, load_features

    features = load_features(
        args.features, fisher_z_transform=args.fisher_z, statistics=args.statistics
    )
    classes = None
    if args.positive is not None:
        from connscale.classify.features import read_participants

        mapping = read_participants(args.participants, label=args.label)
        values = sorted({mapping.get(s) for s in features.subjects} - {None})
        if args.positive not in values:
            raise ValueError(
                f"--positive {args.positive!r} is not a value of column "
                f"{args.label!r}; found {values}."
            )
        classes = [v for v in values if v != args.positive] + [args.positive]
    return align_labels(features, args.participants, label=args.label, classes=classes)


def _write_metrics(record: RunRecord, args, features, result: dict) -> dict:
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
        "model": args.model,
        "folds": args.folds,
        "repeats": args.repeats,
        "interval": args.interval,
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
                [index // args.folds, index % args.folds]
                + [result["fold_scores"][name][index] for name in METRICS]
                for index in range(args.folds * args.repeats)
            ],
        )
    )
    return summary


def _write_subjects(record: RunRecord, args, features, result: dict) -> list:
    """Write the per-subject predictions and the top features; return the feature rows."""
    out = record.out_dir
    oof = np.asarray(result["oof_scores"])
    predicted_positive = (oof > 0) if args.model == "svm" else (oof > 0.5)
    correct = (predicted_positive == features.y[None, :].astype(bool)).mean(axis=0)
    record.add_output(
        _write_tsv(
            out / f"{_PREFIX}_predictions.tsv",
            ["participant_id", args.label, "mean_score", "fraction_correct"],
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
    rows = _feature_rows(features, result, args.top)
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


def _write_figures(record: RunRecord, args, features, result: dict) -> None:
    """Draw the confusion matrix, the ROC curves and the edges' importance."""
    from connscale.report import plots

    out = record.out_dir
    record.add_figure(
        plots.plot_confusion_matrix(
            result["confusion_matrix"],
            out / f"{_PREFIX}_confusion.png",
            class_names=tuple(features.y_classes),
            title=f"Confusion matrix ({args.repeats} repeats pooled)",
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
                title=f"Feature importance ({args.model})",
            )
        )


def _results(args, features, result: dict, summary: dict, rows: list) -> dict:
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
                f", divided by the {args.repeats} repeats (one pass over the subjects)"
                if args.interval == "subjects"
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
    """Run ``connscale classify``: load, cross-validate, write tables, figures and the log."""
    from connscale.classify import cross_validate

    configure_logging(args.verbose)
    if args.top < 1:
        raise ValueError(f"--top must be >= 1; got {args.top}.")
    parameters = {key: value for key, value in vars(args).items() if key != "func"}
    parameters["features"] = [str(p) for p in args.features]
    record = RunRecord(_PREFIX, args.out, parameters)
    record.device = "cpu (scikit-learn)"

    with record.timer("load"):
        features = _load(args)
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
            model=args.model,
            folds=args.folds,
            repeats=args.repeats,
            rfe=args.rfe,
            n_features_to_select=args.n_features,
            permutation_test=args.permutations,
            interval=args.interval,
            random_state=args.seed,
            n_jobs=args.n_jobs,
        )

    with record.timer("write"):
        summary = _write_metrics(record, args, features, result)
        rows = _write_subjects(record, args, features, result)
    with record.timer("figures"):
        _write_figures(record, args, features, result)

    record.results = _results(args, features, result, summary, rows)
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
