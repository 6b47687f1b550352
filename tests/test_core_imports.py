"""The numerical core imports with numpy, scipy, torch and h5py alone.

The correlation, dynamic-FC, pair, degree, ECM, ALFF, ReHo, despiking, QC and motion modules
are imported in a fresh interpreter in which every other third-party package the project
uses (tqdm, nibabel, nilearn, pandas, pybids, scikit-learn, matplotlib, Dask, Spark, ISA-L,
Jinja2, YAML, ...) raises ImportError; their users import them where they are used.
"""

import subprocess
import sys
import textwrap

CORE = [
    "connscale",
    "connscale.fc",
    "connscale.fc.static",
    "connscale.fc.dynamic",
    "connscale.fc.pairs",
    "connscale.fc.degree",
    "connscale.maps",
    "connscale.maps.degree",
    "connscale.maps.ecm",
    "connscale.maps.alff",
    "connscale.maps.reho",
    "connscale.despike",
    "connscale.qc",
    "connscale.motion",
]
BLOCKED = [
    "tqdm", "nibabel", "nilearn", "pandas", "bids", "sklearn", "matplotlib", "dask",
    "distributed", "pyspark", "isal", "jinja2", "yaml", "templateflow", "dipy", "nitime",
]  # fmt: skip

_PROBE = textwrap.dedent(
    """
    import importlib, importlib.abc, sys
    blocked = set(sys.argv[1].split(","))

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in blocked:
                raise ImportError(f"{name} is not part of the numerical core")
            return None

    sys.meta_path.insert(0, Block())
    for module in sys.argv[2:]:
        importlib.import_module(module)
    """
)


def test_numerical_core_imports_without_the_rest():
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, ",".join(BLOCKED), *CORE],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]


def test_the_probe_blocks():
    """The same probe fails on a module that needs a blocked package (it can fail)."""
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, ",".join(BLOCKED), "connscale.networks"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0 and "not part of the numerical core" in result.stderr
