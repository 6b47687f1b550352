"""Malformed tractograms, mismatched spaces, and the written outputs."""

from pathlib import Path

import numpy as np
import pytest

from connscale import life
from connscale.life.outputs import (
    connectome,
    endpoint_labels,
    save_pruned_tractogram,
    save_weights,
    write_relmat,
)
from connscale.life.streamlines import StreamlineArray, load_streamlines

nib = pytest.importorskip("nibabel")
NIB_DATA = Path(nib.__file__).parent / "tests" / "data"


def _trk(path, streamlines, affine, shape):
    F = nib.streamlines.Field
    header = {
        F.VOXEL_TO_RASMM: affine.astype(np.float32),
        F.DIMENSIONS: np.array(shape, np.int16),
        F.VOXEL_SIZES: np.sqrt((affine[:3, :3] ** 2).sum(0)).astype(np.float32),
        F.VOXEL_ORDER: "RAS",
    }
    nib.streamlines.save(
        nib.streamlines.Tractogram(list(streamlines), affine_to_rasmm=np.eye(4)),
        str(path),
        header=header,
    )
    return path


@pytest.fixture(scope="module")
def small(phantom):
    return phantom


def test_malformed_tractograms_give_clear_errors(tmp_path):
    for name in ("no_magic_number.tck", "no_header_end.tck", "no_header_end_eof.tck"):
        with pytest.raises(ValueError, match="Could not read tractogram"):
            load_streamlines(NIB_DATA / name)
    bad = tmp_path / "garbage.trk"
    bad.write_bytes(b"not a trackvis file at all" * 10)
    with pytest.raises(ValueError, match="Could not read tractogram 'garbage.trk'"):
        load_streamlines(bad)
    with pytest.raises(ValueError, match="no streamlines"):
        load_streamlines(NIB_DATA / "empty.trk")
    with pytest.raises(ValueError, match=r"must be \.trk or \.tck"):
        load_streamlines(tmp_path / "x.vtk")
    with pytest.raises(FileNotFoundError, match="not found"):
        load_streamlines(tmp_path / "missing.trk")
    with pytest.raises(ValueError, match=r"streamline 1 has shape \(4, 2\)"):
        load_streamlines([np.zeros((3, 3)), np.zeros((4, 2))])
    with pytest.raises(ValueError, match="Streamline 1 holds NaN"):
        load_streamlines([np.zeros((3, 3)), np.array([[0, 0, 0], [np.nan, 1, 1]])])
    with pytest.raises(ValueError, match="got one array of shape"):
        load_streamlines(np.zeros((5, 3)))
    with pytest.raises(ValueError, match="got int"):
        load_streamlines(5)
    sl = load_streamlines(NIB_DATA / "standard.tck")
    assert len(sl) == 120 and sl.source is not None
    ref = nib.streamlines.load(str(NIB_DATA / "standard.tck")).streamlines
    np.testing.assert_allclose(sl[7], ref[7])


def test_mismatched_spaces_are_rejected(tmp_path, small):
    ph = small
    other = ph.affine.copy()
    other[:3, 3] += 10.0
    path = _trk(tmp_path / "shifted.trk", ph.streamlines, other, ph.dwi.shape[:3])
    with pytest.raises(ValueError, match="space does not match the dMRI"):
        life.fit(ph.dwi, ph.bvals, ph.bvecs, path, affine=ph.affine, device="cpu")
    path = _trk(tmp_path / "smaller.trk", ph.streamlines, ph.affine, (5, 5, 5))
    with pytest.raises(ValueError, match=r"dimensions \(5, 5, 5\)"):
        life.fit(ph.dwi, ph.bvals, ph.bvecs, path, affine=ph.affine, device="cpu")
    # Streamlines in another space altogether (all outside the volume).
    far = [s + 1000.0 for s in ph.streamlines]
    with pytest.raises(ValueError, match="No streamline has a node inside"):
        life.fit(ph.dwi, ph.bvals, ph.bvecs, far, affine=ph.affine, device="cpu")
    with pytest.raises(ValueError, match="'affine'"):
        life.fit(ph.dwi, ph.bvals, ph.bvecs, ph.streamlines, device="cpu")
    with pytest.raises(ValueError, match="'bvecs' must have shape"):
        life.fit(ph.dwi, ph.bvals, ph.bvecs[:-1], ph.streamlines, affine=ph.affine, device="cpu")


def test_outputs_round_trip(tmp_path, small):
    ph = small
    sub = ph.streamlines.subset(np.arange(0, 300, 10))
    path = _trk(tmp_path / "in.trk", sub, ph.affine, ph.dwi.shape[:3])
    fit = life.fit(ph.dwi, ph.bvals, ph.bvecs, path, affine=ph.affine, device="cpu")
    w = fit.weights
    assert w.shape == (30,)
    out = save_pruned_tractogram(fit.streamlines, w, tmp_path / "pruned.trk")
    back = nib.streamlines.load(str(out))
    assert len(back.streamlines) == int((w > 0).sum())
    np.testing.assert_allclose(back.streamlines[0], sub[int(np.flatnonzero(w > 0)[0])], atol=1e-4)
    np.testing.assert_allclose(
        back.tractogram.data_per_streamline["weight"][:, 0], w[w > 0], rtol=1e-6
    )
    tck = save_pruned_tractogram(fit.streamlines, w, tmp_path / "pruned.tck")
    assert len(nib.streamlines.load(str(tck)).streamlines) == int((w > 0).sum())
    np.testing.assert_array_equal(np.load(save_weights(w, tmp_path / "w.npy")), w)
    table = np.loadtxt(save_weights(w, tmp_path / "w.tsv"), skiprows=1)
    np.testing.assert_allclose(table[:, 1], w, rtol=1e-8)
    with pytest.raises(ValueError, match="npy or .tsv"):
        save_weights(w, tmp_path / "w.csv")


def test_connectome_counts_endpoints():
    affine = np.eye(4)
    labels = np.zeros((10, 4, 4), np.int16)
    labels[:3] = 1
    labels[7:] = 2
    labels[4:6, :2] = 5
    sl = StreamlineArray.from_list(
        [
            np.array([[1.0, 1, 1], [5, 1, 1], [8, 1, 1]]),  # 1 - 2
            np.array([[8.0, 2, 2], [1, 2, 2]]),  # 2 - 1
            np.array([[1.0, 1, 1], [4, 1, 1]]),  # 1 - 5
            np.array([[1.0, 1, 1], [4, 3, 3]]),  # 1 - background: not counted
            np.array([[8.0, 1, 1], [9, 1, 1]]),  # 2 - 2
        ]
    )
    w = np.array([1.0, 0.5, 2.0, 3.0, 0.0])
    np.testing.assert_array_equal(endpoint_labels(sl, labels, affine)[3], [1, 0])
    M, regions = connectome(sl, w, labels, affine, measure="weight")
    assert regions.tolist() == [1, 2, 5]
    np.testing.assert_allclose(M, [[0, 1.5, 2.0], [1.5, 0, 0], [2.0, 0, 0]])
    C, _ = connectome(sl, w, labels, affine, measure="count")
    np.testing.assert_allclose(C, [[0, 2, 1], [2, 0, 0], [1, 0, 0]])
    with pytest.raises(ValueError, match="'measure' must be"):
        connectome(sl, w, labels, affine, measure="x")
    with pytest.raises(ValueError, match="needs the LiFEFit"):
        connectome(sl, w, labels, affine, measure="evidence")
    with pytest.raises(ValueError, match="no region"):
        connectome(sl, w, np.zeros((3, 3, 3)), affine)


def test_relmat_files(tmp_path):
    from connscale.io import load_relmat
    from connscale.io.relmat import read_relmat_tsv

    M = np.array([[0, 1.5], [1.5, 0]])
    paths = write_relmat(M, [3, 7], tmp_path, "sub-01", measure="weight")
    names = sorted(p.name for p in paths)
    assert names == [
        "sub-01_meas-LiFEWeightSum_relmat.h5",
        "sub-01_meas-LiFEWeightSum_relmat.json",
        "sub-01_meas-LiFEWeightSum_relmat.tsv",
    ]
    got, labels = read_relmat_tsv(tmp_path / "sub-01_meas-LiFEWeightSum_relmat.tsv")
    np.testing.assert_allclose(got, M)
    assert labels == ["3", "7"]
    got, attrs = load_relmat(tmp_path / "sub-01_meas-LiFEWeightSum_relmat.h5")
    np.testing.assert_allclose(got, M)
    assert attrs["measure"] == "LiFEWeightSum"
