"""The one local[2] SparkSession of a test process: the in-process Spark tests of every directory
get the same session (``getOrCreate``), so the JVM starts once (starting one costs seconds)."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from typing import Any


def local_spark() -> Iterator[Any]:
    """A session fixture's body: the local[2] session with the project's packages shipped, stopped
    when the test process ends."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from spark_apps import runtime

    session = (
        SparkSession.builder.master("local[2]")
        .appName("tiering-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.task.maxFailures", "1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    runtime.ship_packages(session.sparkContext)
    yield session
    session.stop()
    # py4j logs "Closing down clientserver connection" from finalizers at interpreter exit, after
    # pytest closed the streams logging writes to.
    logging.getLogger("py4j").setLevel(logging.WARNING)
