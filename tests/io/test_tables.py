"""The TSV writer of numeric tables (connscale.io.tables)."""

import io

import numpy as np
import pytest

from connscale.io import tables


def _savetxt(values, labels, fmt):
    buffer = io.StringIO()
    np.savetxt(buffer, values, delimiter="\t", header="\t".join(labels), comments="", fmt=fmt)
    return buffer.getvalue()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("fmt", ["%.7g", "%.8g"])
def test_same_text_as_savetxt(tmp_path, monkeypatch, dtype, fmt):
    """Every value (NaN, infinities, -0, tiny and huge ones) as numpy.savetxt writes it, in
    steps of a few rows (the last one short)."""
    monkeypatch.setattr(tables, "_STEP_VALUES", 12)
    rng = np.random.default_rng(0)
    values = (rng.standard_normal((7, 5)) * 10.0 ** rng.integers(-12, 12, (7, 5))).astype(dtype)
    if dtype != np.int64:
        values[0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    labels = ["a", "b", "Left-Amygdala", "7", "Schaefer_Vis_1"]
    path = tables.write_float_table(tmp_path / "t.tsv", values, labels, fmt=fmt)
    assert path.read_text() == _savetxt(values, labels, fmt)


def test_replaces_and_refuses(tmp_path):
    path = tmp_path / "t.tsv"
    path.write_text("old")
    tables.write_float_table(path, np.ones((1, 2)), ["a", "b"], fmt="%.7g")
    assert path.read_text() == "a\tb\n1\t1\n"
    with pytest.raises(ValueError, match="table of 3 columns; got an array of shape \\(1, 2\\)"):
        tables.write_float_table(path, np.ones((1, 2)), ["a", "b", "c"], fmt="%.7g")
    assert path.read_text() == "a\tb\n1\t1\n"
    assert [p.name for p in tmp_path.iterdir()] == ["t.tsv"]
