"""The container recipes (Dockerfile, connscale.def) start a real console command, the
BIDS-App's, whose --help works; what needs a container engine is built in .ci/run."""

import importlib
import json
import re
import shlex
from pathlib import Path

from connscale.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


def entry_point_argv() -> list[str]:
    """Return the argv of the Dockerfile's (last) ENTRYPOINT, in its exec (JSON) form."""
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    (last,) = [line for line in lines if line.startswith("ENTRYPOINT ")][-1:]
    return json.loads(last.removeprefix("ENTRYPOINT "))


def _runscript_argv() -> list[str]:
    """Return the argv of connscale.def's %runscript (``exec CMD ... "$@"``)."""
    text = (ROOT / "connscale.def").read_text()
    body = re.search(r"^%runscript\n(.*?)(?=^%|\Z)", text, flags=re.MULTILINE | re.DOTALL)[1]
    (line,) = [line.strip() for line in body.splitlines() if line.strip()]
    words = shlex.split(line)
    assert words[0] == "exec" and words[-1] == "$@", line
    return words[1:-1]


def test_entry_points_name_the_bids_app_command(capsys):
    argv = entry_point_argv()
    assert argv == ["connscale", "bids"] == _runscript_argv()
    pyproject = (ROOT / "pyproject.toml").read_text()
    scripts = re.search(r"^\[project\.scripts\]\n(.*?)^\[", pyproject, re.MULTILINE | re.DOTALL)[1]
    target = re.search(rf'^{re.escape(argv[0])} = "([\w.]+):(\w+)"$', scripts, re.MULTILINE)
    module, function = target.groups()
    assert getattr(importlib.import_module(module), function) is main
    assert main([*argv[1:], "--help"]) == 0
    usage = capsys.readouterr().out
    assert usage.startswith("usage: connscale bids") and "participant" in usage


def test_recipes_share_the_base_image_and_keep_the_version_source():
    dockerfile = (ROOT / "Dockerfile").read_text()
    (base,) = re.findall(r"^ARG BASE=(\S+)$", dockerfile, flags=re.MULTILINE)
    assert re.search(r"^FROM \$\{BASE\}$", dockerfile, flags=re.MULTILINE)
    definition = (ROOT / "connscale.def").read_text()
    assert re.search(r"^Bootstrap: docker\nFrom: (\S+)$", definition, flags=re.MULTILINE)[1] == base
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    ignored = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    assert ".git" not in ignored  # setuptools-scm reads the version from the tags in the image
