"""Figures asked of the database (the latest copied epoch of a lineage, totals by state) and
listings with or without custom metadata, on SQLite and a real PostgreSQL."""

from __future__ import annotations

from tests.metadata.support import count_queries, delete, finish, segment, tip
from tiering_core.kafka.epoch import EpochEntry, LeaderEpochCache
from tiering_core.metadata.segments import EPOCHS_PER_QUERY
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.tier.view import highest_copied_offset

S = RemoteLogSegmentState
TIP = tip("CCCCCCCCCCCCCCCCCCCCCC", "orders", 1)


def test_the_latest_copied_epoch_is_the_latest_lineage_epoch_with_finished_data(store) -> None:
    lease = store.acquire_lease(TIP, "t")
    assert store.latest_copied_epoch(TIP, [0, 1, 2]) is None
    finish(store, lease, segment(TIP, 0, 99, {0: 0, 2: 50}))
    finish(store, lease, segment(TIP, 100, 199, {5: 100}))  # an epoch this lineage does not have
    assert store.latest_copied_epoch(TIP, [0, 2, 7]) == (2, 99)
    assert store.latest_copied_epoch(TIP, [0, 2, 5, 7]) == (5, 199)
    assert store.latest_copied_epoch(TIP, [0, 1]) == (0, 49)
    assert store.latest_copied_epoch(TIP, [6, 7]) is None
    assert store.latest_copied_epoch(TIP, []) is None


def test_the_latest_copied_epoch_reads_past_pages_of_epochs_outside_the_lineage(store) -> None:
    lease = store.acquire_lease(TIP, "t")
    finish(store, lease, segment(TIP, 0, 9, {1: 0}))
    # More epochs with data than one page holds, none of them in the lineage below.
    epochs = {10 + 2 * i: 10 + i for i in range(EPOCHS_PER_QUERY + 5)}
    finish(store, lease, segment(TIP, 10, 10 + len(epochs), epochs))
    lineage = [1] + [11 + 2 * i for i in range(EPOCHS_PER_QUERY + 10)]
    assert store.latest_copied_epoch(TIP, lineage) == (1, 9)


def test_the_highest_copied_offset_of_a_long_lineage_is_one_query(store) -> None:
    lease = store.acquire_lease(TIP, "t")
    finish(store, lease, segment(TIP, 0, 99, {0: 0}))
    lineage = LeaderEpochCache([EpochEntry(0, 0)] + [EpochEntry(e, 99 + e) for e in range(1, 100_000)])
    statements = count_queries(store)
    assert highest_copied_offset(store, TIP, lineage, 200_000) == 99
    assert len(statements) == 1


def test_segment_totals_count_and_sum_live_segments_by_state(store) -> None:
    lease = store.acquire_lease(TIP, "t")
    a = finish(store, lease, segment(TIP, 0, 99, size=10))
    finish(store, lease, segment(TIP, 100, 199, size=20))
    store.add_segment(segment(TIP, 200, 299, size=40), lease)
    gone = finish(store, lease, segment(TIP, 300, 399, size=80))
    delete(store, lease, gone.segment_id)
    store.update_segment_state(a.segment_id, S.DELETE_SEGMENT_STARTED, lease)
    assert store.segment_totals(TIP, (S.COPY_SEGMENT_FINISHED,)) == (1, 20)
    assert store.segment_totals(TIP, {S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED}) == (2, 30)
    assert store.segment_totals(TIP, [S.COPY_SEGMENT_STARTED]) == (1, 40)
    assert store.segment_totals(TIP, [S.DELETE_SEGMENT_FINISHED]) == (0, 0)  # no longer remote data
    assert store.segment_totals(TIP, ()) == (0, 0)
    assert (store.remote_segment_count(TIP), store.remote_log_size(TIP)) == (1, 20)


def test_a_listing_without_custom_metadata_differs_from_the_full_one_only_in_it(store) -> None:
    lease = store.acquire_lease(TIP, "t")
    for i in range(3):
        finish(store, lease, segment(TIP, 100 * i, 100 * i + 99, custom={"objects": {"log": f"k{i}"}}))
    full = store.list_segments(TIP)
    for _ in range(2):  # a first listing, then one from the memo
        narrow = store.list_segments(TIP, custom_metadata=False)
        assert [m.custom_metadata for m in narrow] == [None] * 3
        assert [m.custom_metadata for m in full] == [{"objects": {"log": f"k{i}"}} for i in range(3)]
        assert store.with_custom_metadata(narrow) == full
        assert store.finished_segments(TIP, custom_metadata=False) == narrow
