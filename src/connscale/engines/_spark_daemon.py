"""PySpark worker daemon that imports connscale (numpy, torch) before forking.

Spark starts ``python -m <spark.python.daemon.module>`` once per executor
and forks a Python worker from it for each task slot; importing connscale
here means every forked worker starts with torch already loaded instead of
importing it itself (seconds per worker). Used for local masters.
"""

import connscale  # noqa: F401  (preloaded for the forked workers)
import connscale.engines.local  # noqa: F401
from pyspark.daemon import manager

if __name__ == "__main__":
    manager()
