"""The cohort's one declaration (connscale.cohort_config): run_cohort's
signature, checks and docstring and the ``connscale cohort`` options come
from CohortConfig's fields."""

from __future__ import annotations

import inspect
import re
from dataclasses import fields
from pathlib import Path

import pytest

from connscale._params import declared, flags_of, keywords_from_args
from connscale._validation import InvalidParameterError
from connscale.cli.cohort import job_params
from connscale.cli.main import build_parser
from connscale.cohort import check_job_params, run_cohort
from connscale.cohort_config import JOB_PARAMS, CohortConfig, CohortJobParams, job_defaults

from .._command_help import command_help, words

HELP = Path(__file__).parent / "cohort_help.txt"


def _cohort_help(monkeypatch) -> str:
    return command_help(monkeypatch, "cohort")


def test_cohort_help_is_unchanged(monkeypatch):
    """The options, their help, defaults and groups, as before the declaration
    (whitespace aside: the wrapping depends on the Python version)."""
    assert words(_cohort_help(monkeypatch)) == words(HELP.read_text())


def test_every_option_is_documented_once(monkeypatch):
    listing = words(_cohort_help(monkeypatch).split("\n\n", 2)[2])
    for name, flag, _ in [*flags_of(CohortConfig), *flags_of(CohortJobParams)]:
        for option in flag.names:
            shown = option if option.startswith("-") else flag.metavar
            assert re.search(rf"(?<![\w-]){re.escape(shown)}(?![\w-])", listing), option
        if flag.help:
            assert listing.count(words(flag.help.replace("%%", "%"))) == 1, name
    options = [s for a in build_parser().subcommands["cohort"]._actions for s in a.option_strings]
    assert len(options) == len(set(options))


def test_every_field_is_a_keyword_a_checked_parameter_and_a_docstring_entry():
    names = list(declared(CohortConfig))
    assert names == [f.name for f in fields(CohortConfig)]
    assert list(inspect.signature(run_cohort).parameters) == names
    unchecked = {"inputs", "out_dir", "cluster", "dashboard_address"}
    assert set(run_cohort.parameter_constraints) == set(names) - unchecked
    for name in names:
        entries = re.findall(rf"^    {name} : ", run_cohort.__doc__, flags=re.MULTILINE)
        assert len(entries) == 1, name
    for name in declared(CohortJobParams):  # under ``params``
        entries = re.findall(rf"^        {name} : ", run_cohort.__doc__, flags=re.MULTILINE)
        assert len(entries) == 1, name
    assert sorted({n for names in JOB_PARAMS.values() for n in names}) == sorted(
        declared(CohortJobParams)
    )


def test_keyword_defaults_are_kept():
    signature = inspect.signature(run_cohort)
    positional = [n for n, p in signature.parameters.items() if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert positional == ["inputs", "job", "out_dir"]
    defaults = {n: p.default for n, p in signature.parameters.items() if p.default is not p.empty}
    assert defaults == {
        "params": None,
        "engine": "local",
        "cluster": None,
        "n_jobs": None,
        "retries": 1,
        "dashboard_address": None,
        "queue": None,
        "walltime": None,
        "cores_per_job": None,
        "mem_per_job": None,
        "gpus_per_job": None,
        "threads_per_task": 1,
        "batch_size": None,
        "overwrite": False,
        "wait": False,
        "verbose": 1,
    }


def test_command_line_gives_the_keywords(tmp_path):
    argv = ["cohort", "a.tsv", "b.tsv", "--job", "fc", "--out", str(tmp_path), "-q"]
    keywords = keywords_from_args(build_parser().parse_args(argv), CohortConfig)
    assert keywords == {
        "inputs": ["a.tsv", "b.tsv"],
        "job": "fc",
        "out_dir": tmp_path,
        "engine": "local",
        "cluster": None,
        "n_jobs": None,
        "retries": 1,
        "dashboard_address": None,
        "queue": None,
        "walltime": None,
        "cores_per_job": None,
        "mem_per_job": None,
        "gpus_per_job": None,
        "overwrite": False,
        "wait": False,
        "verbose": 0,
    }
    argv += ["--backend", "serial", "--dashboard", "127.0.0.1:0", "--retries", "0", "--wait"]
    keywords = keywords_from_args(build_parser().parse_args(argv), CohortConfig)
    assert keywords["engine"] == "serial" and keywords["retries"] == 0 and keywords["wait"]
    assert keywords["dashboard_address"] == "127.0.0.1:0"


def test_a_config_or_its_fields_are_checked_alike(tmp_path):
    with pytest.raises(InvalidParameterError, match="'retries' parameter of run_cohort"):
        run_cohort(CohortConfig([], "fc", tmp_path, retries=-1))
    with pytest.raises(InvalidParameterError, match="'job' parameter of run_cohort"):
        run_cohort([], "nope", tmp_path)
    assert not any(tmp_path.iterdir())


def test_job_defaults_are_those_of_before():
    common = {
        "device": "auto",
        "dtype": "float32",
        "atlas": None,
        "atlas_name": None,
        "mask": None,
        "memory_limit": None,
    }
    assert job_defaults("pairs") == {"window_length": None, "step": 1, "threshold": 0.5, **common}
    assert job_defaults("dfc") == {
        "window_length": None,
        "step": 1,
        "kind": "triu",
        "threshold": None,
        "absolute": False,
        "rank": None,
        "random_state": 0,
        **common,
    }
    assert job_defaults("fc") == {"kind": "triu", **common}
    assert check_job_params("fc", {"device": "cpu"}) == {**job_defaults("fc"), "device": "cpu"}


@pytest.mark.parametrize("job", ["pairs", "dfc", "fc"])
def test_command_line_gives_the_job_defaults(job, tmp_path):
    argv = ["cohort", "a.tsv", "--job", job, "--out", str(tmp_path)]
    assert job_params(build_parser().parse_args(argv)) == job_defaults(job)


def test_command_line_gives_the_job_params(tmp_path):
    argv = ["cohort", "a.tsv", "--job", "dfc", "--out", str(tmp_path), "--window", "20"]
    argv += ["--kind", "lowrank", "--rank", "3", "--seed", "7", "--dtype", "float64"]
    params = job_params(build_parser().parse_args(argv))
    assert params == {
        **job_defaults("dfc"),
        "window_length": 20,
        "kind": "lowrank",
        "rank": 3,
        "random_state": 7,
        "dtype": "float64",
    }
    argv = ["cohort", "a.tsv", "--job", "pairs", "--out", str(tmp_path), "--window", "20"]
    params = job_params(build_parser().parse_args([*argv, "--threshold", "0.3"]))
    assert params["threshold"] == 0.3
