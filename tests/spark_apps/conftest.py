"""One local[2] SparkSession for every in-process Spark test (starting one costs seconds)."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
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
