"""Input validation shared by every public function.

Messages say what was expected and what arrived, as scikit-learn's do.

Parameters are validated once, at the public entry: each public function
(or estimator) declares a constraint per parameter and :func:`validate_params`
checks them before the body runs; functions it calls skip their own
declared checks (see :func:`validate_params`). What depends on the data (a
window no longer than the series, a rank below the number of series) is
checked in the body, where the data is known.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import os
import re
import sys
from collections.abc import Callable, Mapping
from numbers import Integral, Real
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from connscale._choices import DEVICES

if TYPE_CHECKING:
    import torch

# Fewest time points in a sliding window, everywhere (dynamic_correlation,
# pairwise_dfc, the cohort jobs): with 2 points every Pearson r is +-1 (or
# undefined), so 3 is the shortest window whose correlation says anything.
MIN_WINDOW_LENGTH = 3

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def user_stacklevel() -> int:
    """Return the ``stacklevel`` of ``warnings.warn`` naming the first caller outside connscale.

    As pandas' ``find_stack_level``: a fixed level drifts
    whenever a wrapper (:func:`validate_params`) or a helper adds a frame.
    Call it in the argument list of ``warnings.warn``.
    """
    frame = sys._getframe(1)  # the function that warns: stacklevel 1
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
        level += 1
    return level if frame is not None else 1


def check_timeseries(
    timeseries,
    *,
    name: str = "timeseries",
    min_timepoints: int = 3,
    dtype=None,
) -> np.ndarray:
    """Validate a (n_timepoints, n_series) array.

    Parameters
    ----------
    timeseries : array-like of shape (n_timepoints, n_series)
    name : str
        Name used in error messages.
    min_timepoints : int, default=3
        Fewest time points accepted.
    dtype : numpy dtype or None
        Convert to this dtype; None keeps float32/float64 and converts
        anything else to float64.

    Returns
    -------
    ndarray of shape (n_timepoints, n_series)
    """
    try:
        import torch

        if isinstance(timeseries, torch.Tensor):
            timeseries = timeseries.detach().cpu().numpy()
    except ImportError:  # pragma: no cover - torch is a hard dependency
        pass
    array = np.asarray(timeseries)
    if array.dtype == object:
        raise ValueError(f"'{name}' must be a numeric array; got an object array.")
    check_real(array, name)
    if array.ndim != 2:
        raise ValueError(
            f"'{name}' must be a 2-D array of shape (n_timepoints, n_series); "
            f"got an array of shape {array.shape}."
        )
    if not np.issubdtype(array.dtype, np.number) and array.dtype != bool:
        raise ValueError(f"'{name}' must be numeric; got dtype {array.dtype}.")
    if dtype is not None:
        array = array.astype(dtype, copy=False)
    elif array.dtype not in (np.float32, np.float64):
        array = array.astype(np.float64)
    n_timepoints, n_series = array.shape
    if n_timepoints < min_timepoints:
        raise ValueError(
            f"'{name}' must have at least {min_timepoints} time points (rows); got "
            f"{n_timepoints} (shape {array.shape}). Arrays are (n_timepoints, "
            "n_series): transpose yours if the axes are swapped."
        )
    if n_series < 1:
        raise ValueError(f"'{name}' has no series (shape {array.shape}).")
    finite = np.isfinite(array)
    if not finite.all():
        bad = np.flatnonzero(~finite.all(axis=0))
        n_nan = int(np.isnan(array).sum())
        n_inf = int((~finite).sum()) - n_nan
        raise ValueError(
            f"'{name}' contains {n_nan} NaN and {n_inf} infinite value(s) in "
            f"{bad.size} series (first: column {bad[0]}). Clean or drop them first."
        )
    return array


def check_real(array, name: str) -> None:
    """Refuse complex arrays: dropping the imaginary part would lose data."""
    if np.iscomplexobj(array):
        raise ValueError(
            f"'{name}' must hold real numbers; got complex values (dtype {array.dtype}). "
            "Pass the real part, magnitude or phase explicitly."
        )


def check_not_all_constant(array: np.ndarray, name: str = "timeseries") -> None:
    """Raise when every series (column) of a finite 2-D array is constant.

    Every correlation would be undefined.
    """
    if array.shape[0] and bool((array == array[:1]).all()):
        raise ValueError(
            f"Every series of '{name}' is constant (zero variance; shape {array.shape}); "
            "their correlations are all undefined. Expected at least one varying series."
        )


def check_output_path(out, name: str = "out") -> Path:
    """Return an output file path that is not a directory and whose parent is not a file."""
    path = Path(os.fspath(out))
    if path.is_dir():
        raise ValueError(f"'{name}' must be a file path; got {path}, which is a directory.")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ValueError(
                    f"'{name}' cannot be created: {parent} is a file, not a directory."
                )
            break
    return path


def check_int(value, name: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """Check an integer parameter lies in [minimum, maximum]."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ValueError(f"'{name}' must be an integer; got {value!r}.")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"'{name}' must be >= {minimum}; got {value}.")
    if maximum is not None and value > maximum:
        raise ValueError(f"'{name}' must be <= {maximum}; got {value}.")
    return value


def to_timepoints(value, name: str, *, t_r: float | None = None):
    """Convert a duration to time points.

    Ints pass through; a string ending in ``s``
    (``'44s'``) is seconds, divided by the repetition time ``t_r`` and
    rounded to the nearest time point; other strings must be integers.
    """
    if not isinstance(value, str):
        return value
    text = value.strip().lower()
    if text.endswith("s"):
        try:
            seconds = float(text[:-1])
        except ValueError:
            raise ValueError(
                f"'{name}' must be a number of time points or of seconds ('44s'); got {value!r}."
            ) from None
        if t_r is None:
            raise ValueError(
                f"'{name}' is given in seconds ({value!r}) but the repetition time is unknown; "
                "pass t_r (--t-r), or give it in time points."
            )
        t_r = check_positive(t_r, "t_r")
        if not np.isfinite(seconds) or seconds <= 0:
            raise ValueError(f"'{name}' must be a positive duration; got {value!r}.")
        return int(np.floor(seconds / t_r + 0.5))
    try:
        return int(text)
    except ValueError:
        raise ValueError(
            f"'{name}' must be a number of time points or of seconds ('44s'); got {value!r}."
        ) from None


def check_positive(value, name: str) -> float:
    """Check a number is finite and > 0."""
    if (
        isinstance(value, bool)
        or not isinstance(value, Real)
        or not np.isfinite(value)
        or value <= 0
    ):
        raise ValueError(f"'{name}' must be a number > 0; got {value!r}.")
    return float(value)


_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}


def parse_memory(memory_limit: int | float | str | None) -> int | None:
    """Parse a memory size given as bytes or as a string such as ``"8GB"``.

    Parameters
    ----------
    memory_limit : int, float, str or None
        A number of bytes, or a number followed by a unit (``B``, ``KB``,
        ``MB``, ``GB``, ``TB`` in powers of 1000; ``KiB``, ``MiB``, ``GiB``,
        ``TiB`` in powers of 1024). None means no limit.

    Returns
    -------
    int or None
        The size in bytes.
    """
    if memory_limit is None:
        return None
    if isinstance(memory_limit, bool):
        raise ValueError(
            f"'memory_limit' must be bytes or a size like '8GB'; got {memory_limit!r}."
        )
    if isinstance(memory_limit, (int, float)):
        value = int(memory_limit)
    else:
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(memory_limit))
        if match is None or match.group(2).lower() not in _UNITS:
            raise ValueError(
                "'memory_limit' must be a number of bytes or a size such as "
                f"'512MB', '8GB' or '2GiB'; got {memory_limit!r}."
            )
        value = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    if value <= 0:
        raise ValueError(f"'memory_limit' must be positive; got {memory_limit!r}.")
    return value


def resolve_n_jobs(n_jobs: int | None) -> int:
    """Return the number of workers ``n_jobs`` stands for, as scikit-learn counts them.

    A positive count, or -1 for every core, -2 for all but one, ...;
    None is every core. 0, and fewer than -(cores), are errors.

    Every ``n_jobs`` of connscale (engines, cohort, BIDS-App, classification)
    and the command line's ``--n-jobs`` go through this one rule.
    """
    cpus = os.cpu_count() or 1
    if n_jobs is None:
        return cpus
    if isinstance(n_jobs, (bool, np.bool_)) or not isinstance(n_jobs, (Integral, np.integer)):
        raise ValueError(f"'n_jobs' must be an integer or None; got {n_jobs!r}.")
    n_jobs = int(n_jobs)
    if n_jobs == 0 or n_jobs < -cpus:
        raise ValueError(
            f"'n_jobs' must be a positive number of workers, or -1 for all {cpus} cores "
            f"(-2 for all but one, ...); got {n_jobs}."
        )
    return n_jobs if n_jobs > 0 else cpus + 1 + n_jobs


def check_window(
    window_length,
    step,
    n_timepoints: int | None = None,
    *,
    minimum: int = MIN_WINDOW_LENGTH,
    where: str = "the number of time points",
    t_r: float | None = None,
) -> tuple[int, int]:
    """Validate a sliding window's length and step.

    Check ``minimum <= window_length <= n_timepoints``
    (no upper bound when ``n_timepoints`` is None) and ``step >= 1``.
    ``minimum`` defaults to :data:`MIN_WINDOW_LENGTH`, the one window minimum
    of every correlation window. ``where`` names what ``n_timepoints``
    counts, for the message. Either may be given in seconds (``'44s'``) with
    the repetition time ``t_r`` (see :func:`to_timepoints`). Returns
    (window_length, step) as ints, in time points.
    """
    window_length = to_timepoints(window_length, "window_length", t_r=t_r)
    step = to_timepoints(step, "step", t_r=t_r)
    window_length = check_int(window_length, "window_length", minimum=minimum)
    if n_timepoints is not None and window_length > n_timepoints:
        raise ValueError(
            f"'window_length' must be at most {where} ({n_timepoints}); got {window_length}."
        )
    return window_length, check_int(step, "step", minimum=1)


def check_kind_options(kind: str, threshold, absolute, rank, compute_error=False) -> None:
    """Check the rules between ``kind`` and the parameters that apply to some kinds only.

    They do not depend on the data, so the cohort checks them before its
    first scan): ``'sparse'`` needs a ``threshold`` (in (0, 1] with
    ``absolute``), ``'lowrank'`` a ``rank``; ``rank`` is for ``'lowrank'`` and
    ``'factor'``, ``compute_error`` too.
    """
    if kind == "sparse":
        if threshold is None:
            raise ValueError("kind='sparse' needs a 'threshold' in [-1, 1]; got None.")
        if absolute and threshold <= 0:
            raise ValueError(
                f"With absolute=True the threshold must be in (0, 1]; got {threshold}."
            )
    elif threshold is not None or absolute:
        name = "threshold" if threshold is not None else "absolute"
        raise ValueError(f"'{name}' applies to kind='sparse' only; got kind={kind!r}.")
    if kind == "lowrank" and rank is None:
        raise ValueError("kind='lowrank' needs a 'rank' (1 <= rank < n_series); got None.")
    if kind in ("triu", "sparse") and rank is not None:
        raise ValueError(f"'rank' applies to kind='lowrank' or 'factor'; got kind={kind!r}.")
    if compute_error and kind not in ("lowrank", "factor"):
        raise ValueError(
            f"'compute_error' applies to kind='lowrank' or 'factor'; got kind={kind!r}."
        )


def check_threshold(threshold, name: str = "threshold") -> float:
    """Check a correlation threshold lies in [-1, 1]."""
    if isinstance(threshold, bool) or not isinstance(threshold, Real):
        raise ValueError(f"'{name}' must be a number in [-1, 1]; got {threshold!r}.")
    threshold = float(threshold)
    if not -1.0 <= threshold <= 1.0:
        raise ValueError(f"'{name}' must lie in [-1, 1]; got {threshold}.")
    return threshold


def check_option(value, name: str, allowed) -> str:
    """Check a string option is one of ``allowed``."""
    if value not in allowed:
        raise ValueError(f"'{name}' must be one of {sorted(allowed)}; got {value!r}.")
    return value


def check_random_state(seed) -> np.random.Generator:
    """Turn None, an int or a Generator into a numpy Generator."""
    if seed is None or isinstance(seed, (Integral, np.integer)):
        return np.random.default_rng(seed)
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, np.random.RandomState):
        return np.random.default_rng(seed.randint(0, 2**31 - 1))
    raise ValueError(f"'random_state' must be None, an int or a numpy Generator; got {seed!r}.")


# --------------------------------------------------------------------------
# Declared parameter constraints (scikit-learn's validate_params style)
# --------------------------------------------------------------------------


class InvalidParameterError(ValueError, TypeError):
    """A parameter of a public function or estimator breaks its declared constraint.

    A ValueError (and a TypeError, as in scikit-learn), so the
    CLI reports it in one line.
    """


class _Constraint:
    """One allowed form of a parameter."""

    def is_satisfied_by(self, value) -> bool:
        raise NotImplementedError

    def __str__(self) -> str:
        raise NotImplementedError


_TYPE_NAMES = {
    Integral: "int",
    Real: "float",
    str: "str",
    bool: "bool",
    dict: "dict",
    list: "list",
    tuple: "tuple",
}


def _type_name(kind) -> str:
    return _TYPE_NAMES.get(kind, getattr(kind, "__qualname__", str(kind)))


class Interval(_Constraint):
    """A number of type ``kind`` in an interval.

    A number of type ``kind`` (``Integral`` or ``Real``) between ``left``
    and ``right`` (None: unbounded); ``closed`` is ``'left'``, ``'right'``,
    ``'both'`` or ``'neither'``. Booleans, NaN and infinities never match.
    """

    def __init__(self, kind, left, right, *, closed: str):
        if kind not in (Integral, Real):
            raise TypeError(f"Interval needs Integral or Real; got {kind!r}.")
        if closed not in ("left", "right", "both", "neither"):
            raise ValueError(
                f"'closed' must be 'left', 'right', 'both' or 'neither'; got {closed!r}."
            )
        self.kind, self.left, self.right, self.closed = kind, left, right, closed

    def is_satisfied_by(self, value) -> bool:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (self.kind, np.number)):
            return False
        if self.kind is Integral and not isinstance(value, (Integral, np.integer)):
            return False
        if not np.isfinite(value):
            return False
        if self.left is not None:
            if value < self.left or (value == self.left and self.closed in ("right", "neither")):
                return False
        if self.right is not None:
            if value > self.right or (value == self.right and self.closed in ("left", "neither")):
                return False
        return True

    def __str__(self) -> str:
        what = "an int" if self.kind is Integral else "a float"
        left = "-inf" if self.left is None else self.left
        right = "inf" if self.right is None else self.right
        opening = "[" if self.closed in ("left", "both") and self.left is not None else "("
        closing = "]" if self.closed in ("right", "both") and self.right is not None else ")"
        return f"{what} in the range {opening}{left}, {right}{closing}"


class Options(_Constraint):
    """One of a set of values of type ``kind``."""

    def __init__(self, kind, options):
        self.kind, self.options = kind, frozenset(options)

    def is_satisfied_by(self, value) -> bool:
        return isinstance(value, self.kind) and value in self.options

    def __str__(self) -> str:
        shown = ", ".join(repr(o) for o in sorted(self.options, key=repr))
        return f"a {_type_name(self.kind)} among {{{shown}}}"


class StrOptions(Options):
    """One of a set of strings."""

    def __init__(self, options):
        super().__init__(str, options)


class SequenceOf(_Constraint):
    """A non-empty list, tuple or 1-D array whose every item satisfies ``item``.

    E.g. several thresholds computed in one pass.
    """

    def __init__(self, item: _Constraint):
        self.item = item

    def is_satisfied_by(self, value) -> bool:
        if not isinstance(value, (list, tuple, np.ndarray)) or np.ndim(value) != 1:
            return False
        return len(value) > 0 and all(self.item.is_satisfied_by(v) for v in value)

    def __str__(self) -> str:
        return f"a non-empty sequence, each {self.item}"


class _InstanceOf(_Constraint):
    def __init__(self, kind):
        self.kind = kind

    def is_satisfied_by(self, value) -> bool:
        if self.kind in (Integral, Real) and isinstance(value, (bool, np.bool_)):
            return False
        return isinstance(value, self.kind)

    def __str__(self) -> str:
        name = _type_name(self.kind)
        return f"an {name}" if name[:1].lower() in "aeiou" else f"a {name}"


class _NoneConstraint(_Constraint):
    def is_satisfied_by(self, value) -> bool:
        return value is None

    def __str__(self) -> str:
        return "None"


class _Predicate(_Constraint):
    def __init__(self, test: Callable[[object], bool], description: str):
        self.test, self.description = test, description

    def is_satisfied_by(self, value) -> bool:
        try:
            return bool(self.test(value))
        except (TypeError, ValueError):
            return False

    def __str__(self) -> str:
        return self.description


def _is_array_like(value) -> bool:
    if isinstance(value, (str, bytes, Mapping)) or value is None:
        return False
    return (
        hasattr(value, "__array__") or hasattr(value, "__len__") and hasattr(value, "__getitem__")
    )


@runtime_checkable
class MemoryCounter(Protocol):
    """What a ``memory_limit`` may be besides a size.

    A memory planner that
    counts a whole task (:class:`connscale._compute.MemoryPlanner`), passed
    down so that the call counts its allocations into it.
    """

    device_budget: int
    host_budget: int

    def reserve_device(self, nbytes: int) -> None: ...

    def reserve_host(self, nbytes: int) -> None: ...


def _is_memory(value) -> bool:
    if isinstance(value, MemoryCounter):
        return True
    return value is not None and parse_memory(value) is not None


#: The device names the API and the command line take (and ``cuda:N``).
DEVICE_PATTERN = re.compile(rf"({'|'.join(DEVICES)}|cuda:\d+)", re.IGNORECASE)


def _is_device(value) -> bool:
    if isinstance(value, str):
        return DEVICE_PATTERN.fullmatch(value.strip()) is not None
    # A torch.device exists only once torch is imported: a name is checked without it
    # (importing torch takes seconds, which a call's readers need not wait for).
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.device) and value.type in ("cpu", "cuda")


#: The floating dtypes connscale computes in, by the names numpy gives them.
_DTYPES = {"float32": "float32", "float64": "float64", "single": "float32", "double": "float64"}


def resolve_dtype(dtype: str | np.dtype | torch.dtype | type = "float32") -> torch.dtype:
    """Turn a user's ``dtype`` argument into ``torch.float32`` or ``torch.float64``.

    Parameters
    ----------
    dtype : {'float32', 'float64'}, numpy dtype or torch dtype, default='float32'

    Returns
    -------
    torch.dtype
    """
    import torch

    if isinstance(dtype, torch.dtype):
        if dtype in (torch.float32, torch.float64):
            return dtype
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = str(dtype)
        if name in _DTYPES:
            return getattr(torch, _DTYPES[name])
    raise ValueError(f"'dtype' must be 'float32' or 'float64'; got {dtype!r}.")


def _is_dtype(value) -> bool:
    resolve_dtype(value)
    return True


def _is_random_state(value) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return False
    return value is None or isinstance(
        value, (Integral, np.random.Generator, np.random.RandomState)
    )


def _is_n_jobs(value) -> bool:
    if value is None:
        return False  # declared separately
    resolve_n_jobs(value)
    return True


_NAMED = {
    "array-like": _Predicate(_is_array_like, "an array-like"),
    "boolean": _Predicate(lambda v: isinstance(v, (bool, np.bool_)), "a bool"),
    "random_state": _Predicate(
        _is_random_state, "an int, a numpy Generator, a RandomState or None"
    ),
    "memory": _Predicate(
        _is_memory,
        "a number of bytes, a size such as '512MB', '8GB' or '2GiB', or a MemoryPlanner",
    ),
    "device": _Predicate(_is_device, "'auto', 'cpu', 'cuda', 'cuda:N' or a torch.device"),
    "dtype": _Predicate(_is_dtype, "'float32' or 'float64' (or the numpy/torch dtype)"),
    "n_jobs": _Predicate(_is_n_jobs, "a positive int, or -1 for every core (-2: all but one, ...)"),
    "path": _Predicate(lambda v: isinstance(v, (str, os.PathLike)), "a path"),
    "callable": _Predicate(callable, "a callable"),
}


def make_constraint(spec) -> _Constraint:
    """Return the constraint object of one declaration.

    The declaration is a constraint, None, a type
    or one of the names ``'array-like'``, ``'boolean'``, ``'random_state'``,
    ``'memory'``, ``'device'``, ``'dtype'``, ``'n_jobs'``, ``'path'``,
    ``'callable'``.
    """
    if isinstance(spec, _Constraint):
        return spec
    if spec is None:
        return _NoneConstraint()
    if isinstance(spec, str):
        try:
            return _NAMED[spec]
        except KeyError:
            raise ValueError(
                f"Unknown constraint {spec!r}; expected one of {sorted(_NAMED)}."
            ) from None
    if isinstance(spec, type):
        return _InstanceOf(spec)
    raise TypeError(f"Cannot make a constraint of {spec!r}.")


def _describe(constraints: list[_Constraint]) -> str:
    words = [str(c) for c in constraints if not isinstance(c, _NoneConstraint)]
    if any(isinstance(c, _NoneConstraint) for c in constraints):
        words.append("None")
    if len(words) == 1:
        return words[0]
    return f"{', '.join(words[:-1])} or {words[-1]}"


def validate_parameter_values(
    constraints: Mapping[str, list], params: Mapping[str, object], caller: str
) -> None:
    """Check each parameter of ``params`` named in ``constraints``.

    Each is checked against its declared constraints (any one must hold).

    Raises
    ------
    InvalidParameterError
        ``"The 'x' parameter of caller must be an int in the range [1, inf).
        Got 0 instead."``
    """
    for name, value in params.items():
        if name not in constraints:
            continue
        checks = [make_constraint(spec) for spec in constraints[name]]
        if any(check.is_satisfied_by(value) for check in checks):
            continue
        raise InvalidParameterError(
            f"The {name!r} parameter of {caller} must be {_describe(checks)}. "
            f"Got {value!r} instead."
        )


_SKIP_NESTED = contextvars.ContextVar("connscale_skip_nested_validation", default=False)


def validate_params(constraints: Mapping[str, list], *, prefer_skip_nested_validation: bool = True):
    """Decorate a public function with its declared parameter constraints.

    The arguments of each call are checked before the body runs. With
    ``prefer_skip_nested_validation`` (the default), public functions called
    from the body skip their own declared checks: the outer entry already
    validated what it passes on (validate once, at the entry). The
    constraints stay readable as ``function.parameter_constraints`` (the
    cohort checks its job's parameters against them).
    """

    def decorate(func):
        signature = inspect.signature(func)
        unknown = set(constraints) - set(signature.parameters)
        if unknown:
            raise ValueError(
                f"Constraints of {func.__qualname__} name no parameter: {sorted(unknown)}."
            )

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            if _SKIP_NESTED.get():
                return func(*args, **kwargs)
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            validate_parameter_values(constraints, bound.arguments, func.__qualname__)
            token = _SKIP_NESTED.set(prefer_skip_nested_validation)
            try:
                return func(*args, **kwargs)
            finally:
                _SKIP_NESTED.reset(token)

        wrapper.parameter_constraints = dict(constraints)
        return wrapper

    return decorate


def validate_estimator_params(estimator, method: str = "fit") -> None:
    """Check an estimator's constructor parameters.

    They are checked against its class's ``_parameter_constraints`` (call at
    the top of ``fit``).
    """
    constraints = type(estimator)._parameter_constraints
    params = {name: getattr(estimator, name) for name in constraints}
    validate_parameter_values(constraints, params, f"{type(estimator).__name__}.{method}")


@contextlib.contextmanager
def skip_nested_validation():
    """Make calls inside this block skip their declared checks.

    For an entry, such as an estimator's ``fit``, that validated its
    parameters itself.
    """
    token = _SKIP_NESTED.set(True)
    try:
        yield
    finally:
        _SKIP_NESTED.reset(token)
