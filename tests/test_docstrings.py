"""Every public callable documents its Parameters, its Returns and an Example (numpydoc).

"Public" is what a user imports: the names in ``connscale.__all__`` and in the ``__all__`` of
the public subpackages and modules below, and the public methods their classes define. The
Examples run as doctests in ``make test`` (pyproject.toml collects ``src/connscale``).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect

import pytest

PUBLIC_MODULES = [
    "connscale",
    "connscale.classify",
    "connscale.cifti",
    "connscale.datasets",
    "connscale.denoise",
    "connscale.despike",
    "connscale.engines",
    "connscale.fc",
    "connscale.io",
    "connscale.life",
    "connscale.maps",
    "connscale.motion",
    "connscale.networks",
    "connscale.nuisance",
    "connscale.qc",
    "connscale.report",
    "connscale.states",
]


def _public_callables():
    """Yield (qualified name, object) for each public function, class and public method."""
    seen = set()
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            obj = getattr(module, name)
            # Constants, subpackages, and exceptions/warnings (raised by connscale, not
            # called by users) have no Parameters/Returns to document.
            if inspect.ismodule(obj) or not callable(obj) or _is_exception(obj):
                continue
            key = f"{obj.__module__}.{obj.__qualname__}"
            if key in seen:
                continue
            seen.add(key)
            yield f"{module_name}.{name}", obj
            if inspect.isclass(obj):
                for method_name, method in _public_methods(obj):
                    method_key = f"{method.__module__}.{method.__qualname__}"
                    if method_key not in seen:  # a method inherited from a documented base
                        seen.add(method_key)
                        yield f"{module_name}.{name}.{method_name}", method


def _is_exception(obj) -> bool:
    return inspect.isclass(obj) and issubclass(obj, BaseException)


def _public_methods(cls):
    """The public methods defined by ``cls`` or a connscale base (not scikit-learn's)."""
    seen = set()
    for klass in cls.__mro__:
        if not klass.__module__.startswith("connscale"):
            continue
        for name, attr in vars(klass).items():
            if name.startswith("_") or name in seen:
                continue
            seen.add(name)
            if isinstance(attr, staticmethod | classmethod):
                attr = attr.__func__
            if inspect.isfunction(attr):
                yield name, getattr(cls, name)


def _own_parameters(obj) -> list[str]:
    target = obj.__init__ if inspect.isclass(obj) else obj
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return []
    names = [n for n in signature.parameters if n not in ("self", "cls")]
    if inspect.isclass(obj) and target is object.__init__:
        return []
    return names


def _returns_value(obj) -> bool:
    if inspect.isclass(obj):
        return False
    annotation = inspect.signature(obj).return_annotation
    return annotation not in (None, "None")


CALLABLES = sorted(_public_callables())


def test_the_walk_finds_the_package_api():
    names = {name for name, _ in CALLABLES}
    assert "connscale.correlation" in names
    assert "connscale.DFCStates.fit" in names
    assert "connscale.io.save_timeseries" in names
    assert "connscale.engines.SerialEngine.map" in names
    assert "connscale.engines.SparkEngine.sum_blocks" in names  # the worker engines too
    assert len(CALLABLES) > 100


def _sections(doc: str) -> dict[str, str]:
    """Return each numpydoc section of ``doc`` (a title underlined by dashes) and its text."""
    lines = doc.splitlines()
    starts = [
        k
        for k in range(len(lines) - 1)
        if lines[k].strip()
        and set(lines[k + 1].strip()) == {"-"}
        and len(lines[k + 1].strip()) == len(lines[k].strip())
    ]
    bounds = [*starts, len(lines)]
    return {
        lines[k].strip(): "\n".join(lines[k + 2 : end]).strip()
        for k, end in zip(starts, bounds[1:])
    }


def test_sections_are_read_from_their_underlined_titles():
    parsed = _sections("Summary.\n\nParameters\n----------\nx : int\n\nExamples\n--------\n")
    assert parsed == {"Parameters": "x : int", "Examples": ""}


@pytest.mark.parametrize(("name", "obj"), CALLABLES, ids=[name for name, _ in CALLABLES])
def test_public_callable_has_parameters_returns_examples(name, obj):
    doc = inspect.getdoc(obj)
    assert doc, f"{name}: no docstring"
    parsed = _sections(doc)
    missing = []
    # A dataclass's fields are its parameters: an Attributes section documents both.
    fields_documented = dataclasses.is_dataclass(obj) and parsed.get("Attributes")
    if _own_parameters(obj) and not (parsed.get("Parameters") or fields_documented):
        missing.append("Parameters")
    if _returns_value(obj) and not (parsed.get("Returns") or parsed.get("Yields")):
        missing.append("Returns")
    if ">>>" not in parsed.get("Examples", ""):
        missing.append("Examples")
    assert not missing, f"{name}: no {' / '.join(missing)} section"
