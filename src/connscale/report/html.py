"""A self-contained HTML report of one connscale run.

:func:`write_report` turns a run record (``RunRecord`` or its ``as_dict()``,
as in ``<prefix>_log.json``) into ``report.html``: command, parameters,
timings, device, results, the figures embedded as base64 ``data:`` URIs,
outputs and warnings. Inline CSS, no scripts, no external resource, so the
file can be mailed or archived alone. Only the standard library is used.
"""

from __future__ import annotations

import base64
import html
import math
import os
import warnings
from numbers import Number
from pathlib import Path
from typing import Protocol

__all__ = ["render_report", "write_report"]


class RunLog(Protocol):
    """A run's record that gives the content of its log (the command line's ``RunRecord``)."""

    def as_dict(self) -> dict:
        """Return the record as written to ``<prefix>_log.json``."""


_MIME = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".svg": "image/svg+xml",
}
_MAX_LIST = 12
_INTERVAL_KEYS = {"mean", "ci_low", "ci_high"}

_CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 0;
       color: #1d2330; background: #f6f7f9; line-height: 1.45; }
header { background: #1f3a5f; color: #fff; padding: 18px 32px; }
header h1 { margin: 0 0 4px 0; font-size: 1.6em; }
header p { margin: 0; opacity: 0.85; font-size: 0.92em; }
main { padding: 8px 32px 32px 32px; max-width: 1200px; }
section { background: #fff; border: 1px solid #dde1e7; border-radius: 6px;
          padding: 12px 20px; margin: 16px 0; }
h2 { font-size: 1.15em; margin: 4px 0 10px 0; color: #1f3a5f; }
h3 { font-size: 1.0em; margin: 12px 0 6px 0; }
table { border-collapse: collapse; font-size: 0.9em; margin: 4px 0 8px 0; }
th, td { border-bottom: 1px solid #e6e8ec; padding: 3px 12px 3px 0; text-align: left;
         vertical-align: top; }
th { color: #4a5568; font-weight: 600; }
td.num { font-variant-numeric: tabular-nums; text-align: right; }
code { font-family: Menlo, Consolas, monospace; font-size: 0.88em; background: #f0f2f5;
       padding: 1px 4px; border-radius: 3px; }
.bar { display: inline-block; height: 10px; background: #4c78a8; border-radius: 2px; }
.warn { color: #8a4b00; }
.muted { color: #6b7280; }
figure { display: inline-block; margin: 8px 16px 8px 0; vertical-align: top; }
figure img { max-width: 100%; border: 1px solid #e6e8ec; }
figcaption { font-size: 0.85em; color: #4a5568; }
"""


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _fmt_number(value: float) -> str:
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if value == 0 or 1e-3 <= abs(value) < 1e6:
        return f"{value:.4g}"
    return f"{value:.3e}"


def _to_plain(value: object) -> object:
    """Convert numpy scalars/arrays to Python objects, leaving the rest."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        try:
            return value.tolist()
        except (TypeError, ValueError):
            return str(value)
    return value


def _render_value(value: object, depth: int = 0) -> str:
    value = _to_plain(value)
    if value is None:
        return '<span class="muted">none</span>'
    if isinstance(value, Number):
        return _esc(_fmt_number(value))
    if isinstance(value, str):
        return f"<code>{_esc(value)}</code>" if os.sep in value or "/" in value else _esc(value)
    if isinstance(value, dict):
        if _INTERVAL_KEYS <= set(value):
            return _esc(_interval_text(value))
        if depth >= 3:
            return _esc(f"{{{len(value)} entries}}")
        return _render_table(value, depth + 1)
    if isinstance(value, (list, tuple)):
        flat = all(isinstance(_to_plain(v), (Number, str)) or v is None for v in value)
        if flat and len(value) <= _MAX_LIST:
            return (
                _esc(", ".join(_fmt_number(v) if isinstance(v, Number) else str(v) for v in value))
                or '<span class="muted">empty</span>'
            )
        if flat and all(isinstance(v, str) for v in value):
            head = ", ".join(str(v) for v in value[:3])
            return _esc(f"{len(value)} values: {head}, ...")
        if flat:
            numbers = [float(v) for v in value if isinstance(v, Number)]
            text = f"{len(value)} values"
            if numbers:
                finite = [v for v in numbers if math.isfinite(v)]
                if finite:
                    text += (
                        f" (mean {_fmt_number(sum(finite) / len(finite))}, "
                        f"min {_fmt_number(min(finite))}, max {_fmt_number(max(finite))})"
                    )
            return _esc(text)
        rows = [_to_plain(v) for v in value]
        if (
            rows
            and len(rows) <= _MAX_LIST
            and all(isinstance(r, list) for r in rows)
            and len({len(r) for r in rows}) == 1
            and len(rows[0]) <= _MAX_LIST
            and all(isinstance(c, (Number, str)) for r in rows for c in r)
        ):
            cells = "".join(
                "<tr>"
                + "".join(
                    f'<td class="num">{_esc(_fmt_number(c) if isinstance(c, Number) else c)}</td>'
                    for c in r
                )
                + "</tr>"
                for r in rows
            )
            return f"<table>{cells}</table>"
        return _esc(f"{len(value)} items")
    return _esc(value)


def _interval_text(value: dict) -> str:
    text = (
        f"{_fmt_number(value['mean'])} [{_fmt_number(value['ci_low'])}, "
        f"{_fmt_number(value['ci_high'])}]"
    )
    if "k" in value and "n" in value:
        text += f" (k = {_fmt_number(value['k'])}, n = {_fmt_number(value['n'])})"
    return text


def _render_table(mapping: dict, depth: int = 0) -> str:
    if not mapping:
        return '<p class="muted">none</p>'
    rows = []
    intervals = {
        k: v for k, v in mapping.items() if isinstance(v, dict) and _INTERVAL_KEYS <= set(v)
    }
    if len(intervals) >= 2:  # a metrics block: one row per metric
        rows.append(
            "<table><tr><th>metric</th><th>estimate</th><th>95% interval</th><th>k / n</th></tr>"
        )
        for name, value in intervals.items():
            kn = (
                f"{_fmt_number(value['k'])} / {_fmt_number(value['n'])}"
                if "k" in value and "n" in value
                else ""
            )
            rows.append(
                f'<tr><td>{_esc(name)}</td><td class="num">{_esc(_fmt_number(value["mean"]))}'
                f'</td><td class="num">[{_esc(_fmt_number(value["ci_low"]))}, '
                f'{_esc(_fmt_number(value["ci_high"]))}]</td><td class="num">{_esc(kn)}</td>'
                "</tr>"
            )
        rows.append("</table>")
        rest = {k: v for k, v in mapping.items() if k not in intervals}
        if rest:
            rows.append(_render_table(rest, depth))
        return "".join(rows)
    rows.append("<table>")
    for key, value in mapping.items():
        rows.append(f"<tr><th>{_esc(key)}</th><td>{_render_value(value, depth)}</td></tr>")
    rows.append("</table>")
    return "".join(rows)


def _render_timings(timings: dict) -> str:
    if not timings:
        return '<p class="muted">none</p>'
    numbers = {k: float(v) for k, v in timings.items() if isinstance(v, Number)}
    top = max(numbers.values(), default=0.0) or 1.0
    rows = ["<table><tr><th>step</th><th>seconds</th><th></th></tr>"]
    for key, value in numbers.items():
        width = round(200 * value / top)
        rows.append(
            f'<tr><td>{_esc(key)}</td><td class="num">{_esc(_fmt_number(value))}'
            f'</td><td><span class="bar" style="width: {width}px"></span></td></tr>'
        )
    rows.append("</table>")
    return "".join(rows)


def _resolve(path: str | os.PathLike, out_dir: Path) -> Path:
    path = Path(path)
    return path if path.is_absolute() or path.exists() else out_dir / path


def _embed_figure(path: str | os.PathLike, out_dir: Path, problems: list) -> str:
    resolved = _resolve(path, out_dir)
    mime = _MIME.get(resolved.suffix.lower())
    if mime is None:
        problems.append(f"figure {path} not embedded: unsupported type {resolved.suffix!r}")
        return ""
    try:
        data = resolved.read_bytes()
    except OSError as exc:
        problems.append(f"figure {path} not embedded: {exc.strerror or exc}")
        return ""
    if not data:
        problems.append(f"figure {path} not embedded: the file is empty")
        return ""
    encoded = base64.b64encode(data).decode("ascii")
    name = resolved.name
    return (
        f'<figure><img src="data:{mime};base64,{encoded}" alt="{_esc(name)}">'
        f"<figcaption>{_esc(name)}</figcaption></figure>"
    )


def _display_path(path: str | os.PathLike, out_dir: Path) -> str:
    resolved = _resolve(path, out_dir)
    try:
        return str(resolved.resolve().relative_to(out_dir.resolve()))
    except (ValueError, OSError):
        return str(path)


def render_report(
    record: RunLog | dict,
    out_dir: str | os.PathLike,
    *,
    published_dir: str | os.PathLike | None = None,
) -> str:
    """Render the HTML text of the report of ``record`` (see :func:`write_report`).

    Parameters
    ----------
    record : RunLog or dict
        As :func:`write_report`.
    out_dir : str or path
        Folder of the report (relative figure and output paths are taken from it).
    published_dir : str, path or None
        As :func:`write_report`.

    Returns
    -------
    str
        The self-contained HTML document.

    Examples
    --------
    >>> from connscale.report import render_report
    >>> record = {"command": "fc", "parameters": {"kind": "triu"}, "timings_s": {"compute": 0.5}}
    >>> html = render_report(record, ".")
    >>> html.startswith("<!DOCTYPE html>"), "<h1>connscale fc</h1>" in html
    (True, True)
    """
    if hasattr(record, "as_dict"):
        record = record.as_dict()
    if not isinstance(record, dict):
        raise ValueError(f"Expected a RunRecord or its dict; got {type(record).__name__}.")
    out_dir = Path(out_dir)
    command = str(record.get("command", "run"))
    software = record.get("software") or {}
    problems: list = []
    figures = [_embed_figure(p, out_dir, problems) for p in record.get("figures") or []]
    figures = [f for f in figures if f]
    for problem in problems:
        warnings.warn(f"report: {problem}", RuntimeWarning, stacklevel=3)
    run_warnings = list(record.get("warnings") or []) + [f"report: {p}" for p in problems]

    outputs = []
    base = out_dir if published_dir is None else Path(published_dir)
    for path in record.get("outputs") or []:
        resolved = _resolve(path, base)
        size = f"{resolved.stat().st_size:,} bytes" if resolved.is_file() else "missing"
        outputs.append(
            f"<li><code>{_esc(_display_path(path, base))}</code> "
            f'<span class="muted">{_esc(size)}</span></li>'
        )

    subtitle = " · ".join(
        _esc(x)
        for x in [
            f"started {record.get('started') or '?'}",
            f"device {record.get('device') or 'n/a'}",
            f"connscale {software.get('connscale', '?')}",
            f"python {software.get('python', '?')}",
        ]
    )
    warnings_html = (
        ("<ul>" + "".join(f'<li class="warn">{_esc(w)}</li>' for w in run_warnings) + "</ul>")
        if run_warnings
        else '<p class="muted">none</p>'
    )
    sections = [
        ("parameters", "Parameters", _render_table(record.get("parameters") or {})),
        ("timings", "Timings", _render_timings(record.get("timings_s") or {})),
        ("results", "Results", _render_table(record.get("results") or {})),
        ("figures", "Figures", "".join(figures) or '<p class="muted">none</p>'),
        ("warnings", f"Warnings ({len(run_warnings)})", warnings_html),
        (
            "outputs",
            "Outputs",
            ("<ul>" + "".join(outputs) + "</ul>") if outputs else '<p class="muted">none</p>',
        ),
    ]
    body = "".join(
        f'<section id="{sid}"><h2>{_esc(title)}</h2>{content}</section>'
        for sid, title, content in sections
    )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>connscale {_esc(command)} report</title>\n"
        f"<style>{_CSS}</style>\n</head>\n<body>\n"
        f"<header><h1>connscale {_esc(command)}</h1><p>{subtitle}</p></header>\n"
        f"<main>{body}</main>\n"
        f'<footer><p class="muted" style="padding: 0 32px">Generated by connscale '
        f"{_esc(software.get('connscale', ''))}.</p></footer>\n"
        "</body>\n</html>\n"
    )


def write_report(
    record: RunLog | dict,
    out_dir: str | os.PathLike,
    *,
    filename: str = "report.html",
    published_dir: str | os.PathLike | None = None,
) -> Path:
    """Write the self-contained HTML report of a run.

    Parameters
    ----------
    record : RunLog or dict
        A run record with ``as_dict()`` (the command line's ``RunRecord``) or its dict (the
        content of ``<prefix>_log.json``). Relative figure and output paths are
        taken relative to ``out_dir``.
    out_dir : str or path
        Folder of the report.
    filename : str, default="report.html"
    published_dir : str, path or None
        Where the report will be published when ``out_dir`` is a staging
        folder: relative output paths (links out of the staged set) are then
        taken relative to it. None: ``out_dir``.

    Returns
    -------
    Path
        The report. Figures that cannot be read are listed among the report's
        warnings and warned about (RuntimeWarning).

    Examples
    --------
    >>> import tempfile
    >>> from connscale.report import write_report
    >>> record = {"command": "fc", "parameters": {"kind": "triu"}, "results": {"n_regions": 4}}
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = write_report(record, tmp)
    ...     print(path.name, "connscale fc" in path.read_text())
    report.html True
    """
    from connscale.io.atomic import write_text_atomic

    out_dir = Path(out_dir)
    text = render_report(record, out_dir, published_dir=published_dir)
    return write_text_atomic(out_dir / filename, text)
