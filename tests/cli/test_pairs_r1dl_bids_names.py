"""pairs and r1dl name their outputs as BIDS derivatives that pybids reads back, publish one
set per folder, resume, refuse a result of other parameters, and feed connscale classify."""

import json

import nibabel as nib
import numpy as np
import pytest
from numpy.testing import assert_allclose

from connscale.cli.main import main
from connscale.fc.pairs import pair_summary, pairwise_dfc
from connscale.io.bids import from_pybids, pybids_config
from connscale.io.timeseries import load_timeseries, save_timeseries
from tests.bids._pybids import assert_pybids_reads

SOURCE = {"ses": "2", "task": "rest", "run": "1", "desc": "simple"}
PAIRS = ["--window", "8", "--step", "3", "--device", "cpu", "-q"]


def _pybids(path):
    from bids.layout import parse_file_entities

    parsed = parse_file_entities(str(path), config=["bids", "derivatives", pybids_config()])
    return from_pybids(parsed), parsed["suffix"], parsed["extension"]


def _outputs(out):
    """Every file the commands wrote, by path relative to ``out`` (hidden ones left out)."""
    return sorted(
        p.relative_to(out).as_posix()
        for p in out.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(out).parts)
    )


def _stamps(folder):
    return {p.name: p.stat().st_mtime_ns for p in folder.iterdir() if not p.name.startswith(".")}


@pytest.fixture
def series(tmp_path):
    """Two BIDS-named region series of different lengths and one plain-named."""
    rng = np.random.default_rng(3)
    labels = ["DMN", "SMN", "VIS", "SAL"]
    paths = []
    for sub, n_timepoints in (("01", 30), ("02", 24)):
        path = tmp_path / f"sub-{sub}_ses-2_task-rest_run-1_desc-simple_timeseries.tsv"
        save_timeseries(path, rng.standard_normal((n_timepoints, 4)), labels)
        paths.append(path)
    plain = tmp_path / "scan_3.npy"
    np.save(plain, rng.standard_normal((26, 4)))
    return paths, plain


def test_pairs_names_parse_back(series, tmp_path):
    (a, b), plain = series
    out = tmp_path / "out"
    assert main(["pairs", str(a), str(b), "--out", str(out), *PAIRS]) == 0
    group = "ses-2_task-rest_run-1_meas-PearsonCorrelation_desc-simple_features"
    stem = "ses-2_task-rest_run-1_meas-PearsonCorrelation_desc-simple_pairs"
    files = {
        f"sub-{sub}/ses-2/func/sub-{sub}_{stem}{ext}"
        for sub in ("01", "02")
        for ext in (".h5", ".json", ".tsv", "_manifest.json")
    }
    files |= {f"{group}{ext}" for ext in (".tsv", ".json", "_log.json", "_manifest.json")}
    files |= {f"{group}_report.html", "dataset_description.json"}
    assert _outputs(out) == sorted(files)
    for name in _outputs(out):
        if name == "dataset_description.json":
            continue
        entities, suffix, extension = _pybids(out / name)
        expected = {**SOURCE, "meas": "PearsonCorrelation"}
        if name.startswith("sub-"):
            expected["sub"] = name[4:6]
        assert entities == expected, name
        if extension in (".h5", ".tsv") or name.endswith(("pairs.json", "features.json")):
            assert suffix == ("pairs" if name.startswith("sub-") else "features"), name
    description = json.loads((out / "dataset_description.json").read_text())
    assert description["GeneratedBy"][0]["Name"] == "connscale"
    assert_pybids_reads(out)

    # A plain name gets a sub- label from its letters and digits, as fc and dfc give it;
    # with nothing in common the root set has only meas-.
    other = tmp_path / "other"
    assert main(["pairs", str(a), str(plain), "--out", str(other), *PAIRS]) == 0
    h5 = other / "sub-scan3" / "func" / "sub-scan3_meas-PearsonCorrelation_pairs.h5"
    assert _pybids(h5) == ({"sub": "scan3", "meas": "PearsonCorrelation"}, "pairs", ".h5")
    table = other / "meas-PearsonCorrelation_features.tsv"
    assert _pybids(table) == ({"meas": "PearsonCorrelation"}, "features", ".tsv")
    rows = [line.split("\t")[0] for line in table.read_text().splitlines()]
    assert rows == ["scan", "sub-01_ses-2_task-rest_run-1_desc-simple", "sub-scan3"]


def test_pairs_resumes_input_by_input(series, tmp_path, monkeypatch, capsys):
    import connscale.io.pairs as pairs_io

    (a, b), _ = series
    fresh, out = tmp_path / "fresh", tmp_path / "out"
    argv = ["pairs", str(a), str(b), *PAIRS]
    assert main([*argv, "--out", str(fresh)]) == 0
    features = "ses-2_task-rest_run-1_meas-PearsonCorrelation_desc-simple_features"
    func_a, func_b = (out / f"sub-{s}" / "ses-2" / "func" for s in ("01", "02"))

    # A run that stops while writing its second input: the first input's set is published.
    write = pairs_io.write_pair_summary
    calls = []

    def fail_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise OSError("disk gone")
        return write(*args, **kwargs)

    monkeypatch.setattr(pairs_io, "write_pair_summary", fail_second)
    assert main([*argv, "--out", str(out)]) == 2
    monkeypatch.setattr(pairs_io, "write_pair_summary", write)
    assert len(list(func_a.glob("*_manifest.json"))) == 1
    assert not list(func_b.glob("*_manifest.json")) and not (out / f"{features}.tsv").exists()
    done = _stamps(func_a)
    capsys.readouterr()

    assert main([*argv, "--out", str(out)]) == 0
    assert "2 scan(s) (1 computed)" in capsys.readouterr().out
    assert _stamps(func_a) == done  # not redone
    log = json.loads((out / f"{features}_log.json").read_text())
    assert log["results"]["n_computed"] == 1 and log["results"]["n_windows"] == [8, 6]
    # The feature table of the resumed run (the first input's summary read back) is the
    # table of an uninterrupted run.
    assert (out / f"{features}.tsv").read_text() == (fresh / f"{features}.tsv").read_text()

    every = {**_stamps(func_a), **_stamps(func_b), **_stamps(out)}
    assert main([*argv, "--out", str(out)]) == 0
    assert "nothing to do" in capsys.readouterr().out
    assert {**_stamps(func_a), **_stamps(func_b), **_stamps(out)} == every


def test_pairs_other_parameters_are_refused(series, tmp_path, capsys):
    (a, _), _ = series
    out = tmp_path / "out"
    argv = ["pairs", str(a), "--out", str(out), "--device", "cpu", "-q"]
    assert main([*argv, "--window", "8"]) == 0
    (store,) = out.rglob("*_pairs.h5")
    first = store.read_bytes()
    capsys.readouterr()
    assert main([*argv, "--window", "10"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "other parameters" in err and "--overwrite" in err
    assert "window: 8 -> 10" in err and store.read_bytes() == first
    assert main([*argv, "--window", "10", "--overwrite"]) == 0
    assert store.read_bytes() != first
    sidecar = json.loads(store.with_suffix(".json").read_text())
    assert sidecar["WindowLength"] == 10


def test_classify_reads_the_pairs_outputs(tmp_path):
    from connscale.classify.features import load_features
    from connscale.datasets import simulate_cohort

    sim = simulate_cohort(10, 4, 60, effect_edges=2, effect_size=0.9, random_state=2)
    written = sim.write(tmp_path / "data")
    out = tmp_path / "pairs"
    argv = ["pairs", *map(str, written["timeseries"]), "--window", "12", "--step", "4"]
    assert main([*argv, "--threshold", "0.3", "--out", str(out), "--device", "cpu", "-q"]) == 0
    stores = sorted(out.glob("sub-*/func/*_pairs.h5"))
    summaries = sorted(out.glob("sub-*/func/*_pairs.tsv"))
    assert len(stores) == len(summaries) == 10
    statistics = ("mean", "std", "fraction_above")
    from_stores = load_features(stores, statistics=statistics)
    from_tables = load_features(summaries, statistics=statistics)
    assert from_stores.subjects == from_tables.subjects == [p.name[4:6] for p in stores]
    assert_allclose(from_stores.X, from_tables.X, atol=1e-6)
    series, _ = load_timeseries(written["timeseries"][0])
    ref = pair_summary(pairwise_dfc(series[None], 12, 4, device="cpu").courses, threshold=0.3)
    assert_allclose(from_stores.X[0], ref.features()[0], atol=1e-5)
    for files, name in ((stores, "h5"), (summaries, "tsv")):
        result = tmp_path / f"classify_{name}"
        status = main(
            [
                "classify",
                *map(str, files),
                "--participants",
                str(written["participants"]),
                "--label",
                "group",
                "--repeats",
                "1",
                "--folds",
                "2",
                "--out",
                str(result),
                "-q",
            ]
        )
        assert status == 0
        metrics = json.loads((result / "classify_metrics.json").read_text())
        assert metrics["n_subjects"] == 10 and metrics["n_features"] == 2 * 6


@pytest.fixture
def bold(tmp_path):
    rng = np.random.default_rng(1)
    shape = (5, 4, 3)
    mask = np.zeros(shape, np.uint8)
    mask[1:4, 1:3] = 1
    data = rng.standard_normal(shape + (30,)).astype(np.float32) + 50
    affine = np.diag([3.0, 3.0, 3.0, 1.0])
    path = tmp_path / "sub-01_ses-2_task-rest_run-1_space-MNI_desc-preproc_bold.nii.gz"
    nib.Nifti1Image(data, affine).to_filename(path)
    nib.Nifti1Image(mask, affine).to_filename(tmp_path / "mask.nii.gz")
    return path, tmp_path / "mask.nii.gz"


def test_r1dl_names_parse_back(bold, tmp_path, capsys):
    path, mask = bold
    out = tmp_path / "out"
    argv = ["r1dl", str(path), "--mask", str(mask), "-k", "2", "-r", "4", "--out", str(out)]
    argv += ["--device", "cpu", "--dtype", "float64", "-q"]
    assert main(argv) == 0
    func = "sub-01/ses-2/func/sub-01_ses-2_task-rest_run-1_space-MNI_meas-R1DL"
    names = [
        "components.json",
        "components.nii.gz",
        "components.npz",
        "components.png",
        "components_log.json",
        "components_manifest.json",
        "components_report.html",
        "iterations.json",
        "iterations.tsv",
        "mixing.json",
        "mixing.tsv",
    ]
    assert _outputs(out) == sorted(["dataset_description.json"] + [f"{func}_{n}" for n in names])
    source = {"sub": "01", "ses": "2", "task": "rest", "run": "1", "space": "MNI"}
    for name in names:
        entities, suffix, extension = _pybids(out / f"{func}_{name}")
        assert entities == {**source, "meas": "R1DL"}, name
        assert f"{suffix}{extension}" == name.rsplit("_", 1)[-1], name
    sidecar = json.loads((out / f"{func}_components.json").read_text())
    assert sidecar["NumberOfComponents"] == 2 and sidecar["Sparsity"] == 4
    assert sidecar["Sources"] == [
        "../sub-01_ses-2_task-rest_run-1_space-MNI_desc-preproc_bold.nii.gz",
        "../mask.nii.gz",
    ]
    mixing = json.loads((out / f"{func}_mixing.json").read_text())
    header = (out / f"{func}_mixing.tsv").read_text().splitlines()[0].split("\t")
    assert header == ["network_000", "network_001"] and set(header) <= set(mixing)
    assert nib.load(out / f"{func}_components.nii.gz").shape == (5, 4, 3, 2)
    assert_pybids_reads(out)
    # Other parameters: never replaced silently.
    capsys.readouterr()
    assert main([*argv, "--seed", "1"]) == 2
    assert "other parameters (seed: 0 -> 1)" in capsys.readouterr().err
