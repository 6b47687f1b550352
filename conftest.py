"""Collect the Examples of the package's docstrings as doctests (``make test`` runs them).

Only ``src/connscale`` is collected this way: ``--doctest-modules`` would also import every
module under ``tests/``, whose interpreted-Triton helpers set the interpreter's environment
at import. This file sits at the repository's root so that it does not ship in the wheel.
"""

from pathlib import Path

from _pytest.doctest import DoctestModule

_PACKAGE = Path(__file__).resolve().parent / "src" / "connscale"


def pytest_collect_file(file_path: Path, parent):
    """Return a doctest collector for a module of the package."""
    # __main__.py runs the command line at import (pytest's --doctest-modules skips it too);
    # with --doctest-modules on, pytest collects these files itself.
    if (
        file_path.suffix == ".py"
        and _PACKAGE in file_path.parents
        and file_path.name != "__main__.py"
        and not parent.config.option.doctestmodules
    ):
        return DoctestModule.from_parent(parent, path=file_path)
    return None
