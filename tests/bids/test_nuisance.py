"""XCP-D's nuisance sets by name and custom nuisance files (connscale.nuisance).

Each set's columns are checked against the lists of XCP-D's own files
(``xcp_d/data/nuisance/<name>.yml`` of PennLINC/xcp_d, copied below), resolved
on nilearn's fMRIPrep confounds test files as XCP-D resolves them (a name, or
a regular expression starting with ``^`` matched case-insensitively); the
cleaning with those columns equals ``nilearn.signal.clean``.
"""

from __future__ import annotations

import json
import re
import shutil
import warnings

import nibabel as nib
import numpy as np
import pandas as pd
import pytest
from nilearn.maskers import NiftiLabelsMasker
from nilearn.signal import clean

from connscale._choices import NUISANCE_SETS, STRATEGIES
from connscale.bidsapp.participant import run_participant
from connscale.cli.main import main
from connscale.denoise import clean_signals, cleaning_operator, load_confounds
from connscale.io.bids import strategy_desc
from connscale.io.timeseries import load_timeseries
from connscale.nuisance import (
    SET_PARAMETERS,
    NuisanceError,
    bold_desc,
    read_nuisance_file,
    set_columns,
)
from tests.bids._fmriprep import (
    AFFINE,
    ATLAS,
    CIFTI_ATLAS,
    DATA,
    SHAPE,
    T_R,
    atlas_img,
    brain_model_91k,
    make_fmriprep_cifti,
    participant_log,
    write_cifti_atlas,
)

_MOTION = ["trans_x", "trans_y", "trans_z", "rot_x", "rot_y", "rot_z"]
_24P = [f"{m}{s}" for m in _MOTION for s in ("", "_derivative1", "_derivative1_power2", "_power2")]
_MOTION12 = [f"{m}{s}" for m in _MOTION for s in ("", "_derivative1")]
_ACOMPCOR = ["^w_comp_cor_0[0-4]$", "^c_comp_cor_0[0-4]$", r"^cosine\d+$"]
_TISSUE36 = [
    f"{b}{s}"
    for b in ("global_signal", "csf", "white_matter")
    for s in ("", "_derivative1", "_power2", "_derivative1_power2")
]
#: The ``preproc_confounds`` columns of XCP-D's nuisance files (PennLINC/xcp_d, commit f4cb652).
#: ``aroma``/``aroma_gsr`` also list ``^aroma_orth_motion_.*$`` of fMRIPost-AROMA's own
#: confounds file: connscale reads fMRIPrep's AROMA-denoised BOLD instead (nilearn's
#: ``ica_aroma='full'``), see connscale.nuisance.
XCPD = {
    "24P": _24P,
    "27P": [*_24P, "global_signal", "csf", "white_matter"],
    "36P": [*_24P, *_TISSUE36],
    "acompcor": [*_MOTION12, *_ACOMPCOR],
    "acompcor_gsr": [*_MOTION12, "global_signal", *_ACOMPCOR],
    "aroma": ["csf", "white_matter"],
    "aroma_gsr": ["global_signal", "csf", "white_matter"],
    "gsr_only": ["global_signal"],
}
AROMA = ("aroma", "aroma_gsr")
V21_TSV = DATA / "test-v21_desc-confounds_timeseries.tsv"
V21_JSON = DATA / "test-v21_desc-confounds_timeseries.json"
OLD_TSV = DATA / "test_desc-confounds_regressors.tsv"  # fMRIPrep 20: aroma_motion_XX columns
OLD_JSON = DATA / "test_desc-confounds_regressors.json"
SOURCE = "sub-01_task-rest_space-MNI152NLin2009cAsym"


def xcpd_columns(columns: list[str], header) -> list[str]:
    """Resolve XCP-D's column list on a confounds header as XCP-D's GenerateConfounds does."""
    found = []
    for column in columns:
        if column.startswith("^"):
            matched = [c for c in header if re.match(column, c, re.IGNORECASE)]
            assert matched, column
            found += matched
        else:
            assert column in header, column
            found.append(column)
    return found


def reference_confounds(path, columns: list[str]) -> np.ndarray:
    """The columns from the TSV, each first-volume n/a filled with the second volume (nilearn)."""
    table = pd.read_csv(path, sep="\t")[columns]
    first = table.iloc[0].isna()
    table.loc[0, first] = table.iloc[1][first]
    return table.to_numpy(dtype=np.float64)


def kept_volumes(path) -> np.ndarray:
    """The volumes that are not fMRIPrep's non-steady-state outliers."""
    table = pd.read_csv(path, sep="\t")
    outliers = table.filter(like="non_steady_state_outlier").to_numpy().any(axis=1)
    return np.flatnonzero(~outliers)


def long_confounds(n: int, seed: int) -> pd.DataFrame:
    """An fMRIPrep >= 21 confounds table of ``n`` volumes (the v21 header, simulated values).

    Derivatives (first volume n/a) and squares as fMRIPrep computes them; 3
    non-steady-state volumes; one cosine drift.
    """
    rng = np.random.default_rng(seed)
    header = pd.read_csv(V21_TSV, sep="\t", nrows=0).columns
    table = {}
    for column in header:
        base = re.sub(r"(_derivative1)?(_power2)?$", "", column)
        if base not in table:
            table[base] = np.cumsum(rng.standard_normal(n)) * 0.1 + rng.uniform(-1, 1)
    for column in header:
        base = re.sub(r"(_derivative1)?(_power2)?$", "", column)
        values = table[base]
        if "_derivative1" in column:
            values = np.r_[np.nan, np.diff(values)]
        table[column] = values**2 if column.endswith("_power2") else values
    for k in range(3):
        table[f"non_steady_state_outlier0{k}"] = (np.arange(n) == k).astype(float)
    table["cosine00"] = np.cos(np.pi * (np.arange(n) + 0.5) / n)
    for column in ("framewise_displacement", "dvars", "std_dvars"):
        table[column] = np.r_[np.nan, np.abs(rng.standard_normal(n - 1))]
    return pd.DataFrame(table)[list(header)]


def write_run(func, entities, table, json_file, *, desc="preproc", seed=0):
    """Write a run's BOLD (the confounds mixed in), mask, sidecar, confounds TSV and JSON."""
    func.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    n = len(table)
    drivers = table[[c for c in ("trans_x", "rot_z", "global_signal", "csf") if c in table]]
    drivers = drivers.to_numpy()
    drivers = (drivers - drivers.mean(0)) / drivers.std(0)
    regions = rng.standard_normal((n, 4))
    data = np.empty((*SHAPE, n), dtype=np.float32)
    for idx in np.ndindex(SHAPE):
        data[idx] = (
            1000
            + 50 * idx[0]
            + 10 * regions[:, min(idx[0], 3)]
            + drivers @ rng.uniform(-5, 5, drivers.shape[1])
            + rng.standard_normal(n)
        )
    space = "space-MNI152NLin2009cAsym"
    bold = func / f"{entities}_{space}_desc-{desc}_bold.nii.gz"
    nib.save(nib.Nifti1Image(data, AFFINE), bold)
    mask = np.zeros(SHAPE, dtype=np.uint8)
    mask[1:-1, 1:-1, 1:] = 1
    nib.save(nib.Nifti1Image(mask, AFFINE), func / f"{entities}_{space}_desc-brain_mask.nii.gz")
    bold.with_name(bold.name.replace(".nii.gz", ".json")).write_text(
        json.dumps({"RepetitionTime": T_R, "SkullStripped": False})
    )
    table.to_csv(
        func / f"{entities}_desc-confounds_timeseries.tsv", sep="\t", index=False, na_rep="n/a"
    )
    shutil.copy(json_file, func / f"{entities}_desc-confounds_timeseries.json")
    return bold


def make_tree(root, subjects, *, n=120, desc="preproc"):
    """An fMRIPrep tree of ``n``-volume runs with fMRIPrep 21's confounds columns."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "dataset_description.json").write_text(
        json.dumps(
            {
                "Name": "fake fMRIPrep",
                "BIDSVersion": "1.9.0",
                "DatasetType": "derivative",
                "GeneratedBy": [{"Name": "fMRIPrep", "Version": "23.0.2"}],
            }
        )
    )
    for i, sub in enumerate(subjects):
        func = root / f"sub-{sub}" / "func"
        write_run(func, f"sub-{sub}_task-rest", long_confounds(n, i), V21_JSON, desc=desc, seed=i)
    return root


@pytest.fixture(scope="module")
def short_runs(tmp_path_factory):
    """nilearn's own confounds files (30 volumes): fMRIPrep 21's, and fMRIPrep 20's for AROMA."""
    func = tmp_path_factory.mktemp("fmriprep") / "sub-01" / "func"
    preproc = write_run(func, "sub-01_task-rest", pd.read_csv(V21_TSV, sep="\t"), V21_JSON)
    aroma = write_run(
        func,
        "sub-01_task-aroma",
        pd.read_csv(OLD_TSV, sep="\t"),
        OLD_JSON,
        desc="smoothAROMAnonaggr",
    )
    return {"preproc": preproc, "aroma": aroma}


@pytest.fixture(scope="module")
def long_runs(tmp_path_factory):
    """120-volume runs (room for 36 regressors), a preproc and an AROMA BOLD."""
    func = tmp_path_factory.mktemp("long") / "sub-01" / "func"
    table = long_confounds(120, seed=7)
    preproc = write_run(func, "sub-01_task-rest", table, V21_JSON, seed=1)
    aroma = write_run(func, "sub-01_task-aroma", table, V21_JSON, desc="smoothAROMAnonaggr")
    return {"preproc": preproc, "aroma": aroma}


def _confounds_tsv(bold):
    entities = bold.name.split("_space-")[0]
    return bold.with_name(f"{entities}_desc-confounds_timeseries.tsv")


def test_the_sets_are_the_strategies_and_xcpd_files():
    assert set(SET_PARAMETERS) == set(XCPD) == set(NUISANCE_SETS)
    assert set(NUISANCE_SETS) <= set(STRATEGIES)
    assert sorted(set_columns("36P")) == sorted(XCPD["36P"])
    assert set_columns("aroma_gsr") == ["csf", "white_matter", "global_signal"]
    for name in NUISANCE_SETS:
        assert bold_desc(name) == ("smoothAROMAnonaggr" if name in AROMA else "preproc")


@pytest.mark.parametrize("name", NUISANCE_SETS)
def test_each_set_selects_xcpd_columns(short_runs, name):
    bold = short_runs["aroma" if name in AROMA else "preproc"]
    header = pd.read_csv(_confounds_tsv(bold), sep="\t", nrows=0).columns
    confounds, sample_mask = load_confounds(bold, name)
    expected = xcpd_columns(XCPD[name], header)
    assert sorted(confounds.columns) == sorted(expected)
    assert len(expected) == len(set(expected))
    assert np.array_equal(sample_mask, kept_volumes(_confounds_tsv(bold)))


def test_acompcor_takes_five_components_per_mask(long_runs, tmp_path):
    """With more than 5 components per mask, the first 5 of each (XCP-D's 0[0-4])."""
    table = pd.read_csv(_confounds_tsv(long_runs["preproc"]), sep="\t")
    meta = json.loads(V21_JSON.read_text())
    rng = np.random.default_rng(0)
    for k in range(4, 8):
        table[f"w_comp_cor_0{k}"] = rng.standard_normal(len(table))
        meta[f"w_comp_cor_0{k}"] = {**meta["w_comp_cor_00"], "Retained": True}
    json_file = tmp_path / "meta.json"
    json_file.write_text(json.dumps(meta))
    bold = write_run(tmp_path / "func", "sub-02_task-rest", table, json_file)
    confounds, _ = load_confounds(bold, "acompcor")
    expected = xcpd_columns(XCPD["acompcor"], table.columns)
    assert sorted(confounds.columns) == sorted(expected)
    assert "w_comp_cor_04" in expected and "w_comp_cor_05" not in expected


FILTERS = [(None, None), (0.08, 0.01)]


@pytest.mark.parametrize("low_pass, high_pass", FILTERS)
@pytest.mark.parametrize("name", NUISANCE_SETS)
def test_cleaning_with_each_set_equals_signal_clean(long_runs, name, low_pass, high_pass):
    bold = long_runs["aroma" if name in AROMA else "preproc"]
    tsv = _confounds_tsv(bold)
    confounds, sample_mask = load_confounds(bold, name)
    series = np.asarray(nib.load(bold).dataobj, dtype=np.float64).reshape(-1, 120).T
    op = cleaning_operator(
        120,
        confounds=confounds,
        sample_mask=sample_mask,
        low_pass=low_pass,
        high_pass=high_pass,
        t_r=T_R,
    )
    ours = clean_signals(series, op, device="cpu", dtype="float64")
    ours32 = clean_signals(series, op, device="cpu", dtype="float32")
    columns = xcpd_columns(XCPD[name], pd.read_csv(tsv, sep="\t", nrows=0).columns)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = clean(
            series,
            confounds=reference_confounds(tsv, columns),
            sample_mask=kept_volumes(tsv),
            low_pass=low_pass,
            high_pass=high_pass,
            t_r=T_R,
        )
    assert ours.shape == ref.shape == (117, series.shape[1])
    np.testing.assert_allclose(ours, ref, atol=1e-5)
    np.testing.assert_allclose(ours32, ref, atol=2e-5)


def test_every_strategy_has_an_alphanumeric_desc(tmp_path):
    labels = {s: strategy_desc(s) for s in STRATEGIES}
    assert labels["36P"] == "36P" and labels["acompcor_gsr"] == "acompcorgsr"
    assert labels["aroma_gsr"] == "aromagsr" and labels["gsr_only"] == "gsronly"
    assert labels["ica_aroma"] == "icaaroma" and labels["scrubbing"] == "scrubbing"
    assert all(re.fullmatch("[A-Za-z0-9]+", label) for label in labels.values())
    assert len(set(labels.values())) == len(labels)
    named = tmp_path / "my_model-v2.yml"
    named.write_text("columns: [global_signal]\n")
    assert strategy_desc(named) == strategy_desc(str(named)) == "mymodelv2"
    keyed = tmp_path / "model.json"
    keyed.write_text(json.dumps({"desc": "gsrwm", "columns": ["global_signal"]}))
    assert strategy_desc(keyed) == "gsrwm"
    assert strategy_desc("acompcorgsr") == "acompcorgsr"  # a label read back by the group level


# --- custom nuisance files ---

_CUSTOM_YAML = """\
desc: custom
columns:
  - global_signal
  - white_matter_derivative1
  - csf_power2
  - csf_derivative1_power2
  - ^TRANS_[XY]$          # a pattern: case-insensitive, as XCP-D's
  - trans_x               # already matched: once
"""


def _base_only(bold, tmp_path):
    """A copy of the run whose confounds TSV lacks every expansion column."""
    table = pd.read_csv(_confounds_tsv(bold), sep="\t")
    table = table[[c for c in table.columns if not re.search("_derivative1|_power2", c)]]
    return write_run(tmp_path / "func", "sub-03_task-rest", table, V21_JSON, seed=5)


@pytest.mark.parametrize("suffix", [".yml", ".json"])
def test_custom_file_names_patterns_and_expansions(long_runs, tmp_path, suffix):
    import yaml

    path = tmp_path / f"set{suffix}"
    content = yaml.safe_load(_CUSTOM_YAML)
    path.write_text(_CUSTOM_YAML if suffix == ".yml" else json.dumps(content))
    bold = _base_only(long_runs["preproc"], tmp_path)
    tsv = pd.read_csv(_confounds_tsv(bold), sep="\t")
    confounds, sample_mask = load_confounds(bold, str(path))
    assert list(confounds.columns) == [
        "global_signal",
        "white_matter_derivative1",
        "csf_power2",
        "csf_derivative1_power2",
        "trans_x",
        "trans_y",
    ]
    wm, csf = tsv["white_matter"].to_numpy(), tsv["csf"].to_numpy()
    d_wm, d_csf = np.diff(wm), np.diff(csf)
    np.testing.assert_allclose(confounds["white_matter_derivative1"], np.r_[d_wm[0], d_wm])
    np.testing.assert_allclose(confounds["csf_power2"], csf**2)
    np.testing.assert_allclose(confounds["csf_derivative1_power2"], np.r_[d_csf[0], d_csf] ** 2)
    np.testing.assert_allclose(confounds["trans_y"], tsv["trans_y"])
    assert np.array_equal(sample_mask, [*range(3, 120)])
    assert strategy_desc(path) == "custom"


def test_a_custom_36p_cleans_as_the_named_set(long_runs, tmp_path):
    """XCP-D's 36P as a file, on a TSV without expansions, equals the named set on the full TSV."""
    path = tmp_path / "mine.yaml"
    path.write_text("columns:\n" + "".join(f"  - {c}\n" for c in XCPD["36P"]))
    bold = long_runs["preproc"]
    base = _base_only(bold, tmp_path)
    ours, mask = load_confounds(base, path)
    named, named_mask = load_confounds(bold, "36P")
    assert sorted(ours.columns) == sorted(named.columns) and np.array_equal(mask, named_mask)
    a = cleaning_operator(120, confounds=ours, sample_mask=mask)
    b = cleaning_operator(120, confounds=named, sample_mask=named_mask)
    np.testing.assert_allclose(a.matrix, b.matrix, atol=1e-8)


def test_xcpd_format_file_equals_the_named_set(long_runs, tmp_path):
    """XCP-D's acompcor.yml, as XCP-D ships it, selects the columns of --denoise acompcor."""
    columns = "".join(f"        - {c}\n" for c in [*_MOTION12, *_ACOMPCOR])
    path = tmp_path / "acompcor_copy.yml"
    path.write_text(
        "name: acompcor\ndescription: |\n    XCP-D's acompcor.\nconfounds:\n"
        "    preproc_confounds:\n        dataset: preprocessed\n        query:\n"
        "            space: null\n            desc: confounds\n            suffix: timeseries\n"
        "        columns:\n" + columns
    )
    bold = long_runs["preproc"]
    ours, _ = load_confounds(bold, path)
    named, _ = load_confounds(bold, "acompcor")
    assert sorted(ours.columns) == sorted(named.columns)
    assert read_nuisance_file(path).desc == "acompcorcopy"


def _one_line(excinfo) -> str:
    message = str(excinfo.value)
    assert "\n" not in message
    return message


def test_a_pattern_that_matches_nothing_names_the_run_and_pattern(long_runs, tmp_path):
    path = tmp_path / "set.yml"
    path.write_text("columns: [global_signal, '^aroma_orth_motion_.*$']\n")
    with pytest.raises(NuisanceError) as excinfo:
        load_confounds(long_runs["preproc"], path)
    message = _one_line(excinfo)
    assert message.startswith(long_runs["preproc"].name)
    assert "'^aroma_orth_motion_.*$'" in message and "set.yml" in message


@pytest.mark.parametrize(
    "column, named",
    [("nothing_here", "'nothing_here'"), ("csf_wm_power3", "'csf_wm_power3'")],
)
def test_an_absent_column_names_the_run_and_column(long_runs, tmp_path, column, named):
    path = tmp_path / "set.yml"
    path.write_text(f"columns: [global_signal, rmsd_power2, {column}]\n")
    bold = _base_only(long_runs["preproc"], tmp_path)
    with pytest.raises(NuisanceError) as excinfo:
        load_confounds(bold, path)
    message = _one_line(excinfo)
    assert message.startswith(bold.name) and named in message and "set.yml" in message
    path.write_text("columns: [rmsd_power2]\n")  # an expansion of a column present: computed
    confounds, _ = load_confounds(bold, path)
    assert list(confounds.columns) == ["rmsd_power2"]


@pytest.mark.parametrize(
    "name, dropped",
    [("36P", ["csf_power2", "global_signal_derivative1"]), ("aroma_gsr", ["global_signal"])],
)
def test_a_set_whose_columns_are_missing_names_the_run_and_columns(
    long_runs, tmp_path, name, dropped
):
    bold = long_runs["aroma" if name in AROMA else "preproc"]
    table = pd.read_csv(_confounds_tsv(bold), sep="\t").drop(columns=dropped)
    desc = bold_desc(name)
    broken = write_run(tmp_path / "func", "sub-04_task-rest", table, V21_JSON, desc=desc)
    with pytest.raises(NuisanceError) as excinfo:
        load_confounds(broken, name)
    message = _one_line(excinfo)
    assert message.startswith(broken.name) and f"set {name} " in message
    assert f"needs column(s) {', '.join(dropped)}," in message


def test_acompcor_without_components_is_one_line(long_runs, tmp_path):
    table = pd.read_csv(_confounds_tsv(long_runs["preproc"]), sep="\t")
    table = table[[c for c in table.columns if "comp_cor" not in c]]
    meta = {k: v for k, v in json.loads(V21_JSON.read_text()).items() if "comp_cor" not in k}
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    broken = write_run(tmp_path / "func", "sub-05_task-rest", table, tmp_path / "meta.json")
    with pytest.raises(ValueError, match="compcor") as excinfo:
        load_confounds(broken, "acompcor")
    assert _one_line(excinfo).startswith(broken.name)


@pytest.mark.parametrize(
    "text, match",
    [
        ("columns: []\n", "names no column"),
        ("description: nothing\n", "names no column"),
        ("colums: [csf]\n", "unknown key"),
        ("columns: [csf, 3]\n", "names or patterns"),
        ("columns: csf\n", "columns must be a list"),
        ("confounds:\n  preproc: [csf]\n", "must be a mapping"),
        ("columns: ['^csf[']\n", "bad pattern"),
        ("desc: my-set\ncolumns: [csf]\n", "letters and digits"),
        ("- csf\n", "mapping"),
        ("columns: [csf\n", "not YAML"),
        (
            "confounds:\n  aroma_confounds:\n    dataset: aroma\n    columns: ['^aroma.*$']\n",
            "dataset 'aroma'",
        ),
    ],
)
def test_bad_nuisance_files_are_one_line(tmp_path, text, match):
    path = tmp_path / "bad.yml"
    path.write_text(text)
    with pytest.raises(NuisanceError, match=match) as excinfo:
        read_nuisance_file(path)
    assert _one_line(excinfo).startswith("bad.yml")


def test_sets_and_files_take_no_parameter(long_runs, tmp_path):
    with pytest.raises(ValueError, match="strategy '36P' takes no parameter"):
        load_confounds(long_runs["preproc"], "36P", fd_threshold=0.2)
    with pytest.raises(ValueError, match="strategy must be one of .* nuisance file; got 'x.yml'"):
        load_confounds(long_runs["preproc"], "x.yml")  # no such file


# --- the command line ---


def _participant(root, out, atlas, denoise, *extra):
    argv = ["bids", str(root), str(out), "participant", "--atlas", str(atlas)]
    argv += ["--atlas-name", "Slab4", *denoise, "--backend", "serial"]
    return main([*argv, "--no-reports", "-q", *extra])


def _masker_series(bold, columns):
    tsv = _confounds_tsv(bold)
    masker = NiftiLabelsMasker(
        labels_img=atlas_img(),
        standardize="zscore_sample",
        detrend=True,
        t_r=T_R,
        mask_img=bold.with_name(bold.name.split("_desc-")[0] + "_desc-brain_mask.nii.gz"),
    )
    img = nib.load(bold)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return masker.fit_transform(
            nib.Nifti1Image(np.asarray(img.dataobj, dtype=np.float64), img.affine),
            confounds=reference_confounds(tsv, columns),
            sample_mask=kept_volumes(tsv),
        )


def test_bids_denoise_36p_and_a_nuisance_file(tmp_path, capsys):
    root = make_tree(tmp_path / "fmriprep", ["01", "02"])
    func = root / "sub-02" / "func"
    tsv = func / "sub-02_task-rest_desc-confounds_timeseries.tsv"
    pd.read_csv(tsv, sep="\t").drop(columns=["csf_power2"]).to_csv(
        tsv, sep="\t", index=False, na_rep="n/a"
    )
    atlas = tmp_path / ATLAS
    nib.save(atlas_img(), atlas)
    out = tmp_path / "out"
    assert _participant(root, out, atlas, ["--denoise", "36P"]) == 1  # sub-02 fails
    series, _ = load_timeseries(
        out / "sub-01" / "func" / f"{SOURCE}_seg-Slab4_desc-36P_timeseries.tsv"
    )
    bold = root / "sub-01" / "func" / f"{SOURCE}_desc-preproc_bold.nii.gz"
    np.testing.assert_allclose(series, _masker_series(bold, XCPD["36P"]), atol=1e-5)
    meta = json.loads(
        (out / "sub-01" / "func" / f"{SOURCE}_seg-Slab4_desc-36P_timeseries.json").read_text()
    )
    assert meta["DenoiseStrategy"] == "36P"
    assert sorted(meta["ConfoundRegressors"]) == sorted(XCPD["36P"])
    report, errors = participant_log(out)
    failed = [r for r in report["records"] if r["status"] == "error"]
    assert [r["subject"] for r in failed] == ["02"] and len(errors) == 2
    assert "needs column(s) csf_power2, absent from" in failed[0]["error"]
    assert "sub-02_task-rest_space-MNI152NLin2009cAsym_desc-preproc_bold" in failed[0]["error"]
    assert not list(out.glob("sub-02/**/*_timeseries.tsv"))  # nothing published for it

    model = tmp_path / "gsr_wm.yml"
    model.write_text("columns: [global_signal, white_matter, '^trans_.$']\n")
    flags = ["--nuisance-regressors", str(model), "--participant-label", "01"]
    assert _participant(root, out, atlas, flags) == 0
    series, _ = load_timeseries(
        out / "sub-01" / "func" / f"{SOURCE}_seg-Slab4_desc-gsrwm_timeseries.tsv"
    )
    columns = ["global_signal", "white_matter", "trans_x", "trans_y", "trans_z"]
    np.testing.assert_allclose(series, _masker_series(bold, columns), atol=1e-5)
    assert main(["bids", str(root), str(out), "group", "--denoise", str(model), "-q"]) == 0
    assert (out / "group" / "seg-Slab4_meas-PearsonCorrelation_desc-gsrwm_features.tsv").is_file()
    capsys.readouterr()


def test_a_nuisance_file_is_in_the_fingerprint(tmp_path):
    from connscale.bidsapp.config import ParticipantConfig

    model = tmp_path / "model.yml"
    model.write_text("columns: [global_signal]\n")
    config = ParticipantConfig(str(tmp_path), str(tmp_path / "out"), atlas="a", atlas_name="A")
    assert config.parameters()["strategy"] == "simple"  # the presets' fingerprints unchanged
    config = ParticipantConfig(
        str(tmp_path), str(tmp_path / "out"), atlas="a", atlas_name="A", strategy=str(model)
    )
    before = config.parameters()
    assert before["strategy"]["columns"] == ["global_signal"]
    assert config.desc == "model"
    model.write_text("columns: [global_signal, csf]\n")
    assert config.parameters() != before


@pytest.mark.parametrize(
    "value, message",
    [
        ("gsr", "expected one of simple, scrubbing"),
        ("missing.yml", "no such file"),
    ],
)
def test_bids_denoise_refuses_in_one_line(tmp_path, capsys, value, message):
    argv = ["bids", str(tmp_path), str(tmp_path / "out"), "participant", "--denoise", value]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "argument --denoise/--nuisance-regressors" in err and message in err


def test_bids_denoise_refuses_a_bad_file_before_any_run(tmp_path, capsys):
    bad = tmp_path / "bad.yml"
    bad.write_text("columns: []\n")
    argv = ["bids", str(tmp_path), str(tmp_path / "out"), "participant", "--denoise", str(bad)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "bad.yml names no column" in err


def test_cifti_runs_take_the_sets_but_not_aroma(tmp_path):
    small = brain_model_91k()[:600]
    root = make_fmriprep_cifti(
        tmp_path / "fmriprep", [("01", None, "rest", None)], brain_model=small
    )
    labels = 1 + (3 * np.arange(len(small))) // len(small)
    atlas = write_cifti_atlas(tmp_path / CIFTI_ATLAS, brain_model=small, labels=labels)
    options = {"atlas": atlas, "atlas_name": "Struct10", "backend": "serial", "verbose": 0}
    report = run_participant(root, tmp_path / "out", strategy="gsr_only", reports=False, **options)
    [record] = report.records
    assert record["status"] == "ok"
    assert list((tmp_path / "out").glob("sub-01/func/*_desc-gsronly_timeseries.tsv"))
    with pytest.raises(ValueError, match="--denoise aroma reads fMRIPrep's AROMA volumes"):
        run_participant(root, tmp_path / "out2", strategy="aroma", **options)


def test_the_group_level_lists_a_run_its_set_failed(tmp_path):
    """Read back by its label (acompcorgsr), the set's failed run is named at the group level."""
    from connscale.bidsapp.group import run_group

    root = make_tree(tmp_path / "fmriprep", ["01", "02", "03"])
    tsv = root / "sub-03" / "func" / "sub-03_task-rest_desc-confounds_timeseries.tsv"
    pd.read_csv(tsv, sep="\t").drop(columns=["global_signal"]).to_csv(
        tsv, sep="\t", index=False, na_rep="n/a"
    )
    nib.save(atlas_img(), tmp_path / ATLAS)
    out = tmp_path / "out"
    assert _participant(root, out, tmp_path / ATLAS, ["--denoise", "acompcor_gsr"]) == 1
    result = run_group(out, atlas_name="Slab4", strategy="acompcor_gsr")
    assert [(e["subject"], e["status"]) for e in result.left_out] == [("03", "error")]
    assert "needs column(s) global_signal" in result.left_out[0]["reason"]
