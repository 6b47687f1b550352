import json

import nibabel as nib
import numpy as np
import pytest

from connscale.io import load_timeseries, read_relmat_tsv, save_timeseries, write_relmat_tsv
from connscale.io.atomic import atomic_path
from connscale.io.nifti import load_masked
from connscale.io.relmat import relmat_path, sidecar, source_entities, write_sidecar


def test_timeseries_formats_round_trip(tmp_path, rng):
    x = rng.standard_normal((20, 4))
    save_timeseries(tmp_path / "a_timeseries.tsv", x, ["A", "B", "C", "D"])
    data, labels = load_timeseries(tmp_path / "a_timeseries.tsv")
    np.testing.assert_allclose(data, x, rtol=1e-7)
    assert labels == ["A", "B", "C", "D"]
    np.savetxt(tmp_path / "b.csv", x, delimiter=",")
    data, labels = load_timeseries(tmp_path / "b.csv")
    np.testing.assert_allclose(data, x)
    assert labels == ["0", "1", "2", "3"]
    np.save(tmp_path / "c.npy", x.astype(np.float32))
    data, _ = load_timeseries(tmp_path / "c.npy")
    assert data.dtype == np.float32


def test_nitime_csv_with_quoted_header():
    from connscale.datasets import load_nitime_roi

    data, labels = load_nitime_roi()
    assert data.shape == (250, 31)
    assert labels[:3] == ["WM", "Vent", "Brain"]


@pytest.mark.parametrize(
    "name, content, match",
    [
        ("x.tsv", "a\tb\n1\tfoo\n", "numeric table"),
        ("x.json", "{}", "must be a"),
        ("x.tsv", "a\tb\tc\n1\t2\n3\t4\n5\t6\n", "header names 3"),
        ("x.tsv", "1\t2\n", "at least 3 time points"),
        ("x.tsv", "a\tb\n1\tnan\n2\t3\n4\t5\n", "NaN"),
    ],
)
def test_bad_timeseries_files(tmp_path, name, content, match):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ValueError, match=match):
        load_timeseries(path)


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="No time-series file"):
        load_timeseries(tmp_path / "nope.tsv")


def test_atomic_path_keeps_target_on_failure(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("crash")
    assert target.read_text() == "old"
    assert list(tmp_path.iterdir()) == [target]


def test_atomic_files_get_default_permissions(tmp_path):
    import os
    import stat

    with atomic_path(tmp_path / "a.txt") as tmp:
        tmp.write_text("x")
    plain = tmp_path / "b.txt"
    plain.write_text("x")
    mode = stat.S_IMODE(os.stat(tmp_path / "a.txt").st_mode)
    assert mode == stat.S_IMODE(os.stat(plain).st_mode)


def test_bids_names_and_sidecar(tmp_path):
    assert source_entities("sub-01_task-rest_bold.nii.gz") == "sub-01_task-rest"
    assert source_entities("fmri1.nii.gz") == "fmri1"
    path = relmat_path(tmp_path, "sub-01_task-rest", seg="schaefer", extension=".tsv")
    assert path.name == "sub-01_task-rest_seg-schaefer_meas-PearsonCorrelation_relmat.tsv"
    write_relmat_tsv(path, np.eye(3), ["a", "b", "c"])
    matrix, labels = read_relmat_tsv(path)
    np.testing.assert_array_equal(matrix, np.eye(3))
    assert labels == ["a", "b", "c"]
    meta = sidecar("triu", 3, source="x.nii.gz")
    side = write_sidecar(path, meta)
    assert side.name.endswith("_relmat.json")
    loaded = json.loads(side.read_text())
    assert loaded["Measure"] == "Pearson correlation"
    assert loaded["StorageFormat"].startswith("UpperTriangle")
    assert loaded["ValidDiagonal"] is False


def _image(rng, shape=(4, 5, 3, 12), affine=None):
    data = rng.standard_normal(shape).astype(np.float32) + 10
    return nib.Nifti1Image(data, np.eye(4) if affine is None else affine)


def test_load_masked_matches_manual_masking(tmp_path, rng):
    img = _image(rng)
    mask = np.zeros(img.shape[:3], dtype=np.uint8)
    mask[1:3, 1:4, :] = 1
    mask_img = nib.Nifti1Image(mask, img.affine)
    series, masker = load_masked(img, mask=mask_img)
    expected = img.get_fdata()[mask.astype(bool)].T
    np.testing.assert_allclose(series, expected, rtol=1e-6)
    back = masker.inverse_transform(series)
    assert back.shape == img.shape


def test_load_masked_atlas_region_means(rng):
    img = _image(rng)
    atlas = np.zeros(img.shape[:3], dtype=np.int16)
    atlas[:2] = 1
    atlas[2:] = 2
    series, _ = load_masked(img, atlas=nib.Nifti1Image(atlas, img.affine))
    data = img.get_fdata()
    np.testing.assert_allclose(series[:, 0], data[atlas == 1].mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(series[:, 1], data[atlas == 2].mean(axis=0), rtol=1e-5)


def test_mask_mismatches_are_clear(rng, tmp_path):
    img = _image(rng)
    with pytest.raises(ValueError, match="grid .* does not match"):
        load_masked(img, mask=nib.Nifti1Image(np.ones((4, 5, 2), np.uint8), img.affine))
    shifted = np.eye(4)
    shifted[0, 3] = 5
    with pytest.raises(ValueError, match="affine does not match"):
        load_masked(img, mask=nib.Nifti1Image(np.ones(img.shape[:3], np.uint8), shifted))
    with pytest.raises(ValueError, match="4-D"):
        load_masked(nib.Nifti1Image(np.ones((4, 4, 4), np.float32), np.eye(4)))
    bad = tmp_path / "broken.nii.gz"
    bad.write_bytes(b"not a nifti")
    with pytest.raises(ValueError, match="Cannot read"):
        load_masked(bad)
    with pytest.raises(FileNotFoundError):
        load_masked(tmp_path / "missing.nii.gz")
