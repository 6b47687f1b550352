"""The BIDS-App end to end on a fake fMRIPrep tree: participant and group levels."""

import json
import warnings
from dataclasses import fields, replace
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
from nilearn.connectome import ConnectivityMeasure
from nilearn.maskers import NiftiLabelsMasker
from sklearn.covariance import EmpiricalCovariance

from connscale.bidsapp.group import run_group
from connscale.bidsapp.participant import run_participant
from connscale.cli.main import main
from connscale.denoise import load_confounds
from connscale.io.bids import from_pybids, parse_bids_name, pybids_config
from connscale.io.relmat import read_relmat_tsv
from connscale.io.timeseries import load_timeseries
from tests.bids._fmriprep import ATLAS, T_R, atlas_img, make_fmriprep, participant_log

SUBJECTS = ["01", "02", "03", "04", "05", "06"]
LABELS = "index\tname\n1\tVisual\n2\tMotor\n3\tDefault\n4\tLimbic\n"


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bids")
    runs = [("01", None, "rest", "1"), ("01", None, "rest", "2")]
    runs += [(s, None, "rest", None) for s in SUBJECTS[1:]]
    root = make_fmriprep(tmp / "fmriprep", runs)
    nib.save(atlas_img(), tmp / ATLAS)
    (tmp / "labels.tsv").write_text(LABELS)
    return tmp, root


def _bold(root, sub):
    return next(root.glob(f"sub-{sub}/func/sub-{sub}_task-rest_space-*_desc-preproc_bold.nii.gz"))


def test_region_series_and_fc_equal_nilearn(tree, tmp_path):
    tmp, root = tree
    report = run_participant(
        root,
        tmp_path / "out",
        atlas=tmp / ATLAS,
        atlas_name="Slab4",
        atlas_labels=tmp / "labels.tsv",
        strategy="simple",
        strategy_params={"motion": "basic"},
        participant_label="02",
        backend="serial",
    )
    assert report.counts == {"ok": 1, "skipped": 0, "error": 0}
    relmat, series_path = report.records[0]["outputs"][0], report.records[0]["outputs"][2]
    matrix, names = read_relmat_tsv(relmat)
    series, header = load_timeseries(series_path)
    assert names == header == ["Visual", "Motor", "Default", "Limbic"]
    bold = _bold(root, "02")
    confounds, sample_mask = load_confounds(bold, "simple", motion="basic")
    img = nib.load(bold)
    img64 = nib.Nifti1Image(np.asarray(img.dataobj, dtype=np.float64), img.affine)
    masker = NiftiLabelsMasker(
        labels_img=atlas_img(),
        standardize="zscore_sample",
        detrend=True,
        t_r=T_R,
        mask_img=str(bold).replace("desc-preproc_bold", "desc-brain_mask"),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = masker.fit_transform(img64, confounds=confounds, sample_mask=sample_mask)
    fc = ConnectivityMeasure(
        kind="correlation", cov_estimator=EmpiricalCovariance(), standardize="zscore_sample"
    ).fit_transform([ref])[0]
    np.testing.assert_allclose(series, ref, atol=1e-5)
    np.testing.assert_allclose(matrix, fc, atol=1e-5)
    meta = json.loads(open(relmat.replace(".tsv", ".json")).read())
    assert meta["Sources"][0] == f"bids:preprocessed:sub-02/func/{bold.name}"
    assert meta["DenoiseStrategy"] == "simple" and meta["Atlas"] == "Slab4"
    assert meta["NodeNames"] == names and meta["StorageFormat"] == "Full"
    assert meta["NumberOfVolumesDiscarded"] == 1  # fMRIPrep's non-steady-state volume
    description = json.loads((tmp_path / "out" / "dataset_description.json").read_text())
    assert description["GeneratedBy"][0]["Name"] == "connscale"
    # Paths relative to the output root: the input dataset's link, the atlas and its labels.
    out = tmp_path / "out"
    link = description["DatasetLinks"]["preprocessed"]
    assert not Path(link).is_absolute() and (out / link).resolve() == root.resolve()
    assert (out / meta["AtlasFile"]).resolve() == (tmp / ATLAS).resolve()
    assert (out / meta["AtlasLabelsFile"]).resolve() == (tmp / "labels.tsv").resolve()
    assert meta["NonNegative"] is False


def test_cli_broken_run_names_resume_and_group(tree, tmp_path, capsys):
    tmp, root = tree
    broken = tmp_path / "fmriprep"
    import shutil

    shutil.copytree(root, broken)
    _bold(broken, "03").write_bytes(b"not a nifti")
    out = tmp_path / "out"
    args = [
        "bids",
        str(broken),
        str(out),
        "participant",
        "--atlas",
        str(tmp / ATLAS),
        "--atlas-name",
        "Slab4",
        "--atlas-labels",
        str(tmp / "labels.tsv"),
        "--denoise",
        "none",
        "--backend",
        "serial",
        "-q",
    ]
    assert main(args) == 1
    report, errors = participant_log(out)
    assert len(errors) == 2 and errors[1].startswith("sub-03_task-rest_space-")
    assert report["counts"] == {"ok": 6, "skipped": 0, "error": 1}

    # Every output name parses back, with pybids, into the run's entities.
    from bids import BIDSLayout

    layout = BIDSLayout(out, validate=False, config=["bids", "derivatives", pybids_config()])
    relmats = layout.get(suffix="relmat", extension=".tsv")
    assert len(relmats) == 6
    for record in report["records"]:
        for path in record["outputs"]:
            expected = {
                k: v for k, v in parse_bids_name(path).items() if k not in ("suffix", "extension")
            }
            entities = layout.get_file(path).get_entities()
            assert from_pybids(entities) == expected
            # The run's QC table is not the atlas's: no seg-.
            assert expected.get("seg", "qc") == (
                "qc" if path.endswith(("_qc.tsv", "_qc.json")) else "Slab4"
            )
            assert expected["desc"] == "none"
            assert set(expected) >= {"sub", "task", "space"}

    # Re-run: the good runs are skipped; a second strategy writes other names.
    assert main(args) == 1
    report, _ = participant_log(out)
    assert report["counts"] == {"ok": 0, "skipped": 6, "error": 1}
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*desc-none_relmat.tsv")}
    second = run_participant(
        broken,
        out,
        atlas=tmp / ATLAS,
        atlas_name="Slab4",
        atlas_labels=tmp / "labels.tsv",
        strategy="simple",
        strategy_params={"motion": "basic"},
        participant_label=["01", "02", "04"],
        backend="serial",
        reports=False,
    )
    assert second.counts == {"ok": 4, "skipped": 0, "error": 0}
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*desc-none_relmat.tsv")} == before
    assert len(list(out.rglob("*desc-simple_relmat.tsv"))) == 4
    # compcor's 85 confounds leave these 30-volume runs no degrees of freedom: refused.
    assert (
        main(
            args[:-4]
            + ["compcor", "--backend", "serial", "-q", "--participant-label", "01", "02", "04"]
        )
        == 1
    )
    assert not list(out.rglob("*desc-compcor_relmat.tsv"))

    # Group level: one atlas and strategy chosen, mean connectome, features, classification.
    with pytest.raises(ValueError, match="several atlases or strategies"):
        run_group(out)
    participants = tmp_path / "participants.tsv"
    participants.write_text(
        "participant_id\tdx\n"
        + "".join(f"sub-{s}\t{'patient' if i % 2 else 'control'}\n" for i, s in enumerate(SUBJECTS))
    )
    capsys.readouterr()
    assert (
        main(
            [
                "bids",
                str(broken),
                str(out),
                "group",
                "--denoise",
                "none",
                "--participants",
                str(participants),
                "--target",
                "dx",
                "--repeats",
                "2",
                "-q",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "6 runs of 5 participants" in printed and "accuracy" in printed
    group = out / "group"
    mean, names = read_relmat_tsv(
        group / "seg-Slab4_meas-PearsonCorrelation_stat-mean_desc-none_relmat.tsv"
    )
    assert names == ["Visual", "Motor", "Default", "Limbic"]
    runs = [read_relmat_tsv(p)[0] for p in sorted(out.glob("sub-*/func/*desc-none_relmat.tsv"))]
    z = np.arctanh(np.clip(np.stack(runs), -1 + 1e-7, 1 - 1e-7))
    np.testing.assert_allclose(mean, np.tanh(z.mean(0)) * (1 - np.eye(4)) + np.eye(4), atol=1e-6)
    table = (group / "seg-Slab4_meas-PearsonCorrelation_desc-none_features.tsv").read_text()
    rows = table.splitlines()
    assert rows[0].split("\t")[:3] == ["participant_id", "Visual|Motor", "Visual|Default"]
    assert [r.split("\t")[0] for r in rows[1:]] == [
        "sub-01",
        "sub-02",
        "sub-04",
        "sub-05",
        "sub-06",
    ]
    result = json.loads(
        (group / "seg-Slab4_meas-PearsonCorrelation_desc-none_classification.json").read_text()
    )
    assert result["n_subjects"] == 5 and result["folds"] == 2
    assert result["classes"] == ["control", "patient"]


def test_bad_arguments(tree, tmp_path, capsys):
    tmp, root = tree
    assert (
        main(
            [
                "bids",
                str(root),
                str(tmp_path / "o"),
                "participant",
                "--atlas-name",
                "A",
                "--denoise",
                "simple",
            ]
        )
        == 2
    )
    assert "needs --atlas" in capsys.readouterr().err
    assert (
        main(
            [
                "bids",
                str(root),
                str(tmp_path / "o"),
                "participant",
                "--atlas",
                str(tmp / ATLAS),
                "--atlas-name",
                "my_atlas",
                "--denoise",
                "simple",
            ]
        )
        == 2
    )
    assert "argument --atlas-name: expected letters, digits or '+'" in capsys.readouterr().err
    assert (
        main(
            [
                "bids",
                str(root),
                str(tmp_path / "o"),
                "participant",
                "--atlas",
                str(tmp / ATLAS),
                "--atlas-name",
                "A",
                "--denoise",
                "simple",
                "--task",
                "nback",
            ]
        )
        == 2
    )
    assert "found 7 BOLD file(s)" in capsys.readouterr().err
    assert main(["bids", str(root), str(tmp_path / "o"), "group"]) == 2
    assert "run the participant level first" in capsys.readouterr().err


def _images(text):
    import re

    sources = re.findall(r'<img[^>]*src="([^"]+)"', text)
    links = re.findall(r'(?:href|src)="([^"]+)"', text)
    return sources, links


def test_reports_are_self_contained(tree, tmp_path):
    tmp, root = tree
    out = tmp_path / "out"
    report = run_participant(
        root,
        out,
        atlas=tmp / ATLAS,
        atlas_name="Slab4",
        atlas_labels=tmp / "labels.tsv",
        strategy="scrubbing",
        strategy_params={"motion": "basic", "wm_csf": "basic", "fd_threshold": 0.15, "scrub": 0},
        participant_label=["01", "02", "03", "04"],
        backend="serial",
    )
    assert report.counts["ok"] == 5
    for record in report.records:
        page = [p for p in record["outputs"] if p.endswith("_report.html")]
        assert page == [
            record["outputs"][0]
            .replace("_meas-PearsonCorrelation", "")
            .replace("_relmat.tsv", "_report.html")
        ]
        sources, links = _images(open(page[0]).read())
        assert len(sources) == 4  # atlas/mask, FD trace over the carpets, connectome, FC hist
        assert all(s.startswith("data:image/png;base64,") for s in sources)
        assert not any(link.startswith(("http:", "https:", "//")) for link in links)
        assert record["mean_fd"] > 0
    assert not list(out.rglob("*.staging")) and not list(out.rglob("figures"))
    result = run_group(out)
    page = [p for p in result.outputs if p.name.endswith("_report.html")][0]
    text = page.read_text()
    sources, links = _images(text)
    assert len(sources) == 2 and all(s.startswith("data:image/png") for s in sources)
    run_links = [link for link in links if link.endswith("_report.html")]
    assert len(run_links) == 5 and all((page.parent / link).is_file() for link in run_links)


def test_reports_drawn_beside_the_computing_process(tree, tmp_path, monkeypatch):
    """With reader processes the reports are drawn by helper processes: each
    run's page is published with its set, its carpets show the same voxels
    before and after denoising; a page that cannot be drawn is a failed
    measure, the set's other files published."""
    from connscale.bidsapp import beside, region_measures
    from connscale.bidsapp.report import figures_bytes

    tmp, root = tree
    used, reports = [], []
    real_helpers, real_report = beside.helpers, region_measures._run_report

    def helpers(count, *, drawing):
        used.append((count, drawing))
        return real_helpers(count, drawing=drawing)

    def run_report(region_set, name):
        report = real_report(region_set, name)
        reports.append(report)
        if region_set.run.name.startswith("sub-02"):  # a page that cannot be drawn
            figures = replace(report.figures, names=report.figures.names[:-1])
            return replace(report, figures=figures)
        return report

    monkeypatch.setattr(beside, "helpers", helpers)
    monkeypatch.setattr(region_measures, "_run_report", run_report)
    kwargs = {"atlas": tmp / ATLAS, "atlas_name": "Slab4", "backend": "serial"}
    kwargs |= {"strategy": "simple", "strategy_params": {"motion": "basic"}}
    result = run_participant(
        root, tmp_path / "out", participant_label=["01", "02"], n_jobs=2, device="cpu", **kwargs
    )
    assert used == [(1, True)] and len(reports) == 3
    for report in reports:
        figures = report.figures
        assert figures.cleaned_carpet.shape == (figures.kept.size, figures.carpet.shape[1])
        arrays = [getattr(figures, f.name) for f in fields(figures)]
        held = sum(a.nbytes for a in arrays if isinstance(a, np.ndarray) and a.ndim > 1)
        planned = figures_bytes(
            figures.carpet.shape[0], int(figures.mask.sum()), figures.mask.size, len(figures.fc)
        )  # what --memory-limit's plan counts for each run's report
        censored = (figures.carpet.shape[0] - figures.kept.size) * figures.carpet.shape[1] * 4
        all_kept = held - figures.affine.nbytes + censored
        assert 0 <= planned - all_kept <= figures.fc.size * 4  # its connectome: float32 or 64
        assert figures.carpet.shape[1] == int(figures.mask.sum()) // figures.step + (
            int(figures.mask.sum()) % figures.step > 0
        )
    for record in result.records:
        pages = [p for p in record["outputs"] if p.endswith("_report.html")]
        folder = Path(record["outputs"][0]).parent
        listed = [
            name
            for manifest in folder.glob(f"{record['name']}*_manifest.json")
            for name in json.loads(manifest.read_text())["files"]
        ]
        if record["name"].startswith("sub-02"):
            assert record["status"] == "partial" and pages == []
            assert "Expected" in record["failed_measures"]["report"]
            assert not [name for name in listed if name.endswith("_report.html")]
            continue
        assert record["status"] == "ok" and len(pages) == 1
        assert Path(pages[0]).name in listed
        sources, _ = _images(Path(pages[0]).read_text())
        assert len(sources) == 4
    assert not list((tmp_path / "out").rglob("*.staging"))


def test_a_run_waiting_for_its_report_holds_none_of_its_data(tree, tmp_path, monkeypatch):
    """While a run's report is drawn its set waits to be published, holding no
    array of the run (at most the runs read ahead are in memory)."""
    import gc
    import weakref

    from connscale.bidsapp import participant, region_measures

    tmp, root = tree
    data, unheld = {}, []
    real_measure, real_commit = participant._despike_and_measure, region_measures._commit

    def measure(config, decoded, context, timings, qc):
        decoded = real_measure(config, decoded, context, timings, qc)
        data[Path(decoded.img.get_filename()).name.split("_desc-")[0]] = weakref.ref(decoded.data)
        return decoded

    def commit(out, written, failed, pending, auxiliary, run_name, timings):
        gc.collect()
        unheld.append(data[run_name]() is None)
        return real_commit(out, written, failed, pending, auxiliary, run_name, timings)

    monkeypatch.setattr(participant, "_despike_and_measure", measure)
    monkeypatch.setattr(region_measures, "_commit", commit)
    result = run_participant(
        root,
        tmp_path / "out",
        atlas=tmp / ATLAS,
        atlas_name="Slab4",
        participant_label=["01", "02"],
        strategy="simple",
        strategy_params={"motion": "basic"},
        backend="serial",
        device="cpu",
    )
    assert result.counts["ok"] == 3 and unheld == [True] * 3


@pytest.mark.parametrize(
    "params, message",
    [
        (
            {"strategy": "aggressive"},
            "The 'strategy' parameter of run_participant must be a str among",
        ),
        (
            {"measures": ["fc", "graph"]},
            "The 'measures' parameter of run_participant must be a "
            "non-empty sequence, each a str among",
        ),
        ({"measures": []}, "must be a non-empty sequence"),
        (
            {"measures": ["dfc"], "window_length": 2},
            r"The 'window_length' parameter of run_participant must be an int in the range "
            r"\[3, inf\) or None. Got 2 instead.",
        ),
        (
            {"pairs_threshold": 1.5},
            r"'pairs_threshold' parameter of run_participant must be a "
            r"float in the range \[-1, 1\]",
        ),
        (
            {"dtype": "float16"},
            "The 'dtype' parameter of run_participant must be a str among {'float32', 'float64'}",
        ),
        ({"memory_limit": "a lot"}, "The 'memory_limit' parameter of run_participant"),
        ({"backend": "mpi"}, "The 'backend' parameter of run_participant"),
        (
            {"backend": "serial", "n_jobs": 0},
            r"The 'n_jobs' parameter of run_participant must be a positive int, or -1 for every",
        ),
    ],
)
def test_participant_parameters_checked_before_the_first_run(tmp_path, params, message):
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=message):
        run_participant(
            tmp_path / "derivatives",
            out,
            atlas=tmp_path / ATLAS,
            atlas_name="test",
            **params,
        )
    assert not out.exists()


def test_group_parameters_checked_before_any_output(tmp_path):
    with pytest.raises(
        ValueError,
        match=r"The 'folds' parameter of run_group must be an int "
        r"in the range \[2, inf\). Got 1 instead.",
    ):
        run_group(tmp_path, participants=tmp_path / "participants.tsv", target="group", folds=1)
    with pytest.raises(ValueError, match="The 'repeats' parameter of run_group"):
        run_group(tmp_path, repeats=0)
    assert not (tmp_path / "group").exists()


def test_reader_processes_give_the_outputs_of_a_reader_thread(tree, tmp_path, monkeypatch):
    """Several readers are processes (the voxel series through shared memory),
    a helper process writes the tables: every output equals, bit for bit, what
    one reader thread, writing its own tables, gives. Either way the device is
    started once the first reads are under way."""
    from connscale.bidsapp import beside, participant

    tmp, root = tree
    outputs, used, real_helpers, started = {}, [], beside.helpers, []
    monkeypatch.setattr(participant, "_start_device", started.append)

    def helpers(count, *, drawing):
        used.append((count, drawing))
        return real_helpers(count, drawing=drawing)

    monkeypatch.setattr(beside, "helpers", helpers)
    for readers in (1, 2):
        report = run_participant(
            root,
            tmp_path / f"out{readers}",
            atlas=tmp / ATLAS,
            atlas_name="Slab4",
            participant_label=["01", "02"],
            strategy="simple",
            strategy_params={"motion": "basic"},
            measures=["fc", "timeseries", "voxelfc"],
            backend="serial",
            n_jobs=readers,
            device="cpu",
            reports=False,
        )
        assert report.counts == {"ok": 3, "skipped": 0, "error": 0}
        outputs[readers] = sorted(p for r in report.records for p in r["outputs"])
    assert used == [(1, False)]  # none beside one reader thread
    assert started == ["cpu", "cpu"]  # the device started while the first reads ran
    assert [Path(p).name for p in outputs[1]] == [Path(p).name for p in outputs[2]]
    for one, two in zip(outputs[1], outputs[2]):
        assert Path(one).read_bytes() == Path(two).read_bytes() or Path(one).suffix == ".h5"
        if Path(one).suffix == ".h5":
            import h5py

            with h5py.File(one) as a, h5py.File(two) as b:
                for name in a:
                    if isinstance(a[name], h5py.Dataset):
                        np.testing.assert_array_equal(a[name][()], b[name][()])
