"""Feature matrices from the connectomes of a cohort, aligned with labels.

Each subject is one file whose name carries its BIDS subject entity
(``sub-<label>``). Supported files:

- region-by-region matrices (static FC, reconstructed low-rank correlations,
  region-level LiFE connectomes): ``.npy`` (a square matrix or the 1-D
  strictly-upper-triangle vector in connscale's row-major order), BIDS
  ``_relmat.tsv`` (a square matrix with a header row of region labels) and
  ``_relmat.h5`` (as :mod:`connscale.io.hdf5` writes it: dataset
  ``"relmat"``, attributes ``kind`` in {``"triu"``, ``"dense"``,
  ``"sparse"``} and ``N`` (or ``n``) on the root or the dataset, optional
  ``labels``; a sparse store's unstored pairs read as 0). Each matrix
  contributes its strictly-upper triangle, one feature per region pair;
- DFC pair summaries written by ``connscale pairs`` (``_pairs.tsv``): a TSV with columns
  ``i``, ``j``, ``label_i``, ``label_j`` and any of ``mean``, ``std``,
  ``fraction_above``; each (statistic, pair) is one feature;
- region-pair DFC stores ``_pairs.h5`` (``connscale pairs``, ``connscale
  cohort --job pairs``, ``connscale bids --measures pairs``: datasets
  ``courses`` (pairs, windows), ``pairs``, optional ``summary/<stat>`` and
  ``labels``) and sliding-window stores ``_dfc.h5`` (``connscale dfc``,
  ``connscale cohort --job dfc``, ``connscale bids --measures dfc``: format
  ``connscale-dfc-1``, any stored kind, read through
  :func:`connscale.load_dynamic`): each pair's mean and standard deviation
  over the windows (and the fraction of windows above the file's threshold
  when it has one) are the pair-summary features;
- the group feature table of ``connscale bids ... group``
  (``group/..._features.tsv``: a ``participant_id`` column, then one column
  per feature, read by :func:`connscale.io.features.read_feature_table`):
  one file for the whole cohort, its rows the participants, its columns the
  features (:func:`load_feature_table`).

All connscale outputs of one cohort are recognised by their content, not
their names; :func:`load_features` dispatches. Every file is read by its one
reader in :mod:`connscale.io`.

Labels come from a BIDS ``participants.tsv``: column ``participant_id``
(with or without the ``sub-`` prefix) and a label column chosen by the user.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from connscale._triu import matrix_to_vec, n_from_pairs, triu_pairs
from connscale.io.bids import read_participants
from connscale.io.dfc import read_dfc_info
from connscale.io.features import is_feature_table, read_feature_table
from connscale.io.hdf5 import load_relmat, store_kind
from connscale.io.pairs import PAIR_STATISTICS, is_pair_summary, read_pair_summary, read_pairs_h5
from connscale.io.relmat import read_relmat_npy, read_relmat_tsv

__all__ = [
    "FeatureSet",
    "align_labels",
    "file_kind",
    "fisher_z",
    "load_connectome_features",
    "load_feature_table",
    "load_features",
    "load_pair_features",
    "read_pair_file",
    "read_pair_summary",
    "read_participants",
    "read_relmat",
    "subject_id_from_path",
]

_SUBJECT = re.compile(r"(?:^|[_/\\])sub-([A-Za-z0-9]+)")
#: Correlations are clipped to [-1 + eps, 1 - eps] before arctanh.
FISHER_Z_EPS = 1e-7


@dataclass
class FeatureSet:
    """Features of a cohort: one row per subject, one column per feature.

    Attributes
    ----------
    X : ndarray of shape (n_subjects, n_features)
    subjects : list of str
        Subject labels (without ``sub-``), one per row.
    pair_i, pair_j : ndarray of int64, shape (n_features,)
        Region pair of each feature (``i < j``; -1 for a feature of a group
        feature table that is no region pair).
    statistic : list of str
        What each feature is: ``"edge"`` for matrix entries, or the DFC
        summary statistic (``"mean"``, ``"std"``, ``"fraction_above"``; a
        group feature table's ``dfc_mean``, ``dfc_std``, or ``"other"``).
    region_labels : list of str
        Names of the regions (``region_<k>`` when the files name none).
    files : list of str
        The file of each subject.
    y : ndarray of shape (n_subjects,) or None
        Labels once aligned (see :func:`align_labels`): 0 negative, 1 positive.
    y_classes : list of str or None
        ``[negative, positive]`` label values once aligned.
    names : list of str or None
        The features' names as the file gives them (a group feature table's
        columns); None: made from the pairs (see :attr:`feature_names`).

    Examples
    --------
    >>> import numpy as np
    >>> from connscale.classify import FeatureSet
    >>> features = FeatureSet(X=np.arange(6.0).reshape(2, 3), subjects=["01", "02"],
    ...                       pair_i=np.array([0, 0, 1]), pair_j=np.array([1, 2, 2]),
    ...                       statistic=["edge"] * 3, region_labels=["V1", "M1", "PCC"])
    >>> features.n_features, features.feature_names
    (3, ['V1--M1', 'V1--PCC', 'M1--PCC'])
    """

    X: np.ndarray
    subjects: list
    pair_i: np.ndarray
    pair_j: np.ndarray
    statistic: list
    region_labels: list
    files: list = field(default_factory=list)
    y: np.ndarray | None = None
    y_classes: list | None = None
    names: list | None = None

    @property
    def n_features(self) -> int:
        """The number of features (columns of :attr:`X`)."""
        return int(self.X.shape[1])

    @property
    def feature_names(self) -> list:
        """The features' names: ``"<label_i>--<label_j>"`` or the file's own names.

        A pair is prefixed by the statistic for DFC summaries; :attr:`names` is used when
        the file named the features.
        """
        if self.names is not None:
            return list(self.names)
        names = []
        for stat, i, j in zip(self.statistic, self.pair_i, self.pair_j):
            pair = f"{self.region_labels[i]}--{self.region_labels[j]}"
            names.append(pair if stat == "edge" else f"{stat}:{pair}")
        return names

    def feature_table(self) -> list:
        """Return one dict per feature: index, name, statistic, i, j, label_i, label_j.

        Returns
        -------
        list of dict
            One per feature, in column order.

        Examples
        --------
        >>> import numpy as np
        >>> from connscale.classify import FeatureSet
        >>> features = FeatureSet(X=np.arange(6.0).reshape(2, 3), subjects=["01", "02"],
        ...                       pair_i=np.array([0, 0, 1]), pair_j=np.array([1, 2, 2]),
        ...                       statistic=["edge"] * 3, region_labels=["V1", "M1", "PCC"])
        >>> features.feature_table()[2]
        {'feature': 2, 'name': 'M1--PCC', 'statistic': 'edge', 'i': 1, 'j': 2,
         'label_i': 'M1', 'label_j': 'PCC'}
        """
        return [
            {
                "feature": k,
                "name": name,
                "statistic": stat,
                "i": int(i),
                "j": int(j),
                "label_i": self.region_labels[i] if i >= 0 else "",
                "label_j": self.region_labels[j] if j >= 0 else "",
            }
            for k, (name, stat, i, j) in enumerate(
                zip(self.feature_names, self.statistic, self.pair_i, self.pair_j)
            )
        ]

    def subset(self, rows: npt.ArrayLike) -> FeatureSet:
        """Return the subjects at ``rows`` (an index array), same features.

        Parameters
        ----------
        rows : array-like of int
            Row indices.

        Returns
        -------
        FeatureSet
            Those subjects' rows (and labels, once aligned).

        Examples
        --------
        >>> import numpy as np
        >>> from connscale.classify import FeatureSet
        >>> features = FeatureSet(X=np.arange(6.0).reshape(2, 3), subjects=["01", "02"],
        ...                       pair_i=np.array([0, 0, 1]), pair_j=np.array([1, 2, 2]),
        ...                       statistic=["edge"] * 3, region_labels=["V1", "M1", "PCC"])
        >>> features.subset([1]).subjects, features.subset([1]).X.tolist()
        (['02'], [[3.0, 4.0, 5.0]])
        """
        rows = np.asarray(rows, dtype=np.int64)
        return FeatureSet(
            X=self.X[rows],
            subjects=[self.subjects[r] for r in rows],
            pair_i=self.pair_i,
            pair_j=self.pair_j,
            statistic=self.statistic,
            region_labels=self.region_labels,
            files=[self.files[r] for r in rows] if self.files else [],
            y=None if self.y is None else self.y[rows],
            y_classes=self.y_classes,
            names=self.names,
        )


# --------------------------------------------------------------------------
# Single files
# --------------------------------------------------------------------------


def subject_id_from_path(path: str | os.PathLike) -> str:
    """Return the subject label of a BIDS file name (``sub-01_...`` -> ``"01"``).

    The last ``sub-<label>`` entity of the path is used, so a file inside
    ``sub-01/func/`` named ``sub-01_..._relmat.tsv`` gives ``"01"``.

    Parameters
    ----------
    path : str or path
        A file of a BIDS tree.

    Returns
    -------
    str
        The subject label, without ``sub-``.

    Examples
    --------
    >>> from connscale.classify import subject_id_from_path
    >>> subject_id_from_path("out/sub-01/func/sub-01_task-rest_relmat.tsv")
    '01'
    """
    matches = _SUBJECT.findall(str(path))
    if not matches:
        raise ValueError(
            f"Cannot find the subject of {str(path)!r}: expected a BIDS "
            "'sub-<label>' entity in the file name (e.g. 'sub-01_relmat.tsv')."
        )
    return matches[-1]


def _square_to_vec(matrix: np.ndarray, source: str) -> np.ndarray:
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(
            f"{source}: expected a square matrix or a 1-D upper-triangle "
            f"vector; got an array of shape {matrix.shape}."
        )
    return matrix_to_vec(matrix) if matrix.shape[0] > 1 else np.empty(0)


def read_relmat(path: str | os.PathLike) -> tuple[np.ndarray, list | None]:
    """Read one region-by-region matrix as its strictly-upper triangle.

    Parameters
    ----------
    path : str or path
        ``.npy`` (square or 1-D triu vector), ``.tsv`` (square, header row of
        region labels; read by :func:`connscale.io.read_relmat_tsv`) or
        ``.h5`` / ``.hdf5`` (read by :func:`connscale.io.load_relmat`).

    Returns
    -------
    vector : ndarray of shape (n * (n - 1) // 2,)
        Row-major strictly-upper triangle, float64.
    labels : list of str or None
        Region labels when the file has them.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> import numpy as np
    >>> from connscale.classify import read_relmat
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     np.save(Path(tmp) / "r.npy", np.array([[1, 0.2, 0.3], [0.2, 1, 0.4], [0.3, 0.4, 1]]))
    ...     vector, labels = read_relmat(Path(tmp) / "r.npy")
    >>> vector, labels
    (array([0.2, 0.3, 0.4]), None)
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No such connectome file: {str(path)!r}.")
    name = path.name.lower()
    labels = None
    if name.endswith(".npy"):
        array = read_relmat_npy(path)
        if array.ndim == 1:
            n_from_pairs(array.size, source=str(path))
            vector = array
        else:
            vector = _square_to_vec(array, str(path))
    elif name.endswith((".tsv", ".tsv.gz")):
        matrix, labels = read_relmat_tsv(path)
        vector = _square_to_vec(matrix, str(path))
    elif name.endswith((".h5", ".hdf5")):
        stored, attrs = load_relmat(path)
        labels = attrs.get("labels")
        if attrs["kind"] == "triu":
            vector = stored
        else:  # dense, or sparse (pairs below the threshold were not stored: 0)
            vector = _square_to_vec(
                stored.toarray() if attrs["kind"] == "sparse" else stored, str(path)
            )
    else:
        raise ValueError(
            f"{str(path)!r}: unsupported connectome file; expected .npy, _relmat.tsv or _relmat.h5."
        )
    vector = np.asarray(vector)
    if not np.issubdtype(vector.dtype, np.number):
        raise ValueError(f"{str(path)!r}: expected numbers; got dtype {vector.dtype}.")
    return vector.astype(np.float64, copy=False), labels


def _summary_of_courses(courses: np.ndarray, threshold: float | None) -> dict:
    """Mean, std (and fraction above ``threshold``) of (pairs, windows) courses."""
    from connscale.fc.pairs import pair_summary

    summary = pair_summary(
        np.asarray(courses, dtype=np.float64)[None],
        threshold=0.5 if threshold is None else float(threshold),
    )
    out = {"mean": summary.mean[0], "std": summary.std[0]}
    if threshold is not None:
        out["fraction_above"] = summary.fraction_above[0]
    return out


def _threshold_attr(attrs: Mapping) -> float | None:
    value = attrs.get("threshold")
    if isinstance(value, bytes):
        value = value.decode()
    if value is None or isinstance(value, str):
        return None
    value = float(value)
    return None if not np.isfinite(value) else value


def _pairs_table(path: Path, pairs: np.ndarray, labels: Sequence | None, stats: dict) -> dict:
    pairs = np.asarray(pairs, dtype=np.int64)
    if pairs.ndim != 2 or pairs.shape[1] != 2 or not pairs.shape[0]:
        raise ValueError(
            f"{str(path)!r}: 'pairs' must be an (n_pairs, 2) table; got shape {pairs.shape}."
        )
    n = int(pairs.max()) + 1
    labels = _region_labels(labels, n) if labels is not None else [f"region_{k}" for k in range(n)]
    out = {
        "i": pairs[:, 0],
        "j": pairs[:, 1],
        "label_i": [labels[i] for i in pairs[:, 0]],
        "label_j": [labels[j] for j in pairs[:, 1]],
    }
    for stat, values in stats.items():
        values = np.asarray(values, dtype=np.float64)
        if values.shape != (pairs.shape[0],):
            raise ValueError(
                f"{str(path)!r}: summary {stat!r} has shape {values.shape}; "
                f"expected ({pairs.shape[0]},)."
            )
        out[stat] = values
    return out


def _read_pairs_h5(path: Path) -> dict:
    store = read_pairs_h5(path, courses=False)
    stats = store["summary"]
    if not stats:  # a store written before summaries were stored
        stats = _summary_of_courses(read_pairs_h5(path)["courses"], _threshold_attr(store["attrs"]))
    return _pairs_table(path, store["pairs"], store["labels"], stats)


def _read_dfc_h5(path: Path) -> dict:
    from connscale.fc.dynamic_result import load_dynamic

    info = read_dfc_info(path)
    n = info["n_series"]
    if n < 2:
        raise ValueError(f"{str(path)!r}: a DFC store needs at least 2 series; got {n}.")
    with load_dynamic(path) as result:
        if result.kind == "triu":
            courses = np.stack([np.asarray(result[w]) for w in range(len(result))], axis=1)
        else:  # sparse (unkept pairs read as 0), lowrank, factor: reconstructed windows
            courses = np.stack(
                [matrix_to_vec(result.to_dense(w)) for w in range(len(result))], axis=1
            )
    i, j = np.triu_indices(n, 1)
    return _pairs_table(
        path,
        np.stack([i, j], axis=1),
        info["labels"],
        _summary_of_courses(courses, _threshold_attr(info["parameters"])),
    )


def file_kind(path: str | os.PathLike) -> str:
    """Return what a feature file holds.

    One of 'relmat', 'pair_summary', 'pairs', 'dfc' or 'feature_table' (the BIDS-App's
    group feature table).
    """
    path = Path(path)
    name = path.name.lower()
    if name.endswith((".h5", ".hdf5")):
        return store_kind(path)
    if name.endswith(".tsv") and is_feature_table(path):
        return "feature_table"
    return "pair_summary" if is_pair_summary(path) else "relmat"


def read_pair_file(path: str | os.PathLike) -> dict:
    """Per-pair summaries of one scan from any connscale pair-level output.

    Parameters
    ----------
    path : str or path
        A pair-summary TSV (:func:`read_pair_summary`), a ``_pairs.h5`` store
        (its ``summary/<stat>`` datasets, else computed from ``courses``) or
        a ``_dfc.h5`` store (each pair's windowed correlations summarised).

    Returns
    -------
    dict
        As :func:`read_pair_summary`: ``i``, ``j``, ``label_i``, ``label_j``
        and the statistics (``mean``, ``std``, and ``fraction_above`` when
        the file has a threshold).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No such pair-summary file: {str(path)!r}.")
    kind = file_kind(path)
    if kind == "pairs":
        return _read_pairs_h5(path)
    if kind == "dfc":
        return _read_dfc_h5(path)
    if kind == "pair_summary":
        return read_pair_summary(path)
    raise ValueError(f"{str(path)!r} holds a connectivity matrix, not pair summaries.")


def fisher_z(r: npt.ArrayLike) -> np.ndarray:
    """Fisher's z transform, ``arctanh(r)``, of correlations.

    Values are clipped to ``[-1 + 1e-7, 1 - 1e-7]`` first so that perfect
    correlations map to a large finite z (about ±8.4) rather than infinity.
    NaN stays NaN. Values outside [-1, 1] are not correlations: ValueError.

    Parameters
    ----------
    r : array-like
        Correlations in [-1, 1].

    Returns
    -------
    ndarray, float64
        The same shape as ``r``.

    Examples
    --------
    >>> from connscale.classify import fisher_z
    >>> fisher_z([0.0, 0.5, 1.0, float("nan")]).round(3)
    array([0.   , 0.549, 8.406,   nan])
    """
    r = np.asarray(r, dtype=np.float64)
    finite = r[np.isfinite(r)]
    if finite.size and (finite.max() > 1.0 + 1e-6 or finite.min() < -1.0 - 1e-6):
        raise ValueError(
            "Fisher z applies to correlations in [-1, 1]; got values in "
            f"[{finite.min():.4g}, {finite.max():.4g}] (LiFE weights or other "
            "non-correlation features should be used without --fisher-z)."
        )
    return np.arctanh(np.clip(r, -1.0 + FISHER_Z_EPS, 1.0 - FISHER_Z_EPS))


# --------------------------------------------------------------------------
# Cohorts
# --------------------------------------------------------------------------


def _check_paths(paths: str | Path | Iterable[str | os.PathLike]) -> tuple[list[Path], list[str]]:
    if isinstance(paths, (str, Path)):
        paths = [paths]
    paths = [Path(p) for p in paths]
    if not paths:
        raise ValueError("No feature files given.")
    subjects = [subject_id_from_path(p.name) for p in paths]
    seen = {}
    for subject, path in zip(subjects, paths):
        if subject in seen:
            raise ValueError(
                f"Subject 'sub-{subject}' appears twice: {str(seen[subject])!r} and "
                f"{str(path)!r}. Give one feature file per subject."
            )
        seen[subject] = path
    return paths, subjects


def _check_finite(X: np.ndarray, subjects: list) -> None:
    bad = ~np.isfinite(X)
    if bad.any():
        rows = np.flatnonzero(bad.any(axis=1))
        listing = ", ".join(f"sub-{subjects[r]} ({int(bad[r].sum())})" for r in rows[:5])
        raise ValueError(
            f"{int(bad.sum())} feature value(s) are NaN or infinite, in subjects "
            f"{listing}{' ...' if rows.size > 5 else ''}. Constant series give "
            "undefined correlations: drop those regions or subjects first."
        )


def load_connectome_features(
    paths: str | Path | Iterable[str | os.PathLike],
    *,
    fisher_z_transform: bool = False,
    region_labels: Sequence[str] | None = None,
) -> FeatureSet:
    """Stack the upper triangles of one connectome file per subject.

    Parameters
    ----------
    paths : sequence of str or path
        One ``.npy`` / ``_relmat.tsv`` / ``_relmat.h5`` per subject; the
        subject is parsed from ``sub-<label>`` in each file name.
    fisher_z_transform : bool, default=False
        Apply :func:`fisher_z` (for correlations only).
    region_labels : sequence of str or None
        Region names; by default those in the files, else ``region_<k>``.

    Returns
    -------
    FeatureSet
        One feature per region pair (``statistic == "edge"``).

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> tmp = tempfile.TemporaryDirectory()
    >>> paths = [Path(tmp.name) / f"sub-0{s}_relmat.npy" for s in (1, 2, 3, 4)]
    >>> for path in paths:
    ...     np.save(path, np.corrcoef(rng.standard_normal((4, 30))))
    >>> from connscale.classify import load_connectome_features
    >>> features = load_connectome_features(paths, region_labels=["A", "B", "C", "D"])
    >>> features.X.shape, features.feature_names[:2]
    ((4, 6), ['A--B', 'A--C'])
    >>> tmp.cleanup()
    """
    paths, subjects = _check_paths(paths)
    vectors, file_labels = [], None
    for path in paths:
        vector, labels = read_relmat(path)
        if vectors and vector.size != vectors[0].size:
            raise ValueError(
                "All subjects must have the same number of regions; "
                f"{str(paths[0])!r} has {n_from_pairs(vectors[0].size, source='')} and "
                f"{str(path)!r} has {n_from_pairs(vector.size, source=str(path))}."
            )
        if labels is not None:
            if file_labels is None:
                file_labels = labels
            elif list(labels) != list(file_labels):
                raise ValueError(
                    f"{str(path)!r} has other region labels than the files before it; "
                    "all subjects must use the same atlas in the same order."
                )
        vectors.append(vector)
    X = np.vstack(vectors)
    n = n_from_pairs(X.shape[1], source=str(paths[0]))
    if n < 2:
        raise ValueError("Connectomes need at least 2 regions.")
    labels = _region_labels(region_labels if region_labels is not None else file_labels, n)
    if fisher_z_transform:
        X = fisher_z(X)
    _check_finite(X, subjects)
    i, j = triu_pairs(np.arange(X.shape[1]), n)
    return FeatureSet(
        X=X,
        subjects=subjects,
        pair_i=np.asarray(i),
        pair_j=np.asarray(j),
        statistic=["edge"] * X.shape[1],
        region_labels=labels,
        files=[str(p) for p in paths],
    )


def _region_labels(labels: Sequence | None, n: int) -> list:
    if labels is None:
        return [f"region_{k}" for k in range(n)]
    labels = [str(label) for label in labels]
    if len(labels) != n:
        raise ValueError(f"Expected {n} region labels; got {len(labels)}.")
    return labels


def load_pair_features(
    paths: str | Path | Iterable[str | os.PathLike],
    *,
    statistics: Sequence[str] = ("mean", "std"),
    fisher_z_transform: bool = False,
) -> FeatureSet:
    """Stack the DFC pair summaries (``connscale pairs``) of many subjects.

    Parameters
    ----------
    paths : sequence of str or path
        One pair-level file per subject: summary TSV, ``_pairs.h5`` or
        ``_dfc.h5`` (see :func:`read_pair_file`); kinds may be mixed when
        they list the same pairs.
    statistics : sequence of {'mean', 'std', 'fraction_above'}, default=('mean', 'std')
        Which summaries become features (all must be in every file).
    fisher_z_transform : bool, default=False
        Apply :func:`fisher_z` to the ``mean`` column (the mean windowed
        correlation); the other statistics are left as they are.

    Returns
    -------
    FeatureSet
        Features ordered statistic by statistic, pairs in file order.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> import numpy as np
    >>> from connscale import pair_summary, pairwise_dfc
    >>> from connscale.io.pairs import write_pair_summary
    >>> x = np.random.default_rng(0).standard_normal((3, 40, 3))  # 3 subjects, 3 regions
    >>> dfc = pairwise_dfc(x, 10, 5, device="cpu")
    >>> summary = pair_summary(dfc)
    >>> tmp = tempfile.TemporaryDirectory()
    >>> paths = [write_pair_summary(Path(tmp.name) / f"sub-0{s + 1}_pairs.tsv", pairs=dfc.pairs,
    ...                             labels=["V1", "M1", "PCC"], threshold=0.5,
    ...                             summary={"mean": summary.mean[s], "std": summary.std[s],
    ...                                      "fraction_above": summary.fraction_above[s]})
    ...          for s in range(3)]
    >>> from connscale.classify import load_pair_features
    >>> features = load_pair_features(paths, statistics=["mean"])
    >>> features.X.shape, features.feature_names
    ((3, 3), ['mean:V1--M1', 'mean:V1--PCC', 'mean:M1--PCC'])
    >>> tmp.cleanup()
    """
    paths, subjects = _check_paths(paths)
    statistics = list(statistics)
    for stat in statistics:
        if stat not in PAIR_STATISTICS:
            raise ValueError(f"'statistics' must be among {list(PAIR_STATISTICS)}; got {stat!r}.")
    if not statistics:
        raise ValueError("'statistics' must name at least one summary.")
    reference, rows = None, []
    for path in paths:
        summary = read_pair_file(path)
        absent = [s for s in statistics if s not in summary]
        if absent:
            raise ValueError(f"{str(path)!r} has no column(s) {absent}.")
        if reference is None:
            reference = summary
        elif not np.array_equal(summary["i"], reference["i"]) or not np.array_equal(
            summary["j"], reference["j"]
        ):
            raise ValueError(
                f"{str(path)!r} lists other region pairs than {str(paths[0])!r}; "
                "all subjects must have the same pairs in the same order."
            )
        parts = []
        for stat in statistics:
            values = summary[stat]
            if fisher_z_transform and stat == "mean":
                values = fisher_z(values)
            parts.append(values)
        rows.append(np.concatenate(parts))
    X = np.vstack(rows)
    _check_finite(X, subjects)
    n = int(max(reference["j"].max(), reference["i"].max())) + 1
    labels = [f"region_{k}" for k in range(n)]
    for i, j, li, lj in zip(
        reference["i"], reference["j"], reference["label_i"], reference["label_j"]
    ):
        labels[i], labels[j] = li, lj
    n_p = reference["i"].size
    return FeatureSet(
        X=X,
        subjects=subjects,
        pair_i=np.tile(reference["i"], len(statistics)),
        pair_j=np.tile(reference["j"], len(statistics)),
        statistic=[s for s in statistics for _ in range(n_p)],
        region_labels=labels,
        files=[str(p) for p in paths],
    )


def load_feature_table(path: str | os.PathLike) -> FeatureSet:
    r"""Load the group feature table of ``connscale bids`` (group level) as a FeatureSet.

    Parameters
    ----------
    path : str or path
        ``group/seg-<atlas>_meas-PearsonCorrelation_desc-<strategy>_features.tsv``:
        one row per participant (``participant_id``), one column per
        feature. Columns ``<name_i>|<name_j>`` are Fisher-z edges,
        ``<name_i>|<name_j>:dfc_mean`` (``:dfc_std``) DFC summaries of that
        pair; the other columns (state features, voxel maps) are no pair.

    Returns
    -------
    FeatureSet
        ``names`` the table's columns; ``files`` the table, once per row.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from connscale.classify import load_feature_table
    >>> table = ("participant_id\tV1|M1\tV1|M1:dfc_mean\tfd\n"
    ...          "sub-01\t0.5\t0.4\t0.1\nsub-02\t0.2\t0.3\t0.2\n")
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = Path(tmp) / "seg-toy_meas-PearsonCorrelation_desc-36P_features.tsv"
    ...     _ = path.write_text(table)
    ...     features = load_feature_table(path)
    >>> features.subjects, features.statistic, features.region_labels
    (['01', '02'], ['edge', 'dfc_mean', 'other'], ['V1', 'M1'])
    """
    path = Path(path)
    subjects, X, names = read_feature_table(path)
    _check_finite(X, subjects)
    regions: dict[str, int] = {}
    pair_i, pair_j, statistic = [], [], []
    for name in names:
        pair, _, stat = name.partition(":")
        ends = pair.split("|")
        if len(ends) == 2 and all(ends) and (not stat or stat.startswith("dfc_")):
            i, j = (regions.setdefault(end, len(regions)) for end in ends)
            statistic.append(stat or "edge")
        else:
            i = j = -1
            statistic.append("other")
        pair_i.append(i)
        pair_j.append(j)
    return FeatureSet(
        X=X,
        subjects=subjects,
        pair_i=np.asarray(pair_i, dtype=np.int64),
        pair_j=np.asarray(pair_j, dtype=np.int64),
        statistic=statistic,
        region_labels=list(regions),
        files=[str(path)] * len(subjects),
        names=list(names),
    )


def load_features(
    paths: str | Path | Iterable[str | os.PathLike],
    *,
    fisher_z_transform: bool = False,
    statistics: Sequence[str] = ("mean", "std"),
) -> FeatureSet:
    """Load connectomes or DFC pair summaries, whichever the files are.

    A ``.tsv`` whose header has ``i``, ``j``, ``label_i``, ``label_j``, a
    ``_pairs.h5`` and a ``_dfc.h5`` store are pair-level
    (:func:`load_pair_features`); matrices (``.npy``, ``_relmat.tsv``,
    ``_relmat.h5``) go to :func:`load_connectome_features`. All files must
    be matrices, or all pair-level (see :func:`file_kind`). A group feature
    table (``participant_id`` first in its header) holds the whole cohort:
    it is given alone, without Fisher z (its edges are Fisher z already) and
    read by :func:`load_feature_table`.

    Parameters
    ----------
    paths : str, path or iterable of them
        One file per subject (``sub-<label>`` in each name), or one group feature table.
    fisher_z_transform : bool, default=False
        Apply :func:`fisher_z` to the correlations (not to a group feature table).
    statistics : sequence of str, default=('mean', 'std')
        Pair-level files: the summary statistics kept (``'mean'``, ``'std'``,
        ``'fraction_above'``).

    Returns
    -------
    FeatureSet
        One row per subject.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> import numpy as np
    >>> import connscale
    >>> rng = np.random.default_rng(0)
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     paths = []
    ...     for subject in ("01", "02", "03"):
    ...         r = np.corrcoef(rng.standard_normal((4, 30)))
    ...         paths.append(Path(tmp) / f"sub-{subject}_relmat.npy")
    ...         np.save(paths[-1], r)
    ...     features = connscale.load_features(paths, fisher_z_transform=True)
    >>> features.X.shape, features.subjects
    ((3, 6), ['01', '02', '03'])
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    paths = [Path(p) for p in paths]
    if not paths:
        raise ValueError("No feature files given.")
    for path in paths:
        if not path.is_file():
            raise FileNotFoundError(f"No such feature file: {str(path)!r}.")
    found = [file_kind(p) for p in paths]
    if "feature_table" in found:
        table = paths[found.index("feature_table")]
        if len(paths) > 1:
            raise ValueError(
                f"{str(table)!r} is a group feature table (the whole cohort); give it alone, "
                f"not with {len(paths) - 1} other file(s)."
            )
        if fisher_z_transform:
            raise ValueError(
                f"{str(table)!r} is a group feature table, its edges Fisher z already; "
                "load it without the Fisher z transform."
            )
        return load_feature_table(table)
    kinds = {kind != "relmat" for kind in found}
    if len(kinds) > 1:
        raise ValueError(
            "The feature files mix DFC pair summaries and connectome matrices; "
            "give files of one kind."
        )
    if kinds.pop():
        return load_pair_features(
            paths, statistics=statistics, fisher_z_transform=fisher_z_transform
        )
    return load_connectome_features(paths, fisher_z_transform=fisher_z_transform)


# --------------------------------------------------------------------------
# Labels
# --------------------------------------------------------------------------


def align_labels(
    features: FeatureSet,
    participants: str | os.PathLike | dict,
    *,
    label: str,
    classes: Sequence[str] | None = None,
) -> FeatureSet:
    """Attach the labels of ``participants`` to ``features`` (in its row order).

    Parameters
    ----------
    features : FeatureSet
    participants : str, path or dict
        A participants TSV (see :func:`read_participants`) or a ready
        mapping subject -> label.
    label : str
        Column name (used for the TSV and in messages).
    classes : sequence of two str or None
        ``(negative, positive)`` label values; by default the two values
        found, sorted (so ``"control" < "patient"`` makes patients positive).

    Returns
    -------
    FeatureSet
        A copy with ``y`` (int: 0 negative, 1 positive) and
        ``y_classes == [negative, positive]``.

    Examples
    --------
    >>> import numpy as np
    >>> from connscale.classify import FeatureSet
    >>> features = FeatureSet(X=np.arange(6.0).reshape(2, 3), subjects=["01", "02"],
    ...                       pair_i=np.array([0, 0, 1]), pair_j=np.array([1, 2, 2]),
    ...                       statistic=["edge"] * 3, region_labels=["V1", "M1", "PCC"])
    >>> from connscale.classify import align_labels
    >>> labelled = align_labels(features, {"01": "patient", "02": "control"}, label="group")
    >>> labelled.y.tolist(), labelled.y_classes
    ([1, 0], ['control', 'patient'])
    """
    mapping = (
        participants
        if isinstance(participants, dict)
        else read_participants(participants, label=label)
    )
    missing = [s for s in features.subjects if s not in mapping]
    if missing:
        listing = ", ".join(f"sub-{s}" for s in missing[:10])
        raise ValueError(
            f"{len(missing)} subject(s) with features have no {label!r} value in the "
            f"participants table: {listing}{' ...' if len(missing) > 10 else ''}."
        )
    values = [str(mapping[s]) for s in features.subjects]
    found = sorted(set(values))
    if classes is None:
        if len(found) != 2:
            raise ValueError(
                f"Column {label!r} must have exactly two classes among the subjects "
                f"with features; got {len(found)}: {found[:10]}."
            )
        classes = found
    else:
        classes = [str(c) for c in classes]
        if len(classes) != 2:
            raise ValueError(f"'classes' must name two values; got {classes}.")
        extra = sorted(set(found) - set(classes))
        if extra:
            raise ValueError(f"Column {label!r} has values {extra} outside {classes}.")
        if len(set(values)) != 2:
            raise ValueError(
                f"Column {label!r} must have both classes {classes} among the subjects "
                f"with features; got only {found}."
            )
    y = np.array([classes.index(v) for v in values], dtype=np.int64)
    out = features.subset(np.arange(len(features.subjects)))
    out.y = y
    out.y_classes = list(classes)
    return out
