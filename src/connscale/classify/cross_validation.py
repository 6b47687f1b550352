"""Cross-validated classification of connectomes, with honest intervals.

A linear SVM (soft margin, C = 1, as ReAl-LiFE §5) or a multi-layer
perceptron (as GPU-DFC §V.C) inside a scikit-learn ``Pipeline``:
``StandardScaler`` → optional recursive feature elimination → classifier.
The whole pipeline is cloned and fitted on the training subjects of each
fold only, so neither the scaling nor the feature selection sees a test
subject. Folds come from ``RepeatedStratifiedKFold`` (default 5 × 10).

Metrics (the positive class is ``classes[1]``):

- accuracy = (TP + TN) / N
- sensitivity = recall = TP / (TP + FN)
- specificity = TN / (TN + FP)
- precision = TP / (TP + FP)

each with a Clopper–Pearson 95% interval on pooled counts (see
:func:`cross_validate`, ``interval``).
"""

from __future__ import annotations

import functools
import warnings
from numbers import Integral, Real

import numpy as np

from connscale._choices import CLASSIFIERS, CV_INTERVALS
from connscale._docs import fill_doc
from connscale._validation import (
    Interval,
    StrOptions,
    check_random_state,
    user_stacklevel,
    validate_params,
)

__all__ = ["METRICS", "build_pipeline", "clopper_pearson", "cross_validate"]

#: The metrics reported by :func:`cross_validate`, in order.
METRICS = ("accuracy", "sensitivity", "specificity", "precision", "recall")


_CONFIDENCE = [Interval(Real, 0, 1, closed="neither")]
# Declared once for build_pipeline and cross_validate.
_MODEL_CONSTRAINTS = {
    "model": [StrOptions(set(CLASSIFIERS))],
    "rfe": ["boolean"],
    "n_features_to_select": [
        Interval(Integral, 1, None, closed="left"),
        Interval(Real, 0, 1, closed="neither"),
        StrOptions({"cv"}),
        None,
    ],
    "model_params": [dict, None],
}


@validate_params({"confidence": _CONFIDENCE})
def clopper_pearson(k, n, *, confidence: float = 0.95) -> tuple[float, float]:
    """Clopper–Pearson ("exact") interval of a binomial proportion k/n.

    ``low = Beta(α/2; k, n − k + 1)`` (0 when k = 0) and
    ``high = Beta(1 − α/2; k + 1, n − k)`` (1 when k = n), α = 1 − confidence.
    For integer k it equals
    ``scipy.stats.binomtest(k, n).proportion_ci(method="exact")``; the beta
    quantiles are continuous in k, so an averaged (non-integer) count is
    accepted too.

    Parameters
    ----------
    k : float
        Successes, ``0 <= k <= n``.
    n : float
        Trials, ``n > 0``.
    confidence : float, default=0.95

    Returns
    -------
    (low, high) : tuple of float

    Examples
    --------
    >>> from connscale.classify import clopper_pearson
    >>> low, high = clopper_pearson(18, 20)
    >>> round(low, 3), round(high, 3)
    (0.683, 0.988)
    """
    from scipy import stats

    k, n = float(k), float(n)
    if not n > 0:
        raise ValueError(f"'n' must be positive; got {n}.")
    if not 0.0 <= k <= n:
        raise ValueError(f"'k' must lie in [0, n={n}]; got {k}.")
    alpha = 1.0 - confidence
    low = 0.0 if k == 0 else float(stats.beta.ppf(alpha / 2, k, n - k + 1))
    high = 1.0 if k == n else float(stats.beta.ppf(1 - alpha / 2, k + 1, n - k))
    return low, high


@functools.lru_cache(maxsize=1)
def _linear_kernel_svc_class():
    """Return the class, built once on first use (scikit-learn is imported lazily)."""
    from sklearn.base import BaseEstimator, ClassifierMixin

    class LinearKernelSVC(ClassifierMixin, BaseEstimator):
        """``SVC(kernel="linear")`` solved on the precomputed Gram matrix.

        The same optimisation problem and solution as scikit-learn's
        ``SVC(kernel="linear", C=C)`` (libsvm), but the kernel is one BLAS
        product ``X Xᵀ`` instead of libsvm's per-entry dot products: about
        10× faster when features far outnumber subjects (19,900 edges, 138
        training subjects). ``coef_ = dual_coef_ · X[support_]`` makes it a
        linear model (RFE reads ``coef_``).

        Parameters
        ----------
        C : float, default=1.0
            Soft-margin penalty.
        """

        def __init__(self, C: float = 1.0):
            self.C = C

        def fit(self, X, y):
            from sklearn.svm import SVC

            X = np.asarray(X, dtype=np.float64)
            self.svc_ = SVC(kernel="precomputed", C=self.C).fit(X @ X.T, y)
            self.classes_ = self.svc_.classes_
            if self.classes_.size != 2:
                raise ValueError(f"Expected two classes; got {self.classes_.size}.")
            self.coef_ = self.svc_.dual_coef_ @ X[self.svc_.support_]
            self.intercept_ = np.asarray(self.svc_.intercept_, dtype=np.float64).copy()
            self.n_features_in_ = X.shape[1]
            return self

        def decision_function(self, X):
            X = np.asarray(X, dtype=np.float64)
            return X @ self.coef_[0] + self.intercept_[0]

        def predict(self, X):
            return self.classes_[(self.decision_function(X) > 0).astype(np.int64)]

    return LinearKernelSVC


def _svc(C: float = 1.0):
    return _linear_kernel_svc_class()(C=C)


@validate_params(_MODEL_CONSTRAINTS)
def build_pipeline(
    model: str = "svm",
    *,
    rfe: bool = False,
    n_features_to_select=None,
    random_state: int | None = None,
    model_params: dict | None = None,
):
    """Return the unfitted pipeline :func:`cross_validate` fits in every fold.

    Parameters
    ----------
    model : {'svm', 'mlp'}, default='svm'
        ``'svm'``: a soft-margin linear SVM with C = 1, the solution of
        ``SVC(kernel="linear", C=1)`` computed on the precomputed Gram
        matrix (faster when features outnumber subjects). ``'mlp'``:
        ``MLPClassifier(hidden_layer_sizes=(64,), alpha=1e-2, solver="lbfgs",
        max_iter=1000)``.
    rfe : bool, default=False
        Insert recursive feature elimination ranked by a linear SVM (C = 1),
        dropping 10% of the remaining features per step.
    n_features_to_select : int, float, 'cv' or None, default=None
        Features RFE keeps: a count, a fraction, None (half) or ``'cv'``
        (``RFECV``: the smallest set with the best accuracy in an inner
        3-fold stratified split of the training subjects, as ReAl-LiFE §5).
    random_state : int or None
        Seed of the MLP and of the inner RFECV split.
    model_params : dict or None
        Overrides of the classifier's parameters.

    Returns
    -------
    sklearn.pipeline.Pipeline
        Steps ``"scale"`` (StandardScaler), optionally ``"rfe"``, ``"model"``.

    Examples
    --------
    >>> from connscale.classify import build_pipeline
    >>> [name for name, _ in build_pipeline("svm", rfe=True, n_features_to_select=10).steps]
    ['scale', 'rfe', 'model']
    """
    from sklearn.feature_selection import RFE, RFECV
    from sklearn.model_selection import StratifiedKFold
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    if model == "svm":
        estimator = _svc()
    else:
        estimator = MLPClassifier(
            hidden_layer_sizes=(64,),
            alpha=1e-2,
            solver="lbfgs",
            max_iter=1000,
            random_state=random_state,
        )
    if model_params:
        estimator.set_params(**model_params)
    steps = [("scale", StandardScaler())]
    if rfe:
        if n_features_to_select == "cv":
            inner = StratifiedKFold(3, shuffle=True, random_state=random_state)
            steps.append(("rfe", RFECV(_svc(), step=0.1, cv=inner, scoring="accuracy")))
        else:
            steps.append(("rfe", RFE(_svc(), n_features_to_select=n_features_to_select, step=0.1)))
    steps.append(("model", estimator))
    return Pipeline(steps)


def _check_inputs(X, y, folds: int, pos_label):
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"'X' must be 2-D (n_subjects, n_features); got shape {X.shape}.")
    if not np.issubdtype(X.dtype, np.number):
        raise ValueError(f"'X' must be numeric; got dtype {X.dtype}.")
    X = X.astype(np.float64, copy=False)
    if not np.isfinite(X).all():
        raise ValueError(
            f"'X' contains {int((~np.isfinite(X)).sum())} NaN or infinite "
            "value(s); the classifiers need finite features."
        )
    y = np.asarray(y)
    if y.ndim != 1 or y.shape[0] != X.shape[0]:
        raise ValueError(
            f"'y' must be 1-D with one label per row of X ({X.shape[0]}); got shape {y.shape}."
        )
    classes = np.unique(y)
    if classes.size != 2:
        raise ValueError(
            f"'y' must have exactly two classes; got {classes.size}: {classes.tolist()[:10]}."
        )
    if pos_label is not None:
        if pos_label not in classes:
            raise ValueError(f"'pos_label' {pos_label!r} is not a class of y {classes.tolist()}.")
        classes = np.array([c for c in classes if c != pos_label] + [pos_label])
    y01 = (y == classes[1]).astype(np.int64)
    counts = np.bincount(y01, minlength=2)
    if counts.min() < folds:
        raise ValueError(
            f"Each class needs at least folds={folds} subjects for stratified "
            f"{folds}-fold cross-validation; got {dict(zip(classes.tolist(), counts.tolist()))}."
        )
    return X, y01, classes


def _fit_fold(pipeline, X, y, train, test, model: str):
    import warnings as _warnings

    from sklearn.base import clone
    from sklearn.exceptions import ConvergenceWarning

    fitted = clone(pipeline)
    with _warnings.catch_warnings(record=True) as caught:
        _warnings.simplefilter("always", ConvergenceWarning)
        fitted.fit(X[train], y[train])
    converged = not any(issubclass(w.category, ConvergenceWarning) for w in caught)
    predicted = fitted.predict(X[test])
    estimator = fitted.named_steps["model"]
    if hasattr(estimator, "decision_function"):
        score = fitted.decision_function(X[test])
    else:
        score = fitted.predict_proba(X[test])[:, 1]
    n_features = X.shape[1]
    if "rfe" in fitted.named_steps:
        support = fitted.named_steps["rfe"].support_
    else:
        support = np.ones(n_features, dtype=bool)
    coef = np.zeros(n_features)
    importance = np.zeros(n_features)
    if model == "svm":
        coef[support] = np.ravel(estimator.coef_)
        importance = np.abs(coef)
    else:
        importance[support] = np.abs(estimator.coefs_[0]).mean(axis=1)
    return {
        "test": test,
        "predicted": predicted,
        "score": score,
        "coef": coef,
        "importance": importance,
        "support": support,
        "converged": converged,
    }


def _counts(y_true, y_pred) -> np.ndarray:
    """(tn, fp, fn, tp)."""
    tp = int(np.sum((y_true == 1) & (y_pred == 1)))
    tn = int(np.sum((y_true == 0) & (y_pred == 0)))
    fp = int(np.sum((y_true == 0) & (y_pred == 1)))
    fn = int(np.sum((y_true == 1) & (y_pred == 0)))
    return np.array([tn, fp, fn, tp])


def _metric_counts(tn, fp, fn, tp) -> dict:
    """Metric -> (k, n)."""
    return {
        "accuracy": (tp + tn, tn + fp + fn + tp),
        "sensitivity": (tp, tp + fn),
        "specificity": (tn, tn + fp),
        "precision": (tp, tp + fp),
        "recall": (tp, tp + fn),
    }


def _ratio(k, n) -> float:
    return float(k) / float(n) if n > 0 else float("nan")


def _seed(rng: np.random.Generator) -> int:
    return int(rng.integers(0, 2**31 - 1))


def _pooled_metrics(counts, fold_scores: dict, *, divisor: int, confidence: float) -> dict:
    """Return metric -> its pooled proportion, interval and fold summary.

    ``counts`` are (tn, fp, fn, tp) pooled over every test set; k and n are
    divided by ``divisor`` (the repeats for ``interval='subjects'``).
    """
    metrics = {}
    for name, (k_all, n_all) in _metric_counts(*counts).items():
        k, n = k_all / divisor, n_all / divisor
        values = np.asarray(fold_scores[name], dtype=float)
        finite = values[np.isfinite(values)]
        low, high = (
            clopper_pearson(k, n, confidence=confidence) if n > 0 else (float("nan"), float("nan"))
        )
        metrics[name] = {
            "mean": _ratio(k, n),
            "ci_low": low,
            "ci_high": high,
            "k": float(k),
            "n": float(n),
            "fold_mean": float(finite.mean()) if finite.size else float("nan"),
            "fold_std": float(finite.std()) if finite.size else float("nan"),
        }
    return metrics


def _summarise_folds(fits: list, y01, folds: int, *, divisor: int, confidence: float) -> dict:
    """Return the summary of the fitted folds, in :func:`cross_validate`'s order.

    The metrics, ROC AUC, per-fold scores, confusion matrix and out-of-fold scores.
    """
    from sklearn.metrics import roc_auc_score

    fold_counts = np.array([_counts(y01[f["test"]], f["predicted"]) for f in fits])
    fold_scores = {name: [] for name in METRICS}
    for tn, fp, fn, tp in fold_counts:
        for name, (k, n) in _metric_counts(tn, fp, fn, tp).items():
            fold_scores[name].append(_ratio(k, n))
    tn, fp, fn, tp = fold_counts.sum(axis=0)
    summary = _pooled_metrics((tn, fp, fn, tp), fold_scores, divisor=divisor, confidence=confidence)
    oof = np.full((len(fits) // folds, y01.shape[0]), np.nan)
    for index, fit in enumerate(fits):
        oof[index // folds, fit["test"]] = fit["score"]
    aucs = np.array([roc_auc_score(y01, row) for row in oof])
    summary["auc"] = {
        "mean": float(aucs.mean()),
        "std": float(aucs.std()),
        "per_repeat": aucs.tolist(),
    }
    summary["fold_scores"] = {name: [float(v) for v in fold_scores[name]] for name in METRICS}
    summary["confusion_matrix"] = [[int(tn), int(fp)], [int(fn), int(tp)]]
    summary["oof_scores"] = oof
    summary["y"] = y01
    return summary


def _feature_weights(fits: list, model: str) -> dict:
    """Return the mean importance, mean SVM coef and selection frequency of each feature."""
    return {
        "importance": np.mean([f["importance"] for f in fits], axis=0),
        "coef_mean": np.mean([f["coef"] for f in fits], axis=0) if model == "svm" else None,
        "selected_frequency": np.mean([f["support"] for f in fits], axis=0),
    }


def _count_not_converged(fits: list, model: str) -> int:
    """Return the number of folds whose fit did not converge (warned of)."""
    n_not_converged = int(sum(not f["converged"] for f in fits))
    if n_not_converged:
        warnings.warn(
            f"The {model} did not converge in {n_not_converged} of "
            f"{len(fits)} folds; raise max_iter through model_params.",
            RuntimeWarning,
            stacklevel=user_stacklevel(),
        )
    return n_not_converged


def _permutation(pipeline, X, y01, folds: int, n_permutations: int, *, seeds, n_jobs) -> dict:
    """Return the permutation test of the accuracy on one shuffled stratified split.

    ``seeds`` are (the split's, the permutations').
    """
    from sklearn.model_selection import StratifiedKFold, permutation_test_score

    cv_seed, perm_seed = seeds
    score, null_scores, p_value = permutation_test_score(
        pipeline,
        X,
        y01,
        cv=StratifiedKFold(folds, shuffle=True, random_state=cv_seed),
        n_permutations=n_permutations,
        random_state=perm_seed,
        n_jobs=n_jobs,
        scoring="accuracy",
    )
    return {
        "score": float(score),
        "p_value": float(p_value),
        "n_permutations": n_permutations,
        "null_scores": np.asarray(null_scores),
    }


@fill_doc
@validate_params(
    {
        "X": ["array-like"],
        "y": ["array-like"],
        **_MODEL_CONSTRAINTS,
        "folds": [Interval(Integral, 2, None, closed="left")],
        "repeats": [Interval(Integral, 1, None, closed="left")],
        "permutation_test": [Interval(Integral, 0, None, closed="left")],
        "interval": [StrOptions(set(CV_INTERVALS))],
        "confidence": _CONFIDENCE,
        "random_state": ["random_state"],
        "n_jobs": ["n_jobs", None],
    }
)
def cross_validate(  # noqa: PLR0913 - public keywords (scikit-learn-style cross-validation options)
    X,
    y,
    *,
    model: str = "svm",
    folds: int = 5,
    repeats: int = 10,
    rfe: bool = False,
    n_features_to_select=None,
    permutation_test: int = 0,
    interval: str = "subjects",
    confidence: float = 0.95,
    pos_label=None,
    model_params: dict | None = None,
    random_state=None,
    n_jobs: int | None = None,
) -> dict:
    """Repeated stratified k-fold cross-validation of a linear SVM or an MLP.

    The pipeline of :func:`build_pipeline` (scaling, optional RFE, model) is
    cloned and fitted on the training subjects of each fold only.

    Parameters
    ----------
    X : array-like of shape (n_subjects, n_features)
        Features, e.g. ``FeatureSet.X``.
    y : array-like of shape (n_subjects,)
        Two classes, any values.
    model : {'svm', 'mlp'}, default='svm'
    folds : int, default=5
    repeats : int, default=10
        Repeats of the k-fold split, each with another shuffle.
    rfe : bool, default=False
        Recursive feature elimination inside each fold.
    n_features_to_select : int, float, 'cv' or None, default=None
        See :func:`build_pipeline`.
    permutation_test : int, default=0
        Number of label permutations for a p-value of the accuracy
        (``sklearn.model_selection.permutation_test_score`` on one shuffled
        stratified k-fold split, the first repeat's seed); 0 skips it.
    interval : {'subjects', 'predictions'}, default='subjects'
        What n and k of the Clopper–Pearson interval are. Every subject is
        predicted once per repeat; let K be the pooled count of successes over
        all ``folds × repeats`` test sets and M the pooled count of trials
        (accuracy: K = correct predictions, M = repeats × n_subjects;
        sensitivity: K = TP, M = TP + FN; specificity: K = TN, M = TN + FP;
        precision: K = TP, M = TP + FP). ``'subjects'``: k = K / repeats,
        n = M / repeats, the counts of one pass over the cohort (an average,
        so possibly non-integer). Repeats re-test the same subjects and are
        not new evidence, so this is the honest width. ``'predictions'``:
        k = K, n = M, as if all predictions were independent (narrower by
        about √repeats).
    confidence : float, default=0.95
    pos_label : object or None
        The positive class (patients); default the larger of the two sorted
        label values.
    model_params : dict or None
        Overrides of the classifier's parameters.
    %(random_state)s
    n_jobs : int or None, default=None
        Folds fitted in parallel (joblib; None: one at a time, -1: every core,
        -2: all but one, ...).

    Returns
    -------
    dict
        For each of ``accuracy``, ``sensitivity``, ``specificity``,
        ``precision``, ``recall``: ``{"mean", "ci_low", "ci_high", "k", "n",
        "fold_mean", "fold_std"}`` where ``mean = k / n`` (the pooled
        proportion) and ``fold_mean``/``fold_std`` summarise the per-fold
        values. Also:

        - ``"auc"``: ``{"mean", "std"}`` of the ROC AUC of each repeat's
          out-of-fold scores;
        - ``"fold_scores"``: metric -> list of ``folds × repeats`` values;
        - ``"confusion_matrix"``: ``[[TN, FP], [FN, TP]]`` pooled over all
          test predictions;
        - ``"oof_scores"``: (repeats, n_subjects) decision values (SVM) or
          positive-class probabilities (MLP) of each subject when it was tested;
        - ``"feature_weights"``: ``"importance"`` (SVM: mean |coef| across
          folds, in standardised feature units, 0 where RFE dropped the
          feature; MLP: mean over hidden units and folds of the absolute
          first-layer weights, a heuristic), ``"coef_mean"`` (SVM: mean signed
          coef, positive favours the positive class; MLP: None) and
          ``"selected_frequency"`` (fraction of folds keeping the feature);
        - ``"permutation"`` (when requested): ``{"score", "p_value",
          "n_permutations", "null_scores"}`` with p = (C + 1) / (N + 1);
        - ``"classes"`` ``[negative, positive]``, ``"n_subjects"``,
          ``"n_features"``, ``"model"``, ``"folds"``, ``"repeats"``,
          ``"interval"``, ``"confidence"``, ``"n_not_converged"``.

    Examples
    --------
    >>> from connscale.datasets import simulate_cohort
    >>> cohort = simulate_cohort(40, 8, 120, effect_edges=2, effect_size=0.6,
    ...                          random_state=0)
    >>> result = cross_validate(cohort.features(), cohort.y, folds=5, repeats=2,
    ...                         random_state=0)
    >>> result["accuracy"]["mean"] > 0.8
    True
    """
    from joblib import Parallel, delayed
    from sklearn.model_selection import RepeatedStratifiedKFold

    folds, repeats, permutation_test = int(folds), int(repeats), int(permutation_test)
    if n_features_to_select is not None and not rfe:
        raise ValueError("'n_features_to_select' needs rfe=True.")
    X, y01, classes = _check_inputs(X, y, folds, pos_label)
    n_subjects, n_features = X.shape

    rng = check_random_state(random_state)
    cv_seed, model_seed, perm_seed = _seed(rng), _seed(rng), _seed(rng)
    pipeline = build_pipeline(
        model,
        rfe=rfe,
        n_features_to_select=n_features_to_select,
        random_state=model_seed,
        model_params=model_params,
    )
    splitter = RepeatedStratifiedKFold(n_splits=folds, n_repeats=repeats, random_state=cv_seed)
    splits = list(splitter.split(X, y01))
    fits = Parallel(n_jobs=n_jobs)(
        delayed(_fit_fold)(pipeline, X, y01, train, test, model) for train, test in splits
    )

    result: dict = {
        "model": model,
        "folds": folds,
        "repeats": repeats,
        "rfe": bool(rfe),
        "n_subjects": int(n_subjects),
        "n_features": int(n_features),
        "classes": classes.tolist(),
        "interval": interval,
        "confidence": confidence,
    }
    divisor = repeats if interval == "subjects" else 1
    result.update(_summarise_folds(fits, y01, folds, divisor=divisor, confidence=confidence))
    result["feature_weights"] = _feature_weights(fits, model)
    result["n_not_converged"] = _count_not_converged(fits, model)
    if permutation_test:
        result["permutation"] = _permutation(
            pipeline, X, y01, folds, permutation_test, seeds=(cv_seed, perm_seed), n_jobs=n_jobs
        )
    return result


# Not skipping nested validation: cross_validate checks the **kwargs passed on.
@validate_params(
    {"feature_sets": [dict], "random_state": [Integral]}, prefer_skip_nested_validation=False
)
def compare_features(feature_sets: dict, y, *, random_state=0, **kwargs) -> dict:
    """Cross-validate several feature matrices of the same subjects on the same folds.

    For comparisons such as GPU-DFC Table IV (actual vs low-rank
    reconstructed correlations): every matrix gets the same seed, hence the
    same repeated stratified splits and the same model initialisation, so
    the differences come from the features alone.

    Parameters
    ----------
    feature_sets : dict of str -> array-like of shape (n_subjects, n_features_k)
        Named feature matrices, rows in the same subject order.
    y : array-like of shape (n_subjects,)
    random_state : int, default=0
        Shared seed (an int, so that every run draws the same splits).
    **kwargs
        Passed to :func:`cross_validate` (model, folds, repeats, rfe, ...).

    Returns
    -------
    dict of str -> dict
        The :func:`cross_validate` result of each feature set, in order.

    Examples
    --------
    >>> import numpy as np
    >>> from connscale.classify import compare_features
    >>> rng = np.random.default_rng(0)
    >>> y = np.repeat([0, 1], 10)
    >>> informative = rng.standard_normal((20, 5)) + 2.0 * y[:, None]
    >>> noise = rng.standard_normal((20, 5))
    >>> results = compare_features({"informative": informative, "noise": noise}, y, folds=5)
    >>> list(results), results["informative"]["accuracy"]["mean"] > 0.9
    (['informative', 'noise'], True)
    """
    if not feature_sets:
        raise ValueError("'feature_sets' is empty; give at least one named matrix.")
    n_rows = {name: np.shape(X)[0] for name, X in feature_sets.items()}
    if len(set(n_rows.values())) != 1:
        raise ValueError(f"All feature sets must have the same subjects (rows); got {n_rows}.")
    return {
        name: cross_validate(X, y, random_state=int(random_state), **kwargs)
        for name, X in feature_sets.items()
    }
