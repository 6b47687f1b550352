"""Cohort runner: inputs, jobs, resume, per-subject errors (serial and local engines)."""

from __future__ import annotations

import csv
import json
import os

import h5py
import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from connscale.cohort import check_job_params, find_inputs, run_cohort
from connscale.fc.pairs import pair_summary, pairwise_dfc
from connscale.io.timeseries import save_timeseries

N_TIMEPOINTS, N_REGIONS = 40, 5
PAIRS = {"window_length": 10, "step": 3, "threshold": 0.2}


def make_bids(root, subjects=("01", "02", "03"), corrupt=None):
    """derivatives/sub-XX/func/sub-XX_task-rest_timeseries.tsv (+ a corrupt one)."""
    rng = np.random.default_rng(7)
    paths = {}
    for sub in subjects:
        path = root / f"sub-{sub}" / "func" / f"sub-{sub}_task-rest_timeseries.tsv"
        path.parent.mkdir(parents=True)
        if sub == corrupt:
            path.write_text("a\tb\n1\tnot-a-number\n")
        else:
            save_timeseries(
                path,
                rng.standard_normal((N_TIMEPOINTS, N_REGIONS)),
                [f"roi{i}" for i in range(N_REGIONS)],
            )
        paths[sub] = path
    (root / "dataset_description.json").write_text("{}")
    return paths


def read_h5(path):
    with h5py.File(path, "r") as h5:
        data = {}
        h5.visititems(
            lambda name, obj: (
                data.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None
            )
        )
        return data, dict(h5.attrs)


def test_find_inputs(tmp_path):
    paths = make_bids(tmp_path / "deriv")
    items = find_inputs(tmp_path / "deriv")
    assert [i.subject for i in items] == ["01", "02", "03"]
    assert [i.name for i in items] == [f"sub-{s}_task-rest" for s in ("01", "02", "03")]
    assert find_inputs(str(tmp_path / "deriv" / "sub-0[12]" / "func" / "*.tsv")) == items[:2]
    assert find_inputs([paths["03"], paths["03"]]) == items[2:]
    flat = tmp_path / "flat"
    flat.mkdir()
    np.save(flat / "scanA.npy", np.zeros((5, 2)))
    (flat / "notes.txt").write_text("x")
    [item] = find_inputs(flat)
    assert (item.name, item.subject) == ("sub-scanA", None)  # its outputs: sub-scanA/func/


def test_find_inputs_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="No input file"):
        find_inputs(tmp_path / "missing")
    with pytest.raises(ValueError, match="holds no input"):
        find_inputs(tmp_path)
    with pytest.raises(ValueError, match="matches no input"):
        find_inputs(str(tmp_path / "*.tsv"))
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        np.save(tmp_path / folder / "sub-01_bold.npy", np.zeros((5, 2)))
    with pytest.raises(ValueError, match="same name"):
        find_inputs([tmp_path / "a", tmp_path / "b"])


def test_job_params():
    assert check_job_params("pairs", {"window_length": 8})["step"] == 1
    with pytest.raises(ValueError, match="'job' must be one of"):
        check_job_params("voxels", {})
    with pytest.raises(ValueError, match="needs 'window_length'"):
        check_job_params("pairs", {})
    with pytest.raises(ValueError, match="Unknown parameter"):
        check_job_params("fc", {"window_length": 8})
    with pytest.raises(
        ValueError,
        match=r"The 'threshold' parameter of the 'pairs' job \(pair_summary\) "
        r"must be a float in the range \[-1, 1\]. Got 3 instead.",
    ):
        check_job_params("pairs", {"window_length": 8, "threshold": 3})


@pytest.mark.parametrize(
    "job, params, message",
    [
        # 'device', 'rank', 'random_state' and 'rank' with kind='triu' used to pass
        # the cohort's own checks and fail in every subject's task; 'absolute' was
        # coerced to a bool.
        (
            "pairs",
            {**PAIRS, "device": "tpu"},
            "The 'device' parameter of the 'pairs' job (pairwise_dfc) must be",
        ),
        (
            "pairs",
            {**PAIRS, "memory_limit": "lots"},
            "The 'memory_limit' parameter of the 'pairs' job (pairwise_dfc) must be",
        ),
        (
            "dfc",
            {"window_length": 10, "kind": "lowrank", "rank": 0},
            "The 'rank' parameter of the 'dfc' job (dynamic_correlation) must be an int in the "
            "range [1, inf) or None. Got 0 instead.",
        ),
        (
            "dfc",
            {"window_length": 10, "random_state": "seed"},
            "The 'random_state' parameter of the 'dfc' job (dynamic_correlation) must be",
        ),
        (
            "dfc",
            {"window_length": 10, "kind": "sparse", "threshold": 0.5, "absolute": "yes"},
            "The 'absolute' parameter of the 'dfc' job (dynamic_correlation) must be a bool.",
        ),
        (
            "dfc",
            {"window_length": 10, "kind": "triu", "rank": 3},
            "'rank' applies to kind='lowrank' or 'factor'",
        ),
        ("fc", {"device": "gpu0"}, "The 'device' parameter of the 'fc' job (compute_correlation)"),
        ("pairs", {"window_length": 2}, "'window_length' parameter of the 'pairs' job"),
    ],
)
def test_invalid_parameters_fail_before_the_first_subject(tmp_path, job, params, message):
    make_bids(tmp_path / "deriv")
    out = tmp_path / "out"
    with pytest.raises(ValueError) as info:
        run_cohort(tmp_path / "deriv", job, out, params=params, engine="serial", verbose=0)
    assert message in str(info.value)
    assert not out.exists()  # nothing ran, nothing was written


def test_invalid_runner_arguments_fail_before_the_first_subject(tmp_path):
    make_bids(tmp_path / "deriv")
    for kwargs, message in [
        ({"engine": "threads"}, "The 'engine' parameter of run_cohort must be a str among"),
        (
            {"retries": -1},
            "The 'retries' parameter of run_cohort must be an int in the range "
            "[0, inf). Got -1 instead.",
        ),
        ({"threads_per_task": 0}, "The 'threads_per_task' parameter of run_cohort"),
        ({"batch_size": 0}, "The 'batch_size' parameter of run_cohort"),
    ]:
        with pytest.raises(ValueError) as info:
            run_cohort(
                tmp_path / "deriv",
                "pairs",
                tmp_path / "out",
                params=PAIRS,
                verbose=0,
                **{"engine": "serial", **kwargs},
            )
        assert message in str(info.value)
        assert not (tmp_path / "out").exists()


def test_pairs_job_outputs(tmp_path):
    paths = make_bids(tmp_path / "deriv")
    report = run_cohort(
        tmp_path / "deriv", "pairs", tmp_path / "out", params=PAIRS, engine="serial", verbose=0
    )
    assert report.n_ok == 3 and report.n_failed == 0
    for sub, path in paths.items():
        data, attrs = read_h5(
            tmp_path
            / "out"
            / f"sub-{sub}"
            / "func"
            / f"sub-{sub}_task-rest_meas-PearsonCorrelation_pairs.h5"
        )
        x = np.loadtxt(path, skiprows=1)
        expected = pairwise_dfc(x[None], 10, 3, device="cpu")
        assert_allclose(data["courses"], expected.courses[0], atol=1e-6)
        assert_array_equal(data["pairs"], expected.pairs)
        assert_array_equal(data["window_onsets"], expected.window_starts)
        summary = pair_summary(expected.courses, threshold=0.2)
        assert_allclose(data["summary/mean"], summary.mean[0], atol=1e-6)
        assert_allclose(data["summary/fraction_above"], summary.fraction_above[0])
        assert list(data["labels"].astype(str)) == [f"roi{i}" for i in range(N_REGIONS)]
        assert attrs["window_length"] == 10 and attrs["step"] == 3
    saved = json.loads(report.report_path.read_text())
    assert saved["counts"] == {"ok": 3, "skipped": 0, "error": 0}


def test_fc_job(tmp_path):
    from connscale.io.hdf5 import load_relmat

    paths = make_bids(tmp_path / "deriv", subjects=("01",))
    run_cohort(
        tmp_path / "deriv",
        "fc",
        tmp_path / "out",
        engine="serial",
        params={"dtype": "float64"},
        verbose=0,
    )
    relmat, attrs = load_relmat(
        tmp_path / "out" / "sub-01" / "func" / "sub-01_task-rest_meas-PearsonCorrelation_relmat.h5"
    )
    x = np.loadtxt(paths["01"], skiprows=1)
    assert_allclose(relmat, np.corrcoef(x.T)[np.triu_indices(N_REGIONS, 1)], atol=1e-12)
    assert attrs["kind"] == "triu"


def test_dfc_job(tmp_path):
    from connscale import dynamic_correlation, load_dynamic

    paths = make_bids(tmp_path / "deriv", subjects=("01", "02"))
    params = {"window_length": 12, "step": 5, "kind": "sparse", "threshold": 0.3}
    report = run_cohort(
        tmp_path / "deriv", "dfc", tmp_path / "out", params=params, engine="serial", verbose=0
    )
    assert report.n_ok == 2
    output = (
        tmp_path / "out" / "sub-02" / "func" / "sub-02_task-rest_meas-PearsonCorrelation_dfc.h5"
    )
    stored = load_dynamic(output)
    expected = dynamic_correlation(
        np.loadtxt(paths["02"], skiprows=1), 12, 5, kind="sparse", threshold=0.3, device="cpu"
    )
    assert len(stored) == len(expected) == (N_TIMEPOINTS - 12) // 5 + 1
    for k in range(len(expected)):
        assert_allclose(stored.to_dense(k), expected.to_dense(k), atol=1e-6)
    stored.close()
    again = run_cohort(
        tmp_path / "deriv", "dfc", tmp_path / "out", params=params, engine="serial", verbose=0
    )
    assert again.n_skipped == 2
    # Other parameters: redone (the old file is replaced, not refused).
    other = run_cohort(
        tmp_path / "deriv",
        "dfc",
        tmp_path / "out",
        params={"window_length": 10},
        engine="serial",
        verbose=0,
    )
    assert other.n_ok == 2
    with pytest.raises(ValueError, match="needs a 'rank'"):
        check_job_params("dfc", {"window_length": 10, "kind": "lowrank"})


def test_corrupt_input_is_reported_and_others_kept(tmp_path):
    make_bids(tmp_path / "deriv", subjects=("01", "02", "03", "04"), corrupt="02")
    report = run_cohort(
        tmp_path / "deriv",
        "pairs",
        tmp_path / "out",
        params=PAIRS,
        engine="local",
        n_jobs=2,
        batch_size=2,
        verbose=0,
    )
    assert (report.n_ok, report.n_failed) == (3, 1)
    failed = [r for r in report.records if r["status"] == "error"]
    assert failed[0]["subject"] == "02" and "numeric" in failed[0]["error"]
    with open(report.errors_path, newline="") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    # the errors table of every batch (name, input, status, measure, error)
    assert [(r["name"], r["status"]) for r in rows] == [("sub-02_task-rest", "error")]
    for sub in ("01", "03", "04"):
        assert (
            tmp_path
            / "out"
            / f"sub-{sub}"
            / "func"
            / f"sub-{sub}_task-rest_meas-PearsonCorrelation_pairs.h5"
        ).exists()
    assert not (
        tmp_path / "out" / "sub-02" / "func" / "sub-02_task-rest_meas-PearsonCorrelation_pairs.h5"
    ).exists()
    # Fixing the input and re-running does only the failed scan.
    make_bids(tmp_path / "fixed", subjects=("02",))
    os.replace(
        tmp_path / "fixed" / "sub-02" / "func" / "sub-02_task-rest_timeseries.tsv",
        tmp_path / "deriv" / "sub-02" / "func" / "sub-02_task-rest_timeseries.tsv",
    )
    again = run_cohort(
        tmp_path / "deriv", "pairs", tmp_path / "out", params=PAIRS, engine="serial", verbose=0
    )
    assert (again.n_ok, again.n_skipped, again.n_failed) == (1, 3, 0)
    assert again.errors_path.read_text().splitlines() == ["name\tinput\tstatus\tmeasure\terror"]


def test_resume_after_crash(tmp_path):
    make_bids(tmp_path / "deriv", subjects=("01", "02", "03"))
    out = tmp_path / "out"
    first = run_cohort(tmp_path / "deriv", "pairs", out, params=PAIRS, engine="serial", verbose=0)
    outputs = [first.records[i]["output"] for i in range(3)]
    reference = [read_h5(p)[0]["courses"] for p in outputs]
    # Simulate a crash: scan 02's output never got renamed into place,
    # a partial temporary file is left, scan 03 was never started.
    os.remove(outputs[1])
    os.remove(outputs[2])
    partial = (
        out / "sub-02" / "func" / ".sub-02_task-rest_meas-PearsonCorrelation_pairs.h5.abc123.tmp"
    )
    partial.write_bytes(b"\x89HDF partial")
    stamp = os.stat(outputs[0]).st_mtime_ns
    resumed = run_cohort(tmp_path / "deriv", "pairs", out, params=PAIRS, engine="serial", verbose=0)
    assert [r["status"] for r in resumed.records] == ["skipped", "ok", "ok"]
    # The device does not change what is computed: still complete.
    moved = run_cohort(
        tmp_path / "deriv",
        "pairs",
        out,
        params={**PAIRS, "device": "auto"},
        engine="serial",
        verbose=0,
    )
    assert moved.n_skipped == 3
    assert os.stat(outputs[0]).st_mtime_ns == stamp
    assert not partial.exists()
    for path, expected in zip(outputs, reference):
        assert_array_equal(read_h5(path)[0]["courses"], expected)
    # Other parameters: the outputs are redone, not skipped.
    changed = run_cohort(
        tmp_path / "deriv", "pairs", out, params={**PAIRS, "step": 2}, engine="serial", verbose=0
    )
    assert changed.n_ok == 3
    assert read_h5(outputs[0])[0]["courses"].shape[1] == (N_TIMEPOINTS - 10) // 2 + 1


def test_nifti_needs_atlas_or_mask(tmp_path):
    nib = pytest.importorskip("nibabel")
    img = nib.Nifti1Image(np.random.default_rng(0).standard_normal((3, 3, 3, 12)), np.eye(4))
    path = tmp_path / "sub-05" / "func" / "sub-05_task-rest_bold.nii.gz"
    path.parent.mkdir(parents=True)
    img.to_filename(path)
    report = run_cohort(
        tmp_path,
        "pairs",
        tmp_path / "out",
        params={"window_length": 4},
        engine="serial",
        verbose=0,
    )
    assert report.records[0]["subject"] == "05"
    assert "give an 'atlas'" in report.records[0]["error"]


@pytest.mark.parametrize(
    "job, params",
    [("fc", {}), ("pairs", PAIRS), ("dfc", {"window_length": 10, "step": 3})],
)
def test_outputs_made_before_are_read_back_not_recomputed(tmp_path, job, params):
    # The outputs the current code writes are the "before" of any later
    # runner: their in-file fingerprint (attrs) is read, they are skipped.
    make_bids(tmp_path / "deriv", subjects=("01", "02"))
    out = tmp_path / "out"
    before = run_cohort(tmp_path / "deriv", job, out, params=params, engine="serial", verbose=0)
    outputs = [r["output"] for r in before.records]
    stamps = [os.stat(p).st_mtime_ns for p in outputs]
    for path in outputs:
        with h5py.File(path, "r") as h5:
            assert "cohort_fingerprint" in h5.attrs and "cohort_job" in h5.attrs
    again = run_cohort(
        tmp_path / "deriv", job, out, params=params, engine="local", n_jobs=2, verbose=0
    )
    assert [r["status"] for r in again.records] == ["skipped", "skipped"]
    assert [os.stat(p).st_mtime_ns for p in outputs] == stamps


def test_an_output_without_fingerprint_is_refused_in_one_line_never_recomputed(tmp_path):
    make_bids(tmp_path / "deriv", subjects=("01", "02"))
    out = tmp_path / "out"
    first = run_cohort(tmp_path / "deriv", "fc", out, engine="serial", verbose=0)
    path = first.records[0]["output"]
    with h5py.File(path, "r+") as h5:  # the attrs of an output no fingerprint was kept for
        del h5.attrs["cohort_fingerprint"]
    stamp = os.stat(path).st_mtime_ns
    again = run_cohort(tmp_path / "deriv", "fc", out, engine="serial", verbose=0)
    record = again.records[0]
    assert [r["status"] for r in again.records] == ["error", "skipped"]
    assert "\n" not in record["error"] and "--overwrite" in record["error"]
    assert "records no input fingerprint" in record["error"]
    assert os.stat(path).st_mtime_ns == stamp
    replaced = run_cohort(tmp_path / "deriv", "fc", out, engine="serial", overwrite=True, verbose=0)
    assert [r["status"] for r in replaced.records] == ["ok", "ok"]


def test_device_auto_is_resolved_and_recorded(tmp_path):
    make_bids(tmp_path / "deriv", subjects=("01",))
    report = run_cohort(tmp_path / "deriv", "fc", tmp_path / "out", engine="local", verbose=0)
    assert report.device == "cpu"  # many workers share the machine: never CUDA
    log = json.loads(report.report_path.read_text())
    assert log["device"] == log["params"]["device"] == "cpu"
    serial = run_cohort(tmp_path / "deriv", "fc", tmp_path / "o2", engine="serial", verbose=0)
    assert serial.device == ("cuda" if torch_cuda() else "cpu")


def torch_cuda() -> bool:
    import torch

    return torch.cuda.is_available()
