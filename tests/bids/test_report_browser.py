"""The BIDS-App's reports in a real headless browser: every image renders, no external URL."""

from pathlib import Path

import nibabel as nib
import pytest

from connscale.bidsapp.group import run_group
from connscale.bidsapp.participant import run_participant
from tests.bids._browser import CHROMIUM, external_urls, images, render
from tests.bids._fmriprep import atlas_img, make_fmriprep

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium installed")


def test_reports_render_in_chromium(tmp_path):
    root = make_fmriprep(
        tmp_path / "fmriprep", [("01", None, "rest", "1"), ("02", None, "rest", None)]
    )
    nib.save(atlas_img(), tmp_path / "atlas.nii.gz")
    (tmp_path / "labels.tsv").write_text("index\tname\n1\tV\n2\tM\n3\tD\n4\tL\n")
    out = tmp_path / "out"
    report = run_participant(
        root,
        out,
        atlas=tmp_path / "atlas.nii.gz",
        atlas_name="Slab4",
        atlas_labels=tmp_path / "labels.tsv",
        strategy="scrubbing",
        strategy_params={"motion": "basic", "wm_csf": "basic", "fd_threshold": 0.15, "scrub": 0},
        backend="serial",
    )
    pages = [p for r in report.records for p in r["outputs"] if p.endswith("_report.html")]
    pages += [str(p) for p in run_group(out).outputs if p.name.endswith("_report.html")]
    assert len(pages) == 3
    for i, page in enumerate(pages):
        scratch = tmp_path / f"browser{i}"
        scratch.mkdir()
        dom = render(Path(page), scratch)
        seen = images(dom)
        assert len(seen) == Path(page).read_text().count("<img") >= (1 if i == 2 else 5), page
        assert set(seen) == {"yes"}, f"{seen.count('no')} image(s) did not render in {page}"
        assert external_urls(dom) == [], page


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
