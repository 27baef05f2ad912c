"""The recorded lineage, DeleteRecords applied through the platform and tiering gaps
(``tiering_core/metadata/lineage.py``), on SQLite and a real PostgreSQL (``metadata_url``):
each only grows in what it tells (docs/kafka-rules.md section 10), but for the gaps a DeleteRecords
passes: what lies below the global log start is history."""

from __future__ import annotations

import re

import pytest

from tests.metadata.support import count_queries, finish, segment, tip
from tiering_core.kafka.epoch import EpochEntry
from tiering_core.metadata.states import RemoteLogSegmentState, RemotePartitionDeleteState
from tiering_core.metadata.values import StoredTier

S = RemoteLogSegmentState
P = RemotePartitionDeleteState
TIP = tip("BBBBBBBBBBBBBBBBBBBBBB", "orders", 3)
OTHER = tip("DDDDDDDDDDDDDDDDDDDDDD", "payments", 0)
TIP_RE = re.escape(str(TIP))


def test_recorded_lineage_merges_what_each_copy_saw(store) -> None:
    lease = store.acquire_lease(TIP, "t")
    assert store.get_recorded_lineage(TIP) == []
    store.record_lineage(TIP, [EpochEntry(0, 0), EpochEntry(1, 50)], lease)
    # The broker truncated its cache from the start: epoch 1 keeps its recorded start.
    store.record_lineage(TIP, [EpochEntry(1, 60), EpochEntry(2, 90)], lease)
    assert store.get_recorded_lineage(TIP) == [EpochEntry(0, 0), EpochEntry(1, 50), EpochEntry(2, 90)]
    # An unclean election truncated epoch 2 and started epoch 3 at 80: the current cache wins from 80.
    store.record_lineage(TIP, [EpochEntry(1, 60), EpochEntry(3, 80)], lease)
    assert store.get_recorded_lineage(TIP) == [EpochEntry(0, 0), EpochEntry(1, 50), EpochEntry(3, 80)]
    store.record_lineage(TIP, [], lease)
    assert store.get_recorded_lineage(TIP) == [EpochEntry(0, 0), EpochEntry(1, 50), EpochEntry(3, 80)]


def test_a_cache_behind_the_recorded_lineage_records_nothing(store) -> None:
    """A replica that has not seen the later leaders (its latest epoch below the recorded one)
    cannot take back what was recorded: a killed old leader still runs epoch 0 on past the
    point where an unclean election cut it."""
    lease = store.acquire_lease(TIP, "t")
    store.record_lineage(TIP, [EpochEntry(0, 0), EpochEntry(1, 1000)], lease)
    store.record_lineage(TIP, [EpochEntry(0, 0)], lease)
    assert store.get_recorded_lineage(TIP) == [EpochEntry(0, 0), EpochEntry(1, 1000)]


def test_delete_records_offset_is_the_highest_ever_applied(store) -> None:
    lease = store.acquire_lease(TIP, "t", run_id="delete-records-7")
    assert store.get_delete_records_offset(TIP) is None
    assert store.record_delete_records(TIP, 40, lease) == 40
    assert store.record_delete_records(TIP, 30, lease) == 40
    assert store.record_delete_records(TIP, 40, lease) == 40  # again: nothing more recorded
    assert store.record_delete_records(TIP, 45, lease) == 45
    assert store.get_delete_records_offset(TIP) == 45
    observed = store.delete_records_observations(TIP)
    assert [(o.offset, o.source, o.applied, o.token, o.run_id) for o in observed] == [
        (40, "tiering delete-records", True, lease.token, "delete-records-7"),
        (45, "tiering delete-records", True, lease.token, "delete-records-7"),
    ]


def test_stored_tiers_read_many_partitions_in_four_queries(store) -> None:
    """What a tier view joins with the log, for many partitions at once: each partition's as its
    own reads give it, four SELECTs whatever the number, and an empty one for a partition the
    store has never seen."""
    parts = [tip("EEEEEEEEEEEEEEEEEEEEEE", "wide", p) for p in range(300)]
    for p in parts[:200]:
        lease = store.acquire_lease(p, "t")
        finish(store, lease, segment(p, 0, 9, {0: 0}))
        finish(store, lease, segment(p, 10, 19, {0: 10, 2: 15}))
        store.record_lineage(p, [EpochEntry(0, 0), EpochEntry(2, 15)], lease)
        if p.partition % 3 == 0:
            store.record_delete_records(p, 5 + p.partition, lease)
        if p.partition % 5 == 0:
            store.set_remote_log_start_offset(p, 10, lease)
    unseen = tip("FFFFFFFFFFFFFFFFFFFFFF", "never", 0)
    selects = count_queries(store)
    got = store.stored_tiers([*parts, unseen])
    assert len(selects) == 4
    assert got[unseen] == StoredTier()
    for p in parts:
        lineage = store.get_recorded_lineage(p)
        assert got[p] == StoredTier(
            tuple(lineage),
            store.get_remote_log_start_offset(p),
            store.get_delete_records_offset(p),
            got[p].highest_by_epoch,
        )
        epochs = [e.epoch for e in lineage]
        assert got[p].latest_copied_epoch(epochs) == store.latest_copied_epoch(p, epochs)
        assert got[p].latest_copied_epoch([0]) == store.latest_copied_epoch(p, [0])
    assert got[parts[3]].highest_by_epoch == {0: 14, 2: 19}
    assert got[parts[3]].delete_records_offset == 8 and got[parts[5]].remote_log_start_offset == 10


def test_gaps_are_recorded_once_per_range(store) -> None:
    """Each call says whether it added a gap."""
    lease = store.acquire_lease(TIP, "t")
    assert store.record_gap(TIP, 30, 40, lease) is True
    assert store.record_gap(TIP, 10, 20, lease) is True
    assert store.record_gap(TIP, 10, 20, lease) is False
    assert store.record_gap(TIP, 10, 25, lease) is True
    assert [(g.start, g.end) for g in store.list_gaps(TIP)] == [(10, 20), (10, 25), (30, 40)]
    assert all(g.detected_ms > 0 for g in store.list_gaps(TIP))
    with pytest.raises(ValueError):
        store.record_gap(TIP, 5, 4, lease)
    assert store.list_gaps(OTHER) == []


def test_a_delete_records_makes_the_gaps_below_it_history(store) -> None:
    """In the transaction that records it: a gap wholly below the offset is removed, one it cuts
    through is kept from the offset on (detected when it was), one above it stays."""
    lease = store.acquire_lease(TIP, "t")
    for start, end in ((10, 19), (25, 34), (40, 49)):
        store.record_gap(TIP, start, end, lease)
    detected = {(g.start, g.end): g.detected_ms for g in store.list_gaps(TIP)}
    assert store.record_delete_records(TIP, 30, lease) == 30
    assert [(g.start, g.end, g.detected_ms) for g in store.list_gaps(TIP)] == [
        (30, 34, detected[(25, 34)]),
        (40, 49, detected[(40, 49)]),
    ]
    assert store.record_delete_records(TIP, 45, lease) == 45
    assert [(g.start, g.end) for g in store.list_gaps(TIP)] == [(45, 49)]
    assert store.record_delete_records(TIP, 50, lease) == 50
    assert store.list_gaps(TIP) == []


def test_a_gap_is_recorded_from_the_global_log_start_on(store) -> None:
    """Offsets below the remote log start or the highest DeleteRecords were deleted on purpose:
    never recorded as lost."""
    lease = store.acquire_lease(TIP, "t")
    store.set_remote_log_start_offset(TIP, 20, lease)
    assert store.record_gap(TIP, 10, 19, lease) is False
    assert store.list_gaps(TIP) == []
    store.record_gap(TIP, 15, 24, lease)
    assert [(g.start, g.end) for g in store.list_gaps(TIP)] == [(20, 24)]
    store.record_delete_records(TIP, 30, lease)
    store.record_gap(TIP, 25, 35, lease)
    assert [(g.start, g.end) for g in store.list_gaps(TIP)] == [(30, 35)]
