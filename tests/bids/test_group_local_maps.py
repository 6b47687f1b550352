"""ALFF and ReHo at the group level: mean maps on the common mask, feature kinds alff and reho."""

import nibabel as nib
import numpy as np
import pytest

from connscale.bidsapp.group import run_group
from connscale.bidsapp.participant import run_participant
from tests.bids._fmriprep import ATLAS, atlas_img, make_fmriprep

SPACE = "space-MNI152NLin2009cAsym"
STATS = ("alff", "falff", "reho")


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("group_local_maps")
    root = make_fmriprep(tmp / "fmriprep", [(s, None, "rest", None) for s in ("01", "02", "03")])
    nib.save(atlas_img(), tmp / ATLAS)
    report = run_participant(
        root, tmp / "out", atlas=tmp / ATLAS, atlas_name="Slab4", strategy="none",
        measures=["fc", "alff", "reho"], backend="serial", device="cpu", reports=False,
    )  # fmt: skip
    assert report.counts["ok"] == 3, report.records
    result = run_group(tmp / "out", features=["edges", "alff", "reho"])
    return root, tmp / "out", result


def test_group_means_and_features_of_alff_and_reho(cohort):
    root, out, result = cohort
    masks = [np.asarray(nib.load(p).dataobj) > 0 for p in root.glob("sub-*/func/*_mask.nii.gz")]
    mask = np.logical_and.reduce(masks)
    n = int(mask.sum())
    assert result.features.shape == (3, 6 + len(STATS) * n)
    for j, stat in enumerate(STATS):
        paths = sorted(out.glob(f"sub-*/func/*_stat-{stat}_desc-none_boldmap.nii.gz"))
        subjects = np.array([nib.load(p).get_fdata()[mask] for p in paths])
        mean = nib.load(out / f"group/{SPACE}_stat-{stat}_desc-none_boldmap.nii.gz").get_fdata()
        np.testing.assert_allclose(mean[mask], subjects.mean(axis=0), rtol=1e-6)
        columns = slice(6 + j * n, 6 + (j + 1) * n)
        np.testing.assert_allclose(result.features[:, columns], subjects, rtol=1e-6)
        i, jj, k = np.argwhere(mask)[0]
        assert result.feature_names[columns.start] == f"stat-{stat}@{i},{jj},{k}"
    assert result.feature_kinds == ["edges", "alff", "reho"]


def test_a_map_kind_no_run_has_is_refused(cohort):
    _, out, _ = cohort
    with pytest.raises(ValueError, match="feature kind.*maps need every run's maps"):
        run_group(out, features=["edges", "maps"], overwrite=True)
