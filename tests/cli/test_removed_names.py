"""One name per idea: the former names that 0.1 deprecated (r1dl's ``n_atoms``,
LiFE's ``n_iter``, correlation's ``allow_tf32``, pairs' ``window_onsets``,
``--atoms``, ``--iters``, ``--allow-tf32``) are gone in 0.2: passing one is an
error, and the new names give what the old ones gave."""

import numpy as np
import pytest

import connscale
from connscale import life
from connscale.cli.main import main
from connscale.fc.pairs import pairwise_dfc
from connscale.networks import r1dl
from tests.life.conftest import random_problem


def test_r1dl_n_atoms_is_gone():
    S = np.random.default_rng(0).standard_normal((20, 40))
    with pytest.raises(TypeError, match="n_atoms"):
        r1dl(S, n_atoms=2, sparsity=5, random_state=0, device="cpu")


def test_life_n_iter_is_gone():
    data, bvals, bvecs, sl = random_problem(0)
    kwargs = {"affine": np.eye(4), "device": "cpu", "tol": None}
    with pytest.raises(TypeError, match="n_iter"):
        life.fit(data, bvals, bvecs, sl, n_iter=7, **kwargs)
    new = life.fit(data, bvals, bvecs, sl, max_iter=7, **kwargs)
    assert new.n_iter == 7
    with pytest.raises(TypeError, match="n_iter"):
        life.solve(new.model, n_iter=7, tol=None)
    with pytest.raises(TypeError, match="n_iter"):
        life.LiFE(n_iter=7, tol=None, device="cpu")
    assert "n_iter" not in life.LiFE().get_params()


@pytest.mark.parametrize("function", ["correlation", "dynamic_correlation"])
def test_allow_tf32_is_gone(function):
    x = np.random.default_rng(0).standard_normal((30, 5))
    args = (x,) if function == "correlation" else (x, 10)
    with pytest.raises(TypeError, match="allow_tf32"):
        getattr(connscale, function)(*args, device="cpu", allow_tf32=True)


def test_pairs_window_onsets_is_gone():
    result = pairwise_dfc(np.random.default_rng(0).standard_normal((1, 30, 4)), 10, 5, device="cpu")
    np.testing.assert_array_equal(result.window_starts, [0, 5, 10, 15, 20])
    with pytest.raises(AttributeError, match="window_onsets"):
        result.window_onsets  # noqa: B018 - the attribute access is the check


@pytest.mark.parametrize(
    "command, old",
    [("r1dl", ["--atoms", "3"]), ("life", ["--iters", "40"]), ("fc", ["--allow-tf32"])],
)
def test_cli_former_flags_are_refused(command, old, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the parsers check that the inputs exist
    for name in ("x.npy", "dwi.nii", "b", "v", "t.trk"):
        (tmp_path / name).touch()
    required = {
        "r1dl": ["x.npy", "--n-components", "3", "--sparsity", "5", "--out", "o"],
        "life": ["dwi.nii", "--bvals", "b", "--bvecs", "v", "--tractogram", "t.trk", "--out", "o"],
        "fc": ["x.npy", "--out", "o"],
    }[command]
    assert main([command, *required, *old]) == 2
    error = capsys.readouterr().err
    assert f"connscale {command}: error: unrecognized arguments: {' '.join(old)}" in error
    assert not (tmp_path / "o").exists()  # refused before any step
