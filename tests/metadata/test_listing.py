"""Listings on SQLite and a real PostgreSQL: order, custom metadata read when asked for, the memo
shared by threads, the collector paused while listing."""

from __future__ import annotations

import contextlib
import gc
import pickle
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import replace

import pytest
from sqlalchemy import create_engine, text

from tests.metadata.support import count_queries, delete, finish, segment, tip
from tiering_core.kafka.epoch import EpochEntry
from tiering_core.kafka.topic import TopicIdPartition
from tiering_core.metadata.errors import MetadataStoreError, SegmentNotFoundError
from tiering_core.metadata.states import RemoteLogSegmentState, RemotePartitionDeleteState
from tiering_core.metadata.store import RemoteLogMetadataStore

S = RemoteLogSegmentState
P = RemotePartitionDeleteState
TIP = tip("BBBBBBBBBBBBBBBBBBBBBB", "orders", 3)


# --- listing: order, custom metadata read when asked for, threads -------------------------------


def test_ties_on_start_offset_and_event_time_list_by_segment_id(store) -> None:
    lease = store.acquire_lease(TIP, "t")
    ids = [uuid.UUID(f"{d * 8}-{d * 4}-{d * 4}-{d * 4}-{d * 12}") for d in "f70a"]
    for sid in ids:  # inserted in no particular order
        store.add_segment(replace(segment(TIP, 0, 99, event_time=5), segment_id=sid), lease)
    deleted = replace(segment(TIP, 0, 99, event_time=5), segment_id=uuid.UUID(int=5))
    store.add_segment(deleted, lease)
    delete(store, lease, deleted.segment_id)  # event time: now
    store.add_segment(replace(segment(TIP, 0, 99, event_time=2), segment_id=uuid.UUID(int=2**127)), lease)
    expected = [uuid.UUID(int=2**127), *sorted(ids)]
    assert [m.segment_id for m in store.list_segments(TIP)] == expected
    assert [m.segment_id for m in store.list_segments(TIP, include_deleted=True)] == [*expected, deleted.segment_id]
    with RemoteLogMetadataStore(store.url) as other:  # and the same again in a fresh process' first listing
        assert [m.segment_id for m in other.list_segments(TIP)] == expected


def test_custom_metadata_of_a_listing_is_read_in_one_query_when_asked_for(store) -> None:
    lease = store.acquire_lease(TIP, "t")
    written = {}
    for i in range(3):
        meta = segment(TIP, 100 * i, 100 * i + 99, custom={"objects": {"log": f"k{i}.log"}, "n": i})
        store.add_segment(meta, lease)
        done = store.finish_copied_segment(
            meta.segment_id, lease, custom_metadata={"crc32c": {"log": i}}, lineage=[EpochEntry(0, 0)]
        )
        written[meta.segment_id] = done.custom_metadata
    for fresh in (True, False):  # a partition's first listing in a process, and a later one
        with RemoteLogMetadataStore(store.url) as reader:
            if not fresh:
                reader.list_segments(TIP)
            assert "custom_metadata" not in reader._q.live_listing.sql  # the listing leaves it out
            listed = reader.list_segments(TIP, custom_metadata=False)
            statements = count_queries(reader)
            listed = reader.with_custom_metadata(listed)
            assert listed[1].custom_metadata == written[listed[1].segment_id]
            assert len(statements) == 1  # one read for the whole listing ...
            assert {m.segment_id: m.custom_metadata for m in listed} == written
            assert len(statements) == 1  # ... and no more
            assert listed[0].custom_metadata is listed[0].custom_metadata  # decoded once, kept
            assert pickle.loads(pickle.dumps(listed[2])) == listed[2]
            assert listed == [reader.get_segment(m.segment_id) for m in listed]


def test_custom_metadata_of_a_listed_segment_whose_metadata_was_dropped_is_an_error(store) -> None:
    lease = store.acquire_lease(TIP, "removal")
    meta = finish(store, lease, segment(TIP, 0, 99, custom={"objects": {"log": "k.log"}}))
    delete(store, lease, meta.segment_id)
    (listed,) = store.list_segments(TIP, include_deleted=True, custom_metadata=False)
    for state in (P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_STARTED, P.DELETE_PARTITION_FINISHED):
        store.update_partition_delete_state(TIP, state, lease)
    store.drop_partition_metadata(TIP, lease)
    with pytest.raises(SegmentNotFoundError, match=f"{meta.segment_id}.*no longer stored"):
        store.with_custom_metadata([listed])


def test_listing_from_many_threads_with_partitions_coming_and_going(metadata_url: str) -> None:
    """The memo and the partitions listed lately are shared by threads; a store is thread safe."""
    tips = [tip(f"T{i:021d}", "threads", i) for i in range(6)]
    with RemoteLogMetadataStore(metadata_url, listed_partitions=2, segment_memo=8) as store:
        for t in tips:
            lease = store.acquire_lease(t, "t")
            for s in range(3):
                finish(store, lease, segment(t, 100 * s, 100 * s + 99))
        expected = {t: store.list_segments(t) for t in tips}
        errors: list[BaseException] = []
        barrier = threading.Barrier(8)

        def lister(seed: int) -> None:
            try:
                barrier.wait(timeout=30)
                for i in range(150):
                    t = tips[(seed * 7 + i) % len(tips)]
                    assert store.list_segments(t) == expected[t]
            except BaseException as exc:
                errors.append(exc)

        interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)  # switch threads as often as possible
        try:
            threads = [threading.Thread(target=lister, args=(n,)) for n in range(8)]
            for th in threads:
                th.start()
            for th in threads:
                th.join(timeout=120)
        finally:
            sys.setswitchinterval(interval)
        assert errors == []
        assert len(store._listed) <= 2


def test_two_threads_evicting_the_same_listed_partition_do_not_collide(store) -> None:
    """Two threads list new partitions while the record of partitions listed lately is full: both
    evict its oldest entry. A rendezvous where the eviction finds that entry makes them meet there
    if the store lets them in together: without its lock both picked the same entry and the
    second eviction raised KeyError."""
    tips = [tip(f"E{i:021d}", "evict", i) for i in range(3)]
    for t in tips:
        store.register_partition(t)
    rendezvous = threading.Barrier(2)

    class MeetingRecord(dict[tuple[str, int], None]):
        def __iter__(self) -> Iterator[tuple[str, int]]:  # the eviction looks for the oldest entry
            oldest = next(super().__iter__())
            with contextlib.suppress(threading.BrokenBarrierError):
                rendezvous.wait(timeout=0.5)  # broken after 0.5 s when the other thread cannot come
            return iter([oldest])

    store._listed_limit = 1
    store._listed = MeetingRecord({(tips[0].topic_id, tips[0].partition): None})
    errors: list[BaseException] = []

    def lister(t: TopicIdPartition) -> None:
        try:
            assert store.list_segments(t) == []
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=lister, args=(t,)) for t in tips[1:]]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
    assert errors == []
    assert len(dict(store._listed)) == 1 and next(iter(dict(store._listed))) in {
        (t.topic_id, t.partition) for t in tips[1:]
    }


def test_the_collector_pause_is_counted_across_threads_and_leaves_a_disabled_collector_alone() -> None:
    from tiering_core.metadata import listing

    pause = listing.collector_paused
    assert gc.isenabled()
    entered, release = threading.Event(), threading.Event()

    def long_listing() -> None:
        with pause:
            entered.set()
            assert release.wait(timeout=30)

    other = threading.Thread(target=long_listing)
    try:
        with pause:
            assert not gc.isenabled()
            with pause:  # re-entrant in one thread
                assert not gc.isenabled()
            assert not gc.isenabled()
            other.start()
            assert entered.wait(timeout=30)
        assert not gc.isenabled()  # the other thread's listing is still running
        release.set()
        other.join(timeout=30)
        assert gc.isenabled()  # the last one out resumes the collector
        gc.disable()  # the application's choice is left alone
        with pause:
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        release.set()
        gc.enable()


def test_a_listing_that_fails_in_the_database_is_a_metadata_store_error(store, metadata_url: str) -> None:
    lease = store.acquire_lease(TIP, "t")
    finish(store, lease, segment(TIP, 0, 99))
    engine = create_engine(metadata_url)
    try:
        with engine.begin() as conn:  # the table is gone under the store
            conn.execute(text("ALTER TABLE tiering_segments RENAME TO tiering_segments_gone"))
    finally:
        engine.dispose()
    with pytest.raises(MetadataStoreError, match="tiering_segments"):
        store.list_segments(TIP)
