"""The process's sink: nothing is sent outside ``emitting``, a block's sink is restored when it ends
(also when it raises), and ``emit`` sends a counter as a count and a gauge as a value, tagged with
the partition and, only for a replica's metric, the broker."""

from __future__ import annotations

import pytest

from tests.monitoring.test_collect import RecordingSink
from tiering_core.metrics.names import (
    REMOTE_COPY_BYTES,
    REMOTE_FETCH_REQUESTS,
    REMOTE_LOG_SIZE_BYTES,
    MetricKind,
    MetricSpec,
)
from tiering_core.metrics.sink import NullSink, Tags, current_sink, emit, emitting, partition_tags


def test_partition_tags_name_the_broker_only_when_given() -> None:
    assert partition_tags("orders", 7) == {"topic": "orders", "partition": "7"}
    assert partition_tags("orders", 7, 0) == {"topic": "orders", "partition": "7", "broker": "0"}


def test_outside_a_block_runs_report_to_nothing() -> None:
    assert isinstance(current_sink(), NullSink)
    emit(REMOTE_COPY_BYTES, 10, "orders", 0, broker_id=1)  # sent nowhere, and no error


def test_emitting_installs_the_sink_for_the_block_and_restores_the_one_before() -> None:
    outer, inner = RecordingSink(), RecordingSink()
    with emitting(outer):
        with emitting(inner) as installed:
            assert installed is inner and current_sink() is inner
        assert current_sink() is outer
        with pytest.raises(RuntimeError), emitting(inner):
            raise RuntimeError("a run failed")
        assert current_sink() is outer
    assert isinstance(current_sink(), NullSink)


def test_emit_tags_a_replica_metric_with_its_broker_and_a_partition_metric_without() -> None:
    assert "broker" in REMOTE_COPY_BYTES.labels and "broker" not in REMOTE_FETCH_REQUESTS.labels
    sink = RecordingSink()
    with emitting(sink):
        emit(REMOTE_COPY_BYTES, 4096, "orders", 2, broker_id=3)
        emit(REMOTE_FETCH_REQUESTS, 1, "orders", 2, broker_id=3)
        emit(REMOTE_COPY_BYTES, 5, "orders", 2)
    assert sink.sent == [
        (REMOTE_COPY_BYTES.name, 4096, {"topic": "orders", "partition": "2", "broker": "3"}),
        (REMOTE_FETCH_REQUESTS.name, 1, {"topic": "orders", "partition": "2"}),
        (REMOTE_COPY_BYTES.name, 5, {"topic": "orders", "partition": "2"}),
    ]


class KindSink(RecordingSink):
    """Keeps which method each value came through."""

    def __init__(self) -> None:
        super().__init__()
        self.kinds: list[MetricKind] = []

    def incr(self, spec: MetricSpec, count: int, tags: Tags) -> None:
        self.kinds.append(MetricKind.COUNTER)
        super().incr(spec, count, tags)

    def gauge(self, spec: MetricSpec, value: float, tags: Tags) -> None:
        self.kinds.append(MetricKind.GAUGE)
        super().gauge(spec, value, tags)


def test_a_counter_is_sent_as_a_whole_count_and_a_gauge_as_its_value() -> None:
    sink = KindSink()
    with emitting(sink):
        emit(REMOTE_COPY_BYTES, 12.0, "orders", 0)
        emit(REMOTE_LOG_SIZE_BYTES, 81920.5, "orders", 0)
    assert sink.kinds == [REMOTE_COPY_BYTES.kind, REMOTE_LOG_SIZE_BYTES.kind] == [MetricKind.COUNTER, MetricKind.GAUGE]
    (_, count, _), (_, size, _) = sink.sent
    assert type(count) is int and count == 12
    assert size == 81920.5
