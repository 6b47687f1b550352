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
    "dfc": ("dfc", "DfcConfig", "run_dfc"),
    "dfc-states": ("dfc_states", "DfcStatesConfig", "run_dfc_states"),
    "life": ("life", "LifeConfig", "run_life"),
    "r1dl": ("r1dl", "R1dlConfig", "run_r1dl"),
    "classify": ("classify", "ClassifyConfig", "run_classify"),
    "demo": ("demo", "DemoConfig", "run_demo"),
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
    argv = ["fc", str(scan), "--out", str(tmp_path), "--threshold", "0.3", "--precision", "tf32"]
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


def test_dfc_command_line_gives_the_keywords(tmp_path):
    scan = tmp_path / "x.npy"
    scan.touch()
    argv = ["dfc", str(scan), "--out", str(tmp_path), "--window", "44s", "--kind", "lowrank"]
    argv += ["--rank", "3", "--seed", "7", "--precision", "tf32", "-q"]
    args = build_parser().parse_args(argv)
    config, _ = _declaration("dfc")
    keywords = keywords_from_args(args, config)
    assert keywords["window"] == "44s" and keywords["step"] == "1" and keywords["t_r"] is None
    assert keywords["kind"] == "lowrank" and keywords["rank"] == 3 and keywords["seed"] == 7
    assert keywords["precision"] == "tf32" and keywords["verbose"] == 0
    assert keywords["method"] == "randomized" and keywords["taper_sigma"] == 3.0
    assert config(**keywords).input == scan


def test_dfc_entry_checks_its_fields(tmp_path):
    _, run_dfc = _declaration("dfc")
    with pytest.raises(InvalidParameterError, match="'method' parameter of run_dfc"):
        run_dfc(input=tmp_path / "x.npy", out=tmp_path, window=22, method="qr")


def test_dfc_states_command_line_gives_the_keywords(tmp_path):
    scans = [tmp_path / "a.npy", tmp_path / "b_dfc.h5"]
    for scan in scans:
        scan.touch()
    argv = ["dfc-states", *map(str, scans), "--out", str(tmp_path), "--states", "4"]
    argv += ["--no-exemplars", "--taper", "gaussian", "--t-r", "2"]
    args = build_parser().parse_args(argv)
    config, _ = _declaration("dfc-states")
    keywords = keywords_from_args(args, config)
    assert keywords["inputs"] == scans and keywords["window"] is None
    assert keywords["states"] == 4 and keywords["no_exemplars"] is True
    assert keywords["taper"] == "gaussian" and keywords["t_r"] == 2.0
    assert keywords["metric"] == "l1" and keywords["seed"] == 0 and keywords["verbose"] == 1
    assert config(**keywords).atlas is None


def test_dfc_states_entry_checks_its_fields(tmp_path):
    _, run_dfc_states = _declaration("dfc-states")
    with pytest.raises(InvalidParameterError, match="'states' parameter of run_dfc_states"):
        run_dfc_states(inputs=[tmp_path / "a.npy"], out=tmp_path, window=22, states=0)


def _life_argv(tmp_path, *extra):
    for name in ("dwi.nii.gz", "b.bval", "b.bvec", "t.trk"):
        (tmp_path / name).touch()
    files = ["--bvals", "b.bval", "--bvecs", "b.bvec", "--tractogram", "t.trk"]
    return ["life", str(tmp_path / "dwi.nii.gz"), *files, "--out", str(tmp_path), *extra]


def test_life_command_line_gives_the_keywords(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = _life_argv(tmp_path, "--lambda-sweep", "0,0.5", "--max-iter", "40", "--sphere", "100")
    args = build_parser().parse_args(argv)
    config, _ = _declaration("life")
    keywords = keywords_from_args(args, config)
    assert keywords["max_iter"] == 40 and keywords["lam_sweep"] == [0.0, 0.5]
    assert keywords["lam"] == 0.0 and keywords["sphere"] == "100" and keywords["mask"] is None
    assert keywords["measure"] == "weight" and keywords["checkpoint_every"] == 50
    assert config(**keywords).bvals == Path("b.bval")


def test_life_entry_checks_its_fields(tmp_path):
    _, run_life = _declaration("life")
    files = {name: tmp_path / name for name in ("dwi", "bvals", "bvecs", "tractogram")}
    with pytest.raises(InvalidParameterError, match="'measure' parameter of run_life"):
        run_life(**files, out=tmp_path, measure="fa")


def test_r1dl_command_line_gives_the_keywords(tmp_path):
    scan = tmp_path / "x.npy"
    scan.touch()
    argv = ["r1dl", str(scan), "--n-components", "3", "-r", "0.07", "--out", str(tmp_path)]
    args = build_parser().parse_args([*argv, "--no-standardize", "-q"])
    config, _ = _declaration("r1dl")
    keywords = keywords_from_args(args, config)
    assert keywords["n_components"] == 3 and keywords["sparsity"] == 0.07
    assert keywords["standardize"] is False and keywords["verbose"] == 0
    assert keywords["backend"] == "local" and keywords["block_size"] is None
    assert config(**keywords).input == scan


def test_r1dl_entry_checks_its_fields(tmp_path):
    _, run_r1dl = _declaration("r1dl")
    with pytest.raises(InvalidParameterError, match="'sparsity' parameter of run_r1dl"):
        run_r1dl(input=tmp_path / "x.npy", n_components=2, sparsity=1.5, out=tmp_path)


@pytest.mark.parametrize("command", ["life", "r1dl"])
def test_run_parameters_are_the_command_lines(tmp_path, monkeypatch, command):
    """The log's parameters and the fingerprint of a set published before the
    declaration are those of the parsed command line (less its function)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.npy").touch()
    argv = _life_argv(tmp_path) if command == "life" else ["r1dl", "x.npy", "-k", "2", "-r", "5"]
    args = build_parser().parse_args(argv if command == "life" else [*argv, "--out", "o"])
    config, _ = _declaration(command)
    module = importlib.import_module(f"connscale.cli.{command}")
    parsed = {k: v for k, v in vars(args).items() if k != "func"}
    assert module._parameters(config(**keywords_from_args(args, config))) == parsed


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


def test_maps_command_line_gives_the_keywords(tmp_path):
    scan = tmp_path / "sub-01_bold.nii.gz"
    scan.touch()
    argv = ["maps", str(scan), "--out", str(tmp_path), "--degree", "0.2,0.3", "--sparsity",
            "0.01", "--seed=-10,20,4", "--seed", "1,2,3", "--precision", "tf32", "-q"]  # fmt: skip
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
