"""The documentation site as a reader sees it: pages render in headless Chromium,
their figures load, and no internal link is dead.

The site is built by ``make docs`` (``.ci/run`` runs it before ``make test``);
building it here would take minutes (the gallery runs every example), so these
tests read ``docs/_build/html`` and skip, saying why, where it is not built.
"""

from __future__ import annotations

import re
import shutil
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from tests.bids._browser import _MARKER, CHROMIUM, dump_dom, images

SITE = Path(__file__).resolve().parents[2] / "docs" / "_build" / "html"

pytestmark = pytest.mark.skipif(
    not (SITE / "index.html").is_file(), reason=f"the site is not built ({SITE}): run make docs"
)


class _Links(HTMLParser):
    """The href/src targets of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.targets: list[str] = []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("href", "src") and value:
                self.targets.append(value)


def internal_links(page: Path) -> list[tuple[str, Path, str]]:
    """(link, file it points to, fragment) of every relative link of ``page``."""
    parser = _Links()
    parser.feed(page.read_text(encoding="utf-8"))
    found = []
    for link in parser.targets:
        parts = urlsplit(link)
        if parts.scheme or link.startswith(("//", "#", "mailto:", "javascript:")):
            continue  # external, or within the page
        path = unquote(parts.path)
        target = (page.parent / path).resolve() if path else page
        if target.is_dir():
            target = target / "index.html"
        found.append((link, target, parts.fragment))
    return found


def _ids(page: Path) -> set[str]:
    return set(re.findall(r'\bid="([^"]+)"', page.read_text(encoding="utf-8")))


def test_no_internal_link_is_dead():
    # the site's pages (_static/ holds the theme's templates, not pages)
    pages = sorted(p for p in SITE.rglob("*.html") if "_static" not in p.relative_to(SITE).parts)
    assert len(pages) > 20, pages
    dead, ids = [], {}
    for page in pages:
        for link, target, fragment in internal_links(page):
            if not target.exists():
                dead.append(f"{page.relative_to(SITE)}: {link}")
            elif fragment and target.suffix == ".html":
                if target not in ids:
                    ids[target] = _ids(target)
                if fragment not in ids[target]:
                    dead.append(f"{page.relative_to(SITE)}: {link} (no #{fragment})")
    assert not dead, "\n".join(dead[:50])


def test_link_check_sees_a_dead_link(tmp_path):
    page = tmp_path / "page.html"
    (tmp_path / "there.html").write_text('<p id="a">x</p>')
    page.write_text(
        '<a href="there.html#a">ok</a><a href="gone.html">dead</a><a href="https://x.org">ext</a>'
    )
    missing = [link for link, target, _ in internal_links(page) if not target.exists()]
    assert missing == ["gone.html"]


def gallery_pages() -> list[Path]:
    """The gallery's example pages, those with figures first."""
    pages = sorted(p for p in (SITE / "auto_examples").rglob("plot_*.html"))
    return sorted(pages, key=lambda p: "sphx-glr-single-img" not in p.read_text(encoding="utf-8"))


def render_in_site(page: Path, copy: Path, scratch: Path) -> str:
    """The DOM of a site page after Chromium loaded it with no network.

    ``copy`` is a copy of the site (its relative links resolve as built), in
    which the page is changed to mark each <img> rendered or not once loaded.
    """
    marked = copy / page.relative_to(SITE)
    text = marked.read_text(encoding="utf-8")
    marked.write_text(text.replace("</body>", _MARKER + "</body>"), encoding="utf-8")
    return dump_dom(marked, scratch / ".profile")


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium installed")
def test_pages_render_with_their_figures(tmp_path):
    examples = gallery_pages()
    assert len(examples) >= 2, f"the gallery has fewer than two example pages: {examples}"
    pages = {
        "index": SITE / "index.html",
        "correlation": SITE / "api" / "generated" / "connscale.correlation.html",
        **{f"example {p.stem}": p for p in examples[:2]},
    }
    copy = tmp_path / "site"
    shutil.copytree(SITE, copy)
    for what, page in pages.items():
        assert page.is_file(), f"{what}: {page} not built"
        dom = render_in_site(page, copy, tmp_path / what.replace(" ", "_"))
        rendered = images(dom)
        assert "no" not in rendered, f"{what}: an image did not load ({rendered})"
        if what == "correlation":
            assert "connscale.correlation" in dom and "Parameters" in dom
        if what.startswith("example"):
            assert "yes" in rendered, f"{what}: no figure"
