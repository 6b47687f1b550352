"""Region-pair DFC outputs.

The ``_pairs.h5`` store, its NPY + TSV variant, the pair-summary TSV and the
cohort's pair-feature table.

``connscale pairs`` names them as BIDS derivatives, per input in
``sub-<s>/[ses-<t>/]func/`` (``<source>`` its entities, see
:mod:`connscale.io.bids`)::

    <source>_meas-PearsonCorrelation_pairs.h5     the store (or, --format npy:
    <source>_meas-PearsonCorrelation_pairs.npy    the courses and
    <source>_meas-PearsonCorrelation_windows.tsv  the windows)
    <source>_meas-PearsonCorrelation_pairs.tsv    the pair summary
    <source>_meas-PearsonCorrelation_pairs.json   the sidecar

and the feature table of all inputs at the output root
(``[<common entities>_]meas-PearsonCorrelation_features.tsv``). Readers
recognise each file by its content, not its name.

``_pairs.h5`` (``connscale pairs``, ``connscale cohort --job pairs``,
``connscale bids --measures pairs``; readable with h5py alone)::

    courses          (n_pairs, n_windows)  windowed correlation of each pair
    pairs            (n_pairs, 2) int64    regions (i, j), i < j, row-major
    window_onsets    (n_windows,) int64    first time point of each window
    summary/mean, summary/std, summary/fraction_above   (n_pairs,)
    labels           (n_regions,) str      (when the regions have names)
    ...              any further datasets of the caller (kept volumes...)

Root attributes: ``window_length``, ``step``, ``threshold`` (of
``fraction_above``), ``order``, ``n_constant`` (when known), the caller's
(``source``...), and ``complete``, set last once the data are flushed; the
file is written under a temporary name and renamed when it closed without
error.

The pair-summary TSV has one row per pair: ``pair``, ``i``, ``j``,
``label_i``, ``label_j``, ``mean``, ``std``, ``fraction_above_<threshold>``
(``n/a`` for undefined values).
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from connscale._choices import PAIR_STATISTICS
from connscale.io.atomic import atomic_path, write_text_atomic
from connscale.io.h5 import close_h5, create_h5, flush_h5, h5_errors
from connscale.io.publish import check_published

__all__ = [
    "PAIR_STATISTICS",
    "is_pair_summary",
    "read_pair_summary",
    "read_pairs_h5",
    "write_pair_features",
    "write_pair_summary",
    "write_pairs_h5",
    "write_pairs_npy",
]

_ORDER = "row-major strictly-upper"


def write_pairs_h5(
    path: str | os.PathLike,
    *,
    courses: np.ndarray,
    pairs: np.ndarray,
    window_onsets: np.ndarray,
    window_length: int,
    step: int,
    summary: Mapping[str, np.ndarray],
    threshold: float,
    labels: Sequence[str] | None = None,
    n_constant: int | None = None,
    datasets: Mapping[str, np.ndarray] | None = None,
    attrs: Mapping[str, object] | None = None,
) -> Path:
    """Write one scan's ``_pairs.h5`` store, atomically.

    Parameters
    ----------
    path : str or path
        The store; replaced only once the new one is complete.
    courses : ndarray of shape (n_pairs, n_windows)
    pairs : ndarray of shape (n_pairs, 2)
    window_onsets : ndarray of shape (n_windows,)
    window_length, step : int
    summary : mapping
        ``mean``, ``std`` and ``fraction_above``, each of shape (n_pairs,).
    threshold : float
        The threshold of ``fraction_above``.
    labels : sequence of str or None
        Region names.
    n_constant : int or None
        Constant (window, region) series of the scan; left out when unknown.
    datasets : mapping or None
        Further datasets (object arrays are stored as strings).
    attrs : mapping or None
        Further root attributes.

    Returns
    -------
    Path
    """
    import h5py

    missing = [s for s in PAIR_STATISTICS if s not in summary]
    if missing:
        raise ValueError(f"A _pairs.h5 summary needs {list(PAIR_STATISTICS)}; missing {missing}.")
    arrays = {
        "courses": courses,
        "pairs": pairs,
        "window_onsets": window_onsets,
        **{f"summary/{s}": summary[s] for s in PAIR_STATISTICS},
    }
    if labels is not None:
        arrays["labels"] = np.asarray(labels, dtype=object)
    arrays.update(datasets or {})
    root = {
        "window_length": int(window_length),
        "step": int(step),
        "threshold": float(threshold),
        "order": _ORDER,
    }
    if n_constant is not None:
        root["n_constant"] = int(n_constant)
    root.update(attrs or {})
    path = Path(path)
    with atomic_path(path) as tmp:
        h5 = create_h5(tmp, overwrite_own=True)
        try:
            with h5_errors(path):
                for key, value in arrays.items():
                    value = np.asarray(value)
                    kind = {"dtype": h5py.string_dtype()} if value.dtype == object else {}
                    h5.create_dataset(key, data=value, track_times=False, **kind)
                h5.attrs.update(root)
            flush_h5(h5, path)
            with h5_errors(path):
                h5.attrs["complete"] = True  # last, once the data are written
        finally:
            close_h5(h5, path)
    return path


def read_pairs_h5(path: str | os.PathLike, *, courses: bool = True) -> dict:
    """Read a ``_pairs.h5`` store (:func:`write_pairs_h5`).

    Parameters
    ----------
    path : str or path
    courses : bool, default=True
        Read the (n_pairs, n_windows) courses too.

    Returns
    -------
    dict
        ``pairs``, ``window_onsets`` (None when absent), ``labels`` (list of
        str or None), ``summary`` (dict of the statistics stored; empty for
        a store written before summaries were stored), ``attrs`` (root
        attributes) and, with ``courses=True``, ``courses``.

    Raises
    ------
    ValueError
        When a dataset is missing, or the store is flagged incomplete.
    """
    import h5py

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No _pairs.h5 store at {str(path)!r}.")
    check_published(path)
    with h5py.File(path, "r") as h5:
        missing = [k for k in ("courses", "pairs") if k not in h5]
        if missing:
            raise ValueError(
                f"{str(path)!r}: a _pairs.h5 store needs datasets 'courses' and "
                f"'pairs'; found {sorted(h5.keys())}."
            )
        attrs = dict(h5.attrs)
        if not attrs.get("complete", True):
            raise ValueError(f"{path} is incomplete (the run that wrote it did not finish).")
        out = {
            "pairs": h5["pairs"][()],
            "window_onsets": h5["window_onsets"][()] if "window_onsets" in h5 else None,
            "labels": list(h5["labels"].asstr()[()]) if "labels" in h5 else None,
            "summary": {
                s: h5["summary"][s][()]
                for s in PAIR_STATISTICS
                if "summary" in h5 and s in h5["summary"]
            },
            "attrs": attrs,
        }
        if courses:
            out["courses"] = h5["courses"][()]
    return out


def _tsv(rows: list[list], header: list[str]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter="\t", lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


def _fmt(value: float) -> str:
    return "n/a" if not np.isfinite(value) else repr(float(value))


def _pair_rows(pairs: np.ndarray, labels: Sequence[str]) -> list[list]:
    return [[k, int(i), int(j), labels[i], labels[j]] for k, (i, j) in enumerate(pairs)]


def write_pairs_npy(
    courses_path: str | os.PathLike,
    windows_path: str | os.PathLike,
    *,
    courses: np.ndarray,
    window_onsets: np.ndarray,
    window_length: int,
) -> None:
    """Write the NPY + TSV variant of a ``_pairs.h5`` store, each file atomically.

    ``courses_path`` gets the (n_pairs, n_windows) courses (``.npy``),
    ``windows_path`` the windows (``window``, ``onset``, ``end``). The pairs
    (``pair``, ``i``, ``j``, ``label_i``, ``label_j``) are the first columns
    of the pair summary (:func:`write_pair_summary`).
    """
    with atomic_path(courses_path) as tmp, open(tmp, "wb") as fh:
        np.save(fh, courses)
    write_text_atomic(
        windows_path,
        _tsv(
            [[k, int(o), int(o) + window_length] for k, o in enumerate(window_onsets)],
            ["window", "onset", "end"],
        ),
    )


def write_pair_summary(
    path: str | os.PathLike,
    *,
    pairs: np.ndarray,
    labels: Sequence[str],
    summary: Mapping[str, np.ndarray],
    threshold: float,
) -> Path:
    """One scan's pair-summary TSV (see the module docstring), atomically."""
    rows = [
        row + [_fmt(summary[s][k]) for s in PAIR_STATISTICS]
        for k, row in enumerate(_pair_rows(pairs, labels))
    ]
    return write_text_atomic(
        path,
        _tsv(
            rows,
            ["pair", "i", "j", "label_i", "label_j", "mean", "std", f"fraction_above_{threshold}"],
        ),
    )


def write_pair_features(
    path: str | os.PathLike, *, scans: Sequence[str], features: np.ndarray, names: Sequence[str]
) -> Path:
    """Write the feature table of many scans: column ``scan``, then one column per feature."""
    rows = [[scan] + [_fmt(v) for v in row] for scan, row in zip(scans, features)]
    return write_text_atomic(path, _tsv(rows, ["scan", *names]))


def is_pair_summary(path: str | os.PathLike) -> bool:
    """Return whether ``path`` is a pair-summary TSV.

    That is, a TSV whose header names ``i``, ``j``, ``label_i`` and ``label_j``.
    """
    path = Path(path)
    if not path.name.lower().endswith(".tsv"):
        return False
    with open(path, newline="") as handle:
        header = handle.readline().rstrip("\r\n").split("\t")
    return {"i", "j", "label_i", "label_j"} <= set(header)


def read_pair_summary(path: str | os.PathLike) -> dict:
    """Read a pair-summary TSV (:func:`write_pair_summary`, or another tool's).

    Parameters
    ----------
    path : str or path
        TSV with columns ``i``, ``j``, ``label_i``, ``label_j`` and at least
        one of ``mean``, ``std``, ``fraction_above`` (or
        ``fraction_above_<threshold>``, as :func:`write_pair_summary` names
        it), one row per pair; other columns (``pair``) are ignored.

    Returns
    -------
    dict
        ``"i"``, ``"j"`` (int64 arrays), ``"label_i"``, ``"label_j"`` (lists)
        and one float64 array per statistic present.

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
    >>> from connscale.classify import read_pair_summary
    >>> table = read_pair_summary(paths[0])
    >>> table["label_i"], table["j"].tolist(), table["mean"].shape
    (['V1', 'V1', 'M1'], [1, 2, 2], (3,))
    >>> tmp.cleanup()
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No such pair-summary file: {str(path)!r}.")
    check_published(path)  # not a file of a half-replaced 'connscale pairs' set
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle, delimiter="\t")
        columns, rows = list(reader.fieldnames or []), list(reader)
    # The fraction-above column is named after its threshold; read it as
    # ``fraction_above``.
    renamed = {
        c: "fraction_above"
        for c in columns
        if c.startswith("fraction_above_") and "fraction_above" not in columns
    }
    if len(renamed) > 1:
        raise ValueError(f"{str(path)!r}: several fraction-above columns {sorted(renamed)}.")
    if renamed:
        ((old, new),) = renamed.items()
        columns = [new if c == old else c for c in columns]
        for row in rows:
            row[new] = row.pop(old)
    missing = [c for c in ("i", "j", "label_i", "label_j") if c not in columns]
    stats = [c for c in PAIR_STATISTICS if c in columns]
    if missing or not stats:
        raise ValueError(
            f"{str(path)!r}: a pair summary needs columns i, j, label_i, label_j and "
            f"any of {list(PAIR_STATISTICS)}; got columns {columns}."
        )
    if not rows:
        raise ValueError(f"{str(path)!r} has no pairs.")
    try:
        out = {
            "i": np.array([int(r["i"]) for r in rows], dtype=np.int64),
            "j": np.array([int(r["j"]) for r in rows], dtype=np.int64),
            "label_i": [r["label_i"] for r in rows],
            "label_j": [r["label_j"] for r in rows],
        }
        for stat in stats:
            out[stat] = np.array(
                [float(r[stat]) if r[stat] not in ("", "n/a") else np.nan for r in rows]
            )
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{str(path)!r}: malformed value ({exc}).") from None
    if np.any(out["i"] >= out["j"]) or np.any(out["i"] < 0):
        raise ValueError(f"{str(path)!r}: every pair must have 0 <= i < j.")
    return out
