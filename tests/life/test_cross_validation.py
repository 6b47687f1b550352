"""Cross-validation of LiFE over gradient directions with scikit-learn's
splitters (DiffusionData, LiFE.fit(X) and LiFE.score(X))."""

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, KFold, cross_val_score
from sklearn.utils import _safe_indexing, indexable
from sklearn.utils.validation import _num_samples

from connscale import life
from connscale.life.evaluate import split_directions


@pytest.fixture(scope="module")
def data(phantom):
    return life.DiffusionData(
        phantom.dwi, phantom.bvals, phantom.bvecs, phantom.streamlines, affine=phantom.affine
    )


def test_diffusion_data_is_indexed_by_direction(phantom, data):
    n_dw = int((phantom.bvals > 50).sum())
    b0 = np.flatnonzero(phantom.bvals <= 50)
    dw = np.flatnonzero(phantom.bvals > 50)
    assert len(data) == _num_samples(data) == n_dw and data.shape == (n_dw,)
    assert indexable(data)[0] is data
    for key in (np.array([5, 1, 2]), np.isin(np.arange(n_dw), [1, 2, 5])):
        sub = _safe_indexing(data, key)
        assert isinstance(sub, life.DiffusionData) and len(sub) == 3
        volumes = np.r_[b0, dw[[1, 2, 5]]]
        np.testing.assert_array_equal(sub.dwi, phantom.dwi[..., volumes])
        np.testing.assert_array_equal(sub.bvals, phantom.bvals[volumes])
        np.testing.assert_array_equal(sub.bvecs, phantom.bvecs[volumes])
        assert sub.streamlines is data.streamlines and len(data) == n_dw
    assert len(data[3]) == 1 and len(data[2:6]) == 4
    assert repr(data[:4]).startswith("DiffusionData(n_directions=4, n_b0=1")
    with pytest.raises(IndexError, match="one index"):
        data[0, 1]
    with pytest.raises(ValueError, match="'bvals' must hold one b-value per volume"):
        life.DiffusionData(
            phantom.dwi,
            phantom.bvals[:-1],
            phantom.bvecs,
            phantom.streamlines,
            affine=phantom.affine,
        )


def test_grid_search_over_directions(phantom, data):
    lams = [0.0, 0.01]
    search = GridSearchCV(clone(life.LiFE(device="cpu")), {"lam": lams}, cv=KFold(3), refit=True)
    search.fit(data)
    scores = search.cv_results_["mean_test_score"]
    assert np.all(np.isfinite(scores)) and np.all(scores < 0)
    best = lams[int(np.argmax(scores))]
    assert search.best_params_ == {"lam": best}
    direct = life.LiFE(lam=best, device="cpu").fit(data)
    old_style = life.LiFE(lam=best, device="cpu").fit(
        phantom.dwi, phantom.bvals, phantom.bvecs, phantom.streamlines, affine=phantom.affine
    )
    np.testing.assert_allclose(search.best_estimator_.weights_, direct.weights_, rtol=1e-6)
    np.testing.assert_allclose(direct.weights_, old_style.weights_, rtol=1e-6)


def test_fold_score_is_split_rmse(data):
    # One fold over split_directions' halves scores what split_rmse reports.
    model = life.LiFE(device="cpu").fit(data).fit_.model
    train, test = split_directions(model, random_state=0)
    scores = cross_val_score(life.LiFE(lam=0.01, device="cpu"), data, cv=[(train, test)])
    rmse = life.split_rmse(model, lam=0.01, random_state=0)
    np.testing.assert_allclose(scores, [-np.median(rmse)], rtol=1e-4)
    assert len(cross_val_score(life.LiFE(device="cpu"), data, cv=KFold(4))) == 4


def test_fit_and_score_errors(phantom, data):
    with pytest.raises(ValueError, match=r"DiffusionData alone .* got affine, mask as well"):
        life.LiFE(device="cpu").fit(data, affine=phantom.affine, mask=np.ones((14, 14, 14)))
    with pytest.raises(ValueError, match="got no bvecs, streamlines"):
        life.LiFE(device="cpu").fit(phantom.dwi, phantom.bvals, affine=phantom.affine)
    est = life.LiFE(device="cpu").fit(data[:40])
    other = life.DiffusionData(
        phantom.dwi,
        phantom.bvals,
        phantom.bvecs,
        list(phantom.streamlines)[:10],
        affine=phantom.affine,
    )
    with pytest.raises(ValueError, match="share the fit's grid and streamlines"):
        est.score(other[40:])
    with pytest.raises(ValueError, match="at least 2 diffusion-weighted volumes"):
        est.score(data[40])
