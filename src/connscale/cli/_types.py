"""Argument types of the ``connscale`` parsers.

Each checks the value the user typed, at parse time, before anything is
imported or read.

A bad value ends the command with argparse's one line, which names the flag,
the value typed and what is allowed, e.g. ``connscale dfc: error: argument
--step: expected a whole number >= 1; got '0'``. None of them imports torch,
nilearn or pybids.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Callable
from pathlib import Path

from connscale._validation import DEVICE_PATTERN, MIN_WINDOW_LENGTH, parse_memory, resolve_n_jobs

_Error = argparse.ArgumentTypeError


def _bound(minimum, maximum, *, open_min: bool = False) -> str:
    """'>= 1', '> 0', 'in [-1, 1]' or '' (no bounds)."""
    if minimum is not None and maximum is not None:
        return f"in {'(' if open_min else '['}{minimum:g}, {maximum:g}]"
    if minimum is not None:
        return f"{'>' if open_min else '>='} {minimum:g}"
    if maximum is not None:
        return f"<= {maximum:g}"
    return ""


def integer(minimum: int | None = None, maximum: int | None = None) -> Callable[[str], int]:
    """Return the parser of a whole number in [minimum, maximum] (None: unbounded)."""
    allowed = " ".join(["a whole number", _bound(minimum, maximum)]).strip()

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise _Error(f"expected {allowed}; got {text!r}") from None
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            raise _Error(f"expected {allowed}; got {text!r}")
        return value

    return parse


def number(
    minimum: float | None = None, maximum: float | None = None, *, open_min: bool = False
) -> Callable[[str], float]:
    """Return the parser of a finite number in [minimum, maximum] (``open_min``: above minimum)."""
    allowed = " ".join(["a number", _bound(minimum, maximum, open_min=open_min)]).strip()

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise _Error(f"expected {allowed}; got {text!r}") from None
        below = minimum is not None and (value <= minimum if open_min else value < minimum)
        above = maximum is not None and value > maximum
        if not math.isfinite(value) or below or above:
            raise _Error(f"expected {allowed}; got {text!r}")
        return value

    return parse


#: A correlation threshold.
correlation = number(-1.0, 1.0)
#: A duration, frequency or size: a number > 0.
positive = number(0.0, open_min=True)
#: A fraction in (0, 1] (the top fraction of edges maps' --sparsity keeps).
fraction = number(0.0, 1.0, open_min=True)
#: A whole number >= 1 (counts: components, folds, iterations, ...).
count = integer(1)
#: A whole number >= 0 (seeds, retries, permutations, ...).
natural = integer(0)


def numbers(item: Callable[[str], float]) -> Callable[[str], list[float]]:
    """Comma-separated values, each checked by ``item``; at least one."""

    def parse(text: str) -> list[float]:
        values = [v.strip() for v in text.split(",") if v.strip()]
        if not values:
            raise _Error(f"expected one or more values separated by commas; got {text!r}")
        try:
            return [item(v) for v in values]
        except _Error as exc:
            raise _Error(f"{exc} (in {text!r})") from None

    return parse


def coordinate(text: str) -> tuple[float, float, float]:
    """x,y,z in mm."""
    try:
        values = numbers(number())(text)
    except _Error:
        values = []
    if len(values) != 3:
        raise _Error(f"expected x,y,z in mm (three numbers separated by commas); got {text!r}")
    return tuple(values)


def sparsity(text: str) -> int | float:
    """'0.07' -> 0.07 (a fraction in (0, 1]), '500' -> 500 (a count >= 1)."""
    allowed = "a count of voxels >= 1 (500) or a fraction in (0, 1] (0.07)"
    try:
        value = float(text)
    except ValueError:
        raise _Error(f"expected {allowed}; got {text!r}") from None
    if value.is_integer() and not any(c in text for c in ".eE"):
        if value >= 1:
            return int(value)
    elif 0 < value <= 1:
        return value
    raise _Error(f"expected {allowed}; got {text!r}")


def n_features(text: str) -> int | float | str:
    """Parse a number of features to keep: a count >= 1, a fraction in (0, 1) or 'cv'."""
    allowed = "a count >= 1, a fraction in (0, 1) or 'cv'"
    if text == "cv":
        return text
    try:
        number = float(text)
    except ValueError:
        raise _Error(f"expected {allowed}; got {text!r}") from None
    if number >= 1 and number.is_integer():
        return int(number)
    if 0 < number < 1:
        return number
    raise _Error(f"expected {allowed}; got {text!r}")


def _duration(minimum: int, what: str) -> Callable[[str], str]:
    """Return the parser of a duration: time points (a whole number >= minimum) or seconds.

    Seconds are written '44s' (> 0). The value is kept as typed, converted once the
    repetition time is known.
    """
    allowed = f"{what} in time points (a whole number >= {minimum}) or in seconds ('44s')"

    def parse(text: str) -> str:
        value = text.strip().lower()
        try:
            if value.endswith("s"):
                ok = math.isfinite(seconds := float(value[:-1])) and seconds > 0
            else:
                ok = int(value) >= minimum
        except ValueError:
            ok = False
        if not ok:
            raise _Error(f"expected {allowed}; got {text!r}")
        return text

    return parse


#: --window of dfc and dfc-states.
window = _duration(MIN_WINDOW_LENGTH, "a window length")
#: --step of dfc and dfc-states.
step = _duration(1, "a step")
#: A window length in time points only (pairs, cohort, bids).
window_length = integer(MIN_WINDOW_LENGTH)


def n_jobs(text: str) -> int:
    """Parse a number of workers as scikit-learn's n_jobs.

    N > 0, or -1 for every core, -2 for all but one, ... (0 is an error).
    """
    try:
        value = int(text)
        resolve_n_jobs(value)
    except ValueError:
        raise _Error(
            f"expected a number of workers >= 1, or -1 for all {os.cpu_count() or 1} cores "
            f"(-2: all but one, ...); got {text!r}"
        ) from None
    return value


def device(text: str) -> str:
    """'auto', 'cpu', 'cuda' or 'cuda:N'."""
    if DEVICE_PATTERN.fullmatch(text.strip()) is None:
        raise _Error(f"expected 'auto', 'cpu', 'cuda' or 'cuda:N'; got {text!r}")
    return text


def memory(text: str) -> str:
    """Check a size such as '8GB', '512MB' or '2GiB' (or bytes); keep it as typed."""
    try:
        parse_memory(text)
    except ValueError:
        raise _Error(
            f"expected a size such as '512MB', '8GB' or '2GiB' (or bytes, > 0); got {text!r}"
        ) from None
    return text


def gpus(text: str) -> str:
    """'all' or a number of GPUs >= 1."""
    if text != "all" and not re.fullmatch(r"[1-9][0-9]*", text):
        raise _Error(f"expected 'all' or a number of GPUs >= 1; got {text!r}")
    return text


def bids_label(text: str) -> str:
    """Check a BIDS entity label (letters, digits or '+'), e.g. an atlas name."""
    from connscale.io.bids import is_label

    if not is_label(text):
        raise _Error(f"expected letters, digits or '+' (a BIDS label); got {text!r}")
    return text


def nuisance(text: str) -> str:
    """Check a denoising strategy: a name, or a nuisance file (.yml, .yaml, .json) read.

    Return the name, or the file's absolute path (:func:`connscale.nuisance.check_strategy`).
    """
    from connscale._choices import STRATEGIES

    if text in STRATEGIES:
        return text
    if Path(text).suffix.lower() not in (".yml", ".yaml", ".json"):
        raise _Error(f"expected one of {', '.join(STRATEGIES)} or a .yml/.json file; got {text!r}")
    input_file(text)
    from connscale.nuisance import check_strategy

    try:
        return check_strategy(text)
    except ValueError as exc:
        raise _Error(str(exc)) from None


def input_file(text: str) -> Path:
    """Check an input file that exists (a folder or a missing path is refused)."""
    path = Path(text)
    if not path.exists():
        raise _Error(f"no such file: {text!r}")
    if path.is_dir():
        raise _Error(f"{text!r} is a folder; expected a file")
    return path


def atlas_input(text: str) -> Path | str:
    """Check an atlas: a file that exists, or a TemplateFlow atlas name (letters and digits)."""
    if Path(text).exists() or not (text.isascii() and text.isalnum()):
        return input_file(text)
    return text


def input_folder(text: str) -> Path:
    """Check an input folder that exists."""
    path = Path(text)
    if not path.exists():
        raise _Error(f"no such folder: {text!r}")
    if not path.is_dir():
        raise _Error(f"{text!r} is a file; expected a folder")
    return path


def output_folder(text: str) -> Path:
    """Check an output folder: new, or an existing folder (never a file, nor under one)."""
    path = Path(text)
    for place in (path, *path.parents):
        if place.exists():
            if not place.is_dir():
                where = "is a file" if place == path else f"is under the file {str(place)!r}"
                raise _Error(f"{text!r} {where}; expected a folder (new or existing)")
            break
    return path


def dummy_scans(text: str) -> int | str:
    """'auto' or a whole number >= 0 (``--dummy-scans``)."""
    if text == "auto":
        return text
    try:
        return natural(text)
    except _Error:
        raise _Error(f"expected 'auto' or a whole number >= 0; got {text!r}") from None
