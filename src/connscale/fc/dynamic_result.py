"""Storage of sliding-window correlations: in memory or in an HDF5 file.

:class:`DynamicConnectivity` is what :func:`connscale.dynamic_correlation`
returns. Its windows live in one of two backends:

* in memory (numpy arrays, optionally carved out of a caller's preallocated,
  pinned host buffer so that no host memory is allocated during the run);
* in an HDF5 file, written window by window. The file is built as a hidden
  ``.<name>.partial`` beside the target; each window's arrays are written,
  then its ``done`` flag is set and the file flushed, so an interrupted run
  leaves a partial file whose finished windows a re-run keeps; when every
  window is done the partial file is renamed to the target (atomic). A
  finished file with the same parameters and input is reused as it is.

The HDF5 file layout, its writer and its reader are :mod:`connscale.io.dfc`.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from typing_extensions import Self

from connscale._triu import vec_to_matrix
from connscale.fc.sparse import csr_from_parts
from connscale.io.dfc import (  # noqa: F401 (FORMAT, KINDS, partial_path: for fc.dynamic)
    FORMAT,
    KINDS,
    HDF5Backend,
    open_dfc,
    partial_path,
    stored_shapes,
)


class HostArena:
    """Carves aligned arrays out of one preallocated host buffer.

    Parameters
    ----------
    buffer : torch.Tensor or numpy.ndarray
        A 1-D uint8 host buffer (ideally a pinned ``torch.Tensor``), written
        into from the start.
    """

    _ALIGN = 64

    def __init__(self, buffer) -> None:
        import torch

        if isinstance(buffer, np.ndarray):
            if buffer.dtype != np.uint8 or buffer.ndim != 1:
                raise ValueError(
                    "'host_buffer' must be a 1-D uint8 array or tensor; got "
                    f"dtype {buffer.dtype} and shape {buffer.shape}."
                )
            buffer = torch.from_numpy(buffer)
        if not isinstance(buffer, torch.Tensor) or buffer.dtype != torch.uint8 or buffer.dim() != 1:
            raise ValueError(
                "'host_buffer' must be a 1-D uint8 numpy array or CPU torch tensor; "
                f"got {type(buffer).__name__}."
            )
        if buffer.device.type != "cpu":
            raise ValueError(f"'host_buffer' must live in host memory; got device {buffer.device}.")
        self.tensor = buffer
        self.offset = 0

    @property
    def pinned(self) -> bool:
        """Whether the arena's memory is pinned (page-locked)."""
        return bool(self.tensor.is_pinned())

    def take(self, shape: tuple[int, ...], dtype: np.dtype):
        """Return a (numpy view, torch view) pair of ``shape``, or None when full."""
        import torch

        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        start = -(-self.offset // self._ALIGN) * self._ALIGN
        if start + nbytes > self.tensor.numel():
            return None
        self.offset = start + nbytes
        torch_dtype = {
            np.dtype("float32"): torch.float32,
            np.dtype("float64"): torch.float64,
            np.dtype("int32"): torch.int32,
            np.dtype("int64"): torch.int64,
            np.dtype("bool"): torch.bool,
        }[dtype]
        view = self.tensor[start : start + nbytes].view(torch_dtype).view(shape)
        return view.numpy(), view


class MemoryBackend:
    """Windows held in host memory: a window sink of :mod:`connscale.fc._sinks`.

    Targets are window numbers; :meth:`destination` gives pinned views of a
    named array when the caller's ``host_buffer`` holds it.

    ``meter`` (a :class:`connscale._compute.memory.MemoryMeter`, set by the
    caller) counts sparse windows as they arrive, before they are kept.
    """

    in_memory = True

    @staticmethod
    def result_nbytes(
        kind: str, n_windows: int, n_series: int, width: int | None, itemsize: int
    ) -> tuple[int | None, int]:
        """Return the bytes of the stored windows and of the flags kept beside them.

        The windows' bytes are None for sparse (counted as they grow); the
        flags are each window's constant series, mae and nbytes.
        """
        kept = n_windows * (n_series + 16)
        if kind == "sparse":
            return None, kept
        per_window = sum(
            int(np.prod(shape)) for shape in stored_shapes(kind, n_series, width).values()
        )
        return n_windows * per_window * itemsize, kept

    def __init__(
        self,
        kind: str,
        n_windows: int,
        n_series: int,
        dtype: np.dtype,
        width: int | None,
        arena: HostArena | None = None,
    ) -> None:
        self.meter = None
        self.kind = kind
        self.n_windows = n_windows
        self.n_series = n_series
        self.dtype = np.dtype(dtype)
        self.arena = arena
        self.arrays: dict[str, np.ndarray] = {}
        self.torch_views: dict = {}
        for name, shape in stored_shapes(kind, n_series, width).items():
            full = (n_windows,) + shape
            taken = arena.take(full, self.dtype) if arena is not None else None
            if taken is None:
                self.arrays[name] = np.empty(full, dtype=self.dtype)
            else:
                self.arrays[name], self.torch_views[name] = taken
        self.sparse: list[tuple | None] = [None] * n_windows if kind == "sparse" else []
        self.constant = np.zeros((n_windows, n_series), dtype=bool)
        self.mae = np.full(n_windows, np.nan)
        self.nbytes = np.zeros(n_windows, dtype=np.int64)
        self.done = np.zeros(n_windows, dtype=bool)

    # writing
    def destination(self, name: str, start: int, stop: int):
        """Pinned torch view of windows [start, stop) of array ``name``, if any."""
        view = self.torch_views.get(name)
        if view is None or not self.arena.pinned:
            return None
        return view[start:stop]

    def sparse_destination(self, nnz: int):
        """Pinned (values, columns) views for a window with ``nnz`` entries, if any."""
        if self.arena is None or not self.arena.pinned:
            return None
        values = self.arena.take((nnz,), self.dtype)
        columns = self.arena.take((nnz,), np.int32)
        if values is None or columns is None:
            return None
        return values, columns

    def write(self, index: int, arrays: dict) -> None:
        """Keep window ``index``: its stored arrays, ``constant`` and ``mae``."""
        payload = dict(arrays)
        constant, mae = payload.pop("constant"), payload.pop("mae")
        if self.kind == "sparse":
            data = payload["data"]
            indices = payload["indices"]
            if self.arena is None or not np.may_share_memory(data, self.arena.tensor.numpy()):
                if self.meter is not None:
                    self.meter.add(data.nbytes + indices.nbytes + 8 * (self.n_series + 1))
                data = np.array(data, copy=True)
                indices = np.array(indices, copy=True)
            indptr = np.zeros(self.n_series + 1, dtype=np.int64)
            np.cumsum(payload["counts"], out=indptr[1:])
            self.sparse[index] = (data, indices, indptr)
            nbytes = data.nbytes + indices.nbytes + indptr.nbytes
        else:
            nbytes = 0
            for name, values in payload.items():
                target = self.arrays[name][index]
                if not np.may_share_memory(target, values):
                    target[...] = values
                nbytes += target.nbytes
        self.constant[index] = constant
        self.mae[index] = mae
        self.nbytes[index] = nbytes
        self.done[index] = True

    def finish(self) -> None:
        """Do nothing: the windows are complete in memory."""

    def abort(self) -> None:
        """Do nothing: memory holds nothing to remove."""

    # reading
    def read(self, index: int):
        """Return window ``index`` in its stored form (sparse parts, or named arrays)."""
        if self.kind == "sparse":
            data, indices, indptr = self.sparse[index]
            return data, indices, indptr
        return {name: array[index] for name, array in self.arrays.items()}

    def close(self) -> None:
        """Do nothing: memory holds no file to close."""


class DynamicConnectivity:
    """Sliding-window correlations of one run, in their stored form.

    Returned by :func:`connscale.dynamic_correlation` and
    :func:`connscale.load_dynamic`; do not build it directly.

    Attributes
    ----------
    kind : {'triu', 'sparse', 'lowrank', 'factor'}
    n_series, n_timepoints, window_length, step : int
    window_starts : ndarray of shape (n_windows,)
        First time point of each window.
    constant : ndarray of shape (n_windows, n_series), bool
        Series that are constant within each window (their correlations are
        NaN in dense forms and absent from sparse ones).
    mae : ndarray of shape (n_windows,) or None
        Mean absolute error of each compressed window against the exact
        matrix over off-diagonal pairs, when ``compute_error=True``.
    parameters : dict
        The run's parameters.
    path : Path or None
        The HDF5 file behind the result, if any.
    plan : dict or None
        How the run was split (windows per batch, rows per tile, device
        budget); None when nothing had to be computed.
    confirmation : Confirmation or None
        With ``precision='exact'`` where the exact scheme ran: how many
        entries and tiles it had to confirm
        (:class:`connscale.fc._exact.Confirmation`); None otherwise.

    Parameters
    ----------
    backend : object
        Where the windows live: in memory, or the HDF5 file's reader.
    meta : dict
        The run's parameters and the windows' layout (``kind``, ``n_series``,
        ``n_timepoints``, ``window_length``, ``step``, ``window_starts``, ``dtype``).
    path : Path or None, default=None
        The HDF5 file behind ``backend``, if any.

    Examples
    --------
    >>> import numpy as np
    >>> import connscale
    >>> x = np.random.default_rng(0).standard_normal((40, 6))
    >>> dfc = connscale.dynamic_correlation(x, 10, 5, device="cpu")
    >>> dfc
    DynamicConnectivity(kind='triu', n_windows=7, n_series=6, window_length=10, step=5)
    >>> dfc.window_starts
    array([ 0,  5, 10, 15, 20, 25, 30])
    """

    def __init__(self, backend, meta: dict, path: Path | None = None) -> None:
        self._backend = backend
        self.parameters = dict(meta)
        self.kind = meta["kind"]
        self.n_series = int(meta["n_series"])
        self.n_timepoints = int(meta["n_timepoints"])
        self.window_length = int(meta["window_length"])
        self.step = int(meta["step"])
        self.window_starts = np.asarray(meta["window_starts"], dtype=np.int64)
        self.dtype = np.dtype(meta["dtype"])
        self.path = path
        self.plan: dict | None = None
        self.confirmation = None
        self.constant = np.asarray(backend.constant)
        mae = np.asarray(backend.mae, dtype=np.float64)
        self.mae = None if np.all(np.isnan(mae)) else mae
        self._nbytes = np.asarray(backend.nbytes, dtype=np.int64)

    def __len__(self) -> int:
        return int(self.window_starts.size)

    def __repr__(self) -> str:
        where = f", path='{self.path}'" if self.path else ""
        return (
            f"DynamicConnectivity(kind='{self.kind}', n_windows={len(self)}, "
            f"n_series={self.n_series}, window_length={self.window_length}, "
            f"step={self.step}{where})"
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Close the HDF5 file behind the result (no-op in memory).

        Examples
        --------
        >>> import numpy as np
        >>> import connscale
        >>> x = np.random.default_rng(0).standard_normal((40, 6))
        >>> dfc = connscale.dynamic_correlation(x, 10, 5, device="cpu")
        >>> dfc.close()
        """
        self._backend.close()

    def _index(self, index) -> int:
        if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"Window index must be an integer; got {index!r}.")
        k = len(self)
        i = int(index) + k if index < 0 else int(index)
        if not 0 <= i < k:
            raise IndexError(f"Window index {index} out of range for {k} windows.")
        return i

    def __getitem__(self, index):
        """Window ``index`` in its stored form.

        ``triu``: the (n_pairs,) edge vector (row-major strictly upper order);
        ``sparse``: a ``scipy.sparse.csr_array`` of the kept upper-triangle entries;
        ``lowrank``: the pair (Q (N, l), B (l, N)); ``factor``: F (N, r) with
        the correlation matrix ≈ F Fᵀ.
        """
        i = self._index(index)
        stored = self._backend.read(i)
        if self.kind == "sparse":
            data, indices, indptr = stored
            counts = np.diff(indptr)
            return csr_from_parts(data, indices, counts, self.n_series)
        if self.kind == "triu":
            return stored["triu"]
        if self.kind == "lowrank":
            return stored["q"], stored["b"]
        return stored["factor"]

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def to_dense(self, index) -> np.ndarray:
        """Return the (N, N) matrix of window ``index`` (reconstructed when compressed).

        ``triu``: the correlation matrix, unit diagonal, NaN rows/columns for
        constant series. ``sparse``: the kept edges (both triangles), 0
        elsewhere and on the diagonal. ``lowrank``: Q·B. ``factor``: F·Fᵀ.

        Parameters
        ----------
        index : int
            Window number (negative counts from the end).

        Returns
        -------
        ndarray of shape (n_series, n_series)
            The window's matrix.

        Examples
        --------
        >>> import numpy as np
        >>> import connscale
        >>> x = np.random.default_rng(0).standard_normal((40, 6))
        >>> dfc = connscale.dynamic_correlation(x, 10, 5, device="cpu")
        >>> r = dfc.to_dense(-1)
        >>> r.shape, float(r[2, 2])
        ((6, 6), 1.0)
        >>> bool(np.allclose(r[0, 1], np.corrcoef(x[30:40].T)[0, 1], atol=1e-5))
        True
        """
        i = self._index(index)
        stored = self[i]
        if self.kind == "triu":
            dense = vec_to_matrix(stored, self.n_series)
            diag = np.where(self.constant[i], np.nan, 1.0)
            np.fill_diagonal(dense, diag)
            return dense
        if self.kind == "sparse":
            upper = stored.toarray()
            return upper + upper.T
        if self.kind == "lowrank":
            q, b = stored
            return q @ b
        return stored @ stored.T

    def to_teneto(self) -> np.ndarray:
        """All windows as one dense (N, N, n_windows) array (teneto's layout).

        Only for small N: refuses to build more than 2 GB.

        Returns
        -------
        ndarray of shape (n_series, n_series, n_windows)
            ``out[:, :, i]`` is :meth:`to_dense` of window ``i``.

        Examples
        --------
        >>> import numpy as np
        >>> import connscale
        >>> x = np.random.default_rng(0).standard_normal((40, 6))
        >>> connscale.dynamic_correlation(x, 10, 5, device="cpu").to_teneto().shape
        (6, 6, 7)
        """
        n, k = self.n_series, len(self)
        size = n * n * k * self.dtype.itemsize
        if size > 2 * 1000**3:
            raise ValueError(
                f"A dense (N, N, n_windows) = ({n}, {n}, {k}) array needs "
                f"{size / 1e9:.1f} GB; use to_dense(i) window by window instead."
            )
        out = np.empty((n, n, k), dtype=self.dtype)
        for i in range(k):
            out[:, :, i] = self.to_dense(i)
        return out

    @property
    def nbytes(self) -> int:
        """Bytes of the stored windows (values and indices)."""
        return int(self._nbytes.sum())

    @property
    def nbytes_per_window(self) -> np.ndarray:
        """Bytes of each stored window (values and indices)."""
        return self._nbytes.copy()

    @property
    def compression_ratio(self) -> float:
        """Dense N×N bytes of every window over the stored bytes.

        For ``lowrank`` this is GPU-DFC's Eq. 5, N / (2l).
        """
        dense = len(self) * self.n_series**2 * self.dtype.itemsize
        return float(dense / self.nbytes) if self.nbytes else float("inf")


def load_dynamic(path: str | os.PathLike) -> DynamicConnectivity:
    """Reopen the HDF5 file written by ``dynamic_correlation(..., out=path)``.

    Parameters
    ----------
    path : str or path-like

    Returns
    -------
    DynamicConnectivity
        Backed by the file (read on access); call ``close()`` or use it as a
        context manager to release the file.

    Raises
    ------
    IncompleteOutputError
        As :func:`connscale.io.dfc.open_dfc`: an unfinished or damaged file,
        or one of a file set whose publication did not finish.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> import numpy as np
    >>> import connscale
    >>> x = np.random.default_rng(0).standard_normal((40, 6))
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     out = Path(tmp) / "dfc.h5"
    ...     connscale.dynamic_correlation(x, 10, 5, device="cpu", out=out).close()
    ...     with connscale.load_dynamic(out) as dfc:
    ...         print(len(dfc), dfc[0].shape)
    7 (15,)
    """
    backend, meta = open_dfc(path)
    return DynamicConnectivity(backend, meta, path=Path(path))
