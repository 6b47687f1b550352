"""One name per idea: the former names (r1dl's ``n_atoms``, LiFE's ``n_iter``,
pairs' ``window_onsets``, ``--atoms``, ``--iters``) still work for one
release, with a FutureWarning naming the new one, and give the same result."""

import argparse

import numpy as np
import pytest

from connscale import life
from connscale.fc.pairs import pairwise_dfc
from connscale.networks import r1dl
from tests.life.conftest import random_problem


def test_r1dl_n_atoms_is_n_components():
    S = np.random.default_rng(0).standard_normal((20, 40))
    new = r1dl(S, n_components=2, sparsity=5, random_state=0, device="cpu")
    with pytest.warns(FutureWarning, match="'n_atoms' was renamed 'n_components'"):
        old = r1dl(S, n_atoms=2, sparsity=5, random_state=0, device="cpu")
    np.testing.assert_array_equal(old.dictionary, new.dictionary)
    with pytest.raises(ValueError, match="pass only 'n_components'"):
        r1dl(S, 3, 5, n_atoms=2)


def test_life_n_iter_is_max_iter():
    data, bvals, bvecs, sl = random_problem(0)
    kwargs = {"affine": np.eye(4), "device": "cpu", "tol": None}
    new = life.fit(data, bvals, bvecs, sl, max_iter=7, **kwargs)
    with pytest.warns(FutureWarning, match="'n_iter' was renamed 'max_iter'"):
        old = life.fit(data, bvals, bvecs, sl, n_iter=7, **kwargs)
    assert old.n_iter == new.n_iter == 7
    np.testing.assert_array_equal(old.weights, new.weights)
    with pytest.warns(FutureWarning, match="'n_iter' was renamed"):
        assert life.solve(new.model, n_iter=7, tol=None).n_iter == 7
    with pytest.warns(FutureWarning, match="'n_iter' was renamed"):
        est = life.LiFE(n_iter=7, tol=None, device="cpu").fit(
            data, bvals, bvecs, sl, affine=np.eye(4)
        )
    assert est.n_iter_ == 7


def test_pairs_window_onsets_is_window_starts():
    result = pairwise_dfc(np.random.default_rng(0).standard_normal((1, 30, 4)), 10, 5, device="cpu")
    np.testing.assert_array_equal(result.window_starts, [0, 5, 10, 15, 20])
    with pytest.warns(FutureWarning, match="'window_onsets' was renamed 'window_starts'"):
        np.testing.assert_array_equal(result.window_onsets, result.window_starts)


@pytest.mark.parametrize(
    "command, old, new, dest, value",
    [
        ("r1dl", "--atoms", "--n-components", "n_components", 3),
        ("life", "--iters", "--max-iter", "max_iter", 40),
    ],
)
def test_cli_former_flags(command, old, new, dest, value, tmp_path, monkeypatch):
    from connscale.cli import life as life_cli
    from connscale.cli import r1dl as r1dl_cli

    monkeypatch.chdir(tmp_path)  # the parsers check that the inputs exist
    for name in ("x.npy", "dwi.nii", "b", "v", "t.trk"):
        (tmp_path / name).touch()

    parser = argparse.ArgumentParser(prog="connscale")
    sub = parser.add_subparsers(dest="command")
    {"r1dl": r1dl_cli, "life": life_cli}[command].add_parser(sub)
    required = {
        "r1dl": ["x.npy", "--sparsity", "5", "--out", "o"],
        "life": ["dwi.nii", "--bvals", "b", "--bvecs", "v", "--tractogram", "t.trk", "--out", "o"],
    }[command]
    args = parser.parse_args([command, *required, new, str(value)])
    assert getattr(args, dest) == value and args.seed == 0
    with pytest.warns(FutureWarning, match=f"{old} was renamed {new}"):
        args = parser.parse_args([command, *required, old, str(value)])
    assert getattr(args, dest) == value
    with pytest.raises(SystemExit):
        parser.parse_args([command, *required, old, "1", new, "2"])
