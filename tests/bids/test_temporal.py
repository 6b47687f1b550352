"""The temporal steps in XCP-D's order on fMRIPrep trees: dummy scans, FD censoring,
--min-time refusals, the interpolated output, and their one-line errors."""

import json

import nibabel as nib
import numpy as np
import pandas as pd
import pytest

from connscale.bidsapp.participant import run_participant
from connscale.cli.main import main
from connscale.io.relmat import read_relmat_tsv
from connscale.io.timeseries import load_timeseries
from tests.bids._fmriprep import (
    ATLAS,
    CONFOUNDS_TSV,
    SHAPE,
    T_R,
    atlas_img,
    make_fmriprep,
    participant_log,
    write_run,
)

N_VOLUMES = 120
THRESH = 0.5
STRATEGY = {"strategy": "simple", "strategy_params": {"motion": "basic", "wm_csf": "basic"}}
MOTION = ["trans_x", "trans_y", "trans_z", "rot_x", "rot_y", "rot_z"]


def _xcpd_fd(table, head_radius=50.0):
    """XCP-D's ``compute_fd`` (xcp_d/utils/modified_data.py), transcribed."""
    mpars = table[MOTION].fillna(0).to_numpy()
    diff = mpars[:-1] - mpars[1:]
    diff[:, 3:6] *= head_radius
    return np.hstack([0, np.abs(diff).sum(axis=1)])


def _run(func, entities, *, seed, moving):
    """A 120-volume run: two non-steady-state volumes, 1 mm jumps at the volumes ``moving``."""
    bold = write_run(func, entities, seed=seed)
    first = pd.read_csv(CONFOUNDS_TSV, sep="\t")
    confounds = pd.concat([first] + [first.fillna(0)] * 3, ignore_index=True)[:N_VOLUMES]
    rng = np.random.default_rng(seed)
    walk = np.cumsum(0.01 * rng.standard_normal((N_VOLUMES, 6)), axis=0)
    walk[:, 3:] *= 1e-3  # radians
    walk[list(moving), 0] += 1.0  # a 1 mm excursion: FD > 0.5 there and at the volume after
    confounds = confounds.copy()  # one block
    confounds[MOTION] = walk
    for k in range(2):
        confounds[f"non_steady_state_outlier0{k}"] = (confounds.index == k).astype(float)
    confounds.to_csv(
        func / f"{entities}_desc-confounds_timeseries.tsv", sep="\t", index=False, na_rep="n/a"
    )
    data = 1000 + 10 * rng.standard_normal((*SHAPE, N_VOLUMES)).astype(np.float32)
    data += np.linspace(0, 5, N_VOLUMES, dtype=np.float32)  # a drift
    nib.save(nib.Nifti1Image(data, nib.load(bold).affine), bold)
    return confounds


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """sub-01 moves at 5 volumes; sub-02 at most volumes (20 s of low-motion data)."""
    tmp = tmp_path_factory.mktemp("temporal")
    root = make_fmriprep(tmp / "fmriprep", [])
    tables = {
        "01": _run(root / "sub-01" / "func", "sub-01_task-rest", seed=1, moving=[20, 50, 51, 90]),
        "02": _run(root / "sub-02" / "func", "sub-02_task-rest", seed=2, moving=range(10, 120, 2)),
    }
    nib.save(atlas_img(), tmp / ATLAS)
    return tmp, root, tables


def _kwargs(tmp, **extra):
    return {
        "atlas": tmp / ATLAS,
        "atlas_name": "Slab4",
        "backend": "serial",
        "verbose": 0,
        "reports": False,
        **STRATEGY,
        **extra,
    }


def _errors(out):
    _, rows = participant_log(out)
    return {r.split("\t")[0].split("_")[0]: r.split("\t") for r in rows[1:]}


def test_min_time_refuses_a_run_the_other_publishes(tree, tmp_path):
    tmp, root, tables = tree
    out = tmp_path / "out"
    args = ["bids", str(root), str(out), "participant", "--atlas", str(tmp / ATLAS)]
    args += ["--atlas-name", "Slab4", "--denoise", "simple", "--backend", "serial", "-q"]
    args += ["--no-reports", "--fd-threshold", str(THRESH), "--min-time", "100"]
    args += ["--dummy-scans", "auto"]
    assert main(args) == 1  # a refused run counts as not done
    rows = _errors(out)
    assert list(rows) == ["sub-02"] and rows["sub-02"][2] == "refused"
    reason = rows["sub-02"][4]
    assert "sub-02_task-rest" in reason and "fewer than --min-time 100 s" in reason
    assert not list(out.glob("sub-02/**/*.tsv"))  # nothing published for it
    # sub-01: the volumes kept are XCP-D's, after the 2 dummy scans.
    fd = _xcpd_fd(tables["01"])
    kept = np.flatnonzero((fd <= THRESH) & (np.arange(N_VOLUMES) >= 2))
    assert kept.size < N_VOLUMES - 2
    sidecar = json.loads(next(out.glob("sub-01/func/*_timeseries.json")).read_text())
    assert sidecar["KeptVolumes"] == kept.tolist()
    steps = sidecar["TemporalSteps"]
    assert steps["Cleaning"] == "xcpd" and steps["DummyScans"] == 2
    assert steps["FDThreshold"] == THRESH and steps["VolumesCensored"] == N_VOLUMES - 2 - kept.size
    assert steps["LowMotionSeconds"] == pytest.approx(kept.size * T_R)
    series, _ = load_timeseries(next(out.glob("sub-01/func/*_timeseries.tsv")))
    assert series.shape[0] == kept.size


def test_interpolated_output_publishes_every_volume_and_correlates_the_kept(tree, tmp_path):
    tmp, root, tables = tree
    out = tmp_path / "out"
    report = run_participant(
        root,
        out,
        participant_label=["01"],
        fd_thresh=THRESH,
        min_time=0,
        dummy_scans=3,
        output_type="interpolated",
        measures=["fc", "timeseries"],
        **_kwargs(tmp),
    )
    (record,) = report.records
    assert record["status"] == "ok"
    series, _ = load_timeseries(next(out.glob("sub-01/func/*_timeseries.tsv")))
    sidecar = json.loads(next(out.glob("sub-01/func/*_timeseries.json")).read_text())
    fd = _xcpd_fd(tables["01"])
    censored = np.flatnonzero(fd > THRESH)
    censored = censored[censored >= 3]
    assert series.shape[0] == N_VOLUMES - 3 and sidecar["KeptVolumes"] == list(range(3, 120))
    assert sidecar["InterpolatedVolumes"] == censored.tolist()
    kept = np.setdiff1d(np.arange(3, N_VOLUMES), censored) - 3
    matrix, _ = read_relmat_tsv(next(out.glob("sub-01/func/*_relmat.tsv")))
    np.testing.assert_allclose(matrix, np.corrcoef(series[kept].T), atol=1e-5)


def test_without_the_new_options_nothing_changes(tree, tmp_path):
    tmp, root, _ = tree
    out = tmp_path / "out"
    report = run_participant(root, out, participant_label=["01"], **_kwargs(tmp))
    assert report.records[0]["status"] == "ok"
    sidecar = json.loads(next(out.glob("sub-01/func/*_timeseries.json")).read_text())
    steps = sidecar["TemporalSteps"]
    assert steps["Cleaning"] == "nilearn" and steps["DummyScans"] == 0
    assert steps["FDThreshold"] is None and steps["MotionFilter"] is None
    assert sidecar["KeptVolumes"] == list(range(2, N_VOLUMES))  # nilearn's non-steady-state


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"fd_thresh": THRESH, "min_time": 300}, "--min-time 300 s is longer than the run"),
        ({"low_pass": 0.3}, "low_pass 0.3 Hz is at or above the Nyquist frequency"),
        (
            {"motion_filter_type": "lp", "band_stop_min": 20.0},
            "--band-stop-min 20 bpm is at or above the Nyquist",
        ),
        (
            {"motion_filter_type": "notch", "band_stop_min": 12.0, "band_stop_max": 10.0},
            r"--band-stop-min (12) must be below --band-stop-max (10)",
        ),
    ],
)
def test_bad_temporal_options_fail_the_run_in_one_line(tree, tmp_path, options, message):
    tmp, root, _ = tree
    out = tmp_path / "out"
    report = run_participant(root, out, participant_label=["01"], **_kwargs(tmp, **options))
    (record,) = report.records
    assert record["status"] == "error"
    assert "sub-01_task-rest" in record["error"] and message in record["error"]
    assert "\n" not in record["error"]
    assert not list(out.glob("sub-01/**/*.tsv"))


def test_fd_thresh_and_the_scrubbing_fd_threshold_must_agree(tree, tmp_path):
    tmp, root, _ = tree
    kwargs = _kwargs(tmp, strategy="scrubbing", strategy_params={"fd_threshold": 0.2})
    report = run_participant(
        root, tmp_path / "out", participant_label=["01"], fd_thresh=THRESH, **kwargs
    )
    assert (
        "fd_thresh=0.5 and strategy_params' fd_threshold=0.2 differ" in report.records[0]["error"]
    )


def test_the_temporal_steps_enter_the_fingerprint_only_when_asked():
    from connscale.bidsapp.config import ParticipantConfig

    default = ParticipantConfig("d", "o", "a", "A").parameters()
    assert not {"fd_thresh", "dummy_scans", "output_type", "head_radius"} & set(default)
    censored = ParticipantConfig("d", "o", "a", "A", fd_thresh=0.3, dummy_scans="auto")
    assert censored.parameters()["fd_thresh"] == 0.3
    assert censored.voxel_parameters()["dummy_scans"] == "auto"


@pytest.mark.parametrize("output_type", ["interpolated", "censored"])
def test_alff_of_a_censored_run_uses_xcpds_interpolated_series(tree, tmp_path, output_type):
    # XCP-D's ALFF: Lomb-Scargle on the kept volumes, the series' scale over every
    # volume after the dummy scans — XCP-D's interpolated ones where the run has them
    # (--output-type interpolated), else the kept ones linearly interpolated.
    from connscale.bidsapp.cleaning import _cleaning_context
    from connscale.bidsapp.config import ParticipantConfig
    from connscale.bidsapp.layout import find_runs
    from connscale.bidsapp.local_maps import _all_volumes
    from connscale.denoise import clean_signals
    from connscale.maps import alff

    tmp, root, _ = tree
    options = dict(fd_thresh=THRESH, min_time=0, dummy_scans=3, output_type=output_type)
    out = tmp_path / "out"
    report = run_participant(
        root, out, participant_label=["01"], measures=["alff"], **options, **_kwargs(tmp)
    )
    assert report.records[0]["status"] == "ok", report.records
    run = next(r for r in find_runs(root, participant_label=["01"]) if r.name.startswith("sub-01"))
    config = ParticipantConfig(root, out, **options, **_kwargs(tmp), measures=["alff"])
    context = _cleaning_context(config, run, N_VOLUMES)
    img = nib.load(run.bold)
    mask = np.asarray(nib.load(run.mask).dataobj) > 0
    voxels = np.asarray(img.dataobj, dtype=np.float32)[mask].T
    kept = context["operator"].volumes
    if output_type == "interpolated":
        every = clean_signals(voxels, context["series_operator"], standardize=None, device="cpu")
        assert context["series_operator"].volumes.tolist() == list(range(3, N_VOLUMES))
    else:
        cleaned = clean_signals(voxels, context["operator"], standardize=None, device="cpu")
        every = _all_volumes(cleaned, kept - 3, N_VOLUMES - 3)
    expected, _ = alff(every, T_R, sample_mask=kept - 3, device="cpu")
    path = next(out.glob("sub-01/func/*_stat-alff_*boldmap.nii.gz"))
    np.testing.assert_allclose(np.asarray(nib.load(path).dataobj)[mask], expected, rtol=1e-4)
    meta = json.loads(path.with_name(path.name.replace(".nii.gz", ".json")).read_text())
    assert meta["Periodogram"] == "Lomb-Scargle of the kept volumes"
    assert ("XCP-D's interpolated" in meta["CensoredVolumes"]) == (output_type == "interpolated")
