"""`python -m build` makes an sdist and a wheel that install in a fresh venv: the wheel holds
the package and its data, its version is git's, and the installed `connscale` runs.

The fresh venv installs the wheel alone (``--no-deps``) and sees the test environment's packages
through a .pth file (torch and the rest are not downloaded again); that they satisfy the wheel's
requirements is checked from inside it, as is that ``connscale`` comes from the wheel."""

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tests.release.test_container import entry_point_argv

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DATA = ("io/bids_config.json", "data/fslr32k_faces.npz", "data/SOURCE.md")


def _run(argv, **kwargs):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # conftest sets it to src/
    result = subprocess.run(argv, capture_output=True, text=True, env=env, **kwargs)
    assert result.returncode == 0, (argv, result.stdout[-2000:], result.stderr[-2000:])
    return result


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    """Return the folder holding the sdist and the wheel built (the wheel from the sdist)."""
    pytest.importorskip("build", reason="the release extra (build) is not installed")
    pytest.importorskip("setuptools_scm", reason="the release extra is not installed")
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the version comes from git")
    # Built from a clone carrying the working tree's changes to tracked files, so that the
    # build's version file is not rewritten under the tests that import src/.
    source, out = tmp_path_factory.mktemp("source") / "connscale", tmp_path_factory.mktemp("dist")
    _run(["git", "clone", "--quiet", "--shared", str(ROOT), str(source)])
    changes = subprocess.run(
        ["git", "-C", str(ROOT), "diff", "HEAD", "--binary"], capture_output=True, check=True
    ).stdout
    if changes:
        apply = ["git", "-C", str(source), "apply", "--index", "--binary"]
        subprocess.run(apply, input=changes, check=True)
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)])
    return out


@pytest.fixture(scope="module")
def venv(dist, tmp_path_factory):
    """Return a fresh venv with the wheel installed, seeing this environment's packages."""
    root = tmp_path_factory.mktemp("venv")
    _run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(root)])
    python = root / "bin" / "python"
    purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"])
    parents = [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages")]
    (Path(purelib.stdout.strip()) / "_test_environment.pth").write_text("\n".join(parents) + "\n")
    wheel = next(dist.glob("connscale-*.whl"))
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
          "--no-index", str(wheel)])  # fmt: skip
    return root


def _version(dist) -> str:
    return re.match(r"connscale-([^-]+)-py3-none-any\.whl", next(dist.glob("*.whl")).name)[1]


def _check_archives(dist) -> None:
    """The sdist and the wheel hold the package and its data; the version is git's."""
    version = _version(dist)
    assert version != "0+unknown" and not version.startswith("0.0")
    described = subprocess.run(
        ["git", "-C", str(ROOT), "describe", "--tags", "--exact-match", "--match", "v*"],
        capture_output=True,
        text=True,
    )
    if described.returncode == 0 and not _run(["git", "-C", str(ROOT), "status", "--porcelain",
                                                "--untracked-files=no"]).stdout:  # fmt: skip
        assert version == described.stdout.strip().removeprefix("v")  # a clean tagged commit
    with zipfile.ZipFile(next(dist.glob("*.whl"))) as wheel:
        names = set(wheel.namelist())
        entry_points = wheel.read(f"connscale-{version}.dist-info/entry_points.txt").decode()
    assert {f"connscale/{name}" for name in PACKAGE_DATA} <= names
    assert {"connscale/__init__.py", "connscale/_scm_version.py", "connscale/cli/main.py"} <= names
    assert not any(name.startswith(("tests/", "benchmarks/")) for name in names)
    assert "connscale = connscale.cli.main:main" in entry_points
    (sdist,) = dist.glob("connscale-*.tar.gz")
    with tarfile.open(sdist) as archive:
        members = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"PKG-INFO", "pyproject.toml", "CHANGELOG.md", "Dockerfile", "connscale.def"} <= members
    assert "src/connscale/_scm_version.py" in members
    assert {f"src/connscale/{name}" for name in PACKAGE_DATA} <= members


def _check_fresh_venv(dist, venv, tmp_path) -> None:
    """The wheel installed in a fresh venv imports, finds its data and runs."""
    python, command = venv / "bin" / "python", venv / "bin" / "connscale"
    check = (
        "import importlib.metadata as md, importlib.resources as res, json, sys, connscale\n"
        "from packaging.requirements import Requirement\n"
        "unmet = []\n"
        "for text in md.requires('connscale'):\n"
        "    req = Requirement(text)\n"
        "    if req.marker is None or req.marker.evaluate({'extra': ''}):\n"
        "        try:\n"
        "            found = md.version(req.name)\n"
        "        except md.PackageNotFoundError:\n"
        "            found = None\n"
        "        if found is None or not req.specifier.contains(found, prereleases=True):\n"
        "            unmet.append((text, found))\n"
        "data = [(res.files('connscale') / n).is_file() for n in sys.argv[1:]]\n"
        "print(json.dumps({'file': connscale.__file__, 'version': connscale.__version__,\n"
        "                  'unmet': unmet, 'data': data}))\n"
    )
    report = json.loads(_run([str(python), "-c", check, *PACKAGE_DATA], cwd=tmp_path).stdout)
    assert Path(report["file"]).is_relative_to(venv), report["file"]  # the wheel's, not src/
    assert report["version"] == _version(dist) and report["unmet"] == [] and all(report["data"])
    assert _run([str(command), "--version"], cwd=tmp_path).stdout.strip() == (
        f"connscale {_version(dist)}"
    )
    assert "bids" in _run([str(command), "--help"], cwd=tmp_path).stdout
    usage = _run([str(venv / "bin" / entry_point_argv()[0]), *entry_point_argv()[1:], "--help"])
    assert "participant" in usage.stdout  # the containers' entry point, as installed

    x = np.random.default_rng(0).standard_normal((40, 6))
    src = tmp_path / "sub-01_timeseries.tsv"
    np.savetxt(src, x, delimiter="\t", header="\t".join(f"r{i}" for i in range(6)), comments="")
    _run([str(command), "fc", str(src), "--out", str(tmp_path / "out"), "--device", "cpu", "-q"],
         cwd=tmp_path)  # fmt: skip
    read = (
        "import sys, numpy as np\n"
        "from connscale.io import read_relmat_tsv\n"
        "np.save(sys.argv[2], read_relmat_tsv(sys.argv[1])[0])\n"
    )
    stem = tmp_path / "out" / "sub-01" / "func" / "sub-01_meas-PearsonCorrelation_relmat"
    _run([str(python), "-c", read, f"{stem}.tsv", str(tmp_path / "r.npy")], cwd=tmp_path)
    np.testing.assert_allclose(np.load(tmp_path / "r.npy"), np.corrcoef(x.T), atol=1e-5)
    log = json.loads(Path(f"{stem}_log.json").read_text())
    assert log["device"] == "cpu" and log["software"]["connscale"] == _version(dist)


# One test, so that the pytest-xdist workers build the wheel once.
def test_built_sdist_and_wheel_install_and_run(dist, venv, tmp_path):
    _check_archives(dist)
    _check_fresh_venv(dist, venv, tmp_path)
