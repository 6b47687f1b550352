"""simulate_cohort: planted edges differ between groups, nothing else does."""

import numpy as np
import pytest

from connscale.datasets import simulate_cohort


def test_planted_difference_matches_effect_size():
    cohort = simulate_cohort(
        60, 12, 400, effect_edges=3, effect_size=0.5, n_networks=12, random_state=0
    )
    X = cohort.features()
    difference = X[cohort.y == 1].mean(axis=0) - X[cohort.y == 0].mean(axis=0)
    planted = cohort.effect_features
    np.testing.assert_allclose(difference[planted], 0.5, atol=0.08)
    others = np.delete(difference, planted)
    assert np.abs(others).max() < 0.1
    assert len(cohort.timeseries) == 60 and cohort.timeseries[0].shape == (400, 12)
    assert cohort.y.sum() == 30 and cohort.groups.count("patient") == 30


def test_explicit_edges_negative_effect_and_reproducible():
    a = simulate_cohort(
        20, 6, 300, effect_edges=[(4, 1)], effect_size=-0.6, n_networks=6, random_state=3
    )
    b = simulate_cohort(
        20, 6, 300, effect_edges=[(4, 1)], effect_size=-0.6, n_networks=6, random_state=3
    )
    assert a.effect_edges.tolist() == [[1, 4]]
    np.testing.assert_array_equal(a.timeseries[5], b.timeseries[5])
    X = a.features()
    k = a.effect_features[0]
    assert X[a.y == 1, k].mean() - X[a.y == 0, k].mean() < -0.45


def test_write(tmp_path):
    cohort = simulate_cohort(6, 3, 20, effect_edges=1, random_state=0)
    written = cohort.write(tmp_path)
    lines = written["participants"].read_text().splitlines()
    assert lines[0] == "participant_id\tgroup" and lines[1].startswith("sub-01\t")
    assert len(written["timeseries"]) == 6
    data = np.loadtxt(written["timeseries"][0], skiprows=1, delimiter="\t")
    np.testing.assert_allclose(data, cohort.timeseries[0], rtol=1e-6, atol=1e-6)


def test_bad_inputs():
    with pytest.raises(ValueError, match="'effect_size' must lie in"):
        simulate_cohort(10, 4, 20, effect_size=1.0)
    with pytest.raises(ValueError, match="'n_subjects' must be >= 4"):
        simulate_cohort(3, 4, 20)
    with pytest.raises(ValueError, match="region pairs"):
        simulate_cohort(10, 4, 20, effect_edges=[(1, 1)])
    with pytest.raises(ValueError, match="region pairs"):
        simulate_cohort(10, 4, 20, effect_edges=[(0, 4)])
    with pytest.raises(ValueError, match="'effect_edges' must be <= 6"):
        simulate_cohort(10, 4, 20, effect_edges=7)
