"""Progress bars of the voxel maps (verbose=1): every row of R, every pass
and every power iteration is counted once."""

import numpy as np
import pytest
import torch
import tqdm.auto as tqdm_auto
from tqdm.auto import tqdm

import connscale
from connscale.fc import _tiles
from connscale.maps import degree, ecm

from ._reference import simulated


@pytest.fixture
def bars(monkeypatch):
    """The tqdm bars the maps make, kept for inspection after they close."""
    made = []

    class Kept(tqdm):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    # The maps import tqdm where they draw a bar (the numerical core imports none).
    monkeypatch.setattr(tqdm_auto, "tqdm", Kept)
    return made


def test_degree_counts_every_row_once(bars, capsys):
    x = simulated(seed=6, n_series=60)
    maps, info = degree.compute_degree(x, [0.1, 0.3], device="cpu", memory_limit=40_000, verbose=1)
    assert info["block_rows"] < 60  # several blocks
    (bar,) = bars
    assert bar.total == 60 and bar.n == 60
    assert "degree centrality" in capsys.readouterr().err
    np.testing.assert_array_equal(maps, connscale.degree_centrality(x, [0.1, 0.3], device="cpu"))


def test_sparsity_counts_the_histogram_collect_and_degree_passes(bars):
    x = simulated(seed=6, n_series=60)
    connscale.degree_centrality(x, sparsity=[0.1, 0.5], device="cpu", verbose=1)
    (bar,) = bars
    # histogram + one collect pass per distinct bin (two here) + degree
    assert bar.total == bar.n == 4 * 60


def test_verbose_0_shows_nothing(capsys):
    x = simulated(seed=6, n_series=30)
    connscale.degree_centrality(x, 0.2, device="cpu")
    connscale.eigenvector_centrality(x, device="cpu")
    assert capsys.readouterr().err == ""


def test_walker_counts_the_rows_of_every_block():
    u = torch.randn(50, 8, dtype=torch.float64)
    seen = []
    bar = tqdm(total=50, disable=True)
    bar.update = seen.append  # the rows each block reports
    _tiles.walk_row_blocks(u, 16, lambda tile, r0, r1: None, progress=bar)
    assert seen == [16, 16, 16, 2]


def test_ecm_counts_its_iterations(bars):
    x = simulated(seed=7, n_series=40)
    centrality = connscale.eigenvector_centrality(x, device="cpu", dtype="float64", verbose=1)
    (bar,) = bars
    u, _ = ecm.normalized_series(x, device="cpu", dtype="float64")
    vector, n_iter, _ = ecm.power_iteration(u, 1e-6, 1000)
    assert 1 < bar.n == n_iter < bar.total == 1000
    np.testing.assert_allclose(centrality, vector.numpy(), atol=1e-12)
