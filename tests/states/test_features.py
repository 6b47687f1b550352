"""State features against hand-counted sequences."""

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from connscale.states import (
    fraction_time,
    mean_dwell_time,
    n_transitions,
    state_features,
    transition_matrix,
)

SEQUENCE = np.array([2, 2, 0, 0, 0, 2, 1, 1, 2, 2])


def test_features_of_a_known_sequence():
    assert_allclose(fraction_time(SEQUENCE, 4), [0.3, 0.2, 0.5, 0.0])
    # runs: 2 (2), 0 (3), 2 (1), 1 (2), 2 (2)
    assert_allclose(mean_dwell_time(SEQUENCE, 4), [3.0, 2.0, 5 / 3, 0.0])
    assert n_transitions(SEQUENCE) == 4
    counts = transition_matrix(SEQUENCE, 3, normalize=False)
    assert_array_equal(counts, [[2, 0, 1], [0, 1, 1], [1, 1, 2]])
    assert counts.sum() == SEQUENCE.size - 1
    assert_allclose(transition_matrix(SEQUENCE, 3), counts / counts.sum(axis=1, keepdims=True))


def test_state_features_table():
    table = state_features([SEQUENCE, np.zeros(5, dtype=int)], 3, subjects=["a", "b"])
    assert table.X.shape == (2, 3 + 3 + 1 + 9)
    assert table.feature_names[0] == "fraction_time_state-1"
    assert table.feature_names[6] == "n_transitions"
    assert_allclose(table.X[1], [1, 0, 0, 5, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0])
    assert table.rows()[0]["subject"] == "a"


@pytest.mark.parametrize(
    "labels, message",
    [
        ([0, 3], r"\[0, 3\)"),
        ([[0, 1]], "1-D"),
        ([0.5, 1.0], "integers"),
        ([], "non-empty"),
    ],
)
def test_bad_sequences(labels, message):
    with pytest.raises(ValueError, match=message):
        fraction_time(np.asarray(labels), 3)
