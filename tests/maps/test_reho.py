"""ReHo against a plain numpy Kendall's W with AFNI 3dReHo's neighbourhoods and tie rule."""

import importlib
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import torch
from scipy import sparse
from scipy.stats import rankdata

import connscale
from connscale._compute import MemoryLimitError
from connscale.maps import grayordinate_neighbours, reho_series, voxel_neighbours
from connscale.maps.neighbours import FSLR32K_FACES

# The module (connscale.maps.reho is the function).
reho_module = importlib.import_module("connscale.maps.reho")
CIFTI_91K = Path(__file__).resolve().parents[1] / "data" / "cifti" / "ones.dscalar.nii"
SHAPE = (6, 7, 5)
N_TIMEPOINTS = 24
# 3dReHo -nneigh N draws the grid points within these index-space radii (rsfc.c IntSpherSha).
AFNI_RADIUS = {7: 1.1, 19: 1.7, 27: 1.9}


def irregular_mask(seed=0):
    mask = np.random.default_rng(seed).random(SHAPE) < 0.65
    mask[2:5, 2:5, 1:4] = True  # one full interior block
    return mask


def simulated(mask, *, ties=False, seed=1):
    """A 4-D image of random series; with ``ties``, every other x-slice on a coarse grid."""
    rng = np.random.default_rng(seed)
    data = rng.standard_normal((*SHAPE, N_TIMEPOINTS)) + rng.standard_normal(N_TIMEPOINTS)
    if ties:  # multiples of 0.5: many tied values in these series, none in the others
        data[::2] = np.round(data[::2] * 2) / 2
    data[~mask] = 0
    return data


def afni_hood(mask, voxel, neighbourhood):
    """The in-mask voxels within 3dReHo's sphere around ``voxel`` (FindVoxHood)."""
    radius = AFNI_RADIUS[neighbourhood]
    hood = []
    for offset in np.ndindex(3, 3, 3):
        d = np.array(offset) - 1
        other = np.array(voxel) + d
        inside = np.all(other >= 0) and np.all(other < mask.shape)
        if inside and (d**2).sum() <= radius**2 and mask[tuple(other)]:
            hood.append(tuple(other))
    return hood


def kendall_w(series):
    """AFNI's ReHoIt: tie-corrected Kendall's W of the columns of (T, M) ``series``."""
    n_timepoints, m = series.shape
    ranks = np.column_stack([rankdata(s) for s in series.T])  # ties: average rank
    tied = 0.0
    for s in series.T:
        _, counts = np.unique(s, return_counts=True)
        tied += float((counts**3 - counts).sum())
    spread = ((ranks.sum(axis=1) - m * (n_timepoints + 1) / 2) ** 2).sum()
    denominator = m * m * (n_timepoints**3 - n_timepoints) - m * tied
    return 12 * spread / denominator if denominator > 0 else np.nan


def reference_reho(data, mask, neighbourhood):
    out = np.zeros(mask.shape)
    for voxel in zip(*np.nonzero(mask)):
        hood = afni_hood(mask, voxel, neighbourhood)
        out[voxel] = kendall_w(np.column_stack([data[v] for v in hood]))
    return out


def images(data, mask, dtype=np.float64):
    affine = np.diag([2.0, 2.0, 2.0, 1.0])
    return nib.Nifti1Image(data.astype(dtype), affine), nib.Nifti1Image(
        mask.astype(np.uint8), affine
    )


@pytest.mark.parametrize("neighbourhood", [7, 19, 27])
@pytest.mark.parametrize("ties", [False, True])
def test_reho_matches_numpy_kendall_w(device, neighbourhood, ties):
    mask = irregular_mask()
    data = simulated(mask, ties=ties)
    img, mask_img = images(data, mask)
    result = connscale.reho(img, mask_img, neighbourhood=neighbourhood, device=device)
    assert result.shape == SHAPE
    np.testing.assert_allclose(result.affine, img.affine)
    w = result.get_fdata()
    expected = reference_reho(data, mask, neighbourhood)
    np.testing.assert_allclose(w, expected, atol=1e-6, rtol=0)
    assert np.all(w[~mask] == 0)
    assert np.all((w[mask] > 0) & (w[mask] <= 1 + 1e-6))


def test_ties_change_w_and_the_correction_is_applied(device):
    """With ties, AFNI's corrected W differs from the uncorrected one (XCP-D's surface formula)."""
    rng = np.random.default_rng(3)
    x = rng.integers(0, 4, size=(30, 5)).astype(np.float64)  # many ties
    neighbours = np.array([[i, (i + 1) % 5, (i + 2) % 5] for i in range(5)])
    w = reho_series(x, neighbours, device=device)
    corrected = [kendall_w(x[:, row]) for row in neighbours]
    np.testing.assert_allclose(w, corrected, atol=1e-12)
    ranks = np.column_stack([rankdata(s) for s in x.T])
    t, m = x.shape[0], 3
    uncorrected = [
        12 * ((ranks[:, row].sum(1) - m * (t + 1) / 2) ** 2).sum() / (m * m * (t**3 - t))
        for row in neighbours
    ]
    assert np.all(w > np.array(uncorrected))


def test_without_ties_equals_xcpd_surface_formula(device):
    """XCP-D's compute_2d_reho (no tie correction) on continuous data."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((40, 12))
    neighbours = np.array([[i, (i + 3) % 12, (i + 7) % 12, -1] for i in range(12)])
    w = reho_series(x, neighbours, device=device)
    for i, row in enumerate(neighbours):
        members = x[:, row[row >= 0]].T
        ranked = np.array([rankdata(s) for s in members])
        sums = ranked.sum(axis=0)
        kc = np.sum(sums**2) - 40 * np.mean(sums) ** 2
        assert w[i] == pytest.approx(12 * kc / (3**2 * (40**3 - 40)), abs=1e-12)


def test_identical_block_has_w_one(device):
    mask = np.zeros(SHAPE, dtype=bool)
    mask[1:6, 1:6, 0:5] = True
    data = simulated(mask, seed=6)
    signal = np.random.default_rng(7).standard_normal(N_TIMEPOINTS)
    data[2:5, 2:5, 1:4] = signal  # a 3x3x3 block of one series
    img, mask_img = images(data, mask)
    w = connscale.reho(img, mask_img, neighbourhood=27, device=device).get_fdata()
    assert w[3, 3, 2] == pytest.approx(1.0, abs=1e-12)
    # Its corner voxels' neighbourhoods reach outside the block: W < 1.
    assert w[2, 2, 1] < 0.9


def test_tensor_input_is_ranked_where_it_lies(device):
    x = np.random.default_rng(11).standard_normal((15, 8))
    neighbours = np.array([[i, (i + 1) % 8] for i in range(8)])
    np.testing.assert_allclose(
        reho_series(torch.from_numpy(x).to(device), neighbours, device="cpu"),
        reho_series(x, neighbours, device=device),
        atol=1e-12,
    )


def test_constant_neighbourhood_is_nan(device):
    x = np.random.default_rng(8).standard_normal((10, 3))
    x[:, 1:] = 5.0
    w = reho_series(x, [[0, 1, -1], [1, 2, -1], [2, -1, -1]], device=device)
    assert not np.isnan(w[0]) and np.isnan(w[1]) and np.isnan(w[2])


def test_float32_and_float64_images_agree(device):
    mask = irregular_mask(seed=2)
    data = simulated(mask, ties=True, seed=9)
    data[1::2] = np.round(data[1::2] * 8) / 8  # every value exact in float32
    w32 = connscale.reho(*images(data, mask, np.float32), device=device).get_fdata()
    w64 = connscale.reho(*images(data, mask, np.float64), device=device).get_fdata()
    np.testing.assert_allclose(w32, w64, atol=1e-12, rtol=0)
    x = data[mask].T
    neighbours = voxel_neighbours(mask)
    np.testing.assert_allclose(
        reho_series(x.astype(np.float32), neighbours, device=device),
        reho_series(x, neighbours, device=device),
        atol=1e-12,
    )


def test_small_memory_limit_gives_the_same_map(device, monkeypatch):
    mask = irregular_mask(seed=3)
    data = simulated(mask, ties=True, seed=10)
    x, neighbours = data[mask].T, voxel_neighbours(mask)
    one_shot = reho_series(x, neighbours, device=device)
    calls = {"_average_ranks": 0, "_membership": 0}
    for name in calls:
        original = getattr(reho_module, name)

        def counted(*args, _original=original, _name=name):
            calls[_name] += 1
            return _original(*args)

        monkeypatch.setattr(reho_module, name, counted)
    batched = reho_series(x, neighbours, device=device, memory_limit=110_000)
    assert calls["_average_ranks"] > 1 and calls["_membership"] > 1
    np.testing.assert_allclose(batched, one_shot, atol=1e-12, rtol=0)
    with pytest.raises(MemoryLimitError, match="neighbour lists"):
        reho_series(x, neighbours, device=device, memory_limit=2_000)


def test_voxel_neighbourhood_sizes():
    mask = np.ones((5, 5, 5), dtype=bool)
    centre = np.ravel_multi_index((2, 2, 2), mask.shape)
    for n in (7, 19, 27):
        neighbours = voxel_neighbours(mask, n)
        assert neighbours.shape == (125, n)
        assert neighbours[centre, 0] == centre
        assert sorted(neighbours[centre]) == sorted(
            np.ravel_multi_index(tuple(np.array(afni_hood(mask, (2, 2, 2), n)).T), mask.shape)
        )
        assert (neighbours[0] >= 0).sum() == {7: 4, 19: 7, 27: 8}[n]  # a corner of the grid


def test_grayordinate_neighbours_of_the_91k_model():
    axis = nib.load(CIFTI_91K).header.get_axis(1)
    neighbours = grayordinate_neighbours(axis)
    n = len(axis)
    assert n == 91282 and neighbours.shape == (n, 27)
    np.testing.assert_array_equal(neighbours[:, 0], np.arange(n))
    rows, cols = np.nonzero(neighbours[:, 1:] >= 0)
    source, target = rows, neighbours[:, 1:][rows, cols]
    adjacency = sparse.coo_matrix((np.ones(len(source)), (source, target)), shape=(n, n)).tocsr()
    assert adjacency.max() == 1  # no neighbour listed twice
    assert (adjacency != adjacency.T).nnz == 0  # symmetric
    assert adjacency.diagonal().sum() == 0  # itself only in the first column
    surface = axis.surface_mask
    assert not np.any(surface[source] != surface[target])  # no cortex-volume edge
    left = axis.name == "CIFTI_STRUCTURE_CORTEX_LEFT"
    assert not np.any(left[source] & surface[target] & ~left[target])  # hemispheres apart
    size = (neighbours >= 0).sum(axis=1)
    assert size[surface].max() == 7 and size[~surface].max() == 27
    # Cortex: the 1-ring of the fs_LR 32k mesh restricted to the medial-wall-free vertices.
    faces = np.load(FSLR32K_FACES)["left"].astype(np.int64)
    n_left = int(left.sum())
    assert left[:n_left].all()  # the left cortex comes first
    vertices = axis.vertex[:n_left]
    ring = sparse.coo_matrix(
        (np.ones(3 * len(faces)), (faces.ravel(), np.roll(faces, 1, axis=1).ravel())),
        shape=(32492, 32492),
    ).tocsr()
    ring = ((ring + ring.T) > 0)[vertices][:, vertices]
    assert ring.nnz > 5 * n_left
    assert ((adjacency[:n_left, :n_left] > 0) != ring).nnz == 0


def test_grayordinate_neighbours_from_user_surfaces(tmp_path):
    axis = nib.load(CIFTI_91K).header.get_axis(1)
    with np.load(FSLR32K_FACES) as packed:
        faces = {"left": packed["left"].astype(np.int32), "right": packed["right"]}
    points = np.zeros((32492, 3), dtype=np.float32)
    gifti = nib.gifti.GiftiImage(
        darrays=[
            nib.gifti.GiftiDataArray(points, intent="NIFTI_INTENT_POINTSET"),
            nib.gifti.GiftiDataArray(faces["left"], intent="NIFTI_INTENT_TRIANGLE"),
        ]
    )
    nib.save(gifti, tmp_path / "lh.surf.gii")
    surfaces = {"left": tmp_path / "lh.surf.gii", "right": faces["right"]}
    np.testing.assert_array_equal(
        grayordinate_neighbours(axis, surfaces), grayordinate_neighbours(axis)
    )
    with pytest.raises(ValueError, match="no mesh for CIFTI_STRUCTURE_CORTEX_RIGHT"):
        grayordinate_neighbours(axis, {"left": faces["left"]})
    with pytest.raises(ValueError, match="names vertices outside"):
        grayordinate_neighbours(axis, {"left": faces["left"] + 100, "right": faces["right"]})


def test_bad_inputs_are_clear_errors():
    mask = irregular_mask()
    img, mask_img = images(simulated(mask), mask)
    with pytest.raises(ValueError, match="neighbourhood"):
        connscale.reho(img, mask_img, neighbourhood=9)
    with pytest.raises(ValueError, match="7, 19 or 27"):
        voxel_neighbours(mask, 18)
    shifted = nib.Nifti1Image(mask.astype(np.uint8), np.diag([3.0, 3.0, 3.0, 1.0]))
    with pytest.raises(ValueError, match="grid"):
        connscale.reho(img, shifted)
    with pytest.raises(ValueError, match="grid"):
        connscale.reho(img, nib.Nifti1Image(mask[:-1].astype(np.uint8), img.affine))
    short = nib.Nifti1Image(img.get_fdata()[..., :2], img.affine)
    with pytest.raises(ValueError, match="at least 3 time points"):
        connscale.reho(short, mask_img)
    x = np.random.default_rng(0).standard_normal((10, 3))
    with pytest.raises(ValueError, match="own index"):
        reho_series(x, [[1, 2], [1, 0], [2, 0]])
    with pytest.raises(ValueError, match="repeats"):
        reho_series(x, [[0, 0], [1, 0], [2, 0]])
    with pytest.raises(ValueError, match="shape"):
        reho_series(x, [[0], [1]])
    with pytest.raises(ValueError, match="-1"):
        reho_series(x, [[0, 3], [1, 0], [2, 0]])
