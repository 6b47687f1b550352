"""Each file format has one writer and one reader in connscale.io: round trips."""

import h5py
import numpy as np
import pytest

from connscale.io.features import is_feature_table, read_feature_table, write_feature_table
from connscale.io.hdf5 import add_datasets, load_relmat, write_relmat_h5
from connscale.io.pairs import (
    PAIR_STATISTICS,
    is_pair_summary,
    read_pair_summary,
    read_pairs_h5,
    write_pair_summary,
    write_pairs_h5,
)
from connscale.io.relmat import read_relmat_tsv, write_relmat_tsv


def _pairs(rng, n_pairs=6, n_windows=5):
    courses = rng.uniform(-1, 1, (n_pairs, n_windows))
    summary = {
        "mean": courses.mean(1),
        "std": courses.std(1),
        "fraction_above": (courses > 0.5).mean(1),
    }
    summary["std"][2] = np.nan  # an undefined value
    i, j = np.triu_indices(4, 1)
    return courses, np.stack([i, j], axis=1), summary


def test_pairs_store_round_trip(tmp_path, rng):
    courses, pairs, summary = _pairs(rng)
    path = write_pairs_h5(
        tmp_path / "sub-01_pairs.h5",
        courses=courses,
        pairs=pairs,
        window_onsets=np.arange(5) * 2,
        window_length=4,
        step=2,
        summary=summary,
        threshold=0.5,
        labels=["A", "B", "C", "D"],
        n_constant=3,
        datasets={"kept_volumes": np.arange(12)},
        attrs={"source": "x.tsv"},
    )
    assert [p.name for p in tmp_path.iterdir()] == ["sub-01_pairs.h5"]  # no temporary left
    store = read_pairs_h5(path)
    np.testing.assert_array_equal(store["courses"], courses)
    np.testing.assert_array_equal(store["pairs"], pairs)
    np.testing.assert_array_equal(store["window_onsets"], np.arange(5) * 2)
    assert store["labels"] == ["A", "B", "C", "D"]
    for stat in PAIR_STATISTICS:
        np.testing.assert_array_equal(store["summary"][stat], summary[stat])
    attrs = store["attrs"]
    assert (attrs["window_length"], attrs["step"], attrs["threshold"]) == (4, 2, 0.5)
    assert attrs["n_constant"] == 3 and attrs["source"] == "x.tsv" and attrs["complete"]
    assert "courses" not in read_pairs_h5(path, courses=False)
    with h5py.File(path) as h5:
        np.testing.assert_array_equal(h5["kept_volumes"][()], np.arange(12))


def test_pairs_store_refuses_unfinished_and_foreign_files(tmp_path, rng):
    courses, pairs, summary = _pairs(rng)
    with pytest.raises(ValueError, match="needs"):
        write_pairs_h5(
            tmp_path / "a_pairs.h5",
            courses=courses,
            pairs=pairs,
            window_onsets=np.arange(5),
            window_length=4,
            step=1,
            summary={"mean": summary["mean"]},
            threshold=0.5,
        )
    assert not list(tmp_path.iterdir())
    with h5py.File(tmp_path / "b_pairs.h5", "w") as h5:
        h5["courses"], h5["pairs"] = courses, pairs
        h5.attrs["complete"] = False
    with pytest.raises(ValueError, match="incomplete"):
        read_pairs_h5(tmp_path / "b_pairs.h5")
    with h5py.File(tmp_path / "c_pairs.h5", "w") as h5:
        h5["courses"] = courses
    with pytest.raises(ValueError, match="needs datasets 'courses' and 'pairs'"):
        read_pairs_h5(tmp_path / "c_pairs.h5")


def test_pair_summary_round_trip(tmp_path, rng):
    _, pairs, summary = _pairs(rng)
    path = write_pair_summary(
        tmp_path / "sub-01_meas-PearsonCorrelation_pairs.tsv",
        pairs=pairs,
        labels=["A", "B", "C", "D"],
        summary=summary,
        threshold=0.5,
    )
    assert is_pair_summary(path)
    assert path.read_text().splitlines()[0].endswith("\tfraction_above_0.5")
    table = read_pair_summary(path)
    np.testing.assert_array_equal(table["i"], pairs[:, 0])
    np.testing.assert_array_equal(table["j"], pairs[:, 1])
    assert table["label_i"][:3] == ["A", "A", "A"] and table["label_j"][-1] == "D"
    for stat in PAIR_STATISTICS:
        np.testing.assert_array_equal(table[stat], summary[stat])  # repr: exact


@pytest.mark.parametrize("shape", [(5, 5), (10,)])
def test_relmat_h5_round_trip(tmp_path, rng, shape):
    matrix = rng.standard_normal(shape)
    path = write_relmat_h5(
        tmp_path / "x_relmat.h5",
        matrix,
        attrs={"measure": "Test"},
        datasets={"node_labels": np.arange(5)},
    )
    stored, attrs = load_relmat(path)
    np.testing.assert_array_equal(stored, matrix)
    assert attrs["kind"] == ("dense" if len(shape) == 2 else "triu")
    assert attrs["N"] == 5 and attrs["measure"] == "Test" and attrs["complete"]
    with pytest.raises(ValueError, match="not a triangular number"):
        write_relmat_h5(tmp_path / "y_relmat.h5", np.zeros(7))
    add_datasets(path, {"names": np.array(["a", "b"], dtype=object)}, attrs={"extra": 1})
    with h5py.File(path) as h5:
        assert list(h5["names"].asstr()[()]) == ["a", "b"] and h5.attrs["extra"] == 1


def test_load_relmat_reads_tsv_and_refuses_other_formats(tmp_path, rng):
    """connscale's relmat TSV reads back through load_relmat; a file of no
    supported format is refused in one line naming it and the formats."""
    matrix = np.corrcoef(rng.standard_normal((4, 30)))
    path = write_relmat_tsv(tmp_path / "x_relmat.tsv", matrix, ["A", "B", "C", "D"])
    stored, attrs = load_relmat(path)
    np.testing.assert_allclose(stored, matrix, rtol=1e-6)
    assert attrs == {"kind": "dense", "N": 4, "labels": ["A", "B", "C", "D"]}
    for name in ("x_relmat.npy", "y_relmat.h5"):
        (tmp_path / name).write_text("not a matrix\n")
        with pytest.raises(ValueError) as info:
            load_relmat(tmp_path / name)
        message = str(info.value)
        assert "\n" not in message and name in message
        assert ".tsv" in message and "_relmat.h5" in message


def test_relmat_tsv_reads_other_tools_layouts(tmp_path, rng):
    matrix = rng.standard_normal((3, 3))
    write_relmat_tsv(tmp_path / "a_relmat.tsv", matrix, ["A", "B", "C"], fmt="%.17g")
    got, labels = read_relmat_tsv(tmp_path / "a_relmat.tsv")
    np.testing.assert_array_equal(got, matrix)
    assert labels == ["A", "B", "C"]
    rows = ["\tA\tB", "A\t1\tn/a", "B\t0.5\t1"]  # a row-name column, an undefined value
    (tmp_path / "b_relmat.tsv").write_text("\n".join(rows) + "\n")
    got, labels = read_relmat_tsv(tmp_path / "b_relmat.tsv")
    np.testing.assert_array_equal(got, [[1, np.nan], [0.5, 1]])
    assert labels == ["A", "B"]


def test_feature_table_round_trip_and_bad_cells(tmp_path, rng):
    X = rng.standard_normal((3, 4))
    names = ["A|B", "A|C", "A|B:dfc_mean", "n_transitions"]
    path = write_feature_table(tmp_path / "t_features.tsv", ["01", "02", "x3"], X, names)
    assert is_feature_table(path)
    subjects, got, got_names = read_feature_table(path)
    assert subjects == ["01", "02", "x3"] and got_names == names
    np.testing.assert_allclose(got, X, rtol=1e-7)
    path.write_text("participant_id\tA|B\nsub-01\t0.5\nsub-02\tabc\n")
    with pytest.raises(ValueError, match=r"t_features.tsv', row 3, column 'A\|B': not a number"):
        read_feature_table(path)
    path.write_text("subject\tA|B\nsub-01\t0.5\n")
    assert not is_feature_table(path)
