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
    "maps": ("maps", "MapsConfig", "run_maps"),
    "pairs": ("pairs", "PairsConfig", "run_pairs"),
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
            assert listing.count(words(flag.help.replace("%%", "%"))) == 1, name
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


def test_maps_command_line_gives_the_keywords(tmp_path):
    scan = tmp_path / "sub-01_bold.nii.gz"
    scan.touch()
    argv = ["maps", str(scan), "--out", str(tmp_path), "--degree", "0.2,0.3", "--sparsity",
            "0.01", "--seed=-10,20,4", "--seed", "1,2,3", "--allow-tf32", "-q"]  # fmt: skip
    with pytest.warns(FutureWarning, match="--precision tf32"):
        args = build_parser().parse_args(argv)
    config, _ = _declaration("maps")
    keywords = keywords_from_args(args, config)
    assert keywords["degree"] == [0.2, 0.3] and keywords["sparsity"] == [0.01]
    assert keywords["seed"] == [(-10.0, 20.0, 4.0), (1.0, 2.0, 3.0)]
    assert keywords["precision"] == "tf32" and keywords["verbose"] == 0
    assert keywords["seed_mask"] is None and keywords["ecm"] is False
    assert config(**keywords).input == scan


def test_maps_entry_checks_its_fields(tmp_path):
    _, run_maps = _declaration("maps")
    with pytest.raises(InvalidParameterError, match="'sparsity' parameter of run_maps"):
        run_maps(input=tmp_path / "x.nii.gz", out=tmp_path, sparsity=[0.0])


def test_pairs_command_line_gives_the_keywords(tmp_path):
    tables = [tmp_path / "sub-01_timeseries.tsv", tmp_path / "sub-02_timeseries.tsv"]
    for table in tables:
        table.touch()
    argv = ["pairs", *map(str, tables), "--window", "8", "--out", str(tmp_path), "--format", "npy"]
    args = build_parser().parse_args(argv)
    config, _ = _declaration("pairs")
    keywords = keywords_from_args(args, config)
    assert keywords["inputs"] == tables and keywords["window"] == 8
    assert keywords["step"] == 1 and keywords["threshold"] == 0.5
    assert keywords["format"] == "npy" and keywords["device"] == "auto"
    assert config(**keywords).out == tmp_path


def test_pairs_entry_checks_its_fields(tmp_path):
    _, run_pairs = _declaration("pairs")
    with pytest.raises(InvalidParameterError, match="'window' parameter of run_pairs"):
        run_pairs(inputs=[tmp_path / "x.tsv"], out=tmp_path, window=2)
