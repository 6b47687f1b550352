"""Feature loaders: relmat files, DFC pair summaries, participants alignment."""

import h5py
import numpy as np
import pytest

from connscale.classify import (
    align_labels,
    fisher_z,
    load_connectome_features,
    load_features,
    load_pair_features,
    read_pair_summary,
    read_participants,
    read_relmat,
    subject_id_from_path,
)

N = 5
LABELS = [f"R{k}" for k in range(N)]


def _corr(rng, n=N):
    x = rng.standard_normal((30, n))
    return np.corrcoef(x, rowvar=False)


def _write_tsv(path, matrix, labels=LABELS, row_names=False):
    lines = ["\t".join(([""] if row_names else []) + list(labels))]
    for name, row in zip(labels, matrix):
        lines.append("\t".join(([name] if row_names else []) + [repr(float(v)) for v in row]))
    path.write_text("\n".join(lines) + "\n")
    return path


def _write_h5(path, data, kind, n=N, labels=None):
    with h5py.File(path, "w") as handle:
        dataset = handle.create_dataset("relmat", data=data)
        dataset.attrs["kind"] = kind
        dataset.attrs["n"] = n
        if labels is not None:
            dataset.attrs["labels"] = labels
    return path


def _write_participants(path, rows, header=("participant_id", "group")):
    path.write_text("\n".join(["\t".join(header)] + ["\t".join(r) for r in rows]) + "\n")
    return path


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def test_subject_id_from_path():
    assert subject_id_from_path("sub-01_task-rest_relmat.tsv") == "01"
    assert subject_id_from_path("/data/sub-ab12/func/sub-ab12_relmat.h5") == "ab12"
    with pytest.raises(ValueError, match="sub-<label>"):
        subject_id_from_path("subject01_relmat.tsv")


def test_read_relmat_formats_agree(tmp_path, rng):
    matrix = _corr(rng)
    expected = matrix[np.triu_indices(N, 1)]
    np.save(tmp_path / "sq.npy", matrix)
    np.save(tmp_path / "vec.npy", expected)
    _write_tsv(tmp_path / "a_relmat.tsv", matrix)
    _write_tsv(tmp_path / "b_relmat.tsv", matrix, row_names=True)
    _write_h5(tmp_path / "t_relmat.h5", expected, "triu", labels=LABELS)
    _write_h5(tmp_path / "d_relmat.h5", matrix, "dense")
    for name in [
        "sq.npy",
        "vec.npy",
        "a_relmat.tsv",
        "b_relmat.tsv",
        "t_relmat.h5",
        "d_relmat.h5",
    ]:
        vector, _ = read_relmat(tmp_path / name)
        np.testing.assert_allclose(vector, expected, rtol=0, atol=1e-15, err_msg=name)
    assert read_relmat(tmp_path / "a_relmat.tsv")[1] == LABELS
    assert read_relmat(tmp_path / "b_relmat.tsv")[1] == LABELS
    assert read_relmat(tmp_path / "t_relmat.h5")[1] == LABELS
    assert read_relmat(tmp_path / "sq.npy")[1] is None


def test_read_relmat_bad_inputs(tmp_path, rng):
    with pytest.raises(FileNotFoundError, match="No such connectome"):
        read_relmat(tmp_path / "missing.npy")
    np.save(tmp_path / "rect.npy", np.zeros((3, 4)))
    with pytest.raises(ValueError, match="square matrix"):
        read_relmat(tmp_path / "rect.npy")
    np.save(tmp_path / "odd.npy", np.zeros(7))
    with pytest.raises(ValueError, match="not a triangular number"):
        read_relmat(tmp_path / "odd.npy")
    (tmp_path / "short_relmat.tsv").write_text("A\tB\tC\n1\t0\t0\n0\t1\t0\n")
    with pytest.raises(ValueError, match="square matrix with a header of 3"):
        read_relmat(tmp_path / "short_relmat.tsv")
    (tmp_path / "text_relmat.tsv").write_text("A\tB\n1\tx\nx\t1\n")
    with pytest.raises(ValueError, match="non-numeric"):
        read_relmat(tmp_path / "text_relmat.tsv")
    _write_h5(tmp_path / "csr_relmat.h5", np.zeros(10), "sparse")
    with pytest.raises(ValueError, match="needs a CSR group"):
        read_relmat(tmp_path / "csr_relmat.h5")
    _write_h5(tmp_path / "kind_relmat.h5", np.zeros(10), "lowrank")
    with pytest.raises(ValueError, match="'triu', 'dense' or 'sparse'"):
        read_relmat(tmp_path / "kind_relmat.h5")
    _write_h5(tmp_path / "n_relmat.h5", np.zeros(10), "triu", n=6)
    with pytest.raises(ValueError, match="n=6 does not match"):
        read_relmat(tmp_path / "n_relmat.h5")
    with h5py.File(tmp_path / "other.h5", "w") as handle:
        handle.create_dataset("matrix", data=np.eye(3))
    with pytest.raises(ValueError, match="no dataset 'relmat'"):
        read_relmat(tmp_path / "other.h5")
    (tmp_path / "x.csv").write_text("1,2\n")
    with pytest.raises(ValueError, match="unsupported connectome file"):
        read_relmat(tmp_path / "x.csv")


def test_load_connectome_features_stacks_and_maps_pairs(tmp_path, rng):
    matrices = [_corr(rng) for _ in range(4)]
    paths = [_write_tsv(tmp_path / f"sub-{k:02d}_relmat.tsv", m) for k, m in enumerate(matrices)]
    features = load_connectome_features(paths)
    i, j = np.triu_indices(N, 1)
    np.testing.assert_allclose(features.X, np.array([m[i, j] for m in matrices]))
    assert features.subjects == ["00", "01", "02", "03"]
    np.testing.assert_array_equal(features.pair_i, i)
    np.testing.assert_array_equal(features.pair_j, j)
    table = features.feature_table()
    assert table[3] == {
        "feature": 3,
        "name": "R0--R4",
        "statistic": "edge",
        "i": 0,
        "j": 4,
        "label_i": "R0",
        "label_j": "R4",
    }
    z = load_connectome_features(paths, fisher_z_transform=True)
    np.testing.assert_allclose(z.X, np.arctanh(features.X))


def test_load_connectome_features_bad_inputs(tmp_path, rng):
    a = _write_tsv(tmp_path / "sub-01_relmat.tsv", _corr(rng))
    b = _write_tsv(tmp_path / "sub-02_relmat.tsv", _corr(rng, 4), labels=LABELS[:4])
    with pytest.raises(ValueError, match="same number of regions"):
        load_connectome_features([a, b])
    c = _write_tsv(tmp_path / "sub-03_relmat.tsv", _corr(rng), labels=list("ABCDE"))
    with pytest.raises(ValueError, match="other region labels"):
        load_connectome_features([a, c])
    d = tmp_path / "again" / "sub-01_relmat.tsv"
    d.parent.mkdir()
    _write_tsv(d, _corr(rng))
    with pytest.raises(ValueError, match="appears twice"):
        load_connectome_features([a, d])
    bad = _corr(rng)
    bad[1, 2] = bad[2, 1] = np.nan
    e = _write_tsv(tmp_path / "sub-04_relmat.tsv", bad)
    with pytest.raises(ValueError, match=r"NaN or infinite, in subjects sub-04 \(1\)"):
        load_connectome_features([a, e])
    with pytest.raises(ValueError, match="No feature files"):
        load_connectome_features([])


def test_fisher_z():
    r = np.array([-1.0, -0.5, 0.0, 0.5, 1.0, np.nan])
    z = fisher_z(r)
    np.testing.assert_allclose(z[1:4], np.arctanh(r[1:4]))
    assert np.isfinite(z[[0, 4]]).all() and z[4] == -z[0] and z[4] > 8
    assert np.isnan(z[5])
    with pytest.raises(ValueError, match="correlations in"):
        fisher_z([0.5, 3.0])


def _pair_summary(path, means, stds, pairs=((0, 1), (0, 2), (1, 2))):
    rows = ["i\tj\tlabel_i\tlabel_j\tmean\tstd\tfraction_above"]
    for (i, j), m, s in zip(pairs, means, stds):
        rows.append(f"{i}\t{j}\tL{i}\tL{j}\t{m}\t{s}\t0.25")
    path.write_text("\n".join(rows) + "\n")
    return path


def test_pair_features(tmp_path):
    a = _pair_summary(tmp_path / "sub-01_pairs.tsv", [0.1, 0.2, 0.3], [0.01, 0.02, 0.03])
    b = _pair_summary(tmp_path / "sub-02_pairs.tsv", [0.4, 0.5, 0.6], [0.04, 0.05, 0.06])
    summary = read_pair_summary(a)
    np.testing.assert_array_equal(summary["j"], [1, 2, 2])
    np.testing.assert_allclose(summary["fraction_above"], 0.25)
    features = load_pair_features([a, b])
    np.testing.assert_allclose(
        features.X, [[0.1, 0.2, 0.3, 0.01, 0.02, 0.03], [0.4, 0.5, 0.6, 0.04, 0.05, 0.06]]
    )
    assert features.feature_names[4] == "std:L0--L2"
    assert features.statistic == ["mean"] * 3 + ["std"] * 3
    z = load_pair_features([a, b], statistics=["mean"], fisher_z_transform=True)
    np.testing.assert_allclose(z.X, np.arctanh([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]]))
    dispatched = load_features([a, b])
    np.testing.assert_allclose(dispatched.X, features.X)


def test_pair_features_bad_inputs(tmp_path, rng):
    a = _pair_summary(tmp_path / "sub-01_pairs.tsv", [0.1, 0.2, 0.3], [0.0] * 3)
    b = _pair_summary(
        tmp_path / "sub-02_pairs.tsv", [0.1, 0.2, 0.3], [0.0] * 3, pairs=((0, 1), (0, 3), (1, 2))
    )
    with pytest.raises(ValueError, match="other region pairs"):
        load_pair_features([a, b])
    with pytest.raises(ValueError, match="'statistics' must be among"):
        load_pair_features([a], statistics=["median"])
    (tmp_path / "sub-03_pairs.tsv").write_text("i\tj\tmean\n0\t1\t0.2\n")
    with pytest.raises(ValueError, match="needs columns i, j, label_i, label_j"):
        read_pair_summary(tmp_path / "sub-03_pairs.tsv")
    (tmp_path / "sub-04_pairs.tsv").write_text("i\tj\tlabel_i\tlabel_j\tmean\n1\t0\tA\tB\t0.2\n")
    with pytest.raises(ValueError, match="0 <= i < j"):
        read_pair_summary(tmp_path / "sub-04_pairs.tsv")
    m = _write_tsv(tmp_path / "sub-05_relmat.tsv", _corr(rng))
    with pytest.raises(ValueError, match="mix DFC pair summaries"):
        load_features([a, m])
    with pytest.raises(FileNotFoundError, match="No such feature file"):
        load_features([tmp_path / "sub-09_relmat.tsv"])


def _features(tmp_path, rng, subjects=("01", "02", "03", "04")):
    paths = [_write_tsv(tmp_path / f"sub-{s}_relmat.tsv", _corr(rng)) for s in subjects]
    return load_connectome_features(paths)


def test_participants_alignment(tmp_path, rng):
    features = _features(tmp_path, rng)
    participants = _write_participants(
        tmp_path / "participants.tsv",
        [
            ("sub-04", "patient"),
            ("02", "control"),
            ("sub-01", "control"),
            ("03", "patient"),
            ("sub-99", "n/a"),
        ],
    )
    assert read_participants(participants, label="group")["04"] == "patient"
    assert "99" not in read_participants(participants, label="group")
    aligned = align_labels(features, participants, label="group")
    np.testing.assert_array_equal(aligned.y, [0, 0, 1, 1])
    assert aligned.y_classes == ["control", "patient"]
    np.testing.assert_array_equal(aligned.X, features.X)
    flipped = align_labels(features, participants, label="group", classes=["patient", "control"])
    np.testing.assert_array_equal(flipped.y, [1, 1, 0, 0])


def test_participants_bad_inputs(tmp_path, rng):
    features = _features(tmp_path, rng)
    good = [("sub-01", "a"), ("sub-02", "b"), ("sub-03", "a"), ("sub-04", "b")]
    path = _write_participants(tmp_path / "p.tsv", good)
    with pytest.raises(ValueError, match="no column 'diagnosis'; choose the label among"):
        align_labels(features, path, label="diagnosis")
    with pytest.raises(ValueError, match="no 'participant_id' column"):
        read_participants(
            _write_participants(tmp_path / "q.tsv", good, ("id", "group")), label="group"
        )
    with pytest.raises(
        ValueError,
        match=r"1 subject\(s\) with features have no 'group' "
        r"value.*sub-04",
    ):
        align_labels(features, _write_participants(tmp_path / "r.tsv", good[:3]), label="group")
    one = [(s, "a") for s, _ in good]
    with pytest.raises(ValueError, match="exactly two classes.*got 1"):
        align_labels(features, _write_participants(tmp_path / "s.tsv", one), label="group")
    three = good[:3] + [("sub-04", "c")]
    with pytest.raises(ValueError, match="exactly two classes.*got 3"):
        align_labels(features, _write_participants(tmp_path / "t.tsv", three), label="group")
    with pytest.raises(ValueError, match="outside"):
        align_labels(features, path, label="group", classes=["a", "z"])
    with pytest.raises(FileNotFoundError, match="No such participants file"):
        read_participants(tmp_path / "none.tsv", label="group")


def test_relmat_h5_written_by_connscale_io(tmp_path, rng):
    """Stores written by connscale.io.hdf5 (triu, dense, sparse) read back."""
    import scipy.sparse as sp

    from connscale.io.hdf5 import RelmatWriter

    matrix = _corr(rng)
    expected = matrix[np.triu_indices(N, 1)]
    for kind in ("triu", "dense", "sparse"):
        path = tmp_path / f"sub-01_{kind}_relmat.h5"
        with h5py.File(path, "w") as handle:
            writer = RelmatWriter(handle, N, kind, np.float64)
            if kind == "triu":
                writer.write_triu(0, expected)
            elif kind == "dense":
                writer.write_rows(0, matrix)
            else:
                upper = sp.csr_array(np.triu(np.where(np.abs(matrix) >= 0.2, matrix, 0), 1))
                writer.append_csr_rows(np.diff(upper.indptr), upper.indices, upper.data)
            writer.close()
        vector, _ = read_relmat(path)
        if kind == "sparse":
            np.testing.assert_allclose(vector, np.where(np.abs(expected) >= 0.2, expected, 0))
        else:
            np.testing.assert_allclose(vector, expected)
    with h5py.File(tmp_path / "part_relmat.h5", "w") as handle:
        RelmatWriter(handle, N, "triu", np.float64)  # never closed: incomplete
    with pytest.raises(ValueError, match="incomplete"):
        read_relmat(tmp_path / "part_relmat.h5")


def test_pair_summary_as_connscale_pairs_writes_it(tmp_path):
    rows = [
        "pair\ti\tj\tlabel_i\tlabel_j\tmean\tstd\tfraction_above_0.5",
        "0\t0\t1\tA\tB\t0.3\t0.1\t0.25",
        "1\t0\t2\tA\tC\t-0.1\t0.2\t0",
    ]
    path = tmp_path / "sub-07_meas-PearsonCorrelation_pairs.tsv"
    path.write_text("\n".join(rows) + "\n")
    features = load_features([path], statistics=["mean", "fraction_above"])
    np.testing.assert_allclose(features.X, [[0.3, -0.1, 0.25, 0.0]])
    assert features.subjects == ["07"]
    assert features.feature_names == [
        "mean:A--B",
        "mean:A--C",
        "fraction_above:A--B",
        "fraction_above:A--C",
    ]
