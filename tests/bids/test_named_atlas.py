"""Atlases by name through TemplateFlow, and probabilistic (4-D) atlases.

Before: ``--atlas`` took a file only (a name was "no such file") and a 4-D
atlas was refused. Now a name resolves through TemplateFlow's client in each
run's space and resolution (here a local TemplateFlow home in its own layout,
no network: ``tests/bids/_templateflow.py``), and probabilistic maps give
region series as nilearn's ``NiftiMapsMasker`` does (a least-squares fit of
the maps to each volume).
"""

import json
import warnings
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

pytest.importorskip("templateflow")

from nilearn.maskers import NiftiLabelsMasker, NiftiMapsMasker  # noqa: E402

from connscale.bidsapp.participant import run_participant  # noqa: E402
from connscale.cli.main import main  # noqa: E402
from connscale.denoise import load_confounds, map_signals  # noqa: E402
from connscale.io.templateflow import get_atlas  # noqa: E402
from connscale.io.timeseries import load_timeseries  # noqa: E402
from tests.bids._fmriprep import T_R, make_fmriprep, write_run  # noqa: E402
from tests.bids._templateflow import TEMPLATE, make_templateflow  # noqa: E402
from tests.conftest import DEVICES  # noqa: E402

FOLDER = f"tpl-{TEMPLATE}"


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    return make_templateflow(tmp_path_factory.mktemp("templateflow"))


@pytest.fixture(autouse=True)
def offline(home, monkeypatch):
    """TemplateFlow on the local home, never updating it, never downloading."""
    import templateflow.client

    def no_network(config, filepath):
        raise ConnectionError(f"no network to fetch {filepath.name}")

    monkeypatch.setenv("TEMPLATEFLOW_HOME", str(home))
    monkeypatch.setenv("TEMPLATEFLOW_AUTOUPDATE", "0")
    monkeypatch.setattr(templateflow.client, "_s3_get", no_network)


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """sub-01 in MNI152NLin2009cAsym (3 mm, no res-), sub-02 at res-2, sub-03 in T1w."""
    root = make_fmriprep(
        tmp_path_factory.mktemp("named") / "fmriprep", [("01", None, "rest", None)]
    )
    write_run(root / "sub-02" / "func", "sub-02_task-rest", seed=1, space=f"{TEMPLATE}_res-2")
    write_run(root / "sub-03" / "func", "sub-03_task-rest", seed=2, space="T1w")
    return root


def test_a_name_resolves_to_the_file_of_the_space_and_resolution(home):
    atlas = get_atlas("Test", template=TEMPLATE, desc="4Parcels", resolution=2)
    assert atlas.image == home / FOLDER / f"{FOLDER}_res-02_atlas-Test_desc-4Parcels_dseg.nii.gz"
    assert atlas.labels == home / FOLDER / f"{FOLDER}_atlas-Test_desc-4Parcels_dseg.tsv"
    # No res- entity: the template resolution nearest the runs' voxel size.
    assert get_atlas("Test", template=TEMPLATE, desc="2Parcels", zooms=(2.2, 2, 2)).resolution == 2
    maps = get_atlas("TestMaps", template=TEMPLATE)  # one version: no desc needed
    assert maps.image.name.endswith("_res-02_atlas-TestMaps_desc-3Maps_probseg.nii.gz")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            {"desc": "9Parcels"},
            "TemplateFlow's atlas Test has no desc '9Parcels'; it has: 2Parcels, 4Parcels.",
        ),
        (
            {},
            "TemplateFlow's atlas Test has several versions; choose one with --atlas-desc: "
            "2Parcels, 4Parcels.",
        ),
        (
            {"desc": "4Parcels", "template": "MNI152NLin6Asym"},
            f"TemplateFlow has atlas-Test_desc-4Parcels in {TEMPLATE}, not in MNI152NLin6Asym.",
        ),
        (
            {"desc": "2Parcels", "resolution": 1},
            f"TemplateFlow has atlas-Test_desc-2Parcels in {TEMPLATE} at res 2, 3, not at res 1.",
        ),
    ],
)
def test_what_templateflow_has_not_is_one_line_listing_what_it_has(kwargs, message):
    with pytest.raises(ValueError) as raised:
        get_atlas("Test", **{"template": TEMPLATE, **kwargs})
    assert str(raised.value) == message


def test_a_file_to_download_without_network_says_how_to_prefetch(home):
    with pytest.raises(RuntimeError) as raised:  # res-03 is an empty skeleton entry
        get_atlas("Test", template=TEMPLATE, desc="2Parcels", zooms=(3.0, 3.0, 3.0))
    message = str(raised.value)
    assert "\n" not in message and f"TEMPLATEFLOW_HOME={home}" in message
    assert "the first use of an atlas downloads it" in message
    assert (
        f"python -c \"import templateflow.api as t; t.get('{TEMPLATE}', atlas='Test', "
        "desc='2Parcels', resolution=3, suffix='dseg', extension='.nii.gz')\"" in message
    )


def test_the_command_line_refuses_an_unknown_desc_in_one_line(tree, tmp_path, capsys):
    out = tmp_path / "out"
    args = ["bids", str(tree), str(out), "participant", "--atlas", "Test"]
    args += ["--atlas-desc", "9Parcels", "--atlas-name", "Test", "--denoise", "simple", "-q"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err == (
        "connscale bids: error: TemplateFlow's atlas Test has no desc '9Parcels'; it has: "
        "2Parcels, 4Parcels.\n"
    )
    assert not out.exists()


def _participant(tree, out, **kwargs):
    kwargs = {
        "strategy": "simple",
        "strategy_params": {"motion": "basic"},
        "reports": False,
        **kwargs,
    }
    return run_participant(tree, out, backend="serial", verbose=0, **kwargs)


def _reference(bold, masker):
    """nilearn's masker on the float64 BOLD with the same confounds (its exact reference)."""
    confounds, sample_mask = load_confounds(bold, "simple", motion="basic")
    img = nib.load(bold)
    img64 = nib.Nifti1Image(np.asarray(img.dataobj, dtype=np.float64), img.affine)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return masker.fit_transform(img64, confounds=confounds, sample_mask=sample_mask)


def _cleaning(bold) -> dict:
    mask = str(bold).replace("desc-preproc_bold", "desc-brain_mask")
    return {"standardize": "zscore_sample", "detrend": True, "t_r": T_R, "mask_img": mask}


def test_a_bids_run_with_an_atlas_by_name(tree, home, tmp_path):
    report = _participant(tree, tmp_path / "out", atlas="Test", atlas_desc="4Parcels",
                          atlas_name="Test4")  # fmt: skip
    by_sub = {r["name"].split("_")[0]: r for r in report.records}
    assert by_sub["sub-03"]["status"] == "error"
    assert by_sub["sub-03"]["error"] == (
        "ValueError: sub-03_task-rest_space-T1w_desc-preproc_bold.nii.gz: TemplateFlow has "
        f"atlas-Test_desc-4Parcels in {TEMPLATE}, not in T1w"
    )
    image = home / FOLDER / f"{FOLDER}_res-02_atlas-Test_desc-4Parcels_dseg.nii.gz"
    for sub in ("sub-01", "sub-02"):
        record = by_sub[sub]
        assert record["status"] == "ok"
        series_path = next(p for p in record["outputs"] if p.endswith("_timeseries.tsv"))
        series, names = load_timeseries(series_path)
        assert names == [f"Parcel{i}of4" for i in range(1, 5)]  # TemplateFlow's .tsv
        meta = json.loads(Path(series_path.replace(".tsv", ".json")).read_text())
        assert (tmp_path / "out" / meta["AtlasFile"]).resolve() == image.resolve()
        assert meta["AtlasSpace"] == TEMPLATE
        bold = next(tree.glob(f"{sub}/func/*_desc-preproc_bold.nii.gz"))
        masker = NiftiLabelsMasker(labels_img=image, resampling_target="data", **_cleaning(bold))
        np.testing.assert_allclose(series, _reference(bold, masker), atol=1e-5)


def test_probabilistic_maps_equal_nifti_maps_masker(tree, home, tmp_path):
    report = _participant(tree, tmp_path / "out", atlas="TestMaps", atlas_name="Maps3",
                          participant_label="01", reports=True)  # fmt: skip
    (record,) = report.records
    assert record["status"] == "ok", record.get("error")
    page = next(p for p in record["outputs"] if p.endswith("_report.html"))
    assert "resampled by linear interpolation from 9×9×8 voxels of 2×2×2 mm" in open(page).read()
    series_path = next(p for p in record["outputs"] if p.endswith("_timeseries.tsv"))
    series, names = load_timeseries(series_path)
    assert names == ["Map 1 LH", "Map 2 LH", "Map 3 LH"]  # DiFuMo's Difumo_names column
    bold = next(tree.glob("sub-01/func/*_desc-preproc_bold.nii.gz"))
    maps = home / FOLDER / f"{FOLDER}_res-02_atlas-TestMaps_desc-3Maps_probseg.nii.gz"
    masker = NiftiMapsMasker(maps_img=maps, resampling_target="data", **_cleaning(bold))
    np.testing.assert_allclose(series, _reference(bold, masker), atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("memory_limit", [None, 10_000])  # 10 kB: the voxels in 2 blocks
def test_map_signals_is_the_least_squares_fit(device, memory_limit):
    """Against scipy's lstsq (nilearn's), overlapping maps, a voxel outside every map."""
    from scipy.linalg import lstsq

    rng = np.random.default_rng(0)
    weights = rng.random((50, 4))
    weights[7] = 0
    data = rng.standard_normal((20, 60)) + 100
    columns = rng.choice(60, 50, replace=False)
    expected = lstsq(weights, data[:, columns].T)[0].T
    got = map_signals(
        data.astype(np.float32), weights, columns=columns, device=device, memory_limit=memory_limit
    )
    expected32 = lstsq(weights, data[:, columns].T.astype(np.float32).astype(np.float64))[0].T
    np.testing.assert_allclose(got, expected32, rtol=1e-9, atol=1e-9)
    assert np.abs(got - expected).max() < 1e-3  # only the float32 input differs
