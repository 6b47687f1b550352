"""PySpark worker daemon that imports connscale and torch before forking.

Spark starts ``python -m <spark.python.daemon.module>`` once per executor
and forks a Python worker from it for each task slot; importing connscale
here means every forked worker starts with torch already loaded instead of
importing it itself (seconds per worker). Used for local masters.
"""

import torch  # noqa: F401 - ``import connscale`` alone no longer imports it (lazy API)
from pyspark.daemon import manager

import connscale
import connscale.engines.local  # noqa: F401

if __name__ == "__main__":
    manager()
