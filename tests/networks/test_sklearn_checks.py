"""R1DL under scikit-learn's estimator checks."""

import pytest

from connscale.networks import R1DL

estimator_checks = pytest.importorskip("sklearn.utils.estimator_checks")
pytest.importorskip("sklearn", minversion="1.8")  # expected_failed_checks, xfail_strict

_WORDING = ("refused with connscale's one-line message naming what was expected and what "
            "was got ({}), not with the words scikit-learn's check looks for")

# Every check R1DL fails, and why. xfail_strict: a check listed here that
# passes fails the test, so the table cannot go stale.
R1DL_EXPECTED_FAILURES = {
    "check_complex_data": _WORDING.format("'must hold real numbers; got complex values'"),
    "check_dtype_object": "object arrays are refused ('must be a numeric array; got dtype "
                          "object'), never cast to numbers",
    "check_estimators_empty_data_messages": _WORDING.format(
        "'must have at least 2 time points (rows) and 1 voxel (column)'"),
    "check_fit2d_1sample": _WORDING.format(
        "'must have at least 2 time points (rows)': a time course needs two"),
    "check_fit2d_predict1d": _WORDING.format(
        "'must be a 2-D matrix of shape (n_timepoints, n_voxels)'"),
    "check_n_features_in_after_fitting": _WORDING.format(
        "'X has 3 voxels; this R1DL was fitted on 4'"),
    "check_transformer_n_iter": "n_iter_ holds one update count per atom, shape "
                                "(n_components,), as r1dl's n_iter; the check wants one int",
    "check_methods_subset_invariance": "rows are the time points of one scan, not independent "
                                       "samples: transform standardizes each voxel over the "
                                       "rows it is given (at least 2), so a row's time courses "
                                       "depend on the others",
}


@estimator_checks.parametrize_with_checks(
    [R1DL(2, device="cpu")],
    expected_failed_checks=lambda estimator: R1DL_EXPECTED_FAILURES,
    xfail_strict=True,
)
def test_scikit_learn_checks(estimator, check):
    check(estimator)
