"""Fixtures for the tests that run the platform beside a real Apache Kafka cluster.

``kafka`` is one single-node cluster shared by a test process (each test uses topics of its own);
``private_kafka`` starts a cluster a test may stop, kill or reconfigure. A Kafka that cannot be
had follows the missing-server rule of tests/conftest.py (a failure under CI, a skip elsewhere).
``schema_registry`` is the export tests' registry, for a typed export of what a real producer wrote,
and ``spark`` their local Spark session, to read the table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

from tests.conftest import provided, unavailable
from tests.export.conftest import (
    schema_registry,  # noqa: F401  (the typed export's real registry)
    spark,  # noqa: F401  (the test process's local Spark session)
)
from tests.real_kafka.cluster import KafkaCluster, KafkaDistribution, kafka_cluster, kafka_distribution
from tests.real_kafka.support import BesideKafka
from tests.services import S3Endpoint, ServiceUnavailable


@pytest.fixture(scope="session")
def kafka_dist() -> KafkaDistribution:
    try:
        return kafka_distribution()
    except ServiceUnavailable as exc:
        unavailable("Apache Kafka", exc)


@pytest.fixture(scope="session")
def kafka(kafka_dist: KafkaDistribution) -> Iterator[KafkaCluster]:
    """A single-node KRaft cluster for the whole test process."""
    yield from provided("Apache Kafka", kafka_cluster(1, distribution=kafka_dist))


PrivateKafka = Callable[..., AbstractContextManager[KafkaCluster]]


@pytest.fixture()
def private_kafka(kafka_dist: KafkaDistribution) -> PrivateKafka:
    """``with private_kafka(nodes=3, settings={...}) as cluster``: a cluster of the test's own."""

    @contextmanager
    def start(nodes: int = 1, settings: Mapping[str, str] | None = None, **kwargs: object) -> Iterator[KafkaCluster]:
        try:
            cm = kafka_cluster(nodes, settings=settings, distribution=kafka_dist, **kwargs)  # type: ignore[arg-type]
            cluster = cm.__enter__()
        except ServiceUnavailable as exc:
            unavailable("Apache Kafka", exc)
        try:
            yield cluster
        except BaseException as exc:
            if not cm.__exit__(type(exc), exc, exc.__traceback__):
                raise
        else:
            cm.__exit__(None, None, None)

    return start


@pytest.fixture()
def beside(tmp_path: Path, s3_endpoint: S3Endpoint) -> Callable[..., BesideKafka]:
    """``beside(cluster, node_id)``: the platform configured on that node's log dirs, with a real S3
    bucket (moto's server) and a SQLite metadata file."""

    def make(cluster: KafkaCluster, node_id: int = 1, **kwargs: object) -> BesideKafka:
        return BesideKafka.create(tmp_path / f"platform-{node_id}", cluster, node_id, s3_endpoint, **kwargs)  # type: ignore[arg-type]

    return make
