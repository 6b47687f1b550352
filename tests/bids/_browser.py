"""Render an HTML report in headless Chromium and read back what the browser saw."""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from pathlib import Path

CHROMIUM = next(
    (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None
)

# Run after the page has loaded: every <img> gets data-rendered="yes|no".
_MARKER = """<script>
window.addEventListener("load", function () {
  for (const img of document.images) {
    img.setAttribute("data-rendered",
                     img.complete && img.naturalWidth > 0 ? "yes" : "no");
  }
  document.body.setAttribute("data-checked", "yes");
});
</script>"""


def render(page: Path, scratch: Path) -> str:
    """The DOM of ``page`` after Chromium loaded it with no network (``--dump-dom``)."""
    text = page.read_text()
    marked = scratch / page.name
    marked.write_text(
        text.replace("</body>", _MARKER + "</body>") if "</body>" in text else text + _MARKER
    )
    for other in page.parent.iterdir():  # relative links resolve as beside the page
        if other.name != page.name and not (scratch / other.name).exists():
            (scratch / other.name).symlink_to(other.resolve())
    return dump_dom(marked, scratch / ".profile")


def dump_dom(marked: Path, profile: Path) -> str:
    """The DOM of a page carrying ``_MARKER`` after Chromium loaded it with no network."""
    result = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--host-resolver-rules=MAP * ~NOTFOUND",  # no network at all
            f"--user-data-dir={profile}",
            "--virtual-time-budget=10000",
            "--dump-dom",
            marked.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if result.returncode != 0 or 'data-checked="yes"' not in result.stdout:
        raise RuntimeError(
            f"chromium did not render {marked.name} (exit {result.returncode}): "
            f"{result.stderr[-2000:]}"
        )
    return result.stdout


def images(dom: str) -> list[str]:
    """``data-rendered`` of every <img> of a dumped DOM."""
    return re.findall(r'<img[^>]*data-rendered="(yes|no)"', dom)


def external_urls(dom: str) -> list[str]:
    """Every URL of the DOM that would leave the file: src/href/url() to http(s) or //."""
    refs = re.findall(r'(?:src|href|action|poster)\s*=\s*"([^"]*)"', dom)
    refs += re.findall(r"url\(\s*['\"]?([^'\")]+)", dom)
    return [r for r in refs if r.strip().lower().startswith(("http:", "https:", "//", "ftp:"))]


def text(fragment: str) -> str:
    """The text of an HTML fragment: tags as spaces, entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", " ", fragment))


def section(dom: str, sid: str) -> str:
    """The inner HTML of ``<section id="sid">`` of a report (AssertionError if none)."""
    match = re.search(rf'<section id="{sid}">(.*?)</section>', dom, re.S)
    assert match, f"no section {sid!r}"
    return match.group(1)


def header(dom: str) -> str:
    """The text of the report's header (title, start time, device, versions)."""
    return text(re.search(r"<header>(.*?)</header>", dom, re.S).group(1))


def listed_outputs(dom: str) -> list[tuple[str, str]]:
    """(path, size or 'missing') of each file in the report's Outputs list."""
    item = r"<li><code>(.*?)</code>\s*<span[^>]*>(.*?)</span></li>"
    return [
        (text(path).strip(), text(size).strip())
        for path, size in re.findall(item, section(dom, "outputs"))
    ]


def assert_header(dom: str, *, device: str = "cpu") -> None:
    """The report's header names its start time, ``device`` and connscale's version."""
    from connscale._version import __version__

    shown = header(dom)
    assert re.search(r"started \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", shown), shown
    assert f"device {device}" in shown and f"connscale {__version__}" in shown, shown
    assert "?" not in shown and "n/a" not in shown, shown
