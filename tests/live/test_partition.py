"""Which wins when the broker's files and the live cluster disagree (tiering_core/live/partition.py),
on partition directories written by the test writer and a real SQLite metadata store."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engine_support import write_segments
from tiering_core.kafka.checkpoints import new_topic_id
from tiering_core.kafka.log_writer import DEMO_NODE_ID, PartitionWriter
from tiering_core.kafka.partition_log import PartitionLog
from tiering_core.kafka.topic import TopicPartition
from tiering_core.live.partition import (
    LiveOffsets,
    LivePartition,
    bounded_offsets,
    unknown_partition,
)
from tiering_core.metadata.store import RemoteLogMetadataStore
from tiering_core.tier.view import load_tier_view

TP = TopicPartition("orders", 0)
_clock = itertools.count(1_700_000_000_000, 11)


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[RemoteLogMetadataStore]:
    s = RemoteLogMetadataStore(f"sqlite:///{tmp_path / 'metadata.db'}")
    try:
        yield s
    finally:
        s.close()


@pytest.fixture()
def writer(tmp_path: Path) -> PartitionWriter:
    (tmp_path / "kafka").mkdir()
    return PartitionWriter(tmp_path / "kafka", TP, clock=lambda: next(_clock), segment_bytes=10**9)


def live(
    writer: PartitionWriter, log_start: int, hw: int, lso: int | None = None, leader: int = DEMO_NODE_ID
) -> LivePartition:
    """The cluster's answer; by default the broker whose files are read (the writer's node) leads."""
    offsets = LiveOffsets(log_start, hw, hw if lso is None else lso)
    return LivePartition(TP, writer.topic_id, offsets, leader_id=leader)


def test_live_high_watermark_and_lso_never_pass_the_local_log_end() -> None:
    assert bounded_offsets(LiveOffsets(0, 120, 90), 100) == (100, 90)
    assert bounded_offsets(LiveOffsets(0, 120, 120), 100) == (100, 100)
    assert bounded_offsets(LiveOffsets(0, 80, 70), 100) == (80, 70)


@pytest.mark.parametrize(
    ("log_start", "local_start", "candidates"),
    [
        (0, 0, [0, 5, 10]),  # the first segment's base: no move at all
        (3, 3, [0, 5, 10]),  # strictly inside the first segment
        (7, 7, [5, 10]),  # strictly inside a later one: the segments wholly below are not copied
        (5, 5, [5, 10]),  # a segment base: the broker's own retention, seen before the files show it
        (17, 17, []),  # inside the active segment
        (25, 25, []),  # beyond the listing: segments newer than it
    ],
)
def test_the_clusters_log_start_is_the_local_log_start_never_a_delete_records(
    writer: PartitionWriter, store: RemoteLogMetadataStore, log_start: int, local_start: int, candidates: list[int]
) -> None:
    write_segments(writer, 3)  # 0, 5, 10; active 15
    writer.append_records(5)  # LEO 20
    writer.set_high_watermark()
    log = PartitionLog.open(writer.path)
    for leader in (DEMO_NODE_ID, DEMO_NODE_ID + 1):  # read from the leader's files or a follower's
        view = load_tier_view(log, store, live(writer, log_start, 20, leader=leader))
        assert view.local_log_start_offset == local_start
        assert (view.global_log_start_offset, view.delete_records_offset) == (None, None)
        assert [c.base_offset for c in view.copy_candidates()] == candidates
        assert view.tiering_gap() is None  # nothing tiered yet: what the broker dropped is history


def test_live_values_win_over_lagging_files(writer: PartitionWriter, store: RemoteLogMetadataStore) -> None:
    write_segments(writer, 3)  # 0, 5, 10; active 15
    writer.append_records(5)  # LEO 20
    writer.set_high_watermark(10)  # the checkpoint lags
    log = PartitionLog.open(writer.path)
    files = load_tier_view(log, store)
    assert (files.high_watermark, files.last_stable_offset, files.offsets_source) == (10, 10, "files")
    view = load_tier_view(log, store, live(writer, 0, 20, 15))
    assert (view.high_watermark, view.last_stable_offset, view.offsets_source) == (20, 15, "broker")
    assert [c.base_offset for c in view.copy_candidates()] == [0, 5, 10]
    ahead = load_tier_view(log, store, live(writer, 0, 30, 30))  # the files read are behind the leader
    assert (ahead.high_watermark, ahead.last_stable_offset) == (20, 20)


def test_broker_retention_racing_the_listing_never_moves_the_global_log_start(
    writer: PartitionWriter, store: RemoteLogMetadataStore
) -> None:
    """The listing is taken, then the broker deletes segments by its own retention, then the admin
    call answers: the live log start is a listed segment base (or the listed end, after a roll and
    delete of everything), never a DeleteRecords."""
    write_segments(writer, 3)  # 0, 5, 10; active 15
    writer.append_records(3)  # LEO 18
    writer.set_high_watermark()
    log = PartitionLog.open(writer.path)
    assert [s.base_offset for s in log.segments] == [0, 5, 10, 15]  # the listing
    writer.delete_oldest_segments(2)  # the broker's retention, after the listing
    view = load_tier_view(log, store, live(writer, 10, 18))
    assert view.global_log_start_offset is None and view.local_log_start_offset == 10
    writer.append_records(2)
    writer.roll()
    writer.delete_oldest_segments(10)  # a roll and delete of every closed segment: log start 20
    view = load_tier_view(log, store, live(writer, 20, 20))
    assert view.global_log_start_offset is None and view.local_log_start_offset == 20


def test_another_topic_id_or_an_unknown_partition_is_refused(
    writer: PartitionWriter, store: RemoteLogMetadataStore
) -> None:
    write_segments(writer, 2)
    writer.set_high_watermark()
    log = PartitionLog.open(writer.path)
    other = new_topic_id()
    view = load_tier_view(log, store, LivePartition(TP, other, LiveOffsets(0, 10, 10)))
    assert view.high_watermark is None and view.last_stable_offset is None
    assert view.live_problem is not None
    assert other in view.live_problem and writer.topic_id in view.live_problem
    assert view.copy_candidates() == []
    assert view.offsets_error == view.live_problem
    gone = load_tier_view(log, store, unknown_partition(TP, None))
    assert gone.live_problem is not None and "does not know" in gone.live_problem
    assert gone.last_stable_offset is None


def test_without_a_kafka_section_nothing_imports_the_kafka_client(tmp_path: Path, writer: PartitionWriter) -> None:
    """status, copy and retention from the files alone never import kafka-python."""
    import subprocess
    import sys
    import textwrap

    write_segments(writer, 2)
    writer.set_high_watermark()
    config = tmp_path / "tiering.yaml"
    config.write_text(
        f"log_dirs: [{tmp_path / 'kafka'}]\nmetadata: {{url: 'sqlite:///{tmp_path / 'm.db'}'}}\n"
        f"remote: {{backend: filesystem, root: {tmp_path / 'tier'}}}\n"
    )
    script = textwrap.dedent(
        f"""
        import sys
        from tiering_core.cli.main import main
        for command in ("status", "copy", "retention"):
            assert main([command, "--config", {str(config)!r}]) == 0, command
        assert "kafka" not in sys.modules, "kafka-python was imported"
        assert "tiering_core.live.source" not in sys.modules
        """
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_sasl_password_is_in_no_message_and_no_log_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    from tests.services import free_port
    from tiering_core.config import KafkaConfig
    from tiering_core.errors import ClusterUnreachableError
    from tiering_core.live.source import ClusterSource

    secret = "pw-" + new_topic_id()
    monkeypatch.setenv("TIERING_TEST_KAFKA_PASSWORD", secret)
    source = ClusterSource(
        KafkaConfig(
            bootstrap_servers=(f"127.0.0.1:{free_port()}",),
            request_timeout_ms=500,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN",
            sasl_plain_username="tiering",
            sasl_password_env="TIERING_TEST_KAFKA_PASSWORD",
        )
    )
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="kafka")  # the command quiets it: a test of it in this process may have run
    with pytest.raises(ClusterUnreachableError) as err:
        source.partition(TP)
    source.close()
    assert "did not answer" in str(err.value) and "\n" not in str(err.value)
    assert "Starting KafkaAdminClient" in caplog.text  # the record is kept, masked
    assert secret not in caplog.text and secret not in str(err.value)
    with pytest.raises(ClusterUnreachableError):  # the failure is kept: no second wait
        source.topic_config("orders")
