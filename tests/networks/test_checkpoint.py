"""r1dl(checkpoint=...): a run interrupted after an atom resumes from it."""

import numpy as np
import pytest

from connscale.networks import _checkpoint
from connscale.networks import _r1dl as r1dl_module


def _interrupt_after(monkeypatch, n_atoms):
    save = _checkpoint.AtomCheckpoint.save

    def interrupted(self, k, **atom):
        save(self, k, **atom)
        if k + 1 == n_atoms:
            raise KeyboardInterrupt

    monkeypatch.setattr(_checkpoint.AtomCheckpoint, "save", interrupted)
    return save


def _assert_same(got, want):
    # Same device, dtype, shapes and threads: the same arithmetic, bit for bit.
    np.testing.assert_array_equal(got.dictionary, want.dictionary)
    np.testing.assert_array_equal(got.loadings.toarray(), want.loadings.toarray())
    np.testing.assert_array_equal(got.n_iter, want.n_iter)
    np.testing.assert_array_equal(got.converged, want.converged)


@pytest.mark.parametrize("storage", ["device", "file"])
def test_resume_after_an_atom_gives_the_uninterrupted_result(
    planted, tmp_path, monkeypatch, storage
):
    S = planted[0][:, :600]
    np.save(tmp_path / "S.npy", S)
    kw = {"random_state": 5, "device": "cpu", "n_init": 2, "storage": storage, "block_size": 128}
    ref = r1dl_module.r1dl(str(tmp_path / "S.npy"), 5, 30, **kw)
    assert ref.info["resumed_atoms"] == 0
    save = _interrupt_after(monkeypatch, 3)
    with pytest.raises(KeyboardInterrupt):
        r1dl_module.r1dl(str(tmp_path / "S.npy"), 5, 30, checkpoint=tmp_path / "ck", **kw)
    monkeypatch.setattr(_checkpoint.AtomCheckpoint, "save", save)
    assert len(list((tmp_path / "ck").glob("atom_*.npz"))) == 3
    res = r1dl_module.r1dl(str(tmp_path / "S.npy"), 5, 30, checkpoint=tmp_path / "ck", **kw)
    assert res.info["resumed_atoms"] == 3
    _assert_same(res, ref)
    # A finished checkpoint: every atom is taken from it.
    again = r1dl_module.r1dl(str(tmp_path / "S.npy"), 5, 30, checkpoint=tmp_path / "ck", **kw)
    assert again.info["resumed_atoms"] == 5
    _assert_same(again, ref)


def test_checkpoint_of_other_data_or_parameters_is_not_used(planted, tmp_path):
    S = planted[0][:, :400].astype(np.float32)
    ck = tmp_path / "ck"
    r1dl_module.r1dl(S, 3, 20, random_state=0, device="cpu", checkpoint=ck)
    other = S.copy()
    other[0, 0] += 1.0
    assert (
        r1dl_module.r1dl(other, 3, 20, random_state=0, device="cpu", checkpoint=ck).info[
            "resumed_atoms"
        ]
        == 0
    )
    for change in (
        {"random_state": 1},
        {"tol": 0.02},
        {"selection": "signed"},
        {"random_state": np.random.default_rng(0)},
    ):
        kw = {"random_state": 0, "device": "cpu", **change}
        res = r1dl_module.r1dl(S, 3, 20, checkpoint=ck, **kw)
        assert res.info["resumed_atoms"] == 0, change
    # A torn atom file ends what is resumed; the atoms after it are learned again.
    ref = r1dl_module.r1dl(S, 3, 20, random_state=0, device="cpu", checkpoint=ck)
    (ck / "atom_00001.npz").write_bytes(b"PK\x03\x04 torn")
    res = r1dl_module.r1dl(S, 3, 20, random_state=0, device="cpu", checkpoint=ck)
    assert res.info["resumed_atoms"] == 1
    _assert_same(res, ref)


def test_estimator_fit_resumes(planted, tmp_path, monkeypatch):
    S = planted[0][:, :500]
    est = r1dl_module.R1DL(4, 25, random_state=2, device="cpu", dtype="float64")
    ref = est.fit(S).result_
    save = _interrupt_after(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        r1dl_module.R1DL(4, 25, random_state=2, device="cpu", dtype="float64").fit(
            S, checkpoint=tmp_path
        )
    monkeypatch.setattr(_checkpoint.AtomCheckpoint, "save", save)
    est = r1dl_module.R1DL(4, 25, random_state=2, device="cpu", dtype="float64").fit(
        S, checkpoint=tmp_path
    )
    assert est.result_.info["resumed_atoms"] == 2
    _assert_same(est.result_, ref)
