"""Start-up of the command and of the package: ``connscale --help``,
``--version``, ``connscale COMMAND --help`` and ``import connscale`` import
no heavy module (torch, nilearn, pybids, ...). What is imported is checked,
not how long it takes (the time is measured in benchmarks/bench_startup.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import connscale
from connscale.cli.main import _COMMANDS, _message, build_parser

#: Top-level packages that must not be imported to start.
HEAVY = {
    "torch",
    "nilearn",
    "nibabel",
    "bids",
    "matplotlib",
    "h5py",
    "scipy",
    "sklearn",
    "dask",
    "distributed",
    "pyspark",
    "pandas",
}


def _python(*args: str) -> subprocess.CompletedProcess:
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, check=True
    )


def _imported(importtime: str) -> set[str]:
    """Top-level packages named by ``python -X importtime`` on stderr."""
    names = set()
    for line in importtime.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "package":
                names.add(name.split(".")[0])
    return names


@pytest.mark.parametrize(
    "argv", [["--help"], ["--version"], ["fc", "--help"], ["bids", "--help"], ["maps", "--help"]]
)
def test_command_start_imports_nothing_heavy(argv):
    result = _python("-X", "importtime", "-m", "connscale", *argv)
    imported = _imported(result.stderr)
    assert "connscale" in imported  # the importtime report was read
    assert imported & HEAVY == set()
    assert result.stdout.startswith("connscale ") or "usage: connscale" in result.stdout


def test_every_command_help_imports_nothing_heavy():
    code = (
        "import contextlib, io, json, sys\n"
        "from connscale.cli.main import _COMMANDS, main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    codes = [main([c, '--help']) for c in _COMMANDS]\n"
        "print(json.dumps({'codes': codes, 'modules': sorted({m.split('.')[0] "
        "for m in sys.modules})}))\n"
    )
    report = json.loads(_python("-c", code).stdout)
    assert report["codes"] == [0] * len(_COMMANDS)
    assert set(report["modules"]) & HEAVY == set()


def test_import_connscale_is_lazy():
    code = (
        "import json, sys\n"
        "import connscale\n"
        "names = dir(connscale)\n"
        "before = sorted({m.split('.')[0] for m in sys.modules})\n"
        "connscale.correlation\n"
        "print(json.dumps({'before': before, 'torch': 'torch' in sys.modules, "
        "'version': connscale.__version__, 'all_in_dir': set(connscale.__all__) <= set(names)}))\n"
    )
    report = json.loads(_python("-c", code).stdout)
    assert set(report["before"]) & HEAVY == set()
    assert report["torch"]  # imported on first use of an API function
    assert report["version"] == connscale.__version__ and report["all_in_dir"]


def test_lazy_names_are_the_public_api():
    assert set(connscale.__all__) == {*connscale._LAZY, "__version__", "life"}
    for name in connscale.__all__:
        assert getattr(connscale, name) is not None
    assert connscale.life.__name__ == "connscale.life"
    assert connscale.correlation is connscale.fc.correlation
    with pytest.raises(AttributeError, match="has no attribute 'correlate'"):
        connscale.correlate  # noqa: B018


def test_choices_match_their_implementations():
    from connscale._choices import COHORT_JOBS
    from connscale.cohort import JOBS

    assert sorted(JOBS) == sorted(COHORT_JOBS)


def test_api_names_are_written_as_flags():
    from connscale.cli._common import api_to_flags

    parser = build_parser()
    dfc, cohort, bids = (parser.subcommands[c] for c in ("dfc", "cohort", "bids"))
    assert (
        api_to_flags("'window_length' must be at most the number of time points (24).", dfc)
        == "--window must be at most the number of time points (24)."
    )
    assert (
        api_to_flags("'rank' applies to kind='lowrank' or 'factor'; got kind='triu'.", dfc)
        == "--rank applies to --kind lowrank or 'factor'; got --kind triu."
    )
    assert (
        api_to_flags("With absolute=True the threshold", cohort) == "With --absolute the threshold"
    )
    assert api_to_flags("'window_length' is missing", bids) == "--window-length is missing"
    assert (
        api_to_flags("'random_state' and 'seed_names'", bids) == "--random-state and 'seed_names'"
    )
    assert api_to_flags("'timeseries' has NaN", dfc) == "INPUT has NaN"


def test_os_errors_name_the_file():
    parser = build_parser()
    error = FileNotFoundError(2, "No such file or directory", "sub-01_bold.nii.gz")
    assert _message(error, parser.subcommands["fc"]) == (
        "sub-01_bold.nii.gz: No such file or directory"
    )
    error = OSError(18, "Invalid cross-device link", "a.tmp", None, "b.h5")
    assert _message(error, parser.subcommands["fc"]) == (
        "a.tmp: Invalid cross-device link (-> b.h5)"
    )
