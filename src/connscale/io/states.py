"""The tables of a DFC-states run (``connscale dfc-states``), written atomically.

``<source>_dfcstates.tsv``: one row per window (``window``, ``onset``,
``onset_s`` when the repetition time is known, ``state`` counted from 1);
``dfcstates_features.tsv``: one row per subject (``subject``, then one
column per feature). The state matrices are relmat files
(:mod:`connscale.io.relmat`, :func:`connscale.io.hdf5.write_relmat_h5`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from connscale.io.atomic import write_text_atomic

__all__ = [
    "read_state_features",
    "read_state_sequence",
    "write_state_features",
    "write_state_sequence",
]

# The first column of a feature table: the subject, or the run's source entities.
_ID_COLUMNS = ("subject", "source")


def write_state_sequence(
    path: str | os.PathLike, *, starts: np.ndarray, states: np.ndarray, t_r: float | None = None
) -> Path:
    """Write the state of each window of one run (``states`` counted from 0)."""
    header = ["window", "onset"] + (["onset_s"] if t_r else []) + ["state"]
    lines = ["\t".join(header)]
    for i, (start, state) in enumerate(zip(starts, states)):
        row = [str(i), str(int(start))]
        if t_r:
            row.append(f"{start * t_r:.6g}")
        lines.append("\t".join(row + [str(int(state) + 1)]))
    return write_text_atomic(path, "\n".join(lines) + "\n")


def write_state_features(
    path: str | os.PathLike,
    *,
    subjects: Sequence[str],
    X: np.ndarray,
    names: Sequence[str],
    digits: int = 6,
    id_column: str = "subject",
) -> Path:
    """Write the state features of each subject (fractions, dwell times...).

    Values are written to ``digits`` significant digits; ``id_column`` names the first
    column, which names the rows (``'source'`` in a run's table of the BIDS-App:
    ``subject`` is a BIDS entity).
    """
    if id_column not in _ID_COLUMNS:
        raise ValueError(f"id_column must be one of {_ID_COLUMNS}; got {id_column!r}.")
    lines = ["\t".join([id_column, *names])]
    for subject, row in zip(subjects, X):
        lines.append("\t".join([subject] + [f"{v:.{digits}g}" for v in row]))
    return write_text_atomic(path, "\n".join(lines) + "\n")


def read_state_sequence(path: str | os.PathLike) -> dict:
    """Read a table of :func:`write_state_sequence` back.

    Returns a dict of ``onset`` (int array), ``onset_s`` (float array, or None without
    it) and ``states`` (counted from 0).
    """
    columns, rows = _read_table(path)
    for needed in ("onset", "state"):
        if needed not in columns:
            raise ValueError(f"{path}: expected a '{needed}' column; got {columns}.")
    return {
        "onset": np.array([int(r["onset"]) for r in rows], dtype=np.int64),
        "onset_s": (
            np.array([float(r["onset_s"]) for r in rows]) if "onset_s" in columns else None
        ),
        "states": np.array([int(r["state"]) - 1 for r in rows], dtype=np.int64),
    }


def read_state_features(path: str | os.PathLike) -> tuple[list[str], np.ndarray, list[str]]:
    """Read a table of :func:`write_state_features` back: subjects, X and feature names."""
    columns, rows = _read_table(path)
    if not columns or columns[0] not in _ID_COLUMNS:
        raise ValueError(
            f"{path}: expected {' or '.join(map(repr, _ID_COLUMNS))} as the first column; "
            f"got {columns[:3]}."
        )
    names = columns[1:]
    X = np.array([[float(r[n]) for n in names] for r in rows], dtype=np.float64)
    return [r[columns[0]] for r in rows], X.reshape(len(rows), len(names)), names


def _read_table(path: str | os.PathLike) -> tuple[list[str], list[dict]]:
    import csv

    with open(path, newline="") as fh:
        reader = csv.DictReader(fh, delimiter="\t")
        return list(reader.fieldnames or []), list(reader)
