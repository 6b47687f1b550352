"""The engine interface shared by the cohort runner and the r1DL backends.

An engine does two things and nothing more:

* ``map(func, items)``: run ``func(item)`` once per item, one task each,
  and return the results in input order (cohort runs: one subject per task).
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


@dataclass
class BlockSet:
    """Handle on blocks held by an engine's workers.

    Attributes
    ----------
    n_blocks : int
        Number of blocks.
    handle : object
        Engine-specific reference (a list, Dask futures, a cached RDD).
    """

    n_blocks: int
    handle: Any = field(repr=False)


class Engine(abc.ABC):
    """Abstract execution engine (see the module docstring)."""

    name: str = "engine"

    @abc.abstractmethod
    def map(self, func: Callable, items: Sequence) -> list:
        """Run ``func(item)`` for every item, one task each; results in order."""

    @abc.abstractmethod
    def load_blocks(self, loader: Callable[[int], Any], n_blocks: int) -> BlockSet:
        """Have workers call ``loader(i)`` for ``i < n_blocks`` and keep the blocks."""

    @abc.abstractmethod
    def map_blocks(self, blocks: BlockSet, func: Callable, *args) -> list:
        """``[func(block, *args) for block in blocks]``, in block order."""

    @abc.abstractmethod
    def sum_blocks(self, blocks: BlockSet, func: Callable, *args):
        """``sum(func(block, *args) for block in blocks)``, by tree reduction."""

    def release(self, blocks: BlockSet) -> None:
        """Free the blocks held for ``blocks``."""

    def close(self) -> None:
        """Release what the engine started (pools, clusters, contexts)."""

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class SerialEngine(Engine):
    """Everything in this process, in order: the reference for the others."""

    name = "serial"

    def map(self, func: Callable, items: Sequence) -> list:
        return [func(item) for item in items]

    def load_blocks(self, loader: Callable[[int], Any], n_blocks: int) -> BlockSet:
        return BlockSet(n_blocks, [loader(i) for i in range(n_blocks)])

    def map_blocks(self, blocks: BlockSet, func: Callable, *args) -> list:
        return [func(block, *args) for block in blocks.handle]

    def sum_blocks(self, blocks: BlockSet, func: Callable, *args):
        return tree_sum([func(block, *args) for block in blocks.handle])

    def release(self, blocks: BlockSet) -> None:
        blocks.handle = []


def tree_sum(values: list):
    """Pairwise (tree) sum of a list, the order Spark's treeReduce uses."""
    if not values:
        raise ValueError("Cannot sum an empty list of blocks.")
    values = list(values)
    while len(values) > 1:
        paired = [values[i] + values[i + 1] for i in range(0, len(values) - 1, 2)]
        if len(values) % 2:
            paired.append(values[-1])
        values = paired
    return values[0]
