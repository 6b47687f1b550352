"""DFCStates on subjects simulated to switch between 3 known states."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.base import clone
from sklearn.metrics import adjusted_rand_score

from connscale import DFCStates, dynamic_correlation
from connscale.datasets import simulate_states
from connscale.states import elbow, exemplar_windows, fraction_time, mean_dwell_time

from ..conftest import DEVICES

WINDOW, STEP = 30, 2


@pytest.fixture(scope="module")
def cohort():
    data = simulate_states(10, 12, 400, random_state=0)
    windows = [dynamic_correlation(ts, WINDOW, STEP, device="cpu") for ts in data.timeseries]
    return data, windows


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("metric", ["l1", "correlation", "euclidean"])
def test_states_are_recovered(cohort, device, metric):
    data, windows = cohort
    train = windows[:7]
    states = DFCStates(3, metric=metric, n_init=3, random_state=0, device=device).fit(train)
    truth = data.window_states(WINDOW, STEP)[:7]
    pure = data.pure_windows(WINDOW, STEP)[:7]
    found, expected = np.concatenate(states.labels_), np.concatenate(truth)
    keep = np.concatenate(pure)
    assert adjusted_rand_score(expected[keep], found[keep]) >= 0.95
    # Match found states to true ones, then compare the features subject by subject.
    mapping = {j: np.bincount(expected[found == j], minlength=3).argmax() for j in range(3)}
    assert sorted(mapping.values()) == [0, 1, 2]
    assert states.n_transitions_.tolist() == [np.count_nonzero(np.diff(t)) for t in truth]
    for labels, true in zip(states.labels_, truth):
        relabelled = np.vectorize(mapping.get)(labels)
        # A window straddling a switch may go either way: each change point is
        # known to within half a window, and the fractions to that many windows
        # per change.
        half = WINDOW / (2 * STEP)
        changes = np.flatnonzero(np.diff(relabelled))
        assert np.abs(changes - np.flatnonzero(np.diff(true))).max() <= half
        assert_allclose(
            fraction_time(relabelled, 3),
            fraction_time(true, 3),
            atol=changes.size * half / true.size,
        )
        assert_allclose(mean_dwell_time(relabelled, 3), mean_dwell_time(true, 3), atol=half)
    # The states are the planted correlation matrices (up to window noise).
    means = states.state_matrices(which="means")
    for j, t in mapping.items():
        off = ~np.eye(12, dtype=bool)
        assert np.abs(means[j][off] - data.state_correlations[t][off]).mean() < 0.1
    # Held-out subjects.
    predicted = states.predict(windows[7:])
    held = np.concatenate(data.window_states(WINDOW, STEP)[7:])
    held_pure = np.concatenate(data.pure_windows(WINDOW, STEP)[7:])
    assert adjusted_rand_score(held[held_pure], np.concatenate(predicted)[held_pure]) >= 0.95
    assert_array_equal(states.predict(windows[0]), states.labels_[0])


def test_fitted_attributes_and_features(cohort):
    _, windows = cohort
    arrays = [np.stack(list(w)) for w in windows[:4]]
    states = DFCStates(
        3, metric="euclidean", exemplars=False, n_init=2, random_state=1, device="cpu"
    ).fit(arrays)
    assert states.cluster_centers_.shape == (3, 66)
    assert_allclose(states.cluster_centers_, states.state_means_, atol=1e-6)
    assert states.fraction_time_.shape == (4, 3)
    assert_allclose(states.fraction_time_.sum(axis=1), 1.0)
    for labels, matrix in zip(states.labels_, states.transition_matrix_):
        left = np.bincount(labels[:-1], minlength=3) > 0
        assert_allclose(matrix.sum(axis=1), left.astype(float))
    table = states.state_features()
    assert table.X.shape == (4, 3 + 3 + 1 + 9)
    inertia = sum(
        ((a - states.cluster_centers_[lab]) ** 2).sum() for a, lab in zip(arrays, states.labels_)
    )
    assert states.inertia_ == pytest.approx(inertia, rel=1e-6)
    assert clone(states).get_params()["n_states"] == 3
    again = DFCStates(
        3, metric="euclidean", exemplars=False, n_init=2, random_state=1, device="cpu"
    ).fit(arrays)
    assert_array_equal(np.concatenate(again.labels_), np.concatenate(states.labels_))


def test_fisher_z_and_exemplars(cohort):
    _, windows = cohort
    variance = np.stack(list(windows[0])).var(axis=1)
    peaks = exemplar_windows(np.stack(list(windows[0])))
    assert all(variance[p] > variance[p - 1] and variance[p] >= variance[p + 1] for p in peaks)
    arrays = [np.stack(list(w)) for w in windows[:4]]
    params = {"n_init": 2, "random_state": 0, "device": "cpu"}
    z = DFCStates(3, fisher_z=True, **params).fit(arrays)
    ref = DFCStates(3, **params).fit([np.arctanh(a) for a in arrays])
    assert_allclose(z.cluster_centers_, ref.cluster_centers_, atol=1e-6)
    assert_array_equal(np.concatenate(z.labels_), np.concatenate(ref.labels_))


@pytest.mark.parametrize("exemplars", [True, False])
def test_verbose_counts_every_run_and_changes_nothing(cohort, monkeypatch, capsys, exemplars):
    from tqdm.auto import tqdm

    from connscale.states import estimator

    made = []

    class Kept(tqdm):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(estimator, "tqdm", Kept)
    arrays = [np.stack(list(w)) for w in cohort[1][:4]]
    params = {"exemplars": exemplars, "n_init": 3, "random_state": 0, "device": "cpu"}
    loud = DFCStates(3, verbose=1, **params).fit(arrays)
    (bar,) = made
    assert bar.n == bar.total == 3 + exemplars
    assert "DFC states" in capsys.readouterr().err
    quiet = DFCStates(3, **params).fit(arrays)
    assert capsys.readouterr().err == ""
    assert_array_equal(loud.cluster_centers_, quiet.cluster_centers_)
    assert_array_equal(np.concatenate(loud.labels_), np.concatenate(quiet.labels_))


def test_elbow_finds_three_states(cohort):
    _, windows = cohort
    curve = elbow(windows, range(2, 8), metric="euclidean", n_init=2, random_state=0, device="cpu")
    assert curve["best"] == 3
    assert curve["ratio"].shape == (6,)


@pytest.mark.parametrize(
    "params, data, message",
    [
        (
            {"metric": "cosine"},
            None,
            "The 'metric' parameter of DFCStates.fit must be a str among "
            r"\{'correlation', 'euclidean', 'l1'\}. Got 'cosine'",
        ),
        (
            {"n_states": 0},
            None,
            r"The 'n_states' parameter of DFCStates.fit must be an int in the "
            r"range \[1, inf\). Got 0 instead.",
        ),
        (
            {"tol": -1e-3},
            None,
            r"'tol' parameter of DFCStates.fit must be a float in the range "
            r"\[0, inf\)",
        ),
        ({"exemplars": "yes"}, None, "'exemplars' parameter of DFCStates.fit must be a bool"),
        ({"fisher_z": 1}, None, "'fisher_z' parameter of DFCStates.fit must be a bool"),
        ({"n_init": 0}, None, r"'n_init' parameter of DFCStates.fit must be an int"),
        ({"verbose": -1}, None, r"'verbose' parameter of DFCStates.fit must be an int"),
        ({}, [np.zeros((3, 4)), np.zeros((3, 5))], "same number of edges"),
        ({}, [np.full((3, 4), np.nan)], "NaN or infinite"),
        ({}, [np.zeros(4)], r"shape \(n_windows, n_edges\)"),
        ({"n_states": 10}, [np.random.default_rng(0).random((4, 3))], "at least as many windows"),
        ({}, [np.ones((6, 4)) * (1 + 1j)], "real numbers; got complex values"),
        ({}, [np.zeros((6, 0))], "at least one edge"),
    ],
)
def test_bad_input(params, data, message):
    data = [np.random.default_rng(0).random((6, 4))] if data is None else data
    with pytest.raises(ValueError, match=message):
        DFCStates(**params, device="cpu").fit(data)


def test_predict_before_fit():
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        DFCStates().predict(np.zeros((3, 3)))


def test_sparse_windows_refused():
    windows = sp.csr_array(np.random.default_rng(0).random((6, 4)))
    with pytest.raises(TypeError, match="Subject 0: expected dense windows .* got a scipy.sparse"):
        DFCStates(2, device="cpu").fit(windows)


def test_read_only_windows_fit_without_warning(cohort):
    _, dfc = cohort
    windows = np.stack(list(dfc[0]))  # one subject: used as given, not concatenated
    windows.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        states = DFCStates(3, metric="euclidean", n_init=2, random_state=0, device="cpu").fit(
            windows
        )
    writable = DFCStates(3, metric="euclidean", n_init=2, random_state=0, device="cpu").fit(
        windows.copy()
    )
    assert_allclose(states.cluster_centers_, writable.cluster_centers_)


def test_other_public_entries_declare_their_constraints():
    from connscale.states import elbow, fraction_time, state_features

    windows = [np.random.default_rng(0).random((6, 4))]
    states = DFCStates(2, exemplars=False, device="cpu", random_state=0).fit(windows)
    with pytest.raises(
        ValueError,
        match="The 'which' parameter of DFCStates.state_matrices "
        "must be a str among {'centers', 'means'}",
    ):
        states.state_matrices(which="medians")
    with pytest.raises(ValueError, match="The 'metric' parameter of elbow must be a str"):
        elbow(windows, metric="cosine")
    for call in (lambda: fraction_time([0, 1], 0), lambda: state_features([[0, 1]], 0)):
        with pytest.raises(
            ValueError,
            match=r"The 'n_states' parameter of \w+ must be an int "
            r"in the range \[1, inf\). Got 0 instead.",
        ):
            call()


def test_predict_compares_in_the_space_fitted_in():
    """With fisher_z the states live in Fisher z: new windows are compared there
    (once), as states fitted on arctanh(windows) compare arctanh(new windows).
    Strong correlations, where z and r disagree on the nearest state."""
    rng = np.random.default_rng(3)
    arrays = [np.tanh(rng.normal(0, 1.5, (60, 20))) for _ in range(4)]
    new = [np.tanh(rng.normal(0, 1.5, (60, 20))) for _ in range(2)]
    params = {"n_init": 2, "random_state": 0, "device": "cpu", "exemplars": False}
    z = DFCStates(3, fisher_z=True, **params).fit(arrays)
    ref = DFCStates(3, **params).fit([np.arctanh(a) for a in arrays])
    for ours, theirs in zip(z.predict(new), ref.predict([np.arctanh(a) for a in new])):
        assert_array_equal(ours, theirs)
