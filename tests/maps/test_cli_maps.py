"""``connscale maps`` end to end: nitime's fmri1 and a small scan on the MNI
152 2 mm grid; the maps load in nilearn on the input's grid and equal the
functions' results."""

import json
import os

import numpy as np
import pytest

nib = pytest.importorskip("nibabel")
pytest.importorskip("nilearn")

import connscale  # noqa: E402
from connscale.cli.main import main  # noqa: E402
from tests.bids._pybids import assert_pybids_reads  # noqa: E402

# nilearn's MNI152 2 mm template grid.
MNI_2MM = np.array([[-2.0, 0, 0, 90], [0, 2, 0, -126], [0, 0, 2, -72], [0, 0, 0, 1]])


@pytest.fixture
def mni_scan(tmp_path):
    """A 16×18×14-voxel crop of the MNI 2 mm grid, 60 volumes, two networks."""
    rng = np.random.default_rng(0)
    shape = (16, 18, 14)
    affine = MNI_2MM.copy()
    affine[:3, 3] += MNI_2MM[:3, :3] @ np.array([37, 45, 30])  # crop origin at voxel (37,45,30)
    ijk = np.indices(shape).reshape(3, -1).T
    inside = np.sum(((ijk - np.array(shape) / 2 + 0.5) / (np.array(shape) / 2)) ** 2, 1) < 1
    signals = rng.standard_normal((60, 2))
    network = (ijk[:, 0] < shape[0] // 2).astype(int)
    data = rng.standard_normal((ijk.shape[0], 60)) + 0.9 * signals[:, network].T + 500
    img = nib.Nifti1Image(data.reshape(*shape, 60).astype(np.float32), affine)
    path = tmp_path / "sub-02_task-rest_space-MNI152NLin2009cAsym_bold.nii.gz"
    img.to_filename(path)
    mask_path = tmp_path / "mask.nii.gz"
    nib.Nifti1Image(inside.reshape(shape).astype(np.uint8), affine).to_filename(mask_path)
    return path, mask_path


def _series(path, mask_path=None):
    from connscale.io.nifti import load_masked

    return load_masked(path, mask=mask_path)


def _values(masker, img):
    """The map's values at the masker's voxels, as one vector."""
    return np.ravel(masker.transform(img))


def _load(path):
    from nilearn.image import load_img

    return load_img(str(path))


def test_maps_cli_on_nitime_fmri1(tmp_path):
    from connscale.datasets.bundled import nitime_fmri_path

    fmri = nitime_fmri_path(1)
    out = tmp_path / "out"
    assert (
        main(
            [
                "maps",
                str(fmri),
                "--degree",
                "0.25,0.5",
                "--weighted",
                "--ecm",
                "--gcor",
                "--out",
                str(out),
                "--device",
                "cpu",
                "-q",
            ]
        )
        == 0
    )
    series, masker = _series(fmri)
    expected = {
        "fmri1_stat-degree_desc-r025": connscale.degree_centrality(series, 0.25, device="cpu"),
        "fmri1_stat-degree_desc-r05": connscale.degree_centrality(series, 0.5, device="cpu"),
        "fmri1_stat-weighteddegree_desc-r025": connscale.degree_centrality(
            series, 0.25, weighted=True, device="cpu"
        ),
        "fmri1_stat-ecm": connscale.eigenvector_centrality(series, device="cpu"),
        "fmri1_stat-gcor": connscale.global_correlation(series, device="cpu"),
    }
    source = nib.load(fmri)
    for stem, values in expected.items():
        img = _load(out / f"{stem}_boldmap.nii.gz")
        assert img.shape == source.shape[:3]
        np.testing.assert_allclose(img.affine, source.affine, atol=1e-5)
        np.testing.assert_allclose(_values(masker, img), values, rtol=1e-5, atol=1e-6)
        sidecar = json.loads((out / f"{stem}_boldmap.json").read_text())
        assert sidecar["NumberOfNodes"] == series.shape[1]
        assert sidecar["Sources"] == [os.path.relpath(fmri, out)]
        assert (out / f"{stem}_boldmap.png").stat().st_size > 0
    assert (
        json.loads((out / "fmri1_stat-degree_desc-r05_boldmap.json").read_text())["Threshold"]
        == 0.5
    )
    log = json.loads((out / "fmri1_maps_log.json").read_text())
    assert len(log["figures"]) == 6 and "degree" in log["timings_s"]
    assert log["results"]["precision"] == "exact" and log["results"]["degree_confirmation"] is None
    assert (out / "report.html").exists() and (out / "dataset_description.json").exists()


def test_maps_cli_on_an_mni_grid_scan(tmp_path, mni_scan):
    path, mask_path = mni_scan
    out = tmp_path / "out"
    seed = (-10.0, -20.0, 2.0)
    assert (
        main(
            [
                "maps",
                str(path),
                "--mask",
                str(mask_path),
                "--degree",
                "0.3",
                "--absolute",
                "--sparsity",
                "0.05",
                "--seed=" + ",".join(map(str, seed)),
                "--fisher-z",
                "--out",
                str(out),
                "--device",
                "cpu",
                "-q",
            ]
        )
        == 0
    )
    series, masker = _series(path, mask_path)
    stem = "sub-02_task-rest_space-MNI152NLin2009cAsym"
    degree = _load(out / f"{stem}_stat-degree_desc-absr03_boldmap.nii.gz")
    np.testing.assert_allclose(degree.affine, nib.load(path).affine)
    assert degree.shape == (16, 18, 14)
    np.testing.assert_array_equal(
        _values(masker, degree),
        connscale.degree_centrality(series, 0.3, absolute=True, device="cpu"),
    )
    assert np.all(np.asarray(degree.dataobj)[np.asarray(nib.load(mask_path).dataobj) == 0] == 0)
    assert_pybids_reads(out)
    sparse = _load(out / f"{stem}_stat-degree_desc-abssparsity005_boldmap.nii.gz")
    n = series.shape[1]
    assert _values(masker, sparse).sum() == pytest.approx(2 * round(0.05 * n * (n - 1) / 2), abs=4)
    meta = json.loads((out / f"{stem}_stat-degree_desc-abssparsity005_boldmap.json").read_text())
    assert meta["Sparsity"] == 0.05 and 0 < meta["Threshold"] < 1
    seed_img = _load(out / f"{stem}_stat-seedz_desc-seed1_boldmap.nii.gz")
    voxel = np.round(np.linalg.solve(seed_img.affine, [*seed, 1])[:3]).astype(int)
    assert np.isinf(np.asarray(seed_img.dataobj)[tuple(voxel)])  # the seed voxel: z(1) = inf
    z = np.asarray(seed_img.dataobj)[np.asarray(nib.load(mask_path).dataobj) > 0]  # keeps inf
    at_seed = np.zeros((16, 18, 14), dtype=np.float32)
    at_seed[tuple(voxel)] = 1
    seed_series = series[:, _values(masker, nib.Nifti1Image(at_seed, seed_img.affine)) == 1][:, 0]
    np.testing.assert_allclose(
        np.tanh(z), connscale.seed_correlation(series, seed_series, device="cpu")[0], atol=1e-5
    )


def test_maps_cli_errors(tmp_path, mni_scan, capsys):
    path, _ = mni_scan
    assert main(["maps", str(path), "--out", str(tmp_path / "o"), "-q"]) == 2
    assert "at least one map" in capsys.readouterr().err
    table = tmp_path / "series.npy"
    np.save(table, np.random.default_rng(0).standard_normal((20, 4)))
    assert main(["maps", str(table), "--gcor", "--out", str(tmp_path / "o"), "-q"]) == 2
    assert "NIfTI" in capsys.readouterr().err
