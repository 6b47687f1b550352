"""The phantom with ground truth: ReAl-LiFE's λ keeps true streamlines and
drops false ones; evaluation (cross-validation, evidence, sweep)."""

from itertools import pairwise

import numpy as np
import pytest

from connscale import life
from connscale.datasets.phantom import simulate_life_phantom
from connscale.life import lambda_sweep, split_rmse
from connscale.life.encode import build_model


@pytest.fixture(scope="module")
def model(phantom):
    return build_model(
        phantom.dwi,
        phantom.bvals,
        phantom.bvecs,
        phantom.streamlines,
        affine=phantom.affine,
        device="cpu",
    )


def test_phantom_is_reproducible_and_shaped():
    a = simulate_life_phantom(n_true=20, n_false=10, shape=(8, 8, 8), random_state=3)
    b = simulate_life_phantom(n_true=20, n_false=10, shape=(8, 8, 8), random_state=3)
    assert a.dwi.shape == (8, 8, 8, 65) and a.dwi.dtype == np.float32
    np.testing.assert_array_equal(a.dwi, b.dwi)
    assert not np.array_equal(a.dwi, a.dwi_repeat)
    assert len(a.streamlines) == 30 and a.is_true.sum() == 20
    assert np.all(a.weights_true[~a.is_true] == 0) and np.all(a.weights_true[a.is_true] >= 0.5)
    with pytest.raises(ValueError, match="n_true"):
        simulate_life_phantom(n_true=0)


def test_lambda_keeps_true_drops_false(phantom, model):
    lam_max = life.lambda_max(model)
    lam0 = life.solve(model)
    real = life.solve(model, lam=0.05 * lam_max, x0=lam0.weights_kept)
    t, f = phantom.is_true, ~phantom.is_true
    kept0, kept = lam0.weights > 0, real.weights > 0
    assert kept0[t].mean() > 0.85 and kept0[f].mean() > 0.3  # LiFE alone keeps many false ones
    assert kept[t].mean() > 0.8 and kept[f].mean() < 0.15
    # The weights track the truth (zeros for the false fibres included).
    from scipy.stats import spearmanr

    assert spearmanr(real.weights, phantom.weights_true)[0] > 0.6
    assert life.solve(model, lam=1.01 * lam_max).weights.max() == 0


def test_sweep_nonzero_count_falls(phantom, model):
    lam_max = life.lambda_max(model)
    rows = lambda_sweep(
        model, [0, 0.02 * lam_max, 0.1 * lam_max, 0.3 * lam_max], data_repeat=phantom.dwi_repeat
    )
    nnz = [r["n_nonzero"] for r in rows]
    sums = [r["weight_sum"] for r in rows]
    assert all(a > b for a, b in pairwise(nnz))
    assert all(a > b for a, b in pairwise(sums))
    assert all(0 < r["cv_rmse_median"] < 100 for r in rows)
    rows2 = lambda_sweep(model, [0, 0.1 * lam_max], random_state=0)  # gradient-direction split
    assert rows2[1]["n_nonzero"] < rows2[0]["n_nonzero"]
    with pytest.raises(
        ValueError,
        match=r"The 'lams' parameter of lambda_sweep must be a "
        r"non-empty sequence, each a float in the range "
        r"\[0, inf\). Got \[-1.0\]",
    ):
        lambda_sweep(model, [-1.0])


def test_solver_kernels_agree(model):
    ref = life.solve(model, max_iter=60, tol=None)
    for options in ({"entry_method": "spmv", "spmm_method": "torch"}, {"pair_method": "gather"}):
        other = life.solve(model, max_iter=60, tol=None, operator_options=options)
        np.testing.assert_allclose(other.objective, ref.objective, rtol=1e-4)
        # float32 rounding differs between kernels and SBB's steps amplify it a little
        assert np.corrcoef(other.weights, ref.weights)[0, 1] > 0.99


def test_cross_validation_and_prediction(phantom, model):
    fit = life.solve(model)
    cv = fit.cross_validate(phantom.dwi_repeat)
    # The model predicts the repeat better than the scan itself does (Rrmse < 1).
    assert np.median(cv["rrmse"]) < 0.85
    assert np.all(fit.voxel_rmse > 0)
    split = split_rmse(model, random_state=0)
    assert split.shape == (model.n_voxels,) and np.median(split) < 1.5 * np.median(cv["rmse_data"])
    pred = fit.predict()
    assert pred.shape == (model.n_voxels, model.n_directions)
    # Prediction + residual = measured signal.
    v = model.voxels
    measured = phantom.dwi[v[:, 0], v[:, 1], v[:, 2]][:, model.volume_index]
    resid_rmse = np.sqrt(((measured - pred) ** 2).mean(axis=1))
    np.testing.assert_allclose(resid_rmse, fit.voxel_rmse, rtol=1e-4)
    other = fit.predict(np.full(5, 1000.0), np.eye(3)[[0, 1, 2, 0, 1]])
    assert other.shape == (model.n_voxels, 5)
    vol = fit.rmse_volume()
    assert vol.shape == model.shape and np.isfinite(vol).sum() == model.n_voxels
    with pytest.raises(ValueError, match="same grid"):
        fit.cross_validate(phantom.dwi_repeat[:5])


def test_strength_of_evidence_true_bundle_beats_false(phantom, model):
    fit = life.solve(model)
    true_idx = np.flatnonzero(phantom.is_true)[:50]
    false_kept = np.flatnonzero(~phantom.is_true & (fit.weights > 0))
    s_true = fit.strength_of_evidence(true_idx, n_boot=500, random_state=0)
    s_false = fit.strength_of_evidence(false_kept[:5], n_boot=500, random_state=0)
    assert s_true["strength"] > 0
    assert s_true["strength"] > s_false["strength"]
    assert s_true["rmse_lesion"].mean() > s_true["rmse_nolesion"].mean()
    with pytest.raises(ValueError, match="indices must lie"):
        fit.strength_of_evidence([10**6])


def test_fit_api_and_estimator(phantom):
    kwargs = {"affine": phantom.affine, "device": "cpu"}
    fit = life.fit(
        phantom.dwi, phantom.bvals, phantom.bvecs, list(phantom.streamlines), lam=0.01, **kwargs
    )
    est = life.LiFE(lam=0.01, device="cpu").fit(
        phantom.dwi, phantom.bvals, phantom.bvecs, phantom.streamlines, affine=phantom.affine
    )
    np.testing.assert_allclose(est.weights_, fit.weights, rtol=1e-5, atol=1e-9)
    assert est.n_iter_ == fit.n_iter and est.score() < 0 and est.score(phantom.dwi_repeat) < 0
    assert est.get_params()["lam"] == 0.01
    with pytest.raises(ValueError, match="not fitted"):
        life.LiFE().predict()
    with pytest.raises(
        ValueError,
        match=r"The 'max_iter' parameter of LiFE.fit must be an int in the range \[1, inf\)",
    ):
        life.LiFE(max_iter=0).fit(
            phantom.dwi, phantom.bvals, phantom.bvecs, phantom.streamlines, affine=phantom.affine
        )
    # Warm start from the solution converges at once; fixed iterations run them all.
    warm = life.fit(
        phantom.dwi,
        phantom.bvals,
        phantom.bvecs,
        phantom.streamlines,
        lam=0.01,
        x0=fit.weights,
        **kwargs,
    )
    assert warm.n_iter < fit.n_iter
    fixed = life.fit(
        phantom.dwi,
        phantom.bvals,
        phantom.bvecs,
        phantom.streamlines,
        max_iter=30,
        tol=None,
        **kwargs,
    )
    assert fixed.n_iter == 30 and len(fixed.objective) == 30


def test_fit_cross_validates_with_random_state_and_sweeps(phantom, model):
    args = (phantom.dwi, phantom.bvals, phantom.bvecs, phantom.streamlines)
    kwargs = {"affine": phantom.affine, "device": "cpu", "max_iter": 60, "tol": None}
    # random_state draws the gradient-direction split of the cross-validation.
    fit = life.fit(*args, cross_validate=True, random_state=0, **kwargs)
    np.testing.assert_allclose(
        fit.cv_rmse, split_rmse(model, max_iter=60, tol=None, random_state=0), rtol=1e-5
    )
    other = life.fit(*args, cross_validate=True, random_state=1, **kwargs)
    assert not np.allclose(other.cv_rmse, fit.cv_rmse)
    assert life.fit(*args, **kwargs).cv_rmse is None
    assert {"load", "build", "solve", "cross_validation"} <= set(fit.timings)
    repeat = life.fit(*args, dwi_repeat=phantom.dwi_repeat, **kwargs)
    np.testing.assert_allclose(
        repeat.cv_rmse, repeat.cross_validate(phantom.dwi_repeat)["rmse"], rtol=1e-6
    )
    lam_max = life.lambda_max(model)
    lams = [0.0, 0.05 * lam_max, 0.5 * lam_max]
    swept = life.fit(*args, lambdas=lams, dwi_repeat=phantom.dwi_repeat, **kwargs)
    rows = lambda_sweep(model, lams, data_repeat=phantom.dwi_repeat, max_iter=60, tol=None)
    assert [r["lam"] for r in swept.lambda_sweep] == lams
    best = min(rows, key=lambda r: r["cv_rmse_median"])
    assert swept.lam == best["lam"]
    np.testing.assert_allclose(swept.weights, best["fit"].weights, rtol=1e-5, atol=1e-9)
    with pytest.raises(ValueError, match="'lambdas' replaces 'lam'"):
        life.fit(*args, lam=0.1, lambdas=lams, **kwargs)


def test_fit_checks_lambdas_before_loading_anything(tmp_path):
    missing = tmp_path / "missing"
    with pytest.raises(
        ValueError,
        match=r"The 'lambdas' parameter of fit must be a non-empty "
        r"sequence, each a float in the range \[0, inf\) or "
        r"None. Got \[0.1, -1.0\]",
    ):
        life.fit(missing, missing, missing, missing, lambdas=[0.1, -1.0])
