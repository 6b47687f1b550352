"""The engine interface shared by the cohort runner and the r1DL backends.

An engine does two things and nothing more:

* ``map(func, items)``: run ``func(item)`` once per item, one task each,
  and return the results in input order (cohort runs: one subject per task).
  A task is tried at most ``1 + retries`` times, whether it raised or its
  worker process died (killed, crashed, out of memory); with
  ``errors='return'`` a task that failed every attempt gives a
  :class:`TaskFailure` in its place and the other items still run.
* block work: ``load_blocks(loader, n_blocks)`` makes every worker build and
  keep its own blocks (``loader(i)`` is called where block ``i`` lives, so the
  driver never ships the data); then ``map_blocks(blocks, func, *args)``
  returns ``[func(block_i, *args) for i]`` in block order ("map, then
  concatenate") and ``sum_blocks(blocks, func, *args)`` returns
  ``sum_i func(block_i, *args)`` computed by a tree reduction ("map, then
  sum"). ``args`` are broadcast once per call and released after it.
  ``release(blocks)`` frees the blocks.

Functions and arguments must be picklable (module-level functions), since
the process-pool, Dask and Spark engines run them in other processes.
Engines are context managers; ``close()`` releases what they started.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from connscale._validation import check_option


@dataclass
class BlockSet:
    """Handle on blocks held by an engine's workers.

    Attributes
    ----------
    n_blocks : int
        Number of blocks.
    handle : object
        Engine-specific reference (a list, Dask futures, a cached RDD).

    Examples
    --------
    >>> import math
    >>> from connscale.engines import get_engine
    >>> engine = get_engine("serial")
    >>> blocks = engine.load_blocks(lambda i: [float(i)] * 3, 4)  # 4 blocks of 3 values
    >>> blocks.n_blocks
    4
    """

    n_blocks: int
    handle: Any = field(repr=False)


@dataclass(frozen=True)
class TaskFailure:
    """A ``map`` task that failed on every attempt (``errors='return'``).

    Attributes
    ----------
    reason : str
        One line: what went wrong on the last attempt.
    attempts : int
        How many times the task was tried (``1 + retries``).
    worker_lost : bool
        True when the worker process running it died (killed by a signal,
        ``os._exit``, a segfault, the out-of-memory killer) instead of the
        task raising an exception.

    Examples
    --------
    >>> import math
    >>> from connscale.engines import get_engine
    >>> with get_engine("serial") as engine:
    ...     results = engine.map(math.sqrt, [4.0, -1.0], errors="return")
    >>> results[0], results[1].reason, results[1].worker_lost
    (2.0, 'ValueError: math domain error', False)
    """

    reason: str
    attempts: int
    worker_lost: bool


_ERRORS = ("raise", "return")


def check_errors(errors: str) -> str:
    """Validate ``map``'s ``errors`` option."""
    return check_option(errors, "errors", set(_ERRORS))


def one_line(text: str, limit: int = 300) -> str:
    """First non-empty line of ``text``, at most ``limit`` characters."""
    line = next((part.strip() for part in str(text).splitlines() if part.strip()), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


class Engine(abc.ABC):
    """Abstract execution engine (see the module docstring).

    Examples
    --------
    >>> from connscale.engines import Engine, get_engine
    >>> with get_engine("serial") as engine:
    ...     print(isinstance(engine, Engine), engine.name)
    True serial
    """

    name: str = "engine"

    @abc.abstractmethod
    def map(
        self,
        func: Callable,
        items: Sequence,
        *,
        errors: str = "raise",
        on_result: Callable[[int, Any], None] | None = None,
    ) -> list:
        """Run ``func(item)`` for every item, one task each; results in order.

        A task is tried at most ``1 + retries`` times, whether it raised or
        its worker died. ``errors='raise'`` raises the error of the first
        task (in input order) that failed every attempt; ``errors='return'``
        puts a :class:`TaskFailure` in that task's place and returns.
        ``on_result(index, result)``, when given, is called in this process
        as each task's result (or ``TaskFailure``) is final (progress).

        Parameters
        ----------
        func : callable
            A picklable (module-level) function of one item.
        items : sequence
            One task per item.
        errors : {'raise', 'return'}, default='raise'
            Raise the first failure, or return a :class:`TaskFailure` in its place.
        on_result : callable or None, default=None
            Called as ``on_result(index, result)`` as each task's result is final.

        Returns
        -------
        list
            The results (or :class:`TaskFailure`) in input order.

        Examples
        --------
        >>> from connscale.engines import get_engine
        >>> with get_engine("serial") as engine:
        ...     engine.map(len, ["a", "bcd"])
        [1, 3]
        """

    @abc.abstractmethod
    def load_blocks(self, loader: Callable[[int], Any], n_blocks: int) -> BlockSet:
        """Have workers call ``loader(i)`` for ``i < n_blocks`` and keep the blocks.

        Parameters
        ----------
        loader : callable
            A picklable function: ``loader(i)`` builds block ``i``.
        n_blocks : int
            The number of blocks.

        Returns
        -------
        BlockSet
            The handle on the blocks, for :meth:`map_blocks`, :meth:`sum_blocks`
            and :meth:`release`.

        Examples
        --------
        >>> import math
        >>> from connscale.engines import get_engine
        >>> engine = get_engine("serial")
        >>> blocks = engine.load_blocks(lambda i: [float(i)] * 3, 4)  # 4 blocks of 3 values
        >>> blocks.n_blocks
        4
        """

    @abc.abstractmethod
    def map_blocks(self, blocks: BlockSet, func: Callable, *args) -> list:
        """``[func(block, *args) for block in blocks]``, in block order.

        Parameters
        ----------
        blocks : BlockSet
            From :meth:`load_blocks`.
        func : callable
            A picklable function ``func(block, *args)``.
        *args
            Sent to the workers once for the call.

        Returns
        -------
        list
            One result per block, in block order.

        Examples
        --------
        >>> import math
        >>> from connscale.engines import get_engine
        >>> engine = get_engine("serial")
        >>> blocks = engine.load_blocks(lambda i: [float(i)] * 3, 4)  # 4 blocks of 3 values
        >>> engine.map_blocks(blocks, sum)
        [0.0, 3.0, 6.0, 9.0]
        """

    @abc.abstractmethod
    def sum_blocks(self, blocks: BlockSet, func: Callable, *args) -> Any:
        """``sum(func(block, *args) for block in blocks)``, by tree reduction.

        Parameters
        ----------
        blocks : BlockSet
            From :meth:`load_blocks`.
        func : callable
            A picklable function ``func(block, *args)``.
        *args
            Sent to the workers once for the call.

        Returns
        -------
        object
            The sum of the blocks' results (:func:`tree_sum`'s order).

        Examples
        --------
        >>> import math
        >>> from connscale.engines import get_engine
        >>> engine = get_engine("serial")
        >>> blocks = engine.load_blocks(lambda i: [float(i)] * 3, 4)  # 4 blocks of 3 values
        >>> engine.sum_blocks(blocks, sum)
        18.0
        """

    def release(self, blocks: BlockSet) -> None:  # noqa: B027 - optional hook
        """Free the blocks held for ``blocks`` (nothing, where none are held).

        Parameters
        ----------
        blocks : BlockSet
            From :meth:`load_blocks`.

        Examples
        --------
        >>> import math
        >>> from connscale.engines import get_engine
        >>> engine = get_engine("serial")
        >>> blocks = engine.load_blocks(lambda i: [float(i)] * 3, 4)  # 4 blocks of 3 values
        >>> engine.release(blocks)
        """

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what the engine started (pools, clusters, contexts).

        Examples
        --------
        >>> from connscale.engines import get_engine
        >>> engine = get_engine("serial")
        >>> engine.close()  # or use the engine as a context manager
        """

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class SerialEngine(Engine):
    """Everything in this process, in order: the reference for the others.

    Examples
    --------
    >>> from connscale.engines import SerialEngine
    >>> SerialEngine().map(abs, [-1, 2])
    [1, 2]
    """

    name = "serial"

    def map(
        self,
        func: Callable,
        items: Sequence,
        *,
        errors: str = "raise",
        on_result: Callable[[int, Any], None] | None = None,
    ) -> list:
        """Run ``func(item)`` for every item in this process, in order (see :meth:`Engine.map`).

        Parameters
        ----------
        func : callable
            A picklable (module-level) function of one item.
        items : sequence
            One task per item.
        errors : {'raise', 'return'}, default='raise'
            Raise the first failure, or return a :class:`TaskFailure` in its place.
        on_result : callable or None, default=None
            Called as ``on_result(index, result)`` as each task's result is final.

        Returns
        -------
        list
            The results (or :class:`TaskFailure`) in input order.

        Examples
        --------
        >>> from connscale.engines import SerialEngine
        >>> seen = []
        >>> SerialEngine().map(abs, [-1, -2], on_result=lambda i, r: seen.append((i, r)))
        [1, 2]
        >>> seen
        [(0, 1), (1, 2)]
        """
        # No retries and no worker to lose: a task that kills its process
        # kills this one.
        raising = check_errors(errors) == "raise"
        results = []
        for index, item in enumerate(items):
            try:
                results.append(func(item))
            except Exception as exc:  # noqa: BLE001 - raised, or returned as a TaskFailure
                if raising:
                    raise
                results.append(TaskFailure(one_line(f"{type(exc).__name__}: {exc}"), 1, False))
            if on_result is not None:
                on_result(index, results[-1])
        return results

    def load_blocks(self, loader: Callable[[int], Any], n_blocks: int) -> BlockSet:
        """Call ``loader(i)`` for ``i < n_blocks`` here and keep the blocks in a list.

        Parameters
        ----------
        loader : callable
            A picklable function: ``loader(i)`` builds block ``i``.
        n_blocks : int
            The number of blocks.

        Returns
        -------
        BlockSet
            The handle on the blocks, for :meth:`map_blocks`, :meth:`sum_blocks`
            and :meth:`release`.

        Examples
        --------
        >>> from connscale.engines import SerialEngine
        >>> SerialEngine().load_blocks(lambda i: i * 10, 3).handle
        [0, 10, 20]
        """
        return BlockSet(n_blocks, [loader(i) for i in range(n_blocks)])

    def map_blocks(self, blocks: BlockSet, func: Callable, *args) -> list:
        """Return ``[func(block, *args) for block in blocks]``, in block order.

        Parameters
        ----------
        blocks : BlockSet
            From :meth:`load_blocks`.
        func : callable
            A picklable function ``func(block, *args)``.
        *args
            Sent to the workers once for the call.

        Returns
        -------
        list

        Examples
        --------
        >>> from connscale.engines import SerialEngine
        >>> engine = SerialEngine()
        >>> engine.map_blocks(engine.load_blocks(lambda i: i, 3), pow, 2)
        [0, 1, 4]
        """
        return [func(block, *args) for block in blocks.handle]

    def sum_blocks(self, blocks: BlockSet, func: Callable, *args) -> Any:
        """Return ``sum(func(block, *args) for block in blocks)``, by :func:`tree_sum`.

        Parameters
        ----------
        blocks : BlockSet
            From :meth:`load_blocks`.
        func : callable
            A picklable function ``func(block, *args)``.
        *args
            Sent to the workers once for the call.

        Returns
        -------
        object

        Examples
        --------
        >>> from connscale.engines import SerialEngine
        >>> engine = SerialEngine()
        >>> engine.sum_blocks(engine.load_blocks(lambda i: i, 4), pow, 2)
        14
        """
        return tree_sum([func(block, *args) for block in blocks.handle])

    def release(self, blocks: BlockSet) -> None:
        """Drop the blocks' list.

        Parameters
        ----------
        blocks : BlockSet
            From :meth:`load_blocks`.

        Examples
        --------
        >>> from connscale.engines import SerialEngine
        >>> engine = SerialEngine()
        >>> blocks = engine.load_blocks(lambda i: i, 2)
        >>> engine.release(blocks)
        >>> blocks.handle
        []
        """
        blocks.handle = []

    def __repr__(self) -> str:
        return "SerialEngine()"


def tree_sum(values: list) -> Any:
    """Pairwise (tree) sum of a list, the order Spark's treeReduce uses.

    Parameters
    ----------
    values : list
        Values that support ``+`` (numbers, arrays, tensors).

    Returns
    -------
    object
        ``((v0 + v1) + (v2 + v3)) + ...``.

    Examples
    --------
    >>> from connscale.engines import tree_sum
    >>> tree_sum([1, 2, 3, 4, 5])
    15
    """
    if not values:
        raise ValueError("Cannot sum an empty list of blocks.")
    values = list(values)
    while len(values) > 1:
        paired = [values[i] + values[i + 1] for i in range(0, len(values) - 1, 2)]
        if len(values) % 2:
            paired.append(values[-1])
        values = paired
    return values[0]
