"""The group feature table of the BIDS-App (``..._features.tsv`` in ``group/``).

One row per participant, one column per feature: a header
``participant_id<TAB><name>...``, then ``sub-<label><TAB><value>...``
(``n/a`` or an empty cell reads as NaN).
"""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from connscale.io.atomic import write_text_atomic

__all__ = ["is_feature_table", "read_feature_table", "write_feature_table"]

_ID = "participant_id"


def write_feature_table(
    path: str | os.PathLike,
    subjects: Sequence[str],
    X: np.ndarray,
    names: Sequence[str],
    *,
    digits: int = 8,
) -> Path:
    """Write the table atomically; ``subjects`` are labels without ``sub-``."""
    X = np.asarray(X, dtype=np.float64)
    if X.shape != (len(subjects), len(names)):
        raise ValueError(
            f"Expected a ({len(subjects)}, {len(names)}) feature matrix; got shape {X.shape}."
        )
    lines = ["\t".join([_ID, *names])]
    for subject, row in zip(subjects, X):
        lines.append(f"sub-{subject}\t" + "\t".join(f"{v:.{digits}g}" for v in row))
    return write_text_atomic(path, "\n".join(lines) + "\n")


def is_feature_table(path: str | os.PathLike) -> bool:
    """Whether a TSV's first header cell is ``participant_id``."""
    try:
        with open(path, newline="") as handle:
            first = handle.readline()
    except (OSError, UnicodeDecodeError):
        return False
    return first.split("\t", 1)[0].strip() == _ID


def read_feature_table(path: str | os.PathLike) -> tuple[list[str], np.ndarray, list[str]]:
    """Read a table of :func:`write_feature_table` back.

    Returns
    -------
    subjects : list of str
        Participant labels, without ``sub-``.
    X : ndarray of shape (n_subjects, n_features), float64
    names : list of str
        The feature columns.

    Raises
    ------
    ValueError
        One line naming the file (and the row or column) for a table that is
        not of this form.
    """
    path = Path(path)
    try:
        with open(path, newline="") as handle:
            rows = [row for row in csv.reader(handle, delimiter="\t") if row]
    except UnicodeDecodeError as exc:
        raise ValueError(f"{str(path)!r} is not a text table ({exc.reason}).") from None
    if not rows or rows[0][0] != _ID:
        raise ValueError(f"{str(path)!r}: expected {_ID!r} as the first column of the header.")
    names, body = rows[0][1:], rows[1:]
    if not names or not body:
        raise ValueError(
            f"{str(path)!r}: a feature table needs at least one feature column and one "
            f"participant row; got {len(names)} and {len(body)}."
        )
    subjects, values = [], np.empty((len(body), len(names)))
    for r, row in enumerate(body, start=2):
        if len(row) != len(names) + 1:
            raise ValueError(
                f"{str(path)!r}, row {r}: expected {len(names) + 1} cells; got {len(row)}."
            )
        subject = row[0].removeprefix("sub-")
        if not subject or subject in subjects:
            raise ValueError(f"{str(path)!r}, row {r}: empty or repeated {_ID} {row[0]!r}.")
        subjects.append(subject)
        for c, cell in enumerate(row[1:]):
            try:
                values[r - 2, c] = np.nan if cell in ("", "n/a") else float(cell)
            except ValueError:
                raise ValueError(
                    f"{str(path)!r}, row {r}, column {names[c]!r}: not a number ({cell!r})."
                ) from None
    return subjects, values, names
