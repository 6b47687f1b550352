"""Render an HTML report in headless Chromium and read back what the browser saw."""

from __future__ import annotations

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
    result = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--host-resolver-rules=MAP * ~NOTFOUND",  # no network at all
            f"--user-data-dir={scratch / '.profile'}",
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
            f"chromium did not render {page.name} (exit {result.returncode}): "
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
