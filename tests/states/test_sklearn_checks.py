"""DFCStates under scikit-learn's estimator checks."""

import pytest

from connscale import DFCStates

estimator_checks = pytest.importorskip("sklearn.utils.estimator_checks")
pytest.importorskip("sklearn", minversion="1.8")  # expected_failed_checks, xfail_strict

_WORDING = ("refused with connscale's one-line message naming what was expected and what "
            "was got ({}), not with the words scikit-learn's check looks for")

# Every check DFCStates fails, and why (xfail_strict: a listed check that
# passes fails the test).
DFCSTATES_EXPECTED_FAILURES = {
    "check_complex_data": _WORDING.format("'windows must hold real numbers; got complex'"),
    "check_dtype_object": "object arrays are refused ('windows must be numeric; got dtype "
                          "object'), never cast to numbers",
    "check_estimators_empty_data_messages": _WORDING.format(
        "'windows must have at least one edge'"),
    "check_fit2d_1sample": _WORDING.format("'n_states=2 needs at least as many windows'"),
    "check_fit2d_predict1d": _WORDING.format(
        "'expected windows of shape (n_windows, n_edges)'"),
    "check_n_features_in_after_fitting": _WORDING.format(
        "'Windows must have 4 edges as in fit; got 3'"),
}


@estimator_checks.parametrize_with_checks(
    [DFCStates(2, n_init=2, device="cpu")],
    expected_failed_checks=lambda estimator: DFCSTATES_EXPECTED_FAILURES,
    xfail_strict=True,
)
def test_scikit_learn_checks(estimator, check):
    check(estimator)
