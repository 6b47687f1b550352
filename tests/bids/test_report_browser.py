"""The BIDS-App's reports in a real headless browser: every image renders, no
external URL, and what the pages say (header, outputs, run links,
classification) is what the runs did."""

import json
import re
from pathlib import Path

import nibabel as nib
import pytest

from connscale.bidsapp.group import run_group
from connscale.bidsapp.participant import run_participant
from tests.bids._browser import (
    CHROMIUM,
    assert_header,
    external_urls,
    images,
    listed_outputs,
    render,
    section,
    text,
)
from tests.bids._fmriprep import ATLAS, atlas_img, make_fmriprep

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium installed")

RUNS = [("01", None, "rest", "1"), ("02", None, "rest", None)]
RUNS += [("03", None, "rest", None), ("04", None, "rest", None)]


def found_outputs(dom: str) -> list[str]:
    """The files of the Outputs list, each found (its size shown, not 'missing')."""
    listed = listed_outputs(dom)
    assert listed and all(size.endswith(" bytes") for _, size in listed), listed
    return [path for path, _ in listed]


def test_reports_render_in_chromium(tmp_path):
    root = make_fmriprep(tmp_path / "fmriprep", RUNS)
    nib.save(atlas_img(), tmp_path / ATLAS)
    (tmp_path / "labels.tsv").write_text("index\tname\n1\tV\n2\tM\n3\tD\n4\tL\n")
    participants = tmp_path / "participants.tsv"
    participants.write_text("participant_id\tdx\nsub-01\tA\nsub-02\tB\nsub-03\tA\nsub-04\tB\n")
    out = tmp_path / "out"
    report = run_participant(
        root,
        out,
        atlas=tmp_path / ATLAS,
        atlas_name="Slab4",
        atlas_labels=tmp_path / "labels.tsv",
        strategy="scrubbing",
        strategy_params={"motion": "basic", "wm_csf": "basic", "fd_threshold": 0.15, "scrub": 0},
        backend="serial",
    )
    group = run_group(out, participants=participants, target="dx", folds=2, repeats=2)
    runs = {}
    for record in report.records:
        page = next(Path(p) for p in record["outputs"] if p.endswith("_report.html"))
        # the region set's files (the QC table is a set of its own, not listed by the report)
        runs[page] = [
            Path(p).name for p in record["outputs"] if Path(p) != page and "_qc." not in p
        ]
    (group_page,) = [p for p in group.outputs if p.name.endswith("_report.html")]
    assert len(runs) == len(RUNS)
    for i, page in enumerate([*runs, group_page]):
        scratch = tmp_path / f"browser{i}"
        scratch.mkdir()
        dom = render(Path(page), scratch)
        seen = images(dom)
        assert len(seen) == Path(page).read_text().count("<img") >= (1 if page == group_page else 4)
        assert set(seen) == {"yes"}, f"{seen.count('no')} image(s) did not render in {page}"
        assert external_urls(dom) == [], page
        assert_header(dom)
        listed = found_outputs(dom)
        if page in runs:  # the run's published files, each found
            assert sorted(listed) == sorted(runs[page]) and any(
                name.endswith("_relmat.tsv") for name in listed
            ), listed
            continue
        # The group page links every run's report, none marked missing.
        links = re.findall(r'<a href="([^"]+)">', section(dom, "runs"))
        assert sorted((group_page.parent / link).resolve() for link in links) == sorted(
            p.resolve() for p in runs
        )
        assert sorted(listed) == sorted(links)
        # ... and shows the classification that was published beside it.
        result = json.loads(next(group_page.parent.glob("*_classification.json")).read_text())
        shown = text(section(dom, "results"))
        assert "classification" in shown and "accuracy" in shown
        for metric in ("accuracy", "sensitivity", "specificity"):
            assert f"{result[metric]['mean']:.4g}" in shown, metric
        assert f"{result['auc']['mean']:.4g}" in shown and "dx" in shown


def test_the_check_sees_a_broken_image(tmp_path):
    page = tmp_path / "page.html"
    page.write_text(
        '<html><body><img src="data:image/png;base64,AAAA">'
        '<img src="https://example.org/x.png"></body></html>'
    )
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    dom = render(page, scratch)
    assert images(dom) == ["no", "no"]
    assert external_urls(dom) == ["https://example.org/x.png"]
