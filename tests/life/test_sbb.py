"""SBB-NNLS: scipy.optimize.nnls's optimum at λ = 0, KKT at λ > 0, the
reference's step order and stop rules."""

import numpy as np
import pytest
import torch
from numpy.testing import assert_allclose
from scipy.optimize import nnls

from connscale.life.sbb import DenseOperator, sbb_nnls


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("shape", [(40, 15), (60, 30), (25, 25)])
def test_lambda_zero_reaches_scipy_nnls(seed, shape):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=shape)
    b = rng.normal(size=shape[0]) + A @ np.maximum(rng.normal(size=shape[1]), 0)
    x_ref, _ = nnls(A, b)
    res = sbb_nnls(
        DenseOperator(A), torch.as_tensor(b), max_iter=5000, tol_grad=1e-10, tol_obj=None
    )
    assert res.stop_reason == "gradient"
    f_ref = 0.5 * np.sum((A @ x_ref - b) ** 2)
    assert res.objective[-1] <= f_ref * (1 + 1e-10) + 1e-10
    assert_allclose(res.x.numpy(), x_ref, atol=1e-7)


@pytest.mark.parametrize("seed", range(3))
def test_lambda_positive_satisfies_kkt(seed):
    rng = np.random.default_rng(seed)
    A = np.abs(rng.normal(size=(50, 20)))
    b = A @ np.abs(rng.normal(size=20)) + 0.1 * rng.normal(size=50)
    lam = 0.5
    res = sbb_nnls(
        DenseOperator(A), torch.as_tensor(b), lam=lam, max_iter=20000, tol_grad=1e-9, tol_obj=None
    )
    x = res.x.numpy()
    g = A.T @ (A @ x - b) + lam
    assert np.all(x >= 0)
    assert np.all(np.abs(g[x > 0]) < 1e-7)
    assert np.all(g[x == 0] > -1e-7)
    # The L1 term shrinks the sum of the weights.
    x0, _ = nnls(A, b)
    assert x.sum() < x0.sum()
    assert res.objective[-1] == pytest.approx(
        0.5 * np.sum((A @ x - b) ** 2) + lam * x.sum(), rel=1e-12
    )


def test_first_update_is_the_short_step_and_iterations_count():
    rng = np.random.default_rng(7)
    A = rng.normal(size=(30, 10))
    b = rng.normal(size=30)
    # max_iter = 2 performs exactly one update (the reference's maxit semantics).
    res = sbb_nnls(DenseOperator(A), torch.as_tensor(b), max_iter=2, tol_grad=None, tol_obj=None)
    assert res.n_updates == 1 and res.stop_reason == "max_iter"
    g = A.T @ (-b)
    B = g > 0  # x = 0: binding where the gradient is positive
    gh = np.where(B, 0.0, g)
    u = A @ gh
    v = np.where(B, 0.0, A.T @ u)
    alpha = (u @ u) / (v @ v)  # short (BB2-type) step at k = 1
    assert_allclose(res.x.numpy(), np.maximum(0, -alpha * g), rtol=1e-12)
    res = sbb_nnls(DenseOperator(A), torch.as_tensor(b), max_iter=50, tol_grad=None, tol_obj=None)
    assert res.n_updates == 49 and len(res.objective) == 50


def test_warm_start_at_optimum_stops_on_gradient():
    rng = np.random.default_rng(8)
    A = rng.normal(size=(30, 10))
    b = rng.normal(size=30)
    x_ref, _ = nnls(A, b)
    res = sbb_nnls(DenseOperator(A), torch.as_tensor(b), x0=x_ref, tol_grad=1e-6)
    assert res.stop_reason == "gradient" and res.n_updates == 0


def test_objective_stop_and_bad_arguments():
    rng = np.random.default_rng(9)
    A = rng.normal(size=(30, 10))
    b = rng.normal(size=30)
    res = sbb_nnls(
        DenseOperator(A), torch.as_tensor(b), tol_grad=None, tol_obj=1e-3, max_iter=10000
    )
    assert res.stop_reason == "objective"
    d = res.data_term
    assert abs(d[-1] - d[-2]) < 1e-3
    with pytest.raises(
        ValueError,
        match=r"The 'lam' parameter of sbb_nnls must be a float in the range \[0, inf\)",
    ):
        sbb_nnls(DenseOperator(A), torch.as_tensor(b), lam=-1.0)
    with pytest.raises(
        ValueError,
        match=r"The 'max_iter' parameter of sbb_nnls must be an int in the range \[1, inf\)",
    ):
        sbb_nnls(DenseOperator(A), torch.as_tensor(b), max_iter=0)
    with pytest.raises(ValueError, match="'x0' must have shape"):
        sbb_nnls(DenseOperator(A), torch.as_tensor(b), x0=np.zeros(3))


def _reference_sbb(A, b, lam, maxit, tolg=1e-5, tolo=1e-5):
    """A literal NumPy transcription of bbnnls(_gpu).m's loop (LIFE.md §2)."""
    x = np.zeros(A.shape[1])
    r = A @ x - b
    g = A.T @ r + lam
    g_old = g.copy()
    obj = {}
    k = 0
    while True:
        k += 1
        P = (x != 0) | (g < 0)
        if (np.abs(g[P]).max() if P.any() else 0.0) < tolg:
            break
        if k > 2 and abs(obj[k - 1] - obj[k - 2]) < tolo:
            break
        if k >= maxit:
            break
        B = (x == 0) & (g > 0)
        gh = g_old.copy()
        gh[B] = 0
        u = A @ gh
        if k % 2 == 0:
            alpha = (gh @ gh) / (u @ u)
        else:
            v = A.T @ u
            v[B] = 0
            alpha = (u @ u) / (v @ v)
        g_old = g
        x = np.maximum(0, x - alpha * g)
        r = A @ x - b
        obj[k] = 0.5 * r @ r
        g = A.T @ r + lam
    return x, [obj[j] for j in sorted(obj)], k


@pytest.mark.parametrize("lam", [0.0, 0.3])
@pytest.mark.parametrize("seed", [0, 1])
def test_iterates_match_a_literal_transcription_of_the_reference(lam, seed):
    rng = np.random.default_rng(seed)
    A = np.abs(rng.normal(size=(40, 25)))
    b = A @ np.maximum(rng.normal(size=25), 0) + 0.2 * rng.normal(size=40)
    x_ref, obj_ref, k_ref = _reference_sbb(A, b, lam, maxit=300)
    res = sbb_nnls(DenseOperator(A), torch.as_tensor(b), lam=lam, max_iter=300)
    assert res.n_iter == k_ref
    assert_allclose(res.data_term[1:], obj_ref, rtol=1e-9)
    assert_allclose(res.x.numpy(), x_ref, rtol=1e-8, atol=1e-12)
