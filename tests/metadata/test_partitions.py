"""Partitions (``tiering_core/metadata/partitions.py``) on SQLite and a real PostgreSQL
(``metadata_url``): registration, the deletion state machine and its tombstone, the remote log
start offset and the state history (docs/kafka-rules.md sections 7 and 10)."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import create_engine, text

from tests.metadata.support import delete, finish, segment, tip
from tiering_core.kafka.epoch import EpochEntry
from tiering_core.kafka.topic import TopicPartition
from tiering_core.metadata.errors import (
    PartitionDeletedError,
    PartitionNotEmptyError,
)
from tiering_core.metadata.states import RemoteLogSegmentState, RemotePartitionDeleteState
from tiering_core.metadata.store import METADATA_DROPPED

S = RemoteLogSegmentState
P = RemotePartitionDeleteState
TIP = tip("BBBBBBBBBBBBBBBBBBBBBB", "orders", 3)
OTHER = tip("DDDDDDDDDDDDDDDDDDDDDD", "payments", 0)
TIP_RE = re.escape(str(TIP))


def test_partitions_register_idempotently_and_a_recreated_topic_is_new(store) -> None:
    store.register_partition(TIP)
    store.register_partition(TIP)
    record = store.get_partition(TIP)
    assert record is not None
    assert (record.topic, record.partition, record.topic_id, record.delete_state) == ("orders", 3, TIP.topic_id, None)
    assert record.topic_id_partition == TIP and not record.dropped and record.created_ms > 0
    assert store.get_partition(TopicPartition("orders", 3)) == record
    recreated = tip("EEEEEEEEEEEEEEEEEEEEEE", "orders", 3)
    lease = store.acquire_lease(TIP, "t")
    finish(store, lease, segment(TIP, 0, 99))
    store.register_partition(recreated)
    assert store.list_segments(recreated) == []
    assert store.segment_for(recreated, 0, 5) is None
    assert [(r.topic_id, r.partition) for r in store.list_partitions()] == [(TIP.topic_id, 3), (recreated.topic_id, 3)]
    assert store.get_partition(tip("FFFFFFFFFFFFFFFFFFFFFF", "orders", 3)) is None


def test_partition_removal_tombstone_blocks_the_topic_id_for_good(store) -> None:
    lease = store.acquire_lease(TIP, "t", run_id="removal-1")
    finished = finish(store, lease, segment(TIP, 0, 99))
    store.record_lineage(TIP, [EpochEntry(0, 0)], lease)
    store.record_gap(TIP, 10, 20, lease)
    store.record_delete_records(TIP, 40, lease)
    store.set_remote_log_start_offset(TIP, 50, lease)
    store.mark_partition_for_deletion(TIP, lease)
    with pytest.raises(PartitionDeletedError):
        store.add_segment(segment(TIP, 100, 199), lease)  # no copy into a partition being removed
    with pytest.raises(PartitionDeletedError):
        store.register_partition(TIP)
    with pytest.raises(PartitionDeletedError, match="DELETE_PARTITION_FINISHED"):
        store.drop_partition_metadata(TIP, lease)  # not before FINISHED
    store.update_partition_delete_state(TIP, P.DELETE_PARTITION_STARTED, lease)
    delete(store, lease, finished.segment_id)  # removal deletes every segment while STARTED
    store.update_partition_delete_state(TIP, P.DELETE_PARTITION_FINISHED, lease)
    store.drop_partition_metadata(TIP, lease)
    store.drop_partition_metadata(TIP, lease)  # idempotent: a resumed removal runs it again
    record = store.get_partition(TIP)
    assert record is not None and record.dropped and record.delete_state == P.DELETE_PARTITION_FINISHED
    assert record.remote_log_start_offset is None
    assert store.list_segments(TIP, include_deleted=True) == []
    assert store.get_recorded_lineage(TIP) == [] and store.list_gaps(TIP) == []
    assert store.get_delete_records_offset(TIP) is None and store.highest_offset_for_epoch(TIP, 0) is None
    with pytest.raises(PartitionDeletedError):
        store.register_partition(TIP)
    store.release_lease(lease)
    again = store.acquire_lease(TIP, "late-copier")
    with pytest.raises(PartitionDeletedError):
        store.add_segment(segment(TIP, 0, 99), again)
    history = store.state_history(TIP)  # the history outlives the metadata
    assert [h.to_state for h in history if h.segment_id is None] == [*(s.value for s in P), METADATA_DROPPED]
    assert [h.to_state for h in store.state_history(finished.segment_id)] == [s.value for s in S]
    # The recreated topic (new topic id) is a new, live partition; lookups by name now find it.
    recreated = tip("GGGGGGGGGGGGGGGGGGGGGG", "orders", 3)
    store.register_partition(recreated)
    assert store.get_partition(TopicPartition("orders", 3)).topic_id == recreated.topic_id


def test_removal_cannot_finish_or_drop_metadata_while_segments_are_live(store) -> None:
    lease = store.acquire_lease(TIP, "removal")
    finished = finish(store, lease, segment(TIP, 0, 99))
    started = segment(TIP, 100, 199)
    store.add_segment(started, lease)
    store.mark_partition_for_deletion(TIP, lease)
    store.update_partition_delete_state(TIP, P.DELETE_PARTITION_STARTED, lease)
    history = store.state_history(TIP)
    with pytest.raises(PartitionNotEmptyError, match=rf"{TIP_RE}.*2 segment\(s\) are not DELETE_SEGMENT_FINISHED"):
        store.update_partition_delete_state(TIP, P.DELETE_PARTITION_FINISHED, lease)
    delete(store, lease, finished.segment_id)
    store.update_segment_state(started.segment_id, S.DELETE_SEGMENT_STARTED, lease)
    with pytest.raises(PartitionNotEmptyError, match=rf"{TIP_RE}.*1 segment\(s\)"):
        store.update_partition_delete_state(TIP, P.DELETE_PARTITION_FINISHED, lease)
    assert store.get_partition(TIP).delete_state == P.DELETE_PARTITION_STARTED
    assert len(store.state_history(TIP)) == len(history) + 3  # only the segment changes landed
    store.update_segment_state(started.segment_id, S.DELETE_SEGMENT_FINISHED, lease)
    store.update_partition_delete_state(TIP, P.DELETE_PARTITION_FINISHED, lease)
    store.drop_partition_metadata(TIP, lease)
    assert store.get_partition(TIP).dropped


def test_metadata_of_live_segments_is_never_dropped(store, metadata_url: str) -> None:
    """A partition that reached DELETE_PARTITION_FINISHED with a live segment (written before the
    guard existed, or by hand) keeps its metadata: dropping it would orphan the segment's objects."""
    lease = store.acquire_lease(TIP, "removal")
    live = finish(store, lease, segment(TIP, 0, 99))
    store.mark_partition_for_deletion(TIP, lease)
    store.update_partition_delete_state(TIP, P.DELETE_PARTITION_STARTED, lease)
    engine = create_engine(metadata_url)
    try:
        with engine.begin() as conn:  # the state an older version could leave behind
            conn.execute(text("UPDATE tiering_partitions SET delete_state = 'DELETE_PARTITION_FINISHED'"))
    finally:
        engine.dispose()
    with pytest.raises(PartitionNotEmptyError, match=rf"{TIP_RE}: metadata cannot be dropped while 1 segment"):
        store.drop_partition_metadata(TIP, lease)
    record = store.get_partition(TIP)
    assert not record.dropped and store.get_segment(live.segment_id).state == S.COPY_SEGMENT_FINISHED
    delete(store, lease, live.segment_id)
    store.drop_partition_metadata(TIP, lease)
    assert store.get_partition(TIP).dropped


def test_a_segment_cannot_finish_once_its_partition_is_marked_for_deletion(store) -> None:
    lease = store.acquire_lease(TIP, "copier")
    started = segment(TIP, 0, 99)
    store.add_segment(started, lease)
    other = segment(TIP, 100, 199)
    store.add_segment(other, lease)
    store.mark_partition_for_deletion(TIP, lease)
    before = (store.list_segments(TIP), store.state_history(TIP), store.get_recorded_lineage(TIP))
    with pytest.raises(PartitionDeletedError, match=rf"{started.segment_id} of {TIP_RE}.*DELETE_PARTITION_MARKED"):
        store.update_segment_state(started.segment_id, S.COPY_SEGMENT_FINISHED, lease)
    with pytest.raises(PartitionDeletedError, match="DELETE_PARTITION_MARKED"):
        store.finish_copied_segment(started.segment_id, lease, custom_metadata={}, lineage=[EpochEntry(0, 0)])
    assert (store.list_segments(TIP), store.state_history(TIP), store.get_recorded_lineage(TIP)) == before
    assert store.segment_for(TIP, 0, 5) is None and store.get_remote_log_start_offset(TIP) is None
    # Deleting stays allowed: removal cleans the unfinished copies up.
    store.update_segment_state(started.segment_id, S.DELETE_SEGMENT_STARTED, lease)
    store.update_partition_delete_state(TIP, P.DELETE_PARTITION_STARTED, lease)
    with pytest.raises(PartitionDeletedError, match="DELETE_PARTITION_STARTED"):
        store.update_segment_state(other.segment_id, S.COPY_SEGMENT_FINISHED, lease)
    store.update_segment_state(other.segment_id, S.DELETE_SEGMENT_STARTED, lease)
    for meta in (started, other):
        store.update_segment_state(meta.segment_id, S.DELETE_SEGMENT_FINISHED, lease)
    assert store.list_segments(TIP) == []


def test_remote_log_start_offset_never_moves_back(store) -> None:
    lease = store.acquire_lease(TIP, "t")
    assert store.get_remote_log_start_offset(TIP) is None
    assert store.set_remote_log_start_offset(TIP, 50, lease) == 50
    assert store.set_remote_log_start_offset(TIP, 20, lease) == 50
    assert store.set_remote_log_start_offset(TIP, 50, lease) == 50
    assert store.set_remote_log_start_offset(TIP, 51, lease) == 51
    assert store.get_remote_log_start_offset(TIP) == 51


def test_the_gaps_the_remote_log_start_passes_are_history(store) -> None:
    """Retention moving the remote log start past a gap removes it in the same transaction; a gap
    it cuts through is kept from the log start on, detected when it first was; a gap at or above
    it stays as it is, and so do another partition's."""
    lease, other = store.acquire_lease(TIP, "t"), store.acquire_lease(OTHER, "t")
    for start, end in ((10, 19), (25, 34), (30, 34), (40, 49)):
        store.record_gap(TIP, start, end, lease)
    store.record_gap(OTHER, 10, 19, other)
    detected = {(g.start, g.end): g.detected_ms for g in store.list_gaps(TIP)}

    def gaps() -> list[tuple[int, int, int]]:
        return [(g.start, g.end, g.detected_ms) for g in store.list_gaps(TIP)]

    assert store.set_remote_log_start_offset(TIP, 20, lease) == 20
    assert [(a, b) for a, b, _ in gaps()] == [(25, 34), (30, 34), (40, 49)]
    assert store.set_remote_log_start_offset(TIP, 32, lease) == 32
    first = min(detected[(25, 34)], detected[(30, 34)])
    assert gaps() == [(32, 34, first), (40, 49, detected[(40, 49)])]
    assert store.set_remote_log_start_offset(TIP, 10, lease) == 32  # never back: nothing changes
    assert store.set_remote_log_start_offset(TIP, 40, lease) == 40  # at the gap's start: it stays
    assert gaps() == [(40, 49, detected[(40, 49)])]
    assert [(g.start, g.end) for g in store.list_gaps(OTHER)] == [(10, 19)]


def test_history_records_token_run_and_time_of_every_change(store) -> None:
    first = store.acquire_lease(TIP, "a", run_id="run-a")
    meta = segment(TIP, 0, 99)
    store.add_segment(meta, first)
    store.release_lease(first)
    second = store.acquire_lease(TIP, "b", run_id="run-b")
    store.update_segment_state(meta.segment_id, S.COPY_SEGMENT_FINISHED, second)
    history = store.state_history(meta.segment_id)
    assert [(h.from_state, h.to_state, h.token, h.run_id) for h in history] == [
        (None, S.COPY_SEGMENT_STARTED.value, first.token, "run-a"),
        (S.COPY_SEGMENT_STARTED.value, S.COPY_SEGMENT_FINISHED.value, second.token, "run-b"),
    ]
    assert all(h.segment_id == meta.segment_id and h.topic_id_partition == TIP for h in history)
    assert history[0].at_ms <= history[1].at_ms
    assert store.state_history(tip=TIP) == history == store.state_history(segment_id=meta.segment_id)
    assert store.state_history(OTHER) == []
    with pytest.raises(TypeError):
        store.state_history()
