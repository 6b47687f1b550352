"""LiFE under scikit-learn's estimator checks."""

import pytest

from connscale.life import LiFE

estimator_checks = pytest.importorskip("sklearn.utils.estimator_checks")
pytest.importorskip("sklearn", minversion="1.8")  # expected_failed_checks, xfail_strict

_SIGNATURE = ("fit takes a scan, its gradients and a tractogram (dwi, bvals, bvecs, "
              "streamlines), not scikit-learn's (X, y): the check's fit(X, y) cannot run")

# Every check LiFE fails, and why (xfail_strict: a listed check that passes
# fails the test). What does not call fit(X, y) passes: parameters, clone,
# repr, tags, unfitted state.
LIFE_EXPECTED_FAILURES = dict.fromkeys(
    ("check_complex_data", "check_dict_unchanged", "check_dont_overwrite_parameters",
     "check_dtype_object", "check_estimator_sparse_array", "check_estimator_sparse_matrix",
     "check_estimator_sparse_tag", "check_estimators_dtypes",
     "check_estimators_empty_data_messages", "check_estimators_fit_returns_self",
     "check_estimators_nan_inf", "check_estimators_overwrite_params",
     "check_estimators_pickle", "check_f_contiguous_array_estimator", "check_fit1d",
     "check_fit2d_1feature", "check_fit2d_1sample", "check_fit2d_predict1d",
     "check_fit_check_is_fitted", "check_fit_idempotent", "check_fit_score_takes_y",
     "check_methods_sample_order_invariance", "check_methods_subset_invariance",
     "check_n_features_in", "check_n_features_in_after_fitting", "check_pipeline_consistency",
     "check_positive_only_tag_during_fit", "check_readonly_memmap_input"),
    _SIGNATURE,
)


@estimator_checks.parametrize_with_checks(
    [LiFE(device="cpu")],
    expected_failed_checks=lambda estimator: LIFE_EXPECTED_FAILURES,
    xfail_strict=True,
)
def test_scikit_learn_checks(estimator, check):
    check(estimator)
