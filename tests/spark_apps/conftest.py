"""One local[2] SparkSession for every in-process Spark test (starting one costs seconds)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.spark_support import local_spark


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    yield from local_spark()
