"""report.html: valid, self-contained, every figure embedded; written by RunRecord."""

import json

import numpy as np
import pytest

from connscale.cli._common import RunRecord
from connscale.report import plots, render_report, write_report
from tests.report._html_check import check_html, decoded_images


def _record(tmp_path, n_figures=2):
    record = RunRecord(
        "fc",
        tmp_path,
        {"input": tmp_path / "sub-01_bold.nii.gz", "window": 30, "note": '<b>&"quoted"'},
    )
    record.device = "cpu"
    with record.timer("compute"):
        pass
    record.timings["write"] = 0.25
    record.results = {
        "accuracy": {"mean": 0.8, "ci_low": 0.64, "ci_high": 0.91, "k": 32, "n": 40},
        "sensitivity": {"mean": 0.75, "ci_low": 0.51, "ci_high": 0.91},
        "n_edges": 4950,
        "scores": list(np.linspace(0, 1, 50)),
        "nested": {"a": [1, 2]},
        "array": np.arange(3),
    }
    record.warnings.append("ConstantSeriesWarning: 2 constant series <excluded>")
    rng = np.random.default_rng(0)
    for k in range(n_figures):
        record.add_figure(
            plots.plot_correlation_matrix(
                np.corrcoef(rng.standard_normal((20, 5)), rowvar=False), tmp_path / f"fig{k}.png"
            )
        )
    out = tmp_path / "sub-01_relmat.tsv"
    out.write_text("a\n")
    record.add_output(out)
    return record


def test_report_is_valid_and_self_contained(tmp_path):
    record = _record(tmp_path)
    path = write_report(record, tmp_path)
    assert path == tmp_path / "report.html"
    text = path.read_text()
    checker = check_html(text)
    images = decoded_images(checker)
    assert len(images) == 2
    assert images[0] == (tmp_path / "fig0.png").read_bytes()
    assert "connscale fc" in checker.title
    for expected in [
        "Parameters",
        "Timings",
        "Results",
        "Figures",
        "Warnings (1)",
        "Outputs",
        "sub-01_relmat.tsv",
        "cpu",
        "[0.64, 0.91]",
        "32 / 40",
        "&lt;b&gt;&amp;&quot;quoted&quot;",
        "&lt;excluded&gt;",
        "4950",
        "50 values (mean 0.5",
    ]:
        assert expected in text, expected
    assert "<b>&" not in text


def test_report_from_log_dict_and_missing_figure(tmp_path):
    record = _record(tmp_path, n_figures=1)
    record.add_figure(tmp_path / "gone.png")
    as_dict = json.loads(json.dumps(record.as_dict(), default=lambda v: v.tolist()))
    with pytest.warns(RuntimeWarning, match="gone.png not embedded"):
        text = render_report(as_dict, tmp_path)
    checker = check_html(text)
    assert len(decoded_images(checker)) == 1
    assert "gone.png not embedded" in text and "Warnings (2)" in text
    with pytest.raises(ValueError, match="Expected a RunRecord"):
        render_report(["not", "a", "record"], tmp_path)


def test_finish_writes_log_then_report(tmp_path):
    record = _record(tmp_path)
    log = record.finish("fc")
    assert json.loads(log.read_text())["command"] == "fc"
    assert record.report_path == tmp_path / "report.html"
    checker = check_html(record.report_path.read_text())
    assert len(decoded_images(checker)) == 2


def test_report_failure_keeps_the_log_and_warns(tmp_path, monkeypatch):
    import connscale.report.html as report_html

    def broken(record, out_dir):
        raise OSError("disk full")

    monkeypatch.setattr(report_html, "write_report", broken)
    record = _record(tmp_path, n_figures=0)
    with pytest.warns(RuntimeWarning, match="report.html could not be written.*disk full"):
        log = record.finish("fc")
    assert json.loads(log.read_text())["parameters"]["window"] == 30
    assert record.report_path is None
    assert not (tmp_path / "report.html").exists()


def test_nested_lists_render_as_tables(tmp_path):
    record = {
        "command": "classify",
        "parameters": {"features": ["a.tsv", "b.tsv"] * 10},
        "results": {"confusion": [[18, 2], [3, 17]]},
        "figures": [],
        "outputs": [],
    }
    text = render_report(record, tmp_path)
    check_html(text)
    assert '<table><tr><td class="num">18</td><td class="num">2</td></tr>' in text
    assert "20 values: a.tsv, b.tsv, a.tsv, ..." in text


def test_staged_report_lists_outputs_from_where_it_is_published(tmp_path):
    """A report written into a staging folder names files outside its set
    relative to the folder it is published in: found there, not 'missing'."""
    published = tmp_path / "group"
    staging = published / ".set.staging"
    staging.mkdir(parents=True)
    (tmp_path / "sub-01").mkdir()
    (tmp_path / "sub-01" / "run_report.html").write_text("<html></html>")
    record = {"command": "bids group", "outputs": ["../sub-01/run_report.html"]}
    staged = render_report(record, staging)
    assert "missing" in staged
    text = render_report(record, staging, published_dir=published)
    assert "missing" not in text and "13 bytes" in text
    assert "<code>../sub-01/run_report.html</code>" in text
