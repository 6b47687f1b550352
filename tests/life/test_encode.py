"""The ENCODE model: dropping, snapping, Φ values, D, S₀ and b."""

import numpy as np
import pytest
import torch
from numpy.testing import assert_allclose

from connscale.life.encode import (
    _SnapTable,
    build_model,
    canonical_dictionary,
    fibonacci_hemisphere,
    resolve_sphere,
)
from connscale.life.streamlines import StreamlineArray

AFFINE = np.diag([2.0, 2.0, 2.0, 1.0])


def _scan(shape=(5, 5, 5), s0=500.0):
    bvals = np.r_[0.0, 0.0, np.full(6, 1000.0), np.full(6, 2000.0)]
    g = fibonacci_hemisphere(6)
    bvecs = np.concatenate([np.zeros((2, 3)), g, g])
    rng = np.random.default_rng(0)
    data = rng.uniform(50, 150, size=shape + (14,))
    data[..., :2] = s0
    return data, bvals, bvecs


def test_dictionary_is_de_medianed_per_shell():
    _, bvals, bvecs = _scan()
    atoms = fibonacci_hemisphere(30)
    D = canonical_dictionary(bvals[2:], bvecs[2:], atoms)
    assert_allclose(np.median(D[:6], axis=0), 0, atol=1e-15)
    assert_allclose(np.median(D[6:], axis=0), 0, atol=1e-15)
    raw = np.exp(-bvals[2:, None] * 1e-3 * (bvecs[2:] @ atoms.T) ** 2)
    assert_allclose(D[:6] - D[:6, :1] * 0, raw[:6] - np.median(raw[:6], axis=0))


def test_phi_values_drop_counts_s0_and_signal():
    data, bvals, bvecs = _scan()
    # Voxel (1, 1, 1) is at (2, 2, 2) mm. A streamline along x inside it, one along
    # y through voxels (2, 1..3, 2), a one-point streamline and one outside.
    sl = [
        np.array([[1.6, 2.0, 2.0], [2.0, 2.0, 2.0], [2.4, 2.0, 2.0]]),
        np.array([[4.0, y, 4.0] for y in np.arange(2.0, 6.01, 0.5)]),
        np.array([[2.0, 2.0, 2.0]]),
        np.array([[40.0, 40.0, 40.0], [41.0, 40.0, 40.0]]),
    ]
    with pytest.warns(UserWarning, match="2 of 4 streamlines dropped"):
        m = build_model(
            data,
            bvals,
            bvecs,
            StreamlineArray.from_list(sl),
            affine=AFFINE,
            sphere=np.eye(3),
            device="cpu",
            dtype="float64",
        )
    assert m.n_dropped_short == 1 and m.n_dropped_outside == 1
    assert list(m.fibre_index) == [0, 1]
    assert m.n_directions == 12 and m.n_atoms == 3
    # Fibre 0: all nodes in voxel (1,1,1) with atom x -> value = 1 × S0.
    voxels = [tuple(v) for v in m.voxels]
    assert voxels == [(1, 1, 1), (2, 1, 2), (2, 2, 2), (2, 3, 2)]
    f, a, v, val = (
        m.entry_fibre.numpy(),
        m.entry_atom().numpy(),
        m.entry_voxel().numpy(),
        m.entry_value.numpy(),
    )
    assert f[v == 0].tolist() == [0] and a[v == 0].tolist() == [0]
    assert_allclose(val, 500.0)  # every (voxel, fibre) has one atom: share 1 × S0
    assert set(a[f == 1].tolist()) == {1}
    assert_allclose(m.s0.numpy(), 500.0)
    vals = data[1, 1, 1, 2:]
    assert_allclose(m.signal[0].numpy(), vals - vals.mean())


def test_share_is_split_between_atoms():
    data, bvals, bvecs = _scan()
    # A bend inside one voxel (4 nodes): one entry per atom met.
    sl = [np.array([[1.5, 1.5, 2.0], [2.0, 1.5, 2.0], [2.0, 2.0, 2.0], [2.0, 2.4, 2.0]])]
    m = build_model(
        data,
        bvals,
        bvecs,
        StreamlineArray.from_list(sl),
        affine=AFFINE,
        sphere=np.array([[1.0, 0, 0], [0, 1.0, 0], [0.0, 0, 1.0], [0.7071, 0.7071, 0]]),
        device="cpu",
        dtype="float64",
    )
    # node tangents snap to x, diagonal, y, y: shares 1/4, 1/4, 1/2 of S0 = 500
    assert m.n_entries == 3
    assert_allclose(sorted(m.entry_value.numpy()), [125.0, 125.0, 250.0])


def test_snap_table_matches_brute_force():
    atoms = fibonacci_hemisphere(300)
    rng = np.random.default_rng(1)
    t = rng.normal(size=(5000, 3))
    t /= np.linalg.norm(t, axis=1, keepdims=True)
    got = _SnapTable(atoms, torch.device("cpu"))(torch.as_tensor(t, dtype=torch.float32)).numpy()
    dots = np.abs(t @ atoms.T)
    best = dots.max(axis=1)
    # The table's atom is the nearest or within a cell (< 0.8°) of it.
    chosen = dots[np.arange(len(t)), got]
    assert np.all(
        np.degrees(np.arccos(np.clip(chosen, -1, 1))) - np.degrees(np.arccos(np.clip(best, -1, 1)))
        < 0.8
    )
    assert np.mean(got == dots.argmax(axis=1)) > 0.97


def test_resolve_sphere_options():
    assert resolve_sphere(None).shape == (2000, 3)
    assert resolve_sphere(10).shape == (10, 3)
    a = resolve_sphere(np.array([[2.0, 0, 0], [0, 0, 3.0]]))
    assert_allclose(np.linalg.norm(a, axis=1), 1)
    pytest.importorskip("dipy")
    assert resolve_sphere("repulsion724").shape == (724, 3)
    with pytest.raises(ValueError, match="Unknown dipy sphere"):
        resolve_sphere("no-such-sphere")
    with pytest.raises(ValueError, match="must have shape"):
        resolve_sphere(np.zeros((4, 2)))
    with pytest.raises(ValueError, match="at least 1"):
        resolve_sphere(0)


def test_bad_scans_are_rejected():
    data, bvals, bvecs = _scan()
    sl = StreamlineArray.from_list([np.array([[2.0, 2, 2], [3.0, 2, 2]])])
    with pytest.raises(ValueError, match="4-D volume"):
        build_model(data[..., 0], bvals, bvecs, sl, affine=AFFINE, device="cpu")
    with pytest.raises(ValueError, match="one b-value per volume"):
        build_model(data, bvals[:-1], bvecs, sl, affine=AFFINE, device="cpu")
    with pytest.raises(ValueError, match="no b=0 volume"):
        build_model(data, bvals + 1000, bvecs, sl, affine=AFFINE, device="cpu")
    with pytest.raises(ValueError, match="'mask' must have the spatial shape"):
        build_model(data, bvals, bvecs, sl, affine=AFFINE, mask=np.ones((2, 2, 2)), device="cpu")
    with pytest.raises(ValueError, match="'affine' must be an invertible"):
        build_model(data, bvals, bvecs, sl, affine=np.zeros((4, 4)), device="cpu")
    with pytest.raises(ValueError, match="'formulation' must be"):
        build_model(data, bvals, bvecs, sl, affine=AFFINE, formulation="x", device="cpu")
    nan_b0 = bvecs.copy()
    nan_b0[0] = np.nan  # some scanners write NaN b-vectors for b=0 volumes
    assert build_model(data, bvals, bvecs, sl, affine=AFFINE, device="cpu").n_fibres == 1
    assert build_model(data, bvals, nan_b0, sl, affine=AFFINE, device="cpu").n_fibres == 1
    nan_dw = bvecs.copy()
    nan_dw[5] = np.nan
    with pytest.raises(ValueError, match="finite, non-zero 'bvecs'"):
        build_model(data, bvals, nan_dw, sl, affine=AFFINE, device="cpu")
    far = StreamlineArray.from_list([np.array([[200.0, 2, 2], [201.0, 2, 2]])])
    with pytest.raises(ValueError, match="No streamline has a node inside the dMRI volume"):
        build_model(data, bvals, bvecs, far, affine=AFFINE, device="cpu")
    with pytest.raises(ValueError, match="and mask"):
        build_model(data, bvals, bvecs, sl, affine=AFFINE, mask=np.zeros((5, 5, 5)), device="cpu")
