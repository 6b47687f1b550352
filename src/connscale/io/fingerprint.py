"""Identity of a run's inputs, so that resume never trusts a stale output.

An output records the fingerprint of the run that made it: each input file's
size, modification time and a hash of its content (the whole file when it is
small, else its first and last MiB, which hold the header of every format
connscale reads), the parameters, and the connscale version. A re-run reuses
or resumes an output only when the fingerprints are equal; a changed input
means recompute.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

from connscale._version import __version__

__all__ = ["array_fingerprint", "file_fingerprint", "run_fingerprint"]

_EDGE = 1 << 20  # bytes hashed at each end of a large file
_WHOLE = 4 * _EDGE  # files up to this size are hashed whole


def file_fingerprint(path: str | os.PathLike) -> dict:
    """Size, mtime and a content hash of one input file.

    Parameters
    ----------
    path : path
        A file (symbolic links are followed: the content is what counts).

    Returns
    -------
    dict
        ``{"name", "bytes", "mtime_ns", "sha256", "hashed"}``; ``hashed`` is
        ``"whole"`` or ``"ends"`` (first and last MiB).
    """
    path = Path(path)
    stat = path.stat()
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        if stat.st_size <= _WHOLE:
            digest.update(fh.read())
            hashed = "whole"
        else:
            digest.update(fh.read(_EDGE))
            fh.seek(-_EDGE, os.SEEK_END)
            digest.update(fh.read(_EDGE))
            hashed = "ends"
    return {
        "name": path.name,
        "bytes": int(stat.st_size),
        "mtime_ns": int(stat.st_mtime_ns),
        "sha256": digest.hexdigest(),
        "hashed": hashed,
    }


def array_fingerprint(array: np.ndarray) -> str:
    """Hash of an in-memory array's shape, dtype and every value."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(f"{array.shape}{array.dtype}".encode())
    digest.update(np.ascontiguousarray(array).view(np.uint8).reshape(-1).data)
    return digest.hexdigest()


def run_fingerprint(
    inputs: Iterable[str | os.PathLike | dict | np.ndarray], parameters: Mapping
) -> dict:
    """Return the fingerprint of a run: its inputs, parameters and connscale version.

    Parameters
    ----------
    inputs : iterable of path, dict or ndarray
        Input files (fingerprinted with :func:`file_fingerprint`), fingerprints
        already made, or arrays (hashed whole).
    parameters : mapping
        The run's parameters (JSON-serialisable values).

    Returns
    -------
    dict
        ``{"inputs": [...], "parameters": {...}, "software": "connscale X",
        "digest": hex}``; compare two fingerprints by their ``digest``.
    """
    items = []
    for item in inputs:
        if isinstance(item, dict):
            items.append(item)
        elif isinstance(item, np.ndarray):
            items.append({"array": array_fingerprint(item)})
        else:
            items.append(file_fingerprint(item))
    record = {
        "inputs": items,
        "parameters": _jsonable(dict(parameters)),
        "software": f"connscale {__version__}",
    }
    text = json.dumps(record, sort_keys=True)
    record["digest"] = hashlib.sha256(text.encode()).hexdigest()
    return record


def _jsonable(value: object) -> object:
    """Parameters as plain JSON values (paths and numpy scalars as text/numbers)."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)
