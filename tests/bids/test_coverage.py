"""Parcel coverage of volume runs and ``min_coverage``: XCP-D's rule, checked against a count."""

import json

import nibabel as nib
import numpy as np
import pandas as pd
import pytest

from connscale.bidsapp.participant import run_participant
from connscale.io.relmat import read_relmat_tsv
from tests.bids._fmriprep import ATLAS, atlas_img, make_fmriprep


def _run(tmp, root, out, min_coverage):
    report = run_participant(
        root,
        tmp / out,
        atlas=tmp / ATLAS,
        atlas_name="Slab4",
        strategy="simple",
        strategy_params={"motion": "basic", "wm_csf": "basic"},
        measures=["fc", "timeseries"],
        min_coverage=min_coverage,
        backend="serial",
        reports=False,
    )
    assert report.counts["ok"] == 1, report.records
    return report.records[0]["outputs"]


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("coverage")
    root = make_fmriprep(tmp / "fmriprep", [("01", None, "rest", None)])
    nib.save(atlas_img(), tmp / ATLAS)
    mask_path = next(root.glob("sub-01/func/*_desc-brain_mask.nii.gz"))
    mask = np.asarray(nib.load(mask_path).dataobj)
    mask[4, 1:4, :] = 0  # label 4 (x = 4): 3 of its 12 voxels left
    mask[3, 1, :] = 0  # label 3: 9 of 12
    nib.save(nib.Nifti1Image(mask, nib.load(mask_path).affine), mask_path)
    return tmp, mask > 0, _run(tmp, root, "out", 0.5), _run(tmp, root, "all", 0.0)


def _series(path):
    table = pd.read_csv(path, sep="\t")
    return table.to_numpy(), list(table.columns)


def _one(outputs, end):
    (found,) = [p for p in outputs if p.endswith(end)]
    return found


def test_coverage_table_is_the_count_of_atlas_voxels_in_the_mask(published):
    tmp, mask, outputs, _ = published
    atlas = np.asarray(atlas_img().dataobj)
    path = _one(outputs, "_seg-Slab4_stat-coverage_desc-simple_bold.tsv")
    lines = open(path).read().splitlines()
    assert lines[0] == "Node\tcoverage"
    rows = [line.split("\t") for line in lines[1:]]
    expected = [
        (atlas == k).sum() and (mask & (atlas == k)).sum() / (atlas == k).sum()
        for k in (1, 2, 3, 4)
    ]
    assert [r[0] for r in rows] == [f"label-{k}" for k in (1, 2, 3, 4)]
    np.testing.assert_allclose([float(r[1]) for r in rows], expected, rtol=1e-7)
    np.testing.assert_allclose(expected, [11 / 12, 1.0, 9 / 12, 3 / 12])


def test_low_coverage_parcels_are_nan_and_named(published):
    _, _, outputs, everything = published
    series, names = _series(_one(outputs, "_timeseries.tsv"))
    assert names == ["label-1", "label-2", "label-3", "label-4"]
    assert np.isnan(series[:, 3]).all() and np.isfinite(series[:, :3]).all()
    reference, _ = _series(_one(everything, "_timeseries.tsv"))
    np.testing.assert_allclose(series[:, :3], reference[:, :3], atol=1e-6)
    fc, _ = read_relmat_tsv(_one(outputs, "_relmat.tsv"))
    full, _ = read_relmat_tsv(_one(everything, "_relmat.tsv"))
    assert np.isnan(fc[3]).all() and np.isnan(fc[:, 3]).all()
    np.testing.assert_allclose(fc[:3, :3], full[:3, :3], atol=1e-6)
    for end in ("_relmat.json", "_timeseries.json"):
        meta = json.loads(open(_one(outputs, end)).read())
        assert meta["MinimumCoverage"] == 0.5
        assert meta["LowCoverageRegions"] == {"label-4": 0.25}
        assert "MinimumCoverage" in meta["LowCoverageDescription"]
    assert json.loads(open(_one(everything, "_relmat.json")).read())["LowCoverageRegions"] == {}


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.int64, np.float32])
def test_coverage_counted_by_value_equals_the_sorted_count(dtype):
    """Small non-negative integer labels are counted by value, others sorted: the same
    labels and fractions either way (gaps in the labels, a label outside the mask)."""
    from connscale.bidsapp import coverage

    rng = np.random.default_rng(3)
    atlas = rng.choice([0, 2, 5, 7, 200], size=(9, 8, 7)).astype(dtype)
    atlas[0, 0, 0] = 9  # a label wholly outside the mask
    mask = rng.random(atlas.shape) > 0.3
    mask[0, 0, 0] = False
    labels, fractions = coverage.volume_coverage(atlas, mask)
    assert labels.tolist() == [2, 5, 7, 9, 200]
    expected = [
        np.count_nonzero(mask & (atlas == v)) / np.count_nonzero(atlas == v) for v in labels
    ]
    np.testing.assert_array_equal(fractions, expected)
    assert coverage._small_labels(atlas) == (np.dtype(dtype).kind in "iu")
    negative = atlas.astype(np.int16)
    negative[0, 0, 0] = -1
    assert not coverage._small_labels(negative)
