"""Store queries on SQLite and a real PostgreSQL: supersede, overlap, epochs, listings, segment
writes and finishing a copy. Every test here runs on both backends (``metadata_url``). Partitions,
the section-10 state and the engine have test files of their modules' names."""

from __future__ import annotations

import pickle
import re
import uuid
from dataclasses import replace

import pytest

from tests.metadata.support import delete, finish, segment, tip
from tiering_core.kafka.epoch import EpochEntry
from tiering_core.metadata.errors import (
    DuplicateSegmentError,
    FencedError,
    InvalidSegmentMetadataError,
    InvalidStateTransitionError,
    MetadataStoreError,
    SegmentNotFoundError,
)
from tiering_core.metadata.states import RemoteLogSegmentState, RemotePartitionDeleteState
from tiering_core.metadata.store import RemoteLogMetadataStore

S = RemoteLogSegmentState
P = RemotePartitionDeleteState
TIP = tip("BBBBBBBBBBBBBBBBBBBBBB", "orders", 3)
OTHER = tip("DDDDDDDDDDDDDDDDDDDDDD", "payments", 0)
TIP_RE = re.escape(str(TIP))


# --- segment_for: supersede and overlap ------------------------------------------------------


def test_shorter_reupload_supersedes_a_longer_one_only_where_it_covers(store) -> None:
    lease = store.acquire_lease(TIP, "t")
    long_one = finish(store, lease, segment(TIP, 0, 199))
    short_one = finish(store, lease, segment(TIP, 0, 99))
    assert [store.segment_for(TIP, 0, o).segment_id for o in (0, 50, 99)] == [short_one.segment_id] * 3
    assert [store.segment_for(TIP, 0, o).segment_id for o in (100, 150, 199)] == [long_one.segment_id] * 3
    assert store.segment_for(TIP, 0, 200) is None
    assert store.segment_for(TIP, 1, 50) is None


def test_partial_overlap_later_finished_wins_the_shared_range(store) -> None:
    lease = store.acquire_lease(TIP, "t")
    first = finish(store, lease, segment(TIP, 0, 199))
    second = finish(store, lease, segment(TIP, 100, 299, {0: 100}))
    assert store.segment_for(TIP, 0, 99).segment_id == first.segment_id
    assert store.segment_for(TIP, 0, 100).segment_id == second.segment_id
    assert store.segment_for(TIP, 0, 299).segment_id == second.segment_id


def test_later_means_finished_later_not_started_later(store) -> None:
    lease = store.acquire_lease(TIP, "t")
    early, late = segment(TIP, 0, 99, event_time=5), segment(TIP, 0, 99, event_time=1)
    store.add_segment(early, lease)
    store.add_segment(late, lease)
    store.update_segment_state(late.segment_id, S.COPY_SEGMENT_FINISHED, lease, event_time_ms=10)
    assert store.segment_for(TIP, 0, 50).segment_id == late.segment_id
    store.update_segment_state(early.segment_id, S.COPY_SEGMENT_FINISHED, lease, event_time_ms=10)
    assert store.segment_for(TIP, 0, 50).segment_id == early.segment_id  # same event time: finish order decides


def test_deleting_the_superseding_copy_leaves_the_older_finished_one_serving(store) -> None:
    lease = store.acquire_lease(TIP, "t")
    older = finish(store, lease, segment(TIP, 0, 99))
    newer = finish(store, lease, segment(TIP, 0, 99))
    assert store.segment_for(TIP, 0, 10).segment_id == newer.segment_id
    store.update_segment_state(newer.segment_id, S.DELETE_SEGMENT_STARTED, lease)  # no longer serves reads
    assert store.segment_for(TIP, 0, 10).segment_id == older.segment_id
    delete(store, lease, older.segment_id)
    assert store.segment_for(TIP, 0, 10) is None


def test_segment_for_uses_the_range_of_the_asked_epoch_and_only_finished_segments(store) -> None:
    lease = store.acquire_lease(TIP, "t")
    both = finish(store, lease, segment(TIP, 0, 149, {0: 0, 1: 100}))
    assert store.segment_for(TIP, 0, 99).segment_id == both.segment_id
    assert store.segment_for(TIP, 0, 120) is None  # epoch 0 ends at 99 in that segment
    assert store.segment_for(TIP, 1, 99) is None  # epoch 1 starts at 100
    assert store.segment_for(TIP, 1, 149).segment_id == both.segment_id
    store.add_segment(segment(TIP, 150, 199, {1: 150}), lease)
    assert store.segment_for(TIP, 1, 160) is None  # COPY_SEGMENT_STARTED never serves
    assert store.segment_for(OTHER, 1, 120) is None


def test_segment_for_finds_offsets_deep_inside_a_wide_segment_among_narrow_ones(store) -> None:
    lease = store.acquire_lease(TIP, "t")
    wide = finish(store, lease, segment(TIP, 0, 99_999))
    narrow = [finish(store, lease, segment(TIP, 100_000 + 10 * i, 100_009 + 10 * i)) for i in range(20)]
    overlay = finish(store, lease, segment(TIP, 50_000, 50_009))
    assert store.segment_for(TIP, 0, 99_999).segment_id == wide.segment_id
    assert store.segment_for(TIP, 0, 50_005).segment_id == overlay.segment_id
    assert store.segment_for(TIP, 0, 50_010).segment_id == wide.segment_id
    assert store.segment_for(TIP, 0, 100_195).segment_id == narrow[19].segment_id


# --- highest offset per epoch ----------------------------------------------------------------


def test_highest_offset_for_epoch_never_decreases(store) -> None:
    lease = store.acquire_lease(TIP, "t")
    a = finish(store, lease, segment(TIP, 0, 149, {0: 0, 1: 100}))
    b = finish(store, lease, segment(TIP, 150, 249, {1: 150, 2: 200}))
    assert [store.highest_offset_for_epoch(TIP, e) for e in (0, 1, 2, 3)] == [99, 199, 249, None]
    finish(store, lease, segment(TIP, 0, 49, {0: 0}))  # a shorter re-upload does not lower it
    started = segment(TIP, 250, 999, {2: 250})
    store.add_segment(started, lease)  # neither does an unfinished one raise it
    assert store.highest_offset_for_epoch(TIP, 0) == 99
    assert store.highest_offset_for_epoch(TIP, 2) == 249
    for meta in (a, b):
        delete(store, lease, meta.segment_id)
    assert [store.highest_offset_for_epoch(TIP, e) for e in (0, 1, 2)] == [99, 199, 249]
    assert store.highest_offset_for_epoch(OTHER, 0) is None


# --- listings ---------------------------------------------------------------------------------


def test_listing_sorted_by_start_offset_across_states_with_epoch_filter(store) -> None:
    lease = store.acquire_lease(TIP, "t")
    c = segment(TIP, 200, 299, {2: 200})
    store.add_segment(c, lease)
    a = finish(store, lease, segment(TIP, 0, 99, {0: 0}))
    b = finish(store, lease, segment(TIP, 100, 199, {0: 100, 1: 150}))
    d = finish(store, lease, segment(TIP, 300, 399, {2: 300}))
    store.update_segment_state(b.segment_id, S.DELETE_SEGMENT_STARTED, lease)
    delete(store, lease, d.segment_id)
    listed = store.list_segments(TIP)
    assert [(m.segment_id, m.state) for m in listed] == [
        (a.segment_id, S.COPY_SEGMENT_FINISHED),
        (b.segment_id, S.DELETE_SEGMENT_STARTED),
        (c.segment_id, S.COPY_SEGMENT_STARTED),
    ]
    assert [m.segment_id for m in store.list_segments(TIP, 0)] == [a.segment_id, b.segment_id]
    assert [m.segment_id for m in store.list_segments(TIP, 1)] == [b.segment_id]
    assert [m.segment_id for m in store.list_segments(TIP, 2)] == [c.segment_id]
    assert store.list_segments(TIP, 7) == []
    everything = store.list_segments(TIP, include_deleted=True)
    assert [m.start_offset for m in everything] == [0, 100, 200, 300]
    assert everything[3].state == S.DELETE_SEGMENT_FINISHED
    assert store.list_segments(OTHER) == []


def test_same_start_offset_lists_by_event_time(store) -> None:
    lease = store.acquire_lease(TIP, "t")
    later = segment(TIP, 0, 99, event_time=2_000)
    earlier = segment(TIP, 0, 49, event_time=1_000)
    store.add_segment(later, lease)
    store.add_segment(earlier, lease)
    assert [m.segment_id for m in store.list_segments(TIP)] == [earlier.segment_id, later.segment_id]


def test_sizes_and_counts_are_of_finished_segments(store) -> None:
    lease = store.acquire_lease(TIP, "t")
    kept = finish(store, lease, segment(TIP, 0, 99, size=1_000))
    finish(store, lease, segment(TIP, 100, 199, size=2_000))
    store.add_segment(segment(TIP, 200, 299, size=4_000), lease)
    doomed = finish(store, lease, segment(TIP, 300, 399, size=8_000))
    store.update_segment_state(doomed.segment_id, S.DELETE_SEGMENT_STARTED, lease)
    assert store.remote_log_size(TIP) == 3_000
    assert store.remote_segment_count(TIP) == 2
    assert [m.start_offset for m in store.finished_segments(TIP)] == [0, 100]
    delete(store, lease, kept.segment_id)
    assert (store.remote_log_size(TIP), store.remote_segment_count(TIP)) == (2_000, 1)
    assert (store.remote_log_size(OTHER), store.remote_segment_count(OTHER)) == (0, 0)


# --- segment writes ---------------------------------------------------------------------------


def test_values_round_trip_and_custom_metadata_merges(store) -> None:
    lease = store.acquire_lease(TIP, "t")
    objects = {"log": f"orders-{TIP.topic_id}/3/00000000000000000000-x.log"}
    meta = segment(TIP, 0, 199, {3: 0, 5: 120, 10: 150}, size=4096, custom={"objects": objects})
    store.add_segment(meta, lease)
    stored = store.get_segment(meta.segment_id)
    assert stored == meta.with_state(S.COPY_SEGMENT_STARTED, writer_token=lease.token)
    assert list(stored.leader_epochs) == [3, 5, 10]
    assert stored.epoch_ranges() == {3: (0, 119), 5: (120, 149), 10: (150, 199)}
    done = store.update_segment_state(
        meta.segment_id, S.COPY_SEGMENT_FINISHED, lease, event_time_ms=777, custom_metadata={"crc32c": {"log": 7}}
    )
    assert done.custom_metadata == {"objects": objects, "crc32c": {"log": 7}}
    assert done.event_time == 777 and done.writer_token == lease.token
    assert store.get_segment(meta.segment_id) == done
    assert store.list_segments(TIP) == [done]
    assert store.get_segment(uuid.uuid4()) is None


def test_values_pickle_for_spark_executors(store) -> None:
    lease = store.acquire_lease(TIP, "t", run_id="r")
    done = finish(store, lease, segment(TIP, 0, 99, {0: 0, 2: 50}, custom={"objects": {"log": "k"}}))
    for value in (done, lease, store.get_partition(TIP), *store.state_history(TIP)):
        assert pickle.loads(pickle.dumps(value)) == value


def test_reads_see_writes_at_once_across_store_instances(metadata_url: str) -> None:
    with RemoteLogMetadataStore(metadata_url) as writer, RemoteLogMetadataStore(metadata_url) as reader:
        lease = writer.acquire_lease(TIP, "w")
        meta = segment(TIP, 0, 99)
        assert reader.list_segments(TIP) == []  # also warms the reader's memo
        writer.add_segment(meta, lease)
        assert [m.state for m in reader.list_segments(TIP)] == [S.COPY_SEGMENT_STARTED]
        writer.update_segment_state(meta.segment_id, S.COPY_SEGMENT_FINISHED, lease)
        assert [m.state for m in reader.list_segments(TIP)] == [S.COPY_SEGMENT_FINISHED]
        assert reader.segment_for(TIP, 0, 5).state == S.COPY_SEGMENT_FINISHED
        writer.update_segment_state(meta.segment_id, S.DELETE_SEGMENT_STARTED, lease)
        assert reader.get_segment(meta.segment_id).state == S.DELETE_SEGMENT_STARTED
        assert reader.segment_for(TIP, 0, 5) is None
        assert reader.highest_offset_for_epoch(TIP, 0) == 99


def test_add_segment_rejections_write_nothing(store) -> None:
    lease = store.acquire_lease(TIP, "t")
    meta = segment(TIP, 0, 99)
    store.add_segment(meta, lease)
    with pytest.raises(DuplicateSegmentError, match=str(meta.segment_id)):
        store.add_segment(meta, lease)
    with pytest.raises(InvalidStateTransitionError, match="COPY_SEGMENT_FINISHED"):
        store.add_segment(segment(TIP, 100, 199).with_state(S.COPY_SEGMENT_FINISHED), lease)
    bad = [
        segment(TIP, 100, 99),  # end before start
        segment(TIP, 100, 199, {}),  # no epochs
        segment(TIP, 100, 199, {0: 50}),  # epoch starts before the segment
        segment(TIP, 100, 199, {0: 100, 1: 250}),  # ... or after it
        segment(TIP, 100, 199, {0: 150, 1: 120}),  # starts out of order
    ]
    for meta_bad in bad:
        with pytest.raises(InvalidSegmentMetadataError):
            store.add_segment(meta_bad, lease)
    with pytest.raises(FencedError):
        store.add_segment(segment(OTHER, 0, 9), lease)  # a lease writes only its own partition
    assert [m.segment_id for m in store.list_segments(TIP, include_deleted=True)] == [meta.segment_id]
    assert len(store.state_history(TIP)) == 1


def test_updates_of_unknown_or_foreign_segments(store) -> None:
    lease = store.acquire_lease(TIP, "t")
    other_lease = store.acquire_lease(OTHER, "t")
    foreign = segment(OTHER, 0, 9)
    store.add_segment(foreign, other_lease)
    with pytest.raises(SegmentNotFoundError):
        store.update_segment_state(uuid.uuid4(), S.COPY_SEGMENT_FINISHED, lease)
    with pytest.raises(SegmentNotFoundError, match=str(foreign.segment_id)):
        store.update_segment_state(foreign.segment_id, S.COPY_SEGMENT_FINISHED, lease)
    assert store.get_segment(foreign.segment_id).state == S.COPY_SEGMENT_STARTED


# --- finishing a copy: one transaction ---------------------------------------------------------


def lineage_state(store: RemoteLogMetadataStore) -> tuple[object, ...]:
    """Everything finish_copied_segment may change."""
    return (
        store.list_segments(TIP, include_deleted=True),
        store.get_recorded_lineage(TIP),
        store.get_remote_log_start_offset(TIP),
        store.highest_offset_for_epoch(TIP, 0),
        store.segment_for(TIP, 0, 150),
        store.state_history(TIP),
        store.get_partition(TIP),
    )


def test_finish_copied_segment_lands_state_lineage_and_remote_log_start_together(store) -> None:
    lease = store.acquire_lease(TIP, "copier", run_id="copy-1")
    meta = segment(TIP, 100, 199, {0: 100, 1: 150}, custom={"objects": {"log": "k.log"}})
    store.add_segment(meta, lease)
    done = store.finish_copied_segment(
        meta.segment_id,
        lease,
        custom_metadata={"crc32c": {"log": 7}},
        lineage=[EpochEntry(0, 40), EpochEntry(1, 150)],
    )
    assert done.state == S.COPY_SEGMENT_FINISHED and done.writer_token == lease.token
    assert done.custom_metadata == {"objects": {"log": "k.log"}, "crc32c": {"log": 7}}
    assert store.get_segment(meta.segment_id) == done
    assert store.segment_for(TIP, 1, 170).segment_id == meta.segment_id
    assert store.highest_offset_for_epoch(TIP, 0) == 149
    assert store.get_recorded_lineage(TIP) == [EpochEntry(0, 40), EpochEntry(1, 150)]
    assert store.get_remote_log_start_offset(TIP) == 100  # was unset: the first copy's start
    history = store.state_history(meta.segment_id)
    assert [(h.to_state, h.token, h.run_id) for h in history][-1] == (
        S.COPY_SEGMENT_FINISHED.value,
        lease.token,
        "copy-1",
    )

    # Again (a retried finish): nothing is recorded twice, and the stored value comes back.
    before = store.state_history(TIP)
    assert (
        store.finish_copied_segment(
            meta.segment_id,
            lease,
            custom_metadata={"crc32c": {"log": 8}},
            lineage=[EpochEntry(0, 40), EpochEntry(1, 150)],
        )
        == done
    )
    assert store.state_history(TIP) == before and store.get_segment(meta.segment_id) == done

    # A later copy merges its lineage; the remote log start, once set, is left alone.
    later = segment(TIP, 200, 299, {2: 200})
    store.add_segment(later, lease)
    store.finish_copied_segment(
        later.segment_id, lease, custom_metadata={}, lineage=[EpochEntry(1, 160), EpochEntry(2, 200)]
    )
    assert store.get_recorded_lineage(TIP) == [EpochEntry(0, 40), EpochEntry(1, 150), EpochEntry(2, 200)]
    assert store.get_remote_log_start_offset(TIP) == 100


def test_finish_copied_segment_with_a_stale_lease_lands_nothing(store) -> None:
    first = store.acquire_lease(TIP, "first", ttl_ms=60_000)
    meta = segment(TIP, 0, 99)
    store.add_segment(meta, first)
    store.release_lease(first)
    second = store.acquire_lease(TIP, "second", ttl_ms=60_000)
    before = lineage_state(store)
    with pytest.raises(FencedError, match="fenced"):
        store.finish_copied_segment(meta.segment_id, first, custom_metadata={"x": 1}, lineage=[EpochEntry(0, 0)])
    assert lineage_state(store) == before
    assert store.get_segment(meta.segment_id).state == S.COPY_SEGMENT_STARTED
    assert store.get_recorded_lineage(TIP) == [] and store.get_remote_log_start_offset(TIP) is None
    store.finish_copied_segment(meta.segment_id, second, custom_metadata={}, lineage=[EpochEntry(0, 0)])
    assert store.get_remote_log_start_offset(TIP) == 0


def test_finish_copied_segment_failing_halfway_rolls_all_of_it_back(store, monkeypatch: pytest.MonkeyPatch) -> None:
    lease = store.acquire_lease(TIP, "copier")
    meta = segment(TIP, 100, 199, {0: 100, 1: 150})
    store.add_segment(meta, lease)
    store.record_lineage(TIP, [EpochEntry(0, 0)], lease)
    before = lineage_state(store)
    # A bad lineage entry fails after the segment's state, ranges and history were written.
    with pytest.raises(ValueError, match="out of order"):
        store.finish_copied_segment(
            meta.segment_id, lease, custom_metadata={"x": 1}, lineage=[EpochEntry(1, 150), EpochEntry(0, 160)]
        )
    assert lineage_state(store) == before

    # A failure in the last step (the remote log start) takes the state and the lineage with it.
    def fail(*_args: object) -> int:
        raise MetadataStoreError("injected: connection lost while setting the remote log start offset")

    monkeypatch.setattr(store, "_advance_remote_log_start", fail)
    with pytest.raises(MetadataStoreError, match="injected"):
        store.finish_copied_segment(meta.segment_id, lease, custom_metadata={"x": 1}, lineage=[EpochEntry(1, 150)])
    assert lineage_state(store) == before
    assert store.get_segment(meta.segment_id).state == S.COPY_SEGMENT_STARTED
    assert store.get_recorded_lineage(TIP) == [EpochEntry(0, 0)]
    assert store.get_remote_log_start_offset(TIP) is None
    monkeypatch.undo()
    done = store.finish_copied_segment(meta.segment_id, lease, custom_metadata={"x": 1}, lineage=[EpochEntry(1, 150)])
    assert done.state == S.COPY_SEGMENT_FINISHED
    assert store.get_recorded_lineage(TIP) == [EpochEntry(0, 0), EpochEntry(1, 150)]
    assert store.get_remote_log_start_offset(TIP) == 100


def test_renewing_with_a_time_to_live_that_is_not_positive_is_refused(store) -> None:
    lease = store.acquire_lease(TIP, "t", ttl_ms=60_000)
    for ttl in (0, -5, 1.5, True):
        with pytest.raises(ValueError, match="time to live"):
            store.renew_lease(lease, ttl_ms=ttl)
        with pytest.raises(ValueError, match="time to live"):
            store.acquire_lease(OTHER, "t", ttl_ms=ttl)
    assert store.current_lease(TIP) == replace(lease, run_id=None)  # unchanged


def test_a_segment_whose_first_epoch_starts_inside_it_is_accepted(store) -> None:
    """After DeleteRecords moved the log start offset into a segment, the broker's leader-epoch
    cache starts there (Kafka truncates it from the start), so the segment's leader epochs begin
    after its base offset (docs/kafka-rules.md section 3). The copier uploads such a segment; the offsets
    before the first epoch were deleted and are never served."""
    lease = store.acquire_lease(TIP, "t")
    done = finish(store, lease, segment(TIP, 0, 99, {0: 50}))
    assert store.segment_for(TIP, 0, 50).segment_id == done.segment_id
    assert store.segment_for(TIP, 0, 49) is None
    assert store.highest_offset_for_epoch(TIP, 0) == 99
