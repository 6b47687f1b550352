"""solve(checkpoint=...): the SBB state is saved and an interrupted solve resumes."""

import numpy as np
import pytest
import torch

from connscale.life import _checkpoint, api, sbb
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
        dtype="float64",
    )


def _interrupt_at(monkeypatch, k_stop):
    save = _checkpoint.SolverCheckpoint.save

    def interrupted(self, state):
        save(self, state)
        if state["k"] >= k_stop and not state["stop_reason"]:
            raise KeyboardInterrupt

    monkeypatch.setattr(_checkpoint.SolverCheckpoint, "save", interrupted)
    return save


def _assert_same(got, want):
    # The resumed solve continues from the saved iterates: the same arithmetic.
    np.testing.assert_array_equal(got.weights, want.weights)
    assert got.objective == want.objective and got.data_term == want.data_term
    assert (got.n_iter, got.stop_reason) == (want.n_iter, want.stop_reason)


@pytest.mark.parametrize(("lam", "tol"), [(0.0, None), (0.02, 1e-6)])
def test_interrupted_solve_resumes_with_the_same_iterates(model, tmp_path, monkeypatch, lam, tol):
    ref = api.solve(model, lam=lam, max_iter=80, tol=tol)
    save = _interrupt_at(monkeypatch, 15)
    with pytest.raises(KeyboardInterrupt):
        api.solve(model, lam=lam, max_iter=80, tol=tol, checkpoint=tmp_path, checkpoint_every=5)
    monkeypatch.setattr(_checkpoint.SolverCheckpoint, "save", save)
    res = api.solve(model, lam=lam, max_iter=80, tol=tol, checkpoint=tmp_path, checkpoint_every=5)
    assert res.resumed_from == 15
    _assert_same(res, ref)
    # Finished: the saved final state is returned without an update.
    updates = []
    done = api.solve(
        model,
        lam=lam,
        max_iter=80,
        tol=tol,
        checkpoint=tmp_path,
        checkpoint_every=5,
        callback=lambda k, x, objective: updates.append(k),
    )
    assert not updates and done.resumed_from == ref.n_iter
    _assert_same(done, ref)


def test_other_problems_have_their_own_state(model, tmp_path):
    a = api.solve(model, lam=0.0, max_iter=30, tol=None, checkpoint=tmp_path)
    b = api.solve(model, lam=0.01, max_iter=30, tol=None, checkpoint=tmp_path)
    c = api.solve(model, lam=0.0, max_iter=40, tol=None, checkpoint=tmp_path)
    d = api.solve(model, lam=0.0, max_iter=30, tol=None, x0=a.weights_kept, checkpoint=tmp_path)
    assert [f.resumed_from for f in (a, b, c, d)] == [0, 0, 0, 0]
    assert len(list(tmp_path.glob("sbb_*.npz"))) == 4
    assert (
        api.solve(model, lam=0.0, max_iter=30, tol=None, checkpoint=tmp_path).resumed_from
        == a.n_iter
    )


def test_unreadable_state_is_solved_again(model, tmp_path):
    ref = api.solve(model, lam=0.0, max_iter=20, tol=None, checkpoint=tmp_path)
    (file,) = tmp_path.glob("sbb_*.npz")
    file.write_bytes(b"PK\x03\x04 torn")
    res = api.solve(model, lam=0.0, max_iter=20, tol=None, checkpoint=tmp_path)
    assert res.resumed_from == 0
    _assert_same(res, ref)
    with pytest.raises(ValueError, match="checkpoint_every"):
        api.solve(model, checkpoint=tmp_path, checkpoint_every=0)


def test_sbb_state_round_trip():
    rng = np.random.default_rng(0)
    op = sbb.DenseOperator(rng.normal(size=(30, 12)))
    b = torch.as_tensor(rng.normal(size=30))
    ref = sbb.sbb_nnls(op, b, max_iter=40, tol_grad=None, tol_obj=None)
    states = []
    sbb.sbb_nnls(
        op,
        b,
        max_iter=40,
        tol_grad=None,
        tol_obj=None,
        state_every=7,
        save_state=lambda s: states.append(
            {
                **s,
                "x": s["x"].clone(),
                "g": s["g"].clone(),
                "g_old": s["g_old"].clone(),
                "objective": list(s["objective"]),
                "data_term": list(s["data_term"]),
            }
        ),
    )
    assert [s["k"] for s in states] == [7, 14, 21, 28, 35, 40]
    assert states[-1]["stop_reason"] == "max_iter"
    res = sbb.sbb_nnls(op, b, max_iter=40, tol_grad=None, tol_obj=None, state=states[2])
    assert torch.equal(res.x, ref.x) and res.objective == ref.objective
    assert (res.n_iter, res.n_updates, res.stop_reason) == (ref.n_iter, ref.n_updates, "max_iter")
