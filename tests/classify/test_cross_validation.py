"""cross_validate: planted effects found, chance on null data, no leakage, intervals."""

import numpy as np
import pytest
from scipy.stats import binomtest

from connscale.classify import METRICS, build_pipeline, clopper_pearson, cross_validate
from connscale.datasets import simulate_cohort


@pytest.fixture(scope="module")
def planted():
    cohort = simulate_cohort(40, 10, 150, effect_edges=3, effect_size=0.4, random_state=1)
    return cohort, cohort.features()


@pytest.mark.parametrize(
    ("k", "n"),
    [(0, 10), (1, 10), (5, 10), (10, 10), (17, 40), (37, 40), (0, 1), (1, 1), (123, 600)],
)
@pytest.mark.parametrize("confidence", [0.95, 0.9])
def test_clopper_pearson_matches_binomtest(k, n, confidence):
    expected = binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
    low, high = clopper_pearson(k, n, confidence=confidence)
    np.testing.assert_allclose([low, high], [expected.low, expected.high], rtol=1e-10, atol=1e-12)


def test_clopper_pearson_non_integer_k_between_neighbours():
    low, high = clopper_pearson(12.5, 20)
    low_a, high_a = clopper_pearson(12, 20)
    low_b, high_b = clopper_pearson(13, 20)
    assert low_a < low < low_b and high_a < high < high_b


def test_clopper_pearson_bad_inputs():
    with pytest.raises(ValueError, match="'n' must be positive"):
        clopper_pearson(0, 0)
    with pytest.raises(ValueError, match=r"'k' must lie in \[0, n=5.0\]"):
        clopper_pearson(6, 5)
    with pytest.raises(ValueError, match="'confidence'"):
        clopper_pearson(1, 5, confidence=1.5)


@pytest.mark.parametrize("model", ["svm", "mlp"])
def test_planted_edges_found(planted, model):
    cohort, X = planted
    result = cross_validate(X, cohort.y, model=model, folds=5, repeats=2, random_state=0)
    assert result["accuracy"]["mean"] > 0.85
    assert result["accuracy"]["ci_low"] > 0.6  # well above chance
    assert result["auc"]["mean"] > 0.9
    importance = result["feature_weights"]["importance"]
    top = set(np.argsort(importance)[::-1][: 3 if model == "svm" else 5].tolist())
    assert set(cohort.effect_features.tolist()) <= top
    if model == "svm":  # patients have higher correlation on the planted edges
        assert (result["feature_weights"]["coef_mean"][cohort.effect_features] > 0).all()


def test_planted_edges_with_rfe(planted):
    cohort, X = planted
    result = cross_validate(
        X, cohort.y, rfe=True, n_features_to_select=5, repeats=1, random_state=0
    )
    assert result["accuracy"]["mean"] > 0.85
    frequency = result["feature_weights"]["selected_frequency"]
    np.testing.assert_allclose(frequency[cohort.effect_features], 1.0)
    assert np.isclose(frequency.sum(), 5.0)  # 5 features kept in every fold
    assert (result["feature_weights"]["importance"][frequency == 0] == 0).all()


def test_rfecv_inside_folds(planted):
    cohort, X = planted
    result = cross_validate(
        X, cohort.y, rfe=True, n_features_to_select="cv", folds=4, repeats=1, random_state=0
    )
    assert result["accuracy"]["mean"] > 0.8


def test_no_difference_is_at_chance():
    inside, accuracies = 0, []
    for seed in range(5):
        cohort = simulate_cohort(60, 10, 150, effect_edges=3, effect_size=0.0, random_state=seed)
        acc = cross_validate(cohort.features(), cohort.y, repeats=2, random_state=seed)["accuracy"]
        accuracies.append(acc["mean"])
        inside += acc["ci_low"] <= 0.5 <= acc["ci_high"]
    assert inside >= 4  # 95% intervals: at most one miss in five
    assert 0.35 < np.mean(accuracies) < 0.65


def test_scaler_is_fitted_on_training_rows_only(planted, monkeypatch):
    """Record what every StandardScaler is fitted on: the rows left out by the
    fits of one repeat must partition the subjects (a scaler fitted on all
    data, or on test rows, fails this)."""
    import sklearn.preprocessing

    seen = []

    class SpyScaler(sklearn.preprocessing.StandardScaler):
        def fit(self, X, y=None, sample_weight=None):
            seen.append(np.array(X, copy=True))
            return super().fit(X, y, sample_weight)

    monkeypatch.setattr(sklearn.preprocessing, "StandardScaler", SpyScaler)
    cohort, X = planted
    folds, repeats = 5, 2
    cross_validate(X, cohort.y, folds=folds, repeats=repeats, random_state=3)
    assert len(seen) == folds * repeats
    all_rows = {row.tobytes(): index for index, row in enumerate(X)}
    for r in range(repeats):
        left_out = []
        for fitted in seen[r * folds : (r + 1) * folds]:
            rows = {all_rows[row.tobytes()] for row in fitted}
            assert len(rows) == fitted.shape[0] < X.shape[0]
            left_out.append(set(range(X.shape[0])) - rows)
        assert sorted(i for part in left_out for i in part) == list(range(X.shape[0]))


def test_feature_selection_does_not_leak():
    """Pure noise, 40 subjects, 1000 features: selecting features on all the
    data before cross-validation gives a high accuracy; inside the folds it
    must stay at chance (averaged over 4 noise data sets)."""
    from sklearn.feature_selection import RFE
    from sklearn.model_selection import StratifiedKFold, cross_val_score
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC

    y = np.repeat([0, 1], 20)
    leaky, honest = [], []
    for seed in range(4):
        X = np.random.default_rng(seed).standard_normal((40, 1000))
        scaled = StandardScaler().fit_transform(X)
        selected = RFE(SVC(kernel="linear"), n_features_to_select=10, step=0.1).fit(scaled, y)
        leaky.append(
            cross_val_score(
                SVC(kernel="linear"),
                scaled[:, selected.support_],
                y,
                cv=StratifiedKFold(5, shuffle=True, random_state=0),
            ).mean()
        )
        honest.append(
            cross_validate(X, y, rfe=True, n_features_to_select=10, repeats=1, random_state=0)[
                "accuracy"
            ]["mean"]
        )
    assert np.mean(leaky) > 0.75  # the leak this test guards against is real
    assert np.mean(honest) < 0.62


def test_result_structure_and_counts(planted):
    from sklearn.metrics import precision_score, recall_score

    cohort, X = planted
    folds, repeats = 4, 3
    result = cross_validate(X, cohort.y, folds=folds, repeats=repeats, random_state=0)
    n = X.shape[0]
    for name in METRICS:
        metric = result[name]
        assert set(metric) >= {"mean", "ci_low", "ci_high", "k", "n"}
        assert metric["ci_low"] <= metric["mean"] <= metric["ci_high"]
        assert len(result["fold_scores"][name]) == folds * repeats
    (tn, fp), (fn, tp) = result["confusion_matrix"]
    assert tn + fp + fn + tp == n * repeats
    assert result["accuracy"]["n"] == n and np.isclose(result["accuracy"]["k"], (tn + tp) / repeats)
    assert result["sensitivity"] == result["recall"]
    assert result["specificity"]["mean"] == pytest.approx(tn / (tn + fp))
    oof = result["oof_scores"]
    assert oof.shape == (repeats, n) and np.isfinite(oof).all()
    y_rep = np.tile(cohort.y, repeats)
    predicted = (oof.ravel() > 0).astype(int)
    assert result["precision"]["mean"] == pytest.approx(precision_score(y_rep, predicted))
    assert result["recall"]["mean"] == pytest.approx(recall_score(y_rep, predicted))
    pooled = cross_validate(
        X, cohort.y, folds=folds, repeats=repeats, random_state=0, interval="predictions"
    )
    assert pooled["accuracy"]["n"] == n * repeats
    assert pooled["accuracy"]["mean"] == pytest.approx(result["accuracy"]["mean"])

    def width(m):
        return m["ci_high"] - m["ci_low"]

    assert width(pooled["accuracy"]) <= width(result["accuracy"])


def test_seed_reproducible_and_labels_any_values(planted):
    cohort, X = planted
    labels = np.where(cohort.y == 1, "patient", "control")
    a = cross_validate(X, labels, repeats=2, random_state=7)
    b = cross_validate(X, cohort.y, repeats=2, random_state=7)
    assert a["classes"] == ["control", "patient"]
    assert a["fold_scores"] == b["fold_scores"]
    np.testing.assert_array_equal(a["oof_scores"], b["oof_scores"])
    flipped = cross_validate(X, labels, repeats=2, random_state=7, pos_label="control")
    assert flipped["classes"] == ["patient", "control"]
    assert flipped["sensitivity"]["mean"] == pytest.approx(a["specificity"]["mean"])


def test_permutation_test(planted):
    cohort, X = planted
    result = cross_validate(X, cohort.y, repeats=1, permutation_test=19, random_state=0)
    assert result["permutation"]["p_value"] == pytest.approx(1 / 20)
    assert result["permutation"]["null_scores"].shape == (19,)
    null = simulate_cohort(40, 10, 150, effect_size=0.0, random_state=2)
    p = cross_validate(null.features(), null.y, repeats=1, permutation_test=19, random_state=0)[
        "permutation"
    ]["p_value"]
    assert p > 0.05


def test_pipeline_steps():
    steps = build_pipeline("mlp", rfe=True, n_features_to_select=3).named_steps
    assert list(steps) == ["scale", "rfe", "model"]
    assert list(build_pipeline("svm").named_steps) == ["scale", "model"]
    assert build_pipeline("svm").named_steps["model"].C == 1.0


def test_bad_inputs():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((20, 4))
    y = np.repeat([0, 1], 10)
    with pytest.raises(ValueError, match="must be 2-D"):
        cross_validate(X[None], y)
    with pytest.raises(ValueError, match="NaN or infinite"):
        cross_validate(np.where(X > 2, np.nan, X), y)
    with pytest.raises(ValueError, match="one label per row"):
        cross_validate(X, y[:-1])
    with pytest.raises(ValueError, match="exactly two classes; got 1"):
        cross_validate(X, np.zeros(20))
    with pytest.raises(ValueError, match="at least folds=5 subjects"):
        cross_validate(X, np.r_[np.zeros(17), np.ones(3)])
    with pytest.raises(
        ValueError,
        match="The 'model' parameter of cross_validate must be a str "
        "among {'mlp', 'svm'}. Got 'forest' instead.",
    ):
        cross_validate(X, y, model="forest")
    with pytest.raises(ValueError, match="needs rfe=True"):
        cross_validate(X, y, n_features_to_select=2)
    with pytest.raises(
        ValueError,
        match="The 'interval' parameter of cross_validate must be a "
        "str among {'predictions', 'subjects'}",
    ):
        cross_validate(X, y, interval="folds")
    with pytest.raises(
        ValueError,
        match=r"The 'folds' parameter of cross_validate must be an "
        r"int in the range \[2, inf\). Got 1 instead.",
    ):
        cross_validate(X, y, folds=1)
    with pytest.raises(ValueError, match="'pos_label'"):
        cross_validate(X, y, pos_label=3)


def test_bad_n_features_to_select():
    X = np.random.default_rng(0).standard_normal((20, 4))
    y = np.repeat([0, 1], 10)
    message = (
        r"The 'n_features_to_select' parameter of cross_validate must be an int in the "
        r"range \[1, inf\), a float in the range \(0, 1\), a str among \{'cv'\} or None. "
        "Got "
    )
    with pytest.raises(ValueError, match=message + "-1 instead."):
        cross_validate(X, y, rfe=True, n_features_to_select=-1)
    with pytest.raises(ValueError, match=message + "'auto' instead."):
        cross_validate(X, y, rfe=True, n_features_to_select="auto")


def test_parameters_checked_before_any_fold_once_per_call():
    from connscale.classify import build_pipeline, clopper_pearson, compare_features

    X = np.random.default_rng(0).standard_normal((20, 4))
    y = np.repeat([0, 1], 10)
    with pytest.raises(
        ValueError,
        match=r"The 'confidence' parameter of cross_validate must "
        r"be a float in the range \(0, 1\). Got 1.5",
    ):
        cross_validate(X, y, confidence=1.5)
    with pytest.raises(ValueError, match="The 'confidence' parameter of clopper_pearson"):
        clopper_pearson(3, 5, confidence=0)
    with pytest.raises(ValueError, match="The 'model' parameter of build_pipeline"):
        build_pipeline("forest")
    with pytest.raises(ValueError, match="The 'rfe' parameter of cross_validate must be a bool"):
        cross_validate(X, y, rfe="yes")
    with pytest.raises(ValueError, match="The 'folds' parameter of cross_validate"):
        compare_features({"a": X}, y, folds=1)  # what compare_features passes on is checked


def test_linear_svm_equals_sklearn_svc_linear():
    """The Gram-matrix SVM gives SVC(kernel='linear')'s solution."""
    from sklearn.svm import SVC

    from connscale.classify.cross_validation import _svc

    rng = np.random.default_rng(1)
    X = rng.standard_normal((30, 200))
    y = np.repeat(["a", "b"], 15)
    X[y == "b", :3] += 1.0
    ours = _svc().fit(X, y)
    reference = SVC(kernel="linear", C=1.0).fit(X, y)
    np.testing.assert_allclose(ours.coef_, reference.coef_, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(ours.intercept_, reference.intercept_, rtol=1e-6, atol=1e-8)
    test = rng.standard_normal((10, 200))
    np.testing.assert_allclose(
        ours.decision_function(test), reference.decision_function(test), rtol=1e-6, atol=1e-8
    )
    np.testing.assert_array_equal(ours.predict(test), reference.predict(test))


def test_parallel_folds_match_serial(planted):
    from joblib import parallel_config

    cohort, X = planted
    serial = cross_validate(X, cohort.y, repeats=1, random_state=5)
    with parallel_config(backend="threading"):  # the n_jobs path without process start-up
        parallel = cross_validate(X, cohort.y, repeats=1, random_state=5, n_jobs=2)
    np.testing.assert_allclose(parallel["oof_scores"], serial["oof_scores"])


def test_compare_features_uses_the_same_folds(planted):
    from connscale.classify import compare_features

    cohort, X = planted
    noise = np.random.default_rng(0).standard_normal(X.shape)
    results = compare_features(
        {"actual": X, "copy": X.copy(), "noise": noise}, cohort.y, repeats=1, random_state=3
    )
    assert list(results) == ["actual", "copy", "noise"]
    np.testing.assert_array_equal(results["actual"]["oof_scores"], results["copy"]["oof_scores"])
    assert results["actual"]["accuracy"]["mean"] > results["noise"]["accuracy"]["mean"] + 0.2
    with pytest.raises(ValueError, match="must be an int"):
        compare_features({"a": X}, cohort.y, random_state=None)
    with pytest.raises(ValueError, match="same subjects"):
        compare_features({"a": X, "b": X[:10]}, cohort.y)
