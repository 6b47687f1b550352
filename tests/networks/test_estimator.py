"""R1DL as a scikit-learn estimator: clone, GridSearchCV, refit,
inverse_transform."""

import numpy as np
import pytest
from numpy.testing import assert_allclose
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import GridSearchCV, KFold

from connscale.networks import R1DL

from .conftest import N_NETWORKS, N_VOXELS, SIZE


def _small(planted):
    return planted[0][:, :300]


def test_clone_keeps_parameters_and_drops_the_fit(planted):
    S = _small(planted)
    est = R1DL(3, 10, max_iter=30, random_state=0, device="cpu", dtype="float64").fit(S)
    copy = clone(est)
    assert copy.get_params() == est.get_params()
    assert not hasattr(copy, "components_")
    with pytest.raises(NotFittedError):
        copy.transform(S)
    copy.fit(S)
    assert_allclose(copy.components_.toarray(), est.components_.toarray())
    assert_allclose(copy.dictionary_, est.dictionary_)


def _reconstruction_score(estimator, X, y=None):
    """Minus the residual of standardized X on the maps' span."""
    Z = X - X.mean(axis=0)
    Z /= np.linalg.norm(Z, axis=0)
    return -float(np.linalg.norm(Z - estimator.inverse_transform(estimator.transform(X))))


def test_grid_search_picks_and_refits(planted):
    S = planted[0]
    search = GridSearchCV(
        R1DL(N_NETWORKS, random_state=0, device="cpu", dtype="float64"),
        {"sparsity": [5, SIZE]},
        scoring=_reconstruction_score,
        cv=KFold(2),
    ).fit(S)
    assert search.cv_results_["mean_test_score"].shape == (2,)
    # More loadings per network explain more of the held-out time points.
    assert search.best_params_ == {"sparsity": SIZE}
    direct = R1DL(N_NETWORKS, SIZE, random_state=0, device="cpu", dtype="float64").fit(S)
    assert_allclose(
        search.best_estimator_.components_.toarray(), direct.components_.toarray(), atol=1e-10
    )


def test_inverse_transform_is_the_projection_on_the_maps(planted):
    S = _small(planted)
    est = R1DL(3, 10, max_iter=30, random_state=0, device="cpu", dtype="float64")
    with pytest.raises(NotFittedError):
        est.inverse_transform(np.zeros((2, 3)))
    courses = est.fit_transform(S)
    back = est.inverse_transform(courses)
    assert back.shape == S.shape
    Z = S - S.mean(axis=0)
    Z /= np.linalg.norm(Z, axis=0)
    V = est.components_.toarray()
    # The residual is orthogonal to every map: least squares on them.
    assert_allclose((Z - back) @ V.T, 0.0, atol=1e-10)
    assert_allclose(back, courses @ V, atol=1e-12)
    with pytest.raises(ValueError, match=r"shape \(n_timepoints, 3\); got shape \(80, 2\)"):
        est.inverse_transform(courses[:, :2])


def test_refit_replaces_every_fitted_attribute(planted):
    S = _small(planted)
    est = R1DL(3, 10, max_iter=30, random_state=0, device="cpu").fit(S)
    est.set_params(n_components=2).fit(planted[0])
    assert est.components_.shape == (2, N_VOXELS)
    assert est.dictionary_.shape == (S.shape[0], 2)
    assert est.n_iter_.shape == (2,)
    assert est.n_features_in_ == N_VOXELS


@pytest.mark.parametrize(
    "params, message",
    [
        (
            {"n_components": 0},
            r"The 'n_components' parameter of R1DL.fit must be an int in the range \[1, inf\). "
            r"Got 0 instead.",
        ),
        (
            {"sparsity": 1.5},
            r"The 'sparsity' parameter of R1DL.fit must be an int in the range "
            r"\[1, inf\) or a float in the range \(0, 1\]. Got 1.5 instead.",
        ),
        ({"storage": "disk"}, "The 'storage' parameter of R1DL.fit must be a str among"),
        ({"standardize": "yes"}, "The 'standardize' parameter of R1DL.fit must be a bool"),
    ],
)
def test_fit_validates_its_parameters_once_before_any_work(params, message, monkeypatch):
    import connscale.networks._r1dl as module

    def refuse(*args, **kwargs):
        raise AssertionError("the image was masked before the parameters were checked")

    monkeypatch.setattr(R1DL, "_fit_masker", refuse)
    with pytest.raises(ValueError, match=message):
        R1DL(**{"n_components": 2, "sparsity": 3, **params}).fit("bold.nii.gz")
    import connscale._validation as validation

    calls = []
    for owner in (validation, module):
        monkeypatch.setattr(
            owner, "validate_parameter_values", lambda *args: calls.append(args[-1])
        )
    R1DL(2, 3, max_iter=2, random_state=0, device="cpu").fit(
        np.random.default_rng(0).standard_normal((20, 15))
    )
    assert calls == ["R1DL.fit", "R1DL.fit"]  # its parameters and checkpoint; not r1dl's
