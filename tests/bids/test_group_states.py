"""DFC states at the BIDS-App's group level: participant with DFC, then group with states."""

import json
import re
import shutil

import nibabel as nib
import numpy as np
import pytest

import connscale
from connscale.bidsapp.group import run_group
from connscale.bidsapp.participant import run_participant
from connscale.cli.main import main
from connscale.io.bids import from_pybids, parse_bids_name, pybids_config
from connscale.io.relmat import read_relmat_tsv
from connscale.io.states import read_state_features, read_state_sequence
from connscale.states import DFCStates
from tests.bids._fmriprep import ATLAS, T_R, atlas_img, make_fmriprep
from tests.bids._pybids import assert_pybids_reads

K = 3
WINDOW, STEP = 10, 2
RUNS = [("01", None, "rest", "1"), ("01", None, "rest", "2")] + [
    (s, None, "rest", None) for s in ("02", "03", "04")
]


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("states")
    root = make_fmriprep(tmp / "fmriprep", RUNS)
    nib.save(atlas_img(), tmp / ATLAS)
    out = tmp / "out"
    participant = ["bids", str(root), str(out), "participant", "--atlas", str(tmp / ATLAS)]
    participant += ["--atlas-name", "Slab4", "--denoise", "none", "--measures", "fc,states"]
    participant += ["--window-length", str(WINDOW), "--step", str(STEP), "--backend", "serial"]
    assert main(participant + ["--no-reports", "-q"]) == 0
    participants = tmp / "participants.tsv"
    participants.write_text(
        "participant_id\tdx\nsub-01\tA\nsub-02\tB\nsub-03\tA\nsub-04\tB\n", encoding="utf-8"
    )
    group = ["bids", str(root), str(out), "group", "--measures", "states", "--states", str(K)]
    group += ["--participants", str(participants), "--target", "dx", "--folds", "2"]
    assert main(group + ["--repeats", "2", "-q"]) == 0
    return tmp, out, group


def _dfc_files(out):
    return sorted(out.glob("sub-*/func/*_dfc.h5"))


def test_outputs_exist_and_parse_with_pybids(cohort):
    from bids.layout import parse_file_entities

    _, out, _ = cohort
    dfc = _dfc_files(out)
    assert len(dfc) == len(RUNS)  # 'states' made the participant level write DFC
    written = [p for d in dfc for p in d.parent.glob(d.name.replace("_dfc.h5", "_*"))]
    per_run = [p for p in written if p.name.endswith(("_dfcstates.tsv", "_features.tsv"))]
    assert len(per_run) == 2 * len(RUNS)
    centres = sorted((out / "group").glob("*_stat-state*_relmat.tsv"))
    assert len(centres) == K
    summary = out / "group" / "seg-Slab4_meas-PearsonCorrelation_desc-none_dfcstates.json"
    assert summary.is_file()
    config = ["bids", "derivatives", pybids_config()]
    for path in per_run + centres + [summary]:
        assert path.with_suffix(".json").is_file()
        expected = {
            k: v for k, v in parse_bids_name(path).items() if k not in ("suffix", "extension")
        }
        assert from_pybids(parse_file_entities(path, config=config)) == expected
        assert expected["seg"] == "Slab4" and expected["desc"] == "none"
    for path in per_run:  # beside the run's DFC, with its source entities
        assert path.name.split("_seg-")[0] in {d.name.split("_seg-")[0] for d in dfc}
    assert [parse_bids_name(p)["stat"] for p in centres] == [f"state{j}" for j in (1, 2, 3)]
    assert not list(out.rglob("*.staging"))


def test_states_equal_dfcstates_fitted_directly(cohort):
    _, out, _ = cohort
    windows = []
    for path in _dfc_files(out):
        with connscale.load_dynamic(path) as result:
            windows.append(np.stack([np.asarray(result[w]) for w in range(len(result))]))
    direct = DFCStates(K, metric="l1", random_state=0, device="cpu").fit(windows)
    for j in range(K):
        matrix, names = read_relmat_tsv(
            out
            / "group"
            / f"seg-Slab4_meas-PearsonCorrelation_stat-state{j + 1}_desc-none_relmat.tsv"
        )
        assert names == ["label-1", "label-2", "label-3", "label-4"]
        np.testing.assert_allclose(matrix, direct.state_matrices()[j], atol=1e-6)
    expected = direct.state_features()
    for i, path in enumerate(_dfc_files(out)):
        sequence = read_state_sequence(str(path).replace("_dfc.h5", "_dfcstates.tsv"))
        np.testing.assert_array_equal(sequence["states"], direct.labels_[i])
        np.testing.assert_allclose(sequence["onset_s"], sequence["onset"] * T_R)
        _, X, names = read_state_features(str(path).replace("_dfc.h5", "_features.tsv"))
        assert names == expected.feature_names
        np.testing.assert_allclose(X[0], expected.X[i], rtol=1e-10, atol=1e-12)
    summary = json.loads(
        (out / "group" / "seg-Slab4_meas-PearsonCorrelation_desc-none_dfcstates.json").read_text()
    )
    assert summary["NumberOfStates"] == K and summary["Metric"] == "l1"
    assert summary["Inertia"] == pytest.approx(direct.inertia_, rel=1e-6)
    np.testing.assert_allclose(
        summary["FractionOfWindows"],
        np.bincount(np.concatenate(direct.labels_), minlength=K) / sum(map(len, windows)),
    )


def test_group_table_and_classification_use_the_state_features(cohort):
    _, out, _ = cohort
    group = out / "group"
    rows = [
        line.split("\t")
        for line in (group / "seg-Slab4_meas-PearsonCorrelation_desc-none_features.tsv")
        .read_text()
        .splitlines()
    ]
    header = rows[0]
    states = [c for c in header if re.match(r"(fraction_time|mean_dwell_time|transition)_", c)]
    assert len(states) == 2 * K + K * K and "n_transitions" in header
    assert [r[0] for r in rows[1:]] == ["sub-01", "sub-02", "sub-03", "sub-04"]
    # sub-01: the mean of its two runs' features.
    runs = sorted(out.glob("sub-01/func/*_features.tsv"))
    assert len(runs) == 2
    mean = np.mean([read_state_features(p)[1][0] for p in runs], axis=0)
    first = header.index("fraction_time_state-1")
    np.testing.assert_allclose(np.array(rows[1][first:], dtype=float), mean, rtol=1e-7)
    result = json.loads(
        (group / "seg-Slab4_meas-PearsonCorrelation_desc-none_classification.json").read_text()
    )
    assert result["n_features"] == len(header) - 1 == 6 + 2 * K + 1 + K * K
    assert "DFC state features" in result["features"] and result["n_subjects"] == 4
    page = (group / "seg-Slab4_meas-PearsonCorrelation_desc-none_report.html").read_text()
    # connectome, QC-FC, state matrices, one run's sequence, transitions
    assert page.count('<img src="data:image/png;base64,') == 5


def test_rerun_resumes_and_another_k_is_refused(cohort, tmp_path, capsys):
    tmp, out, group = cohort
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    group = [str(copy) if a == str(out) else a for a in group]
    published = {p: p.stat().st_mtime_ns for p in copy.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main(group + ["--repeats", "2"]) == 0
    assert "already published" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in copy.rglob("*") if p.is_file()} == published

    same = {"participants": tmp / "participants.tsv", "target": "dx", "folds": 2, "repeats": 2}
    with pytest.raises(FileExistsError, match="n_states: 3 -> 4.*--overwrite"):
        run_group(copy, states=True, n_states=4, **same)
    with pytest.raises(FileExistsError, match="target: 'dx' -> None"):
        run_group(copy, states=True)  # the classification's parameters are kept too
    assert {p: p.stat().st_mtime_ns for p in copy.rglob("*") if p.is_file()} == published

    result = run_group(copy, states=True, n_states=4, overwrite=True, **same)
    assert result.classification["n_features"] == 6 + 2 * 4 + 1 + 4 * 4
    assert result.states.n_states == 4 and not result.states.resumed
    assert len(list((copy / "group").glob("*_stat-state*_relmat.tsv"))) == 4
    result = run_group(copy, states=True, n_states=2, overwrite=True, **same)
    assert len(list((copy / "group").glob("*_stat-state*_relmat.tsv"))) == 2  # none left over
    assert len(result.feature_names) == 6 + 2 * 2 + 1 + 2 * 2


def test_states_need_every_runs_dfc(cohort, tmp_path):
    tmp, _, _ = cohort
    out = tmp_path / "out"
    common = {"atlas": tmp / ATLAS, "atlas_name": "Slab4", "strategy": "none"}
    common.update(backend="serial", reports=False, window_length=WINDOW, step=STEP)
    run_participant(tmp / "fmriprep", out, measures=["fc"], participant_label="02", **common)
    run_participant(tmp / "fmriprep", out, measures=["fc", "dfc"], participant_label="03", **common)
    with pytest.raises(ValueError, match=r"1 of 2 runs have none \(sub-02_.*--measures dfc"):
        run_group(out, states=True)
    assert not (out / "group").exists()
    result = run_group(out)  # not asked for: no states (a warning says why)
    assert result.states is None and len(result.feature_names) == 6
    assert not list(out.rglob("*_dfcstates*"))


def test_dfc_summaries_as_group_features(cohort, tmp_path):
    """features=('edges', 'dfc'): each edge's mean and standard deviation of
    Fisher z over a run's windows, runs averaged per participant, as read
    from the participant's _dfc.h5 with numpy."""
    from connscale.io.dfc import read_dfc_windows

    tmp, out, _ = cohort
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    same = {"participants": tmp / "participants.tsv", "target": "dx", "folds": 2, "repeats": 2}
    result = run_group(copy, features=("edges", "dfc"), overwrite=True, **same)
    n_edges = 6
    assert len(result.feature_names) == 3 * n_edges
    assert result.feature_names[n_edges].endswith(":dfc_mean")
    assert result.feature_names[-1].endswith(":dfc_std")
    assert result.classification["n_features"] == 3 * n_edges
    by_subject = {}
    for path in _dfc_files(copy):
        windows, _ = read_dfc_windows(path)
        z = np.arctanh(np.clip(windows, -1 + 1e-7, 1 - 1e-7))
        row = np.concatenate([z.mean(0), z.std(0)])
        by_subject.setdefault(path.name.split("_")[0].removeprefix("sub-"), []).append(row)
    for subject, row in zip(result.subjects, result.features):
        np.testing.assert_allclose(
            row[n_edges:], np.mean(by_subject[subject], axis=0), rtol=1e-5, atol=1e-6
        )
    assert result.features[:, n_edges:].std() > 0  # not a constant column


def test_dfc_summaries_need_every_runs_dfc(cohort, tmp_path):
    tmp, _, _ = cohort
    out = tmp_path / "out"
    common = {"atlas": tmp / ATLAS, "atlas_name": "Slab4", "strategy": "none"}
    common.update(backend="serial", reports=False)
    run_participant(tmp / "fmriprep", out, measures=["fc"], participant_label="02", **common)
    with pytest.raises(ValueError, match="'dfc' need every run's DFC"):
        run_group(out, features=("edges", "dfc"))


def test_classify_reads_the_group_feature_table(cohort, tmp_path):
    """The group level's feature table (edges and state features) loads as
    it is written, and ``connscale classify`` runs on it."""
    from connscale.classify import load_features

    tmp, out, _ = cohort
    table = out / "group" / "seg-Slab4_meas-PearsonCorrelation_desc-none_features.tsv"
    rows = [line.split("\t") for line in table.read_text().splitlines()]
    features = load_features(table)
    assert features.subjects == ["01", "02", "03", "04"]
    assert features.feature_names == rows[0][1:]
    np.testing.assert_array_equal(features.X, np.array([r[1:] for r in rows[1:]], dtype=float))
    assert features.statistic.count("edge") == 6 and features.region_labels == [
        "label-1",
        "label-2",
        "label-3",
        "label-4",
    ]
    with pytest.raises(ValueError, match="Fisher z already"):
        load_features(table, fisher_z_transform=True)
    classify = ["classify", str(table), "--participants", str(tmp / "participants.tsv")]
    classify += ["--label", "dx", "--folds", "2", "--repeats", "2", "--out", str(tmp_path)]
    assert main(classify + ["-q"]) == 0
    metrics = json.loads((tmp_path / "classify_metrics.json").read_text())
    assert metrics["n_subjects"] == 4 and metrics["n_features"] == len(rows[0]) - 1
    top = (tmp_path / "classify_features.tsv").read_text().splitlines()[1:]
    assert {line.split("\t")[2] for line in top} <= set(rows[0][1:])


def test_folds_above_the_smaller_class_are_said_and_recorded(cohort, tmp_path, caplog):
    """Two participants per class cannot fill 3 stratified folds: 2 are used,
    with a warning line, and the classification JSON says so."""
    tmp, out, _ = cohort
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    same = {"participants": tmp / "participants.tsv", "target": "dx", "repeats": 2}
    with caplog.at_level("WARNING", logger="connscale"):
        result = run_group(copy, folds=3, overwrite=True, **same)
    said = [r.getMessage() for r in caplog.records if "folds" in r.getMessage()]
    assert len(said) == 1 and "3 folds asked for" in said[0] and "2 folds used" in said[0]
    recorded = json.loads(
        (
            copy / "group" / "seg-Slab4_meas-PearsonCorrelation_desc-none_classification.json"
        ).read_text()
    )
    assert recorded == result.classification
    assert recorded["folds"] == 2 and recorded["folds_requested"] == 3
    assert recorded["notes"] == [said[0].removeprefix("group: ")]
    caplog.clear()
    with caplog.at_level("WARNING", logger="connscale"):
        result = run_group(copy, folds=2, overwrite=True, **same)
    assert not [r for r in caplog.records if "folds" in r.getMessage()]
    assert result.classification["folds"] == result.classification["folds_requested"] == 2
    assert result.classification["notes"] == []


def test_pybids_indexes_the_participant_and_group_outputs(cohort):
    tmp, out, _ = cohort
    assert_pybids_reads(out, source=tmp / "fmriprep")
