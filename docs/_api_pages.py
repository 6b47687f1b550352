"""Write the API reference's pages: one per public module, from its ``__all__``.

Each page lists the module's public functions and classes in autosummary
tables (one generated page per object). The top level ``connscale`` is the
canonical place of the names it re-exports: a sub-package's page lists them
as links to it and documents only its own names.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

# (module, title) of every public module, in the order of the reference.
MODULES = (
    ("connscale", "Top level: the main functions and estimators"),
    ("connscale.fc", "Functional connectivity: static, dynamic, region pairs"),
    ("connscale.maps", "Voxel maps: degree, ECM, GCOR, seeds, ALFF, ReHo"),
    ("connscale.states", "Dynamic FC states"),
    ("connscale.networks", "Functional networks: r1DL"),
    ("connscale.life", "Structural connectome pruning: LiFE / ReAl-LiFE"),
    ("connscale.classify", "Classification"),
    ("connscale.cifti", "Grayordinates: CIFTI-2 connectomes, parcellation, maps"),
    ("connscale.io", "Reading inputs and writing results"),
    ("connscale.io.cifti", "CIFTI-2 files"),
    ("connscale.io.bids", "BIDS names of the outputs"),
    ("connscale.denoise", "Confound removal"),
    ("connscale.nuisance", "Nuisance regressor sets"),
    ("connscale.motion", "Head motion"),
    ("connscale.despike", "Despiking"),
    ("connscale.qc", "Quality control"),
    ("connscale.cohort", "Cohort runner"),
    ("connscale.engines", "Execution engines"),
    ("connscale.bidsapp", "The BIDS-App"),
    ("connscale.bidsapp.xcpd_names", "XCP-D's spelling of the output names"),
    ("connscale.datasets", "Data sets and simulators"),
    ("connscale.datasets.fmriprep", "A synthetic fMRIPrep derivatives tree"),
    ("connscale.report", "Figures and HTML reports"),
)


def public_objects(module_name: str) -> tuple[list[str], list[str], list[str]]:
    """Return the classes, functions and other names of a module's ``__all__``.

    Sub-modules (``connscale.life``) and data (constants) are returned in the
    third list; they are not given autosummary pages.
    """
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", None)
    if names is None:
        raise ValueError(f"{module_name} has no __all__: its public names are not declared")
    classes, functions, other = [], [], []
    for name in sorted(names, key=str.lower):
        obj = getattr(module, name)
        if inspect.isclass(obj):
            classes.append(name)
        elif callable(obj) and not inspect.ismodule(obj):
            functions.append(name)
        else:
            other.append(name)
    return classes, functions, other


def _table(module_name: str, names: list[str]) -> list[str]:
    lines = [".. autosummary::", "   :toctree: generated/", "   :nosignatures:", ""]
    lines += [f"   {name}" for name in names]
    return lines + [""]


def module_page(module_name: str, title: str, top: set[str]) -> str:
    """Return the reStructuredText of one module's API page."""
    classes, functions, other = public_objects(module_name)
    module = importlib.import_module(module_name)
    shared = [n for n in classes + functions if module_name != "connscale" and n in top]
    heading = f"``{module_name}``: {title}"
    lines = [f".. _api-{module_name}:", "", heading, "=" * len(heading), ""]
    lines += [f".. module:: {module_name}", ""]
    lines += [f".. currentmodule:: {module_name}", ""]
    summary = (inspect.getdoc(module) or "").split("\n\n")
    lines += [summary[0], ""]
    own_classes = [n for n in classes if n not in shared]
    own_functions = [n for n in functions if n not in shared]
    if own_classes:
        lines += ["Classes", "-------", "", *_table(module_name, own_classes)]
    if own_functions:
        lines += ["Functions", "---------", "", *_table(module_name, own_functions)]
    if shared:
        lines += ["Also here", "---------", ""]
        lines += ["Documented at the top level, importable from here too:", ""]
        for name in shared:
            kind = "class" if name in classes else "function"
            lines += [f".. py:{kind}:: {name}", "   :no-index-entry:", ""]
            role = "class" if kind == "class" else "func"
            lines += [f"   The same object as :{role}:`connscale.{name}`.", ""]
    constants = [n for n in other if not inspect.ismodule(getattr(module, n))]
    if constants:
        lines += ["Constants", "---------", ""]
        for name in constants:
            value = getattr(module, name)
            lines += [f".. py:data:: {name}", f"   :value: {_short(value)}", ""]
    return "\n".join(lines)


def _short(value) -> str:
    text = " ".join(repr(value).split())
    return text if len(text) <= 120 else text[:117] + "..."


def write_api_pages(folder: Path) -> None:
    """Write ``index.rst`` and one page per module into ``folder`` (unchanged files kept)."""
    folder.mkdir(parents=True, exist_ok=True)
    classes, functions, _ = public_objects("connscale")
    top = set(classes + functions)
    toc = []
    for module_name, title in MODULES:
        _write(folder / f"{module_name}.rst", module_page(module_name, title, top))
        toc.append(f"   {module_name}")
    index = [
        ".. _api:",
        "",
        "API reference",
        "=============",
        "",
        "Every public function and class, one page per module, generated from the",
        "numpydoc docstrings. The top level, ``connscale``, holds the functions and",
        "estimators most analyses need; the sub-packages hold the rest.",
        "",
        ".. toctree::",
        "   :maxdepth: 1",
        "",
        *toc,
        "",
    ]
    _write(folder / "index.rst", "\n".join(index))


def _write(path: Path, text: str) -> None:
    # Rewriting an unchanged page would make Sphinx rebuild it.
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
