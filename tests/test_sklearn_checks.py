"""connscale's estimators under scikit-learn's estimator checks.

Each estimator has a table of the checks it fails and why; xfail_strict: a
listed check that passes fails the test, so no table goes stale.
"""

import pytest

from connscale.life import LiFE
from connscale.networks import R1DL
from connscale.states import DFCStates

estimator_checks = pytest.importorskip("sklearn.utils.estimator_checks")
pytest.importorskip("sklearn", minversion="1.8")  # expected_failed_checks, xfail_strict


def _other_wording(message: str) -> str:
    return (
        f"refused with connscale's one-line message naming what was expected and what "
        f"was got ({message}), not with the words scikit-learn's check looks for"
    )


_OBJECT_ARRAYS = "object arrays are refused ({}), never cast to numbers"

R1DL_EXPECTED_FAILURES = {
    "check_complex_data": _other_wording("'must hold real numbers; got complex values'"),
    "check_dtype_object": _OBJECT_ARRAYS.format("'must be a numeric array; got dtype object'"),
    "check_estimators_empty_data_messages": _other_wording(
        "'must have at least 2 time points (rows) and 1 voxel (column)'"
    ),
    "check_fit2d_1sample": _other_wording(
        "'must have at least 2 time points (rows)': a time course needs two"
    ),
    "check_fit2d_predict1d": _other_wording(
        "'must be a 2-D matrix of shape (n_timepoints, n_voxels)'"
    ),
    "check_n_features_in_after_fitting": _other_wording(
        "'X has 3 voxels; this R1DL was fitted on 4'"
    ),
    "check_transformer_n_iter": "n_iter_ holds one update count per atom, shape "
    "(n_components,), as r1dl's n_iter; the check wants one int",
    "check_methods_subset_invariance": "rows are the time points of one scan, not independent "
    "samples: transform standardizes each voxel over the "
    "rows it is given (at least 2), so a row's time courses "
    "depend on the others",
}

DFCSTATES_EXPECTED_FAILURES = {
    "check_complex_data": _other_wording("'windows must hold real numbers; got complex'"),
    "check_dtype_object": _OBJECT_ARRAYS.format("'windows must be numeric; got dtype object'"),
    "check_estimators_empty_data_messages": _other_wording("'windows must have at least one edge'"),
    "check_fit2d_1sample": _other_wording("'n_states=2 needs at least as many windows'"),
    "check_fit2d_predict1d": _other_wording("'expected windows of shape (n_windows, n_edges)'"),
    "check_n_features_in_after_fitting": _other_wording(
        "'Windows must have 4 edges as in fit; got 3'"
    ),
}

# What does not call fit(X, y) passes: parameters, clone, repr, tags,
# unfitted state; and check_fit1d (fit(X, y) with an X that is no
# DiffusionData wants bvecs and streamlines too: a ValueError).
LIFE_EXPECTED_FAILURES = dict.fromkeys(
    (
        "check_complex_data",
        "check_dict_unchanged",
        "check_dont_overwrite_parameters",
        "check_dtype_object",
        "check_estimator_sparse_array",
        "check_estimator_sparse_matrix",
        "check_estimator_sparse_tag",
        "check_estimators_dtypes",
        "check_estimators_empty_data_messages",
        "check_estimators_fit_returns_self",
        "check_estimators_nan_inf",
        "check_estimators_overwrite_params",
        "check_estimators_pickle",
        "check_f_contiguous_array_estimator",
        "check_fit2d_1feature",
        "check_fit2d_1sample",
        "check_fit2d_predict1d",
        "check_fit_check_is_fitted",
        "check_fit_idempotent",
        "check_fit_score_takes_y",
        "check_methods_sample_order_invariance",
        "check_methods_subset_invariance",
        "check_n_features_in",
        "check_n_features_in_after_fitting",
        "check_pipeline_consistency",
        "check_positive_only_tag_during_fit",
        "check_readonly_memmap_input",
    ),
    "fit takes a DiffusionData (a scan, its gradients and a tractogram, whose samples are the "
    "diffusion-weighted directions) or (dwi, bvals, bvecs, streamlines), not a feature "
    "matrix: the check's fit(X, y) cannot run",
)

_EXPECTED_FAILURES = {
    R1DL: R1DL_EXPECTED_FAILURES,
    DFCStates: DFCSTATES_EXPECTED_FAILURES,
    LiFE: LIFE_EXPECTED_FAILURES,
}


@estimator_checks.parametrize_with_checks(
    [R1DL(2, device="cpu"), DFCStates(2, n_init=2, device="cpu"), LiFE(device="cpu")],
    expected_failed_checks=lambda estimator: _EXPECTED_FAILURES[type(estimator)],
    xfail_strict=True,
)
def test_scikit_learn_checks(estimator, check):
    check(estimator)
