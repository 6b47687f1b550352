"""The participant level's one declaration (connscale.bidsapp.config): the
entry's signature, checks and docstring and the ``connscale bids`` options
come from ParticipantConfig's fields; outputs' fingerprints do not move."""

from __future__ import annotations

import inspect
import re
from dataclasses import fields
from pathlib import Path

import nibabel as nib
import pytest

from connscale._params import declared, flags_of, keywords_from_args
from connscale._validation import InvalidParameterError
from connscale.bidsapp.config import GROUP, GroupConfig, ParticipantConfig
from connscale.bidsapp.group import run_group
from connscale.bidsapp.participant import run_participant
from connscale.cli.main import build_parser
from tests.bids._fmriprep import ATLAS, atlas_img, make_fmriprep

from .._command_help import command_help, words

HELP = Path(__file__).parent / "bids_help.txt"


def _bids_help(monkeypatch) -> str:
    return command_help(monkeypatch, "bids")


def test_bids_help_is_unchanged(monkeypatch):
    """The options, their help, defaults and groups, as before the declaration
    (whitespace aside: the wrapping depends on the Python version)."""
    assert words(_bids_help(monkeypatch)) == words(HELP.read_text())


def test_every_option_is_documented_once(monkeypatch):
    text = _bids_help(monkeypatch)
    listing = words(text.split("\n\n", 2)[2])  # after the usage and the description
    for name, flag, _ in [*flags_of(ParticipantConfig), *flags_of(GroupConfig)]:
        for option in flag.names:
            shown = option if option.startswith("-") else flag.metavar
            assert len(re.findall(rf"(?<![\w-]){re.escape(shown)}(?![\w-])", listing)) >= 1
        if flag.help:
            assert listing.count(words(flag.help.replace("%%", "%"))) == 1, name
    options = [s for a in build_parser().subcommands["bids"]._actions for s in a.option_strings]
    assert len(options) == len(set(options))


@pytest.mark.parametrize(
    "function, config, unchecked",
    [
        (
            run_participant,
            ParticipantConfig,
            {
                "gpus",
                "cluster",
                "standardize",
                "participant_label",
                "session_label",
                "task",
                "run",
                "space",
            },
        ),
        (run_group, GroupConfig, set()),
    ],
)
def test_every_field_is_a_keyword_a_checked_parameter_and_a_docstring_entry(
    function, config, unchecked
):
    names = list(declared(config))
    assert names == [f.name for f in fields(config) if f.name != "_"]
    assert list(inspect.signature(function).parameters) == names
    assert set(function.parameter_constraints) == set(names) - unchecked
    for name in names:
        entries = re.findall(rf"^    {name} : ", function.__doc__, flags=re.MULTILINE)
        assert len(entries) == 1, name


def test_group_command_line_gives_the_keywords(tmp_path):
    argv = ["bids", str(tmp_path), str(tmp_path), "group", "--denoise", "simple", "-q"]
    keywords = keywords_from_args(build_parser().parse_args(argv), GroupConfig)
    assert keywords == {
        "output": tmp_path,
        "atlas_name": None,
        "strategy": "simple",
        "participants": None,
        "target": None,
        "folds": 5,
        "repeats": 10,
        "features": ["edges", "states"],
        "n_states": 5,
        "state_metric": "l1",
        "random_state": 0,
        "states": None,
        "device": "auto",
        "overwrite": False,
    }
    argv += ["--measures", "fc,states", "--group-features", "edges,dfc", "--states", "3"]
    keywords = keywords_from_args(build_parser().parse_args(argv), GroupConfig)
    assert keywords["states"] is True and keywords["n_states"] == 3
    assert keywords["features"] == ["edges", "dfc"]


def test_each_flag_names_the_levels_that_read_it():
    participant = [flag for _, flag, _ in flags_of(ParticipantConfig)]
    group = [flag for _, flag, _ in flags_of(GroupConfig)]
    assert all("participant" in flag.levels for flag in participant)
    assert all("group" in flag.levels for flag in group)
    assert {f.names for f in participant if "group" in f.levels} >= {
        f.names for f in group if f.group != GROUP
    }


def test_keyword_defaults_are_kept():
    signature = inspect.signature(run_participant)
    assert [n for n, p in signature.parameters.items() if p.default is p.empty] == [
        "derivatives",
        "output",
        "atlas",
        "atlas_name",
    ]
    defaults = {n: p.default for n, p in signature.parameters.items() if p.default is not p.empty}
    assert defaults == {
        "atlas_labels": None,
        "atlas_space": None,
        "atlas_desc": None,
        "strategy": "simple",
        "strategy_params": None,
        "measures": ("fc", "timeseries"),
        "window_length": None,
        "step": 1,
        "pairs_threshold": 0.5,
        "degree_thresholds": (0.25,),
        "precision": "exact",
        "n_atoms": 10,
        "network_sparsity": 0.07,
        "participant_label": None,
        "participant_label_file": None,
        "array_index": None,
        "participants_per_task": 1,
        "session_label": None,
        "task": None,
        "run": None,
        "space": None,
        "den": None,
        "file_format": None,
        "surfaces": None,
        "write_denoised": False,
        "min_coverage": 0.5,
        "output_spelling": "giga",
        "t_r": None,
        "despike": False,
        "min_dof": 10,
        "detrend": True,
        "standardize": "zscore_sample",
        "low_pass": None,
        "high_pass": None,
        "bpf_order": None,
        "dummy_scans": 0,
        "motion_filter_type": None,
        "band_stop_min": None,
        "band_stop_max": None,
        "motion_filter_order": 4,
        "head_radius": 50.0,
        "fd_thresh": None,
        "min_time": 240.0,
        "output_type": "censored",
        "backend": "local",
        "n_jobs": None,
        "cluster": None,
        "queue": None,
        "walltime": None,
        "cores_per_job": None,
        "mem_per_job": None,
        "gpus_per_job": None,
        "device": "auto",
        "dtype": "float32",
        "threads_per_task": 1,
        "memory_limit": None,
        "gpus": None,
        "work_dir": None,
        "reports": True,
        "overwrite": False,
        "wait": False,
        "verbose": 1,
    }


def test_output_parameters_are_those_of_before():
    """parameters() feeds the outputs' fingerprints: the same keys and values."""
    config = ParticipantConfig("d", "o", "a", "A", participant_label=["01"], backend="serial")
    assert config.parameters() == {
        "atlas": "a",
        "atlas_name": "A",
        "atlas_labels": None,
        "atlas_space": None,
        "strategy": "simple",
        "strategy_params": {},
        "measures": ("fc", "timeseries"),
        "window_length": None,
        "step": 1,
        "pairs_threshold": 0.5,
        "detrend": True,
        "standardize": "zscore_sample",
        "low_pass": None,
        "high_pass": None,
        "dtype": "float32",
        "degree_thresholds": (0.25,),
        "precision": "exact",
        "n_atoms": 10,
        "network_sparsity": 0.07,
        "min_coverage": 0.5,  # issue 25: the region outputs' coverage rule and names
        "output_spelling": "giga",
    }
    assert set(config.region_parameters()) == set(config.parameters()) - {
        "degree_thresholds",
        "precision",
        "n_atoms",
        "network_sparsity",
        "window_length",
        "step",
        "pairs_threshold",
    }
    assert config.voxel_parameters() == {
        "strategy": "simple",
        "strategy_params": {},
        "detrend": True,
        "standardize": "zscore_sample",
        "low_pass": None,
        "high_pass": None,
        "dtype": "float32",
        "measures": [],
    }


def test_command_line_gives_the_keywords(tmp_path):
    atlas = tmp_path / ATLAS
    atlas.write_bytes(b"")
    argv = ["bids", str(tmp_path), str(tmp_path / "out"), "participant", "--atlas", str(atlas)]
    argv += ["--atlas-name", "X", "--denoise", "scrubbing", "--fd-threshold", "0.3"]
    argv += ["--no-reports", "--measures", "states,fc", "--sparsity", "500", "-q"]
    argv += ["--participant-label", "01", "02", "--degree-thresholds", "0.2,0.4"]
    args = build_parser().parse_args(argv)
    keywords = keywords_from_args(args, ParticipantConfig)
    assert set(keywords) == set(inspect.signature(run_participant).parameters) - {
        "detrend",
        "standardize",
        "strategy_params",
        "threads_per_task",
    }
    assert keywords["derivatives"] == tmp_path
    assert keywords["strategy"] == "scrubbing"
    assert keywords["fd_thresh"] == 0.3  # --fd-threshold: an alias of --fd-thresh
    assert keywords["reports"] is False
    assert keywords["measures"] == ["dfc", "fc"]
    assert keywords["network_sparsity"] == 500
    assert keywords["verbose"] == 0
    assert keywords["participant_label"] == ["01", "02"]
    assert keywords["degree_thresholds"] == [0.2, 0.4]
    assert keywords["device"] == "auto" and keywords["dtype"] == "float32"
    defaults = keywords_from_args(build_parser().parse_args(argv[:6]), ParticipantConfig)
    assert defaults["fd_thresh"] is None and defaults["reports"] is True
    assert defaults["measures"] == ["fc", "timeseries"] and defaults["degree_thresholds"] == [0.25]
    assert defaults["verbose"] == 1 and defaults["min_dof"] == 10.0


def test_a_config_is_checked_as_keywords_are(tmp_path):
    config = ParticipantConfig(str(tmp_path), str(tmp_path / "out"), "a", "A", dtype="float16")
    with pytest.raises(
        InvalidParameterError,
        match="The 'dtype' parameter of run_participant must be a str among "
        "{'float32', 'float64'}. Got 'float16' instead.",
    ):
        run_participant(config)
    assert not (tmp_path / "out").exists()


def test_a_config_runs_as_its_keywords(tmp_path):
    """The same parameters as a config or as keywords: the second call finds the
    first's outputs published with the same fingerprint."""
    root = make_fmriprep(tmp_path / "fmriprep", [("01", None, "rest", None)])
    nib.save(atlas_img(), tmp_path / ATLAS)
    keywords = {
        "atlas": tmp_path / ATLAS,
        "atlas_name": "Slab4",
        "strategy_params": {"motion": "basic"},
        "backend": "serial",
    }
    first = run_participant(root, tmp_path / "out", reports=False, verbose=0, **keywords)
    assert first.counts["ok"] == 1
    config = ParticipantConfig(
        str(root),
        str(tmp_path / "out"),
        reports=False,
        verbose=0,
        **{k: str(v) if isinstance(v, Path) else v for k, v in keywords.items()},
    )
    again = run_participant(config)
    assert again.counts == {"ok": 0, "skipped": 1, "error": 0}
