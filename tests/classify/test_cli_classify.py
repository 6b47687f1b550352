"""connscale classify end to end on a simulated cohort."""

import csv
import json

import numpy as np
import pytest

from connscale.cli import main as cli_main
from connscale.datasets import simulate_cohort
from tests.report._html_check import check_html, decoded_images


@pytest.fixture
def cohort_dir(tmp_path, monkeypatch):
    # Only this command: the other sub-command modules are not needed here.
    monkeypatch.setattr(cli_main, "_COMMANDS", ("classify",))
    cohort = simulate_cohort(30, 8, 150, effect_edges=2, effect_size=0.5, random_state=4)
    data = tmp_path / "data"
    written = cohort.write(data)
    labels = cohort.region_labels
    paths = []
    for subject, ts in zip(cohort.subjects, cohort.timeseries):
        matrix = np.corrcoef(ts, rowvar=False)
        path = data / f"sub-{subject}_relmat.tsv"
        with open(path, "w", newline="") as handle:
            writer = csv.writer(handle, delimiter="\t")
            writer.writerow(labels)
            writer.writerows(matrix.tolist())
        paths.append(str(path))
    return cohort, paths, str(written["participants"]), tmp_path / "out"


def test_classify_writes_everything(cohort_dir):
    cohort, paths, participants, out = cohort_dir
    status = cli_main.main(
        [
            "classify",
            *paths,
            "--participants",
            participants,
            "--label",
            "group",
            "--repeats",
            "2",
            "--seed",
            "0",
            "--fisher-z",
            "--top",
            "5",
            "--out",
            str(out),
            "-q",
        ]
    )
    assert status == 0
    metrics = json.loads((out / "classify_metrics.json").read_text())
    assert metrics["classes"] == {"negative": "control", "positive": "patient"}
    assert metrics["accuracy"]["mean"] > 0.8
    with open(out / "classify_features.tsv") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    assert len(rows) == 5
    planted = {tuple(edge) for edge in cohort.effect_edges.tolist()}
    top = {(int(r["i"]), int(r["j"])) for r in rows[:2]}
    assert top == planted
    assert rows[0]["label_i"] == cohort.region_labels[int(rows[0]["i"])]
    folds = (out / "classify_folds.tsv").read_text().splitlines()
    assert len(folds) == 1 + 5 * 2
    predictions = (out / "classify_predictions.tsv").read_text().splitlines()
    assert predictions[0].split("\t") == [
        "participant_id",
        "group",
        "mean_score",
        "fraction_correct",
    ]
    log = json.loads((out / "classify_log.json").read_text())
    assert log["command"] == "classify" and len(log["figures"]) == 3
    checker = check_html((out / "report.html").read_text())
    assert len(decoded_images(checker)) == 3


def test_classify_bad_label_is_a_clean_error(cohort_dir, capsys):
    _, paths, participants, out = cohort_dir
    status = cli_main.main(
        [
            "classify",
            *paths,
            "--participants",
            participants,
            "--label",
            "diagnosis",
            "--out",
            str(out),
            "-q",
        ]
    )
    assert status == 2
    assert "no column 'diagnosis'" in capsys.readouterr().err
    status = cli_main.main(
        [
            "classify",
            *paths,
            "--participants",
            participants,
            "--label",
            "group",
            "--positive",
            "sick",
            "--out",
            str(out),
            "-q",
        ]
    )
    assert status == 2
    assert "--positive 'sick' is not a value" in capsys.readouterr().err
