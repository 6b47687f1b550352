"""ROI time series from TSV, CSV and NPY files."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import numpy as np

from connscale._validation import check_timeseries

TIMESERIES_SUFFIXES = (".tsv", ".csv", ".txt", ".npy")


def load_timeseries(path: str | os.PathLike) -> tuple[np.ndarray, list[str]]:
    """Read ROI time series of shape (n_timepoints, n_regions).

    Parameters
    ----------
    path : str or path
        ``.npy`` (a 2-D array), or ``.tsv``/``.csv``/``.txt`` text with one
        column per region and one row per time point; a first row that is
        not numeric is taken as the region labels (as in BIDS
        ``_timeseries.tsv`` files).

    Returns
    -------
    timeseries : ndarray of shape (n_timepoints, n_regions)
    labels : list of str
        Region labels (from the header, or ``'0', '1', ...``).

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> import numpy as np
    >>> from connscale.io import load_timeseries, save_timeseries
    >>> x = np.random.default_rng(0).standard_normal((50, 3))
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = save_timeseries(Path(tmp) / "roi_timeseries.tsv", x, ["V1", "V2", "MT"])
    ...     series, labels = load_timeseries(path)
    >>> series.shape, labels
    ((50, 3), ['V1', 'V2', 'MT'])
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"No time-series file at {path}.")
    suffix = path.suffix.lower()
    if suffix == ".npy":
        try:
            data = np.load(path, allow_pickle=False)
        except ValueError as exc:
            raise ValueError(f"Cannot read {path} as a numeric .npy array: {exc}") from exc
        labels = None
    elif suffix in (".tsv", ".csv", ".txt"):
        data, labels = _read_text(path, "," if suffix == ".csv" else None)
    else:
        raise ValueError(
            f"Time series must be a {', '.join(TIMESERIES_SUFFIXES)} file; got {path.name}."
        )
    data = check_timeseries(data, name=path.name)
    if labels is None:
        labels = [str(i) for i in range(data.shape[1])]
    elif len(labels) != data.shape[1]:
        raise ValueError(
            f"{path.name}: the header names {len(labels)} regions but the rows hold "
            f"{data.shape[1]} values."
        )
    return data, labels


def _read_text(path: Path, delimiter: str | None) -> tuple[np.ndarray, list[str] | None]:
    with open(path, newline="") as fh:
        first = fh.readline()
    if delimiter is None:
        delimiter = "\t" if "\t" in first else None
    fields = next(csv.reader([first], delimiter=delimiter or " ", skipinitialspace=True))
    fields = [f for f in fields if f != ""]
    has_header = not all(_is_number(f) for f in fields)
    try:
        data = np.loadtxt(
            path, delimiter=delimiter, skiprows=1 if has_header else 0, ndmin=2, dtype=np.float64
        )
    except ValueError as exc:
        raise ValueError(f"Cannot read {path.name} as a numeric table: {exc}") from exc
    return data, (fields if has_header else None)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return text.strip().lower() in ("nan", "n/a")
    return True


def save_timeseries(
    path: str | os.PathLike, timeseries: np.ndarray, labels: list[str] | None = None
) -> Path:
    """Write (n_timepoints, n_regions) series as a TSV with a header, atomically.

    Parameters
    ----------
    path : str or path
        The TSV file to write (replaced atomically when it exists).
    timeseries : ndarray of shape (n_timepoints, n_regions)
        One column per region, written with 8 significant digits.
    labels : list of str or None, default=None
        Region labels of the header row (``'0', '1', ...`` when None).

    Returns
    -------
    Path
        ``path``.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> import numpy as np
    >>> from connscale.io import save_timeseries
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = save_timeseries(Path(tmp) / "ts.tsv", np.eye(3)[:2])
    ...     print(path.read_text())
    0 1 2
    1 0 0
    0 1 0
    """
    from connscale.io.tables import write_float_table

    timeseries = np.asarray(timeseries)
    labels = labels or [str(i) for i in range(timeseries.shape[1])]
    return write_float_table(path, timeseries, labels, fmt="%.8g")
