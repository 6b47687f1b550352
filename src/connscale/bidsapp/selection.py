"""The participants of one call: a participants file and an array job's index.

An array job (SLURM's ``--array``) runs one call per participant of a file,
or per K of them: :func:`select_participants` reads the file (BIDS
``participants.tsv``, its ``participant_id`` column, or a plain list, one
label per line) and keeps the participants of the task's index
(``--array-index``, by default ``$SLURM_ARRAY_TASK_ID``, counted from 0):
task i takes the file's participants i·K to i·K + K − 1 in its order
(``--participants-per-task K``, default 1).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["ARRAY_INDEX_VARIABLE", "read_participants_file", "select_participants"]

#: The environment variable that gives ``array_index`` its default.
ARRAY_INDEX_VARIABLE = "SLURM_ARRAY_TASK_ID"


def read_participants_file(path: str | os.PathLike) -> list[str]:
    """Return the labels of a participants file, in its order, without ``sub-``.

    A file whose first line has a tab is a table (BIDS ``participants.tsv``)
    and the labels are its ``participant_id`` column; any other file lists
    one label per line. Blank lines are skipped.

    Raises
    ------
    FileNotFoundError
        No such file.
    ValueError
        A table without ``participant_id``, a label repeated, or no label.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No participants file at {path}.")
    lines = [line.strip() for line in path.read_text().splitlines()]
    lines = [line for line in lines if line]
    if lines and "\t" in lines[0]:
        header = lines[0].split("\t")
        if "participant_id" not in header:
            raise ValueError(f"{path} is a table without a participant_id column.")
        column = header.index("participant_id")
        lines = [row.split("\t")[column].strip() for row in lines[1:]]
    labels = [label.removeprefix("sub-") for label in lines]
    if not labels:
        raise ValueError(f"{path} lists no participant.")
    twice = sorted({label for label in labels if labels.count(label) > 1})
    if twice:
        raise ValueError(f"{path} lists sub-{twice[0]} more than once.")
    return labels


def select_participants(
    participant_label: tuple | None,
    label_file: str | None,
    array_index: int | None,
    per_task: int = 1,
) -> tuple | None:
    """Return the ``participant_label`` of a call: given, read from a file, or the array task's.

    With ``label_file``: the ``per_task`` participants of task ``array_index``
    (None: the integer in ``$SLURM_ARRAY_TASK_ID`` when set), or all of the
    file's participants when there is no index.

    Raises
    ------
    ValueError
        Both a label and a file, an index (or ``per_task`` > 1) without a
        file, ``per_task`` > 1 without an index, an index past the file, or
        ``$SLURM_ARRAY_TASK_ID`` not an integer.
    FileNotFoundError
        No such participants file.
    """
    if label_file is None:
        if array_index is not None:
            raise ValueError("--array-index needs --participant-label-file (the list it indexes).")
        if per_task != 1:
            raise ValueError("--participants-per-task needs --participant-label-file.")
        return participant_label
    if participant_label is not None:
        raise ValueError("Give --participant-label or --participant-label-file, not both.")
    labels = read_participants_file(label_file)
    if array_index is None:
        value = os.environ.get(ARRAY_INDEX_VARIABLE)
        if value is None:
            if per_task != 1:
                raise ValueError(
                    "--participants-per-task needs an array task's index: --array-index, or "
                    f"${ARRAY_INDEX_VARIABLE} in an array job."
                )
            return tuple(labels)
        try:
            array_index = int(value)
        except ValueError:
            raise ValueError(
                f"${ARRAY_INDEX_VARIABLE} is {value!r}, not an array index (an integer)."
            ) from None
    tasks = -(-len(labels) // per_task)
    if not 0 <= array_index < tasks:
        each = "" if per_task == 1 else f", {per_task} a task,"
        raise ValueError(
            f"Array index {array_index} is outside {label_file}: its {len(labels)} participants"
            f"{each} are indexed 0 to {tasks - 1} (sbatch --array=0-{tasks - 1})."
        )
    return tuple(labels[array_index * per_task : (array_index + 1) * per_task])
