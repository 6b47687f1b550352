"""The cohort runner writes the same files whatever the engine."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from numpy.testing import assert_array_equal

from connscale.cohort import run_cohort

PAIRS = {"window_length": 8, "step": 3, "threshold": 0.3}


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    root = tmp_path_factory.mktemp("cohort")
    rng = np.random.default_rng(3)
    for sub in ("01", "02", "03", "04", "05"):
        folder = root / f"sub-{sub}" / "func"
        folder.mkdir(parents=True)
        n_timepoints = 30 if sub != "04" else 26  # scans of different lengths
        np.save(
            folder / f"sub-{sub}_task-rest_timeseries.npy", rng.standard_normal((n_timepoints, 6))
        )
    # A BIDS tree is searched for *_timeseries.tsv: give it one, plus an unreadable one.
    tsv = root / "sub-06" / "func" / "sub-06_task-rest_timeseries.tsv"
    tsv.parent.mkdir(parents=True)
    tsv.write_text(
        "\n".join("\t".join(str(v) for v in row) for row in rng.standard_normal((30, 6))) + "\n"
    )
    bad = root / "sub-07" / "func" / "sub-07_task-rest_timeseries.tsv"
    bad.parent.mkdir(parents=True)
    bad.write_text("1\t2\n3\n")
    inputs = [str(root / "sub-*" / "func" / "*_timeseries.npy"), str(root)]
    reference = run_cohort(
        inputs, "pairs", root / "serial", params=PAIRS, engine="serial", verbose=0
    )
    return inputs, root, reference


def _contents(path):
    out = {}
    with h5py.File(path, "r") as h5:
        h5.visititems(
            lambda name, obj: (
                out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None
            )
        )
        out["attrs"] = {k: v for k, v in h5.attrs.items()}
    return out


@pytest.mark.parametrize(
    "engine_fixture",
    [
        "local_engine",
        pytest.param("dask_engine", marks=pytest.mark.cluster),
        pytest.param("spark_engine", marks=pytest.mark.cluster),
    ],
)
def test_same_files_whatever_the_engine(cohort, engine_fixture, request):
    inputs, root, reference = cohort
    engine = request.getfixturevalue(engine_fixture)
    out = root / engine.name
    report = run_cohort(inputs, "pairs", out, params=PAIRS, engine=engine, batch_size=3, verbose=0)
    assert [r["name"] for r in report.records] == [r["name"] for r in reference.records]
    assert [r["status"] for r in report.records] == ["ok"] * 6 + ["error"]
    assert report.records[-1]["subject"] == "07"
    for mine, theirs in zip(report.records[:-1], reference.records[:-1]):
        got, expected = _contents(mine["output"]), _contents(theirs["output"])
        assert got.keys() == expected.keys()
        for key in expected:
            if key == "attrs":
                assert got[key].keys() == expected[key].keys()
                for name in expected[key]:
                    assert_array_equal(got[key][name], expected[key][name])
            elif np.issubdtype(np.asarray(expected[key]).dtype, np.floating):
                # Workers may run other thread counts: equal to float32 rounding.
                np.testing.assert_allclose(got[key], expected[key], atol=2e-6, rtol=0)
            else:
                assert_array_equal(got[key], expected[key])
    # Resume on the same engine: nothing to redo.
    again = run_cohort(inputs, "pairs", out, params=PAIRS, engine=engine, verbose=0)
    assert [r["status"] for r in again.records] == ["skipped"] * 6 + ["error"]
