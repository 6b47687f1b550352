"""Each sub-command's one declaration (connscale._params): its options, the
checks and the docstring of its entry come from its config's fields, and its
``--help`` is what it was before the declaration."""

from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import fields
from pathlib import Path

import pytest

from connscale._params import declared, flags_of, keywords_from_args
from connscale._validation import InvalidParameterError
from connscale.cli.main import build_parser

from .._command_help import command_help, words

HELP = Path(__file__).parent / "help"

#: command -> (its module in connscale.cli, its config, its entry).
COMMANDS = {
    "fc": ("fc", "FcConfig", "run_fc"),
    "classify": ("classify", "ClassifyConfig", "run_classify"),
    "demo": ("demo", "DemoConfig", "run_demo"),
}


def _declaration(command: str):
    module, config, function = COMMANDS[command]
    module = importlib.import_module(f"connscale.cli.{module}")
    return getattr(module, config), getattr(module, function)


@pytest.mark.parametrize("command", COMMANDS)
def test_help_is_unchanged(monkeypatch, command):
    """The options, their help, defaults and groups, as before the declaration
    (whitespace aside: the wrapping depends on the Python version)."""
    expected = (HELP / f"{command}.txt").read_text()
    assert words(command_help(monkeypatch, command)) == words(expected)


def _unbroken(text: str) -> str:
    """``words(text)``, a word argparse wrapped at its hyphen rejoined ("cross- validation")."""
    return words(text).replace("- ", "-")


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_is_documented_once(monkeypatch, command):
    config, _ = _declaration(command)
    listing = words(command_help(monkeypatch, command).split("\n\n", 2)[2])
    for name, flag, _ in flags_of(config):
        for option in flag.names:
            shown = option if option.startswith("-") else flag.metavar
            if flag.help is not None:
                assert re.search(rf"(?<![\w-]){re.escape(shown)}(?![\w-])", listing), option
        if flag.help:
            assert _unbroken(listing).count(_unbroken(flag.help.replace("%%", "%"))) == 1, name
    actions = build_parser().subcommands[command]._actions
    options = [s for a in actions for s in a.option_strings]
    assert len(options) == len(set(options))


@pytest.mark.parametrize("command", COMMANDS)
def test_every_field_is_a_keyword_a_checked_parameter_and_a_docstring_entry(command):
    config, function = _declaration(command)
    names = list(declared(config))
    assert names == [f.name for f in fields(config)]
    assert list(inspect.signature(function).parameters) == names
    assert set(function.parameter_constraints) == set(names)
    for name in names:
        entries = re.findall(rf"^    {name} : ", function.__doc__, flags=re.MULTILINE)
        assert len(entries) == 1, name


def test_fc_command_line_gives_the_keywords(tmp_path):
    scan = tmp_path / "x.npy"
    scan.touch()
    argv = ["fc", str(scan), "--out", str(tmp_path), "--threshold", "0.3", "--allow-tf32"]
    with pytest.warns(FutureWarning, match="--precision tf32"):
        args = build_parser().parse_args(argv)
    config, _ = _declaration("fc")
    keywords = keywords_from_args(args, config)
    assert keywords["threshold"] == 0.3 and keywords["precision"] == "tf32"
    assert keywords["kind"] is None and keywords["device"] == "auto"
    assert config(**keywords).input == scan


def test_fc_entry_checks_its_fields(tmp_path):
    _, run_fc = _declaration("fc")
    with pytest.raises(InvalidParameterError, match="'kind' parameter of run_fc"):
        run_fc(input=tmp_path / "x.npy", out=tmp_path, kind="upper")


def test_classify_command_line_gives_the_keywords(tmp_path):
    files = [tmp_path / f"sub-0{i}_relmat.npy" for i in (1, 2)]
    for path in [*files, tmp_path / "participants.tsv"]:
        path.touch()
    argv = ["classify", *map(str, files), "--participants", str(tmp_path / "participants.tsv")]
    argv += ["--label", "group", "--out", str(tmp_path), "--n-features", "0.5", "-q"]
    config, _ = _declaration("classify")
    keywords = keywords_from_args(build_parser().parse_args(argv), config)
    assert keywords["features"] == files and keywords["n_features"] == 0.5
    assert keywords["statistics"] == ("mean", "std") and keywords["verbose"] == 0
    assert keywords["seed"] == 0 and keywords["positive"] is None
    argv += ["--statistics", "fraction_above", "--n-features", "cv", "-v"]
    keywords = keywords_from_args(build_parser().parse_args(argv), config)
    assert keywords["statistics"] == ["fraction_above"] and keywords["n_features"] == "cv"
    assert config(**keywords).verbose == 1


def test_classify_entry_checks_its_fields(tmp_path):
    _, run_classify = _declaration("classify")
    with pytest.raises(InvalidParameterError, match="'top' parameter of run_classify"):
        run_classify(
            features=[tmp_path / "sub-01_relmat.npy"],
            participants=tmp_path / "participants.tsv",
            label="group",
            out=tmp_path,
            top=0,
        )


def test_demo_command_line_gives_the_keywords(tmp_path):
    config, _ = _declaration("demo")
    keywords = keywords_from_args(build_parser().parse_args(["demo"]), config)
    assert keywords == {"out": Path("demo_output"), "device": "auto", "n_voxels": 20000, "seed": 0}
    argv = ["demo", "--out", str(tmp_path), "--device", "cpu", "--n-voxels", "500", "--seed", "3"]
    keywords = keywords_from_args(build_parser().parse_args(argv), config)
    assert config(**keywords) == config(out=tmp_path, device="cpu", n_voxels=500, seed=3)


def test_demo_entry_checks_its_fields(tmp_path):
    _, run_demo = _declaration("demo")
    with pytest.raises(InvalidParameterError, match="'n_voxels' parameter of run_demo"):
        run_demo(out=tmp_path, n_voxels=1)
    assert not any(tmp_path.iterdir())  # refused before any step
