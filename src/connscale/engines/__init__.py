"""Execution engines: one small interface over a process pool, Dask and Spark.

Two kinds of work run through it: one task per item (the cohort runner: one
subject per task) and map/reduce over blocks that workers load and keep
(r1DL: voxel blocks of S). See :class:`connscale.engines.base.Engine`.
"""

from connscale.engines.base import BlockSet, Engine, SerialEngine

__all__ = ["BlockSet", "Engine", "SerialEngine"]
