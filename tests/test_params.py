"""connscale._params: one field declares a parameter; the entry's signature,
constraints and docstring and the command's options are derived from it."""

from __future__ import annotations

import argparse
import inspect
import re
from dataclasses import dataclass
from numbers import Integral

import pytest

from connscale._params import (
    Flag,
    add_arguments,
    constraints,
    entry,
    keywords_from_args,
    param,
    parameters_doc,
)
from connscale._validation import Interval, InvalidParameterError, StrOptions
from connscale.cli import _types


@dataclass(frozen=True)
class Toy:
    """A command with a path, a count and a choice."""

    source: str = param(
        positional=True,
        constraints=["path"],
        doc="Where to read.",
        flag=Flag(("source",), type="input_folder", metavar="SOURCE", help="Input folder."),
    )
    count: int = param(
        3,
        constraints=[Interval(Integral, 1, None, closed="left")],
        doc="How many.",
        flag=Flag(("--count",), group="numbers", type="count", help="How many things."),
    )
    mode: str = param(
        "fast",
        constraints=[StrOptions({"fast", "slow"})],
        doc="How.",
        flag=Flag(("--slow",), action="store_true", dest="slow", default=False,
                  convert=lambda slow: "slow" if slow else "fast", help="Take the time."),
    )  # fmt: skip


@dataclass(frozen=True)
class Bigger(Toy):
    """Toy with one more field."""

    seeds: tuple = param(
        (1, 2),
        constraints=[list, tuple],
        doc="The seeds.",
        flag=Flag(("--seeds",), group="numbers", type=("numbers", "count"), help="Seeds."),
    )


def _parser(config: type) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toy", formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    add_arguments(
        parser, config, {None: parser, "numbers": parser.add_argument_group("numbers")}, _types
    )
    return parser


def _made(config: type):
    @entry(config)
    def make(config):
        """Return the config.

        Parameters
        ----------
        %(parameters)s
        """
        return config

    return make


@pytest.mark.parametrize("config", [Toy, Bigger])
def test_every_field_gives_one_keyword_constraint_doc_entry_and_option(config, tmp_path):
    names = [n for n in inspect.signature(config).parameters]
    make = _made(config)
    assert list(inspect.signature(make).parameters) == names
    assert list(constraints(config)) == names == list(make.parameter_constraints)
    doc = make.__doc__
    for name in names:
        assert len(re.findall(rf"^        {name} : ", doc, flags=re.MULTILINE)) == 1
    text = _parser(config).format_help()
    flags = {"source": "SOURCE", "count": "--count", "mode": "--slow", "seeds": "--seeds"}
    for name in names:
        assert text.count(f"\n  {flags[name]}") == 1
    args = _parser(config).parse_args([str(tmp_path), "--slow", "--count", "7"])
    keywords = keywords_from_args(args, config)
    assert list(keywords) == names
    assert make(**keywords) == config(**keywords)
    assert keywords["mode"] == "slow" and keywords["count"] == 7


def test_the_added_field_reaches_signature_constraints_doc_and_parser():
    assert set(inspect.signature(_made(Bigger)).parameters) - set(
        inspect.signature(_made(Toy)).parameters
    ) == {"seeds"}
    assert set(constraints(Bigger)) - set(constraints(Toy)) == {"seeds"}
    assert "seeds : list or tuple, default=(1, 2)\n    The seeds." in parameters_doc(Bigger)
    assert "seeds" not in parameters_doc(Toy)
    text = " ".join(_parser(Bigger).format_help().split())
    assert "--seeds SEEDS Seeds. (default: 1,2)" in text
    assert "--seeds" not in _parser(Toy).format_help()


def test_the_entry_takes_the_config_or_its_fields_and_checks_both(tmp_path):
    make = _made(Toy)
    given = Toy(str(tmp_path), count=2)
    assert make(given) == given == make(str(tmp_path), count=2)
    message = r"The 'count' parameter of .*make must be an int in the range \[1, inf\)"
    with pytest.raises(InvalidParameterError, match=message + ". Got 0 instead."):
        make(Toy(str(tmp_path), count=0))
    with pytest.raises(InvalidParameterError, match=message):
        make(str(tmp_path), count=0)
    with pytest.raises(TypeError, match="too many positional arguments"):
        make(str(tmp_path), 2)  # keyword-only, as declared
    with pytest.raises(TypeError, match="colour"):
        make(str(tmp_path), colour="red")


def test_docstring_types_and_defaults_are_derived():
    doc = parameters_doc(Toy)
    assert doc.splitlines()[0] == "source : path"
    assert "count : int, default=3\n    How many." in doc
    assert "mode : {'fast', 'slow'}, default='fast'\n    How." in doc


def test_a_body_taking_keywords_must_match_the_declaration():
    def count_only(source, *, count=3, mode="fast"):
        """Return the count."""
        return count

    assert entry(Toy, keywords=True)(count_only)("x", count=4) == 4

    def drifted(source, *, count=4, mode="fast"):
        """Return the count."""
        return count

    with pytest.raises(TypeError, match="parameters differ from its declaration: count"):
        entry(Toy, keywords=True)(drifted)
