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

from connscale.io._atomic import write_text_atomic

__all__ = ["write_state_features", "write_state_sequence"]


def write_state_sequence(
    path: str | os.PathLike, *, starts: np.ndarray, states: np.ndarray, t_r: float | None = None
) -> Path:
    """The state of each window of one run (``states`` counted from 0)."""
    header = ["window", "onset"] + (["onset_s"] if t_r else []) + ["state"]
    lines = ["\t".join(header)]
    for i, (start, state) in enumerate(zip(starts, states)):
        row = [str(i), str(int(start))]
        if t_r:
            row.append(f"{start * t_r:.6g}")
        lines.append("\t".join(row + [str(int(state) + 1)]))
    return write_text_atomic(path, "\n".join(lines) + "\n")


def write_state_features(
    path: str | os.PathLike, *, subjects: Sequence[str], X: np.ndarray, names: Sequence[str]
) -> Path:
    """The state features of each subject (fractions, dwell times...)."""
    lines = ["\t".join(["subject", *names])]
    for subject, row in zip(subjects, X):
        lines.append("\t".join([subject] + [f"{v:.6g}" for v in row]))
    return write_text_atomic(path, "\n".join(lines) + "\n")
