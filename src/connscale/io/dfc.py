"""The HDF5 store of sliding-window correlations (``_dfc.h5``).

Written by ``connscale.dynamic_correlation(..., out=path)`` window by window
(:class:`HDF5Backend`), read back by :func:`open_dfc` (and
:func:`connscale.load_dynamic`, which wraps it in a
:class:`~connscale.fc.DynamicConnectivity`). The file is built as a hidden
``.<name>.partial`` beside the target; each window's arrays are written,
then its ``done`` flag is set and the file flushed, so an interrupted run
leaves a partial file whose finished windows a re-run keeps; when every
window is done the partial file is renamed to the target (atomic).

Layout (all kinds): attributes ``format`` (``connscale-dfc-1``), ``kind``,
``n_series``, ``n_timepoints``, ``window_length``, ``step``, ``n_windows``,
``dtype``, ``parameters`` (JSON), ``input_fingerprint``; datasets
``window_starts`` (k,), ``done`` (k,) bool, ``constant`` (k, N) bool,
``mae`` (k,) float64 (NaN when not computed), ``nbytes`` (k,) int64. Per
kind: ``triu`` (k, N(N−1)/2); ``sparse/<i>/{data,indices,indptr}`` (CSR of
window i's upper triangle, int32 column indices); ``q`` (k, N, l) and ``b``
(k, l, N); ``factor`` (k, N, r). Callers may add datasets (``labels``...)
and attributes (:func:`connscale.io.hdf5.add_datasets`).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import numpy as np

from connscale._choices import DFC_KINDS
from connscale._triu import n_pairs
from connscale.io.h5 import (
    close_h5,
    create_h5,
    early_dcpl,
    flush_h5,
    h5_errors,
    open_h5_resume,
)
from connscale.io.publish import IncompleteOutputError, check_published

__all__ = [
    "FORMAT",
    "KINDS",
    "HDF5Backend",
    "is_dfc_store",
    "open_dfc",
    "partial_path",
    "read_dfc_info",
    "read_dfc_windows",
    "stored_shapes",
]

FORMAT = "connscale-dfc-1"
KINDS = DFC_KINDS


def partial_path(path: str | os.PathLike) -> Path:
    """Return the hidden file an HDF5 result is built in before its final rename."""
    path = Path(path)
    return path.with_name(f".{path.name}.partial")


def stored_shapes(kind: str, n: int, width: int | None) -> dict[str, tuple[int, ...]]:
    """Per-window shapes of the fixed-size arrays of a kind (not sparse)."""
    if kind == "triu":
        return {"triu": (n_pairs(n),)}
    if kind == "lowrank":
        return {"q": (n, width), "b": (width, n)}
    if kind == "factor":
        return {"factor": (n, width)}
    return {}


class HDF5Backend:
    """Windows in an HDF5 file (see the module docstring for the layout).

    Files opened for writing (:meth:`create`, :meth:`resume`) have no chunk
    cache or sieve buffer, so a failed write raises in :meth:`write` (an
    ``OSError`` naming the file); the fixed-size arrays are allocated when
    the file is created, so later writes never change its structure. A
    window sink of :mod:`connscale.fc._sinks` (targets are window numbers).
    """

    in_memory = False

    def __init__(self, handle, path: Path) -> None:
        self.path = Path(path)
        self.file = handle
        attrs = self.file.attrs
        if attrs.get("format") != FORMAT:
            self.file.close()
            raise ValueError(
                f"{self.path} is not a connscale dynamic-connectivity file "
                f"(format attribute {attrs.get('format')!r}, expected {FORMAT!r})."
            )
        self.kind = str(attrs["kind"])
        self.n_windows = int(attrs["n_windows"])
        self.n_series = int(attrs["n_series"])
        self.dtype = np.dtype(str(attrs["dtype"]))
        # Held open while writing: a dataset closed between writes would be
        # a new HDF5 object each time.
        self._datasets: dict = {}

    @classmethod
    def open(cls, path: str | os.PathLike) -> HDF5Backend:
        """Open a finished file for reading."""
        import h5py

        return cls(h5py.File(path, "r"), path)

    @classmethod
    def resume(cls, path: str | os.PathLike) -> HDF5Backend:
        """Reopen an unfinished file of this user for writing (never through a link)."""
        backend = cls(open_h5_resume(path), path)
        if backend.kind == "sparse":
            backend._unflag_broken_sparse_windows()
        return backend

    @classmethod
    def create(cls, path: Path, meta: dict, fingerprint: str, width: int | None) -> HDF5Backend:
        """Create a new file (``O_EXCL``: never through a link) with every array allocated."""
        kind, k, n = meta["kind"], meta["n_windows"], meta["n_series"]
        dtype = np.dtype(meta["dtype"])
        fh = create_h5(path)
        try:
            with h5_errors(path):
                fh.attrs["format"] = FORMAT
                for key in (
                    "kind",
                    "n_series",
                    "n_timepoints",
                    "window_length",
                    "step",
                    "n_windows",
                    "dtype",
                ):
                    fh.attrs[key] = meta[key]
                fh.attrs["parameters"] = json.dumps(meta, sort_keys=True)
                fh.attrs["input_fingerprint"] = fingerprint
                fh.create_dataset(
                    "window_starts", data=np.asarray(meta["window_starts"], dtype=np.int64)
                )
                fh.create_dataset("done", data=np.zeros(k, dtype=bool))
                fh.create_dataset(
                    "constant", shape=(k, n), dtype=bool, chunks=(1, n), dcpl=early_dcpl()
                )
                fh.create_dataset("mae", data=np.full(k, np.nan))
                fh.create_dataset("nbytes", data=np.zeros(k, dtype=np.int64))
                for name, shape in stored_shapes(kind, n, width).items():
                    chunk = (1,) + shape
                    if int(np.prod(chunk)) * dtype.itemsize > (4 << 20):
                        # chunks of at most ~4 MB along the last axis
                        last = max(1, (4 << 20) // (dtype.itemsize * int(np.prod(shape[:-1]))))
                        chunk = (1,) + shape[:-1] + (min(shape[-1], last),)
                    fh.create_dataset(
                        name, shape=(k,) + shape, dtype=dtype, chunks=chunk, dcpl=early_dcpl()
                    )
                if kind == "sparse":
                    fh.create_group("sparse")
            flush_h5(fh, path)
        except BaseException:
            fh.close()
            raise
        return cls(fh, path)

    @staticmethod
    def stored_nbytes(meta: dict, width: int | None) -> int | None:
        """Bytes of a file's arrays (None for sparse: not known in advance)."""
        if meta["kind"] == "sparse":
            return None
        k, n = meta["n_windows"], meta["n_series"]
        item = np.dtype(meta["dtype"]).itemsize
        per_window = sum(
            int(np.prod(shape)) * item for shape in stored_shapes(meta["kind"], n, width).values()
        )
        return k * (per_window + n + 8 + 8 + 8 + 1)

    def _dataset(self, name: str):
        dataset = self._datasets.get(name)
        if dataset is None:
            dataset = self._datasets[name] = self.file[name]
        return dataset

    def _unflag_broken_sparse_windows(self) -> None:
        """Clear the ``done`` flag of sparse windows whose group is unreadable.

        A killed run may leave a sparse window flagged done whose group is unreadable;
        such windows are recomputed.
        """
        done = self.done
        group = self.file["sparse"]
        for index in np.flatnonzero(done):
            try:
                window = group[str(index)]
                ok = (
                    int(window["indptr"][-1])
                    == window["data"].shape[0]
                    == window["indices"].shape[0]
                )
            except (KeyError, OSError, RuntimeError, ValueError):
                ok = False
            if not ok:
                with h5_errors(self.path):
                    self._dataset("done")[index] = False
        flush_h5(self.file, self.path)

    @property
    def done(self) -> np.ndarray:
        """Whether each window is written, ndarray of shape (n_windows,), bool."""
        return self.file["done"][...]

    @property
    def constant(self) -> np.ndarray:
        """The series constant in each window, ndarray of shape (n_windows, n_series), bool."""
        return self.file["constant"][...]

    @property
    def mae(self) -> np.ndarray:
        """Each window's mean absolute error, ndarray of shape (n_windows,) (NaN: not computed)."""
        return self.file["mae"][...]

    @property
    def nbytes(self) -> np.ndarray:
        """The bytes stored for each window, ndarray of shape (n_windows,), int64."""
        return self.file["nbytes"][...]

    def matches(self, meta: dict, fingerprint: str) -> bool:
        """Return whether the file holds the run of parameters ``meta`` on input ``fingerprint``."""
        attrs = self.file.attrs
        return (
            attrs.get("parameters") == json.dumps(meta, sort_keys=True)
            and attrs.get("input_fingerprint") == fingerprint
        )

    def write(self, index: int, arrays: dict) -> None:
        """Write window ``index``: its stored arrays, ``constant`` and ``mae``.

        The window is flagged done only once its data are flushed.
        """
        payload = dict(arrays)
        constant, mae = payload.pop("constant"), payload.pop("mae")
        fh = self.file
        with h5_errors(self.path):
            if self.kind == "sparse":
                group = fh["sparse"]
                name = str(index)
                if name in group:  # left over from an interrupted write
                    del group[name]
                window = group.create_group(name)
                indptr = np.zeros(self.n_series + 1, dtype=np.int64)
                np.cumsum(payload["counts"], out=indptr[1:])
                window.create_dataset("data", data=payload["data"])
                window.create_dataset(
                    "indices", data=payload["indices"].astype(np.int32, copy=False)
                )
                window.create_dataset("indptr", data=indptr)
                nbytes = payload["data"].nbytes + payload["indices"].nbytes + indptr.nbytes
            else:
                nbytes = 0
                for name, values in payload.items():
                    self._dataset(name)[index] = values
                    nbytes += values.nbytes
            self._dataset("constant")[index] = constant
            self._dataset("mae")[index] = mae
            self._dataset("nbytes")[index] = nbytes
        flush_h5(fh, self.path)
        # The window counts as written only once its data are with the system.
        with h5_errors(self.path):
            self._dataset("done")[index] = True
        flush_h5(fh, self.path)

    def set_attrs(self, attrs: dict) -> None:
        """Extra root attributes (provenance), written before the file is finished."""
        with h5_errors(self.path):
            for key, value in attrs.items():
                self.file.attrs[key] = "None" if value is None else value
        flush_h5(self.file, self.path)

    def finish(self) -> None:
        """Flush and close; errors raise (the file is closed either way)."""
        self._datasets.clear()
        close_h5(self.file, self.path)

    def read(self, index: int):
        """Read window ``index`` as stored.

        Returns
        -------
        tuple of ndarray or dict of str to ndarray
            ``(data, indices, indptr)`` (CSR of the upper triangle) for a sparse file,
            else the window's arrays by name (``triu``; ``q`` and ``b``; ``factor``).
        """
        fh = self.file
        if self.kind == "sparse":
            window = fh["sparse"][str(index)]
            return window["data"][...], window["indices"][...], window["indptr"][...]
        return {name: fh[name][index] for name in stored_shapes(self.kind, self.n_series, 1)}

    def abort(self) -> None:
        """After a failure: release the file; the windows flagged done stay."""
        self.close()

    def close(self) -> None:
        """Release the file without reporting errors (after a failure, or reading)."""
        self._datasets.clear()
        if self.file.id.valid:
            with contextlib.suppress(OSError, RuntimeError):
                self.file.close()


def open_dfc(path: str | os.PathLike) -> tuple[HDF5Backend, dict]:
    """Open a finished ``_dfc.h5`` store for reading.

    Parameters
    ----------
    path : str or path-like

    Returns
    -------
    backend : HDF5Backend
        Open for reading; close it when done.
    parameters : dict
        The run's parameters (the ``parameters`` attribute).

    Raises
    ------
    IncompleteOutputError
        When some windows are not flagged done (an unfinished or damaged
        file: its missing windows must never read as zeros), or the file
        belongs to a file set whose publication did not finish.
    """
    path = Path(path)
    if not path.exists():
        hint = ""
        if partial_path(path).exists():
            hint = (
                " An unfinished run left "
                f"{partial_path(path).name}; re-run dynamic_correlation with the same "
                "parameters to finish it."
            )
        raise FileNotFoundError(f"No dynamic-connectivity file at {path}.{hint}")
    check_published(path)
    try:
        backend = HDF5Backend.open(path)
    except OSError as exc:
        raise IncompleteOutputError(
            f"{path} cannot be read as HDF5 ({' '.join(str(exc).split('(')[0].split())})."
        ) from None
    done = backend.done
    if not done.all():
        backend.close()
        raise IncompleteOutputError(
            f"{path} is unfinished: {int(done.sum())} of {done.size} windows were written; "
            "re-run dynamic_correlation with the same input and parameters."
        )
    return backend, json.loads(backend.file.attrs["parameters"])


def is_dfc_store(attrs) -> bool:
    """Return whether HDF5 root attributes ``attrs`` are those of a ``_dfc.h5`` store."""
    return attrs.get("format") in (FORMAT, FORMAT.encode())


def read_dfc_info(path: str | os.PathLike) -> dict:
    """Read what a ``_dfc.h5`` store says about itself, without reading its windows.

    Returns
    -------
    dict
        ``n_series`` (int), ``parameters`` (dict) and ``labels`` (list of
        str, or None when the store has none).
    """
    import h5py

    with h5py.File(path, "r") as h5:
        if not is_dfc_store(h5.attrs):
            raise ValueError(
                f"{path} is not a connscale dynamic-connectivity file "
                f"(format attribute {h5.attrs.get('format')!r})."
            )
        return {
            "n_series": int(h5.attrs["n_series"]),
            "parameters": json.loads(h5.attrs.get("parameters", "{}")),
            "labels": list(h5["labels"].asstr()[()]) if "labels" in h5 else None,
        }


def read_dfc_windows(path: str | os.PathLike) -> tuple[np.ndarray, dict]:
    """Every window of a finished ``triu`` ``_dfc.h5`` store, read at once.

    Parameters
    ----------
    path : str or path-like

    Returns
    -------
    windows : ndarray of shape (n_windows, n_pairs)
        Row ``w`` is window ``w``'s strictly-upper triangle, row-major.
    info : dict
        ``n_series``, ``window_length``, ``step``, ``window_starts``
        (ndarray), ``labels`` (list of str or None), and, when the store
        has them, ``window_onset_volumes``, ``window_onset_seconds``
        (ndarrays) and ``repetition_time`` (float).

    Raises
    ------
    IncompleteOutputError
        An unfinished or unpublished store (see :func:`open_dfc`).
    ValueError
        A store of another kind than ``triu``.
    """
    backend, _ = open_dfc(path)
    try:
        if backend.kind != "triu":
            raise ValueError(
                f"{path} holds DFC of kind {backend.kind!r}; expected 'triu' (every pair)."
            )
        h5 = backend.file
        info = {
            "n_series": backend.n_series,
            "window_length": int(h5.attrs["window_length"]),
            "step": int(h5.attrs["step"]),
            "window_starts": h5["window_starts"][()],
            "labels": list(h5["labels"].asstr()[()]) if "labels" in h5 else None,
        }
        for name in ("window_onset_volumes", "window_onset_seconds"):
            if name in h5:
                info[name] = h5[name][()]
        if "repetition_time" in h5.attrs:
            info["repetition_time"] = float(h5.attrs["repetition_time"])
        return h5["triu"][()], info
    finally:
        backend.close()
