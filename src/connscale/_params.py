"""One declaration per parameter: a config's fields, and what is derived from them.

A command's parameters are the fields of a frozen dataclass, each declared
once with :func:`param`: its default, its constraints (those of
:mod:`connscale._validation`), its documentation and, when it has one, its
command-line flag (:class:`Flag`). From that declaration come:

- the constraints of the entry function (:func:`constraints`, checked by
  :func:`connscale._validation.validate_params`);
- its keyword signature (:func:`signature`) and the "Parameters" section of
  its docstring (:func:`parameters_doc`), all three wired by :func:`entry`;
- its ``argparse`` options (:func:`add_arguments`) and the keywords a parsed
  command line gives (:func:`keywords_from_args`).

Adding an option is adding one field. As dipy derives its command line from
its workflows' ``run()`` signatures and docstrings, but typed: the flag's
argument type is named (a function of ``connscale.cli._types``), since the
layers below ``cli`` do not import it.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import textwrap
from collections.abc import Callable, Mapping
from numbers import Integral, Real

from connscale._validation import (
    Interval,
    Options,
    SequenceOf,
    make_constraint,
    validate_params,
)

__all__ = [
    "Flag",
    "add_arguments",
    "constraints",
    "declared",
    "entry",
    "fingerprint_fields",
    "flags_of",
    "keywords_from_args",
    "param",
    "parameters_doc",
    "signature",
]

#: The metadata key of a declared field.
KEY = "connscale.param"


class _FieldDefault:
    """The flag's default is the field's (a sequence written comma-separated)."""

    def __repr__(self) -> str:
        return "FIELD_DEFAULT"


FIELD_DEFAULT = _FieldDefault()


@dataclasses.dataclass(frozen=True)
class Flag:
    """How a parameter is written on the command line (``add_argument``'s words).

    ``names`` are the option strings (``("--atlas",)``) or, for a positional
    argument, its destination (``("derivatives",)``). ``type`` names a
    function of ``connscale.cli._types`` (``"count"``), or a factory of it
    and its arguments (``("integer", 2)``; a string argument names another
    function: ``("numbers", "correlation")``). ``group`` is the title of the
    argument group (None: the parser's own). ``default`` is the field's
    unless given (``FIELD_DEFAULT``). ``dest`` is the field's name unless
    given; ``convert`` turns the parsed value into the field's (``--no-reports``
    into ``reports``). ``action`` is argparse's (``"store_true"``). ``levels``
    names the analysis levels the option applies to; ``required`` makes an
    option (``--out``) required.
    """

    names: tuple[str, ...]
    help: str | None = None
    group: str | None = None
    type: str | tuple | None = None
    metavar: str | None = None
    choices: tuple | None = None
    default: object = FIELD_DEFAULT
    action: str | None = None
    nargs: str | int | None = None
    const: object = None
    dest: str | None = None
    convert: Callable | None = None
    levels: tuple[str, ...] = ()
    required: bool = False


@dataclasses.dataclass(frozen=True)
class Param:
    """A field's declaration (see :func:`param`)."""

    constraints: tuple = ()
    doc: str = ""
    doc_type: str | None = None
    flags: tuple[Flag, ...] = ()
    positional: bool = False
    fingerprint: bool = True


def param(
    default=dataclasses.MISSING,
    *,
    constraints=(),
    doc: str = "",
    doc_type: str | None = None,
    flag: Flag | tuple[Flag, ...] | None = None,
    positional: bool = False,
    fingerprint: bool = True,
):
    """Declare a config field: its default and everything derived from it.

    Parameters
    ----------
    default : object, optional
        The default (immutable); none: the parameter is required.
    constraints : sequence
        What the value may be, as :func:`connscale._validation.validate_params`
        takes them; empty: not checked.
    doc : str
        Its description in the entry's docstring (numpydoc, unindented).
    doc_type : str or None
        Its type in the docstring; None: derived from ``constraints``.
    flag : Flag, tuple of Flag or None
        Its command-line option(s); None: not on the command line.
    positional : bool
        Positional in the entry's signature (the others are keyword-only).
    fingerprint : bool
        Whether it changes the outputs (the config's ``parameters()``).
    """
    flags = () if flag is None else (flag,) if isinstance(flag, Flag) else tuple(flag)
    declared = Param(tuple(constraints), doc, doc_type, flags, positional, fingerprint)
    return dataclasses.field(default=default, metadata={KEY: declared})


def declared(config: type) -> dict[str, tuple[dataclasses.Field, Param]]:
    """Return the declared fields of a config class, in order: ``{name: (field, Param)}``."""
    return {f.name: (f, f.metadata[KEY]) for f in dataclasses.fields(config) if KEY in f.metadata}


def constraints(config: type) -> dict[str, list]:
    """Return the ``validate_params`` constraints of the fields that declare some."""
    return {name: list(p.constraints) for name, (_, p) in declared(config).items() if p.constraints}


def signature(config: type) -> inspect.Signature:
    """Return the entry's signature: positional fields first, then keyword-only ones."""
    kinds = {True: inspect.Parameter.POSITIONAL_OR_KEYWORD, False: inspect.Parameter.KEYWORD_ONLY}
    items = sorted(declared(config).items(), key=lambda item: not item[1][1].positional)
    return inspect.Signature(
        [
            inspect.Parameter(
                name,
                kinds[p.positional],
                default=inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default,
            )
            for name, (f, p) in items
        ]
    )


def fingerprint_fields(config: type) -> tuple[str, ...]:
    """Return the fields that change a run's outputs (``fingerprint=True``)."""
    return tuple(name for name, (_, p) in declared(config).items() if p.fingerprint)


def _type_words(spec) -> list[str]:
    constraint = make_constraint(spec)
    if isinstance(constraint, Interval):
        return ["int" if constraint.kind is Integral else "float"]
    if isinstance(constraint, Options):
        return ["{" + ", ".join(repr(o) for o in sorted(constraint.options, key=repr)) + "}"]
    if isinstance(constraint, SequenceOf):
        return ["sequence of " + " or ".join(_type_words(constraint.item))]
    named = {"boolean": "bool", "n_jobs": "int", "device": "str", "memory": "int or str"}
    if isinstance(spec, str):
        return [named.get(spec, spec)]
    if spec is None:
        return ["None"]
    return [{Integral: "int", Real: "float"}.get(spec, getattr(spec, "__name__", str(spec)))]


def _doc_type(p: Param) -> str:
    if p.doc_type is not None:
        return p.doc_type
    words = list(dict.fromkeys(w for spec in p.constraints for w in _type_words(spec)))
    if "None" in words:  # last, as numpydoc writes it
        words = [w for w in words if w != "None"] + ["None"]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def parameters_doc(config: type) -> str:
    """Return the numpydoc entries of the declared fields (no heading, unindented)."""
    entries = []
    for name, (f, p) in declared(config).items():
        head = f"{name} : {_doc_type(p)}"
        if f.default is not dataclasses.MISSING:
            head += f", default={f.default!r}"
        entries.append(head + ("\n" + textwrap.indent(p.doc, "    ") if p.doc else ""))
    return "\n".join(entries)


def entry(config: type, *, keywords: bool = False) -> Callable:
    """Decorate ``body(config)``: the entry takes the config, or its fields.

    The entry is called with a ``config`` instance alone, or with the fields
    as arguments (``signature(config)``); either way the values are checked
    against :func:`constraints` before ``body`` runs
    (:func:`~connscale._validation.validate_params`: the messages name the
    entry), and ``%(parameters)s`` in ``body``'s docstring becomes
    :func:`parameters_doc`, indented as the placeholder is.

    With ``keywords``, ``body`` takes the fields as keywords instead of the
    config; its parameters and defaults must be the declared ones (checked
    here, so the two cannot drift).
    """
    sig = signature(config)

    def decorate(body: Callable) -> Callable:
        if keywords:
            _check_same_signature(body, sig)

        def from_keywords(*args, **kwargs):
            given = config(**sig.bind(*args, **kwargs).arguments)
            if keywords:
                return body(**{name: getattr(given, name) for name in sig.parameters})
            return body(given)

        from_keywords.__signature__ = sig
        from_keywords.__name__ = body.__name__
        from_keywords.__qualname__ = body.__qualname__
        checked = validate_params(constraints(config))(from_keywords)

        @functools.wraps(body)
        def call(*args, **kwargs):
            if len(args) == 1 and not kwargs and isinstance(args[0], config):
                given = args[0]
                return checked(**{name: getattr(given, name) for name in sig.parameters})
            return checked(*args, **kwargs)

        call.__signature__ = sig
        call.parameter_constraints = checked.parameter_constraints
        call.__doc__ = _fill(body.__doc__, parameters_doc(config))
        return call

    return decorate


def _check_same_signature(body: Callable, sig: inspect.Signature) -> None:
    """Raise TypeError unless ``body`` takes the declared parameters, defaults included."""
    own = {n: p.default for n, p in inspect.signature(body).parameters.items()}
    declared_ = {n: p.default for n, p in sig.parameters.items()}
    if own != declared_:
        differ = sorted(n for n in own.keys() | declared_.keys() if own.get(n) != declared_.get(n))
        raise TypeError(
            f"{body.__qualname__}'s parameters differ from its declaration: {', '.join(differ)}."
        )


def _fill(doc: str | None, parameters: str) -> str | None:
    """``doc`` with its ``%(parameters)s`` line replaced, at that line's indent."""
    if not doc:
        return doc
    lines = []
    for line in doc.splitlines():
        if line.strip() == "%(parameters)s":
            indent = line[: len(line) - len(line.lstrip())]
            lines.append(textwrap.indent(parameters, indent))
        else:
            lines.append(line)
    return "\n".join(lines)


def _resolve_type(spec, types) -> Callable | None:
    """Return the argparse ``type`` named by ``spec`` among the functions of ``types``."""
    if spec is None:
        return None
    if isinstance(spec, str):
        return getattr(types, spec)
    factory, *args = spec
    return getattr(types, factory)(*(getattr(types, a) if isinstance(a, str) else a for a in args))


def _flag_default(flag: Flag, f: dataclasses.Field):
    if flag.default is not FIELD_DEFAULT:
        return flag.default
    if f.default is dataclasses.MISSING:
        return None
    if isinstance(f.default, tuple | list):
        return ",".join(str(v) for v in f.default)
    return f.default


def flags_of(config: type) -> list[tuple[str, Flag, dataclasses.Field]]:
    """``(field name, flag, field)`` of each command-line option of ``config``."""
    return [(name, flag, f) for name, (f, p) in declared(config).items() for flag in p.flags]


def add_arguments(parser, config: type, groups: Mapping, types) -> None:
    """Add to ``parser`` the options of ``config``'s fields in ``groups``.

    ``groups`` maps group titles to argument groups (made by the caller, in
    the order ``--help`` shows them; the title None: ``parser`` itself, the
    positional arguments); the options of the groups it does not name are
    left out (for another call). ``types`` is the module whose functions
    the flags' types name.
    """
    for name, flag, f in flags_of(config):
        if flag.group not in groups:
            continue
        target = groups[flag.group]
        words = {
            "type": _resolve_type(flag.type, types),
            "metavar": flag.metavar,
            "choices": None if flag.choices is None else list(flag.choices),
            "action": flag.action,
            "nargs": flag.nargs,
            "const": flag.const,
            "help": flag.help,
        }
        words = {k: v for k, v in words.items() if v is not None}
        if flag.names[0].startswith("-"):
            words["dest"] = flag.dest or name
            words["default"] = _flag_default(flag, f)
            if flag.required:
                words["required"] = True
            if "metavar" not in words and "choices" not in words and "action" not in words:
                words["metavar"] = flag.names[-1].lstrip("-").replace("-", "_").upper()
        target.add_argument(*flag.names, **words)


def keywords_from_args(args, config: type) -> dict:
    """Return the entry's keywords that a parsed command line gives.

    One per field with a flag; a field with several flags, such as -v and
    -q, is read once.
    """
    keywords = {}
    for name, flag, _ in flags_of(config):
        if name in keywords:
            continue
        value = getattr(args, flag.dest or name)
        keywords[name] = value if flag.convert is None else flag.convert(value)
    return keywords
