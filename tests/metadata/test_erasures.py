"""The audit trail of erasures: a partition's row updated as its segments are switched, read back
newest first, by topic; each erasure id, topic id and partition has one row; an export table's
row likewise, one per erasure id and table UUID, its pending files emptied at the end."""

from __future__ import annotations

from dataclasses import replace

from tests.metadata.support import tip
from tiering_core.metadata.erasures import (
    FINISHED,
    HELD,
    ErasureRecord,
    LocalSegment,
    LocalSegments,
    SegmentErasure,
    TableErasureFigures,
    TableErasureRecord,
)
from tiering_core.metadata.store import RemoteLogMetadataStore

TIP = tip("EEEEEEEEEEEEEEEEEEEEEE", "orders", 0)


def test_an_erasure_is_updated_as_it_goes_and_read_back_newest_first(metadata_url: str) -> None:
    first = ErasureRecord("e-1", "orders", TIP.topic_id, 0, ("aa" * 32, "bb" * 32), "tiering erase", 10)
    other = ErasureRecord("e-2", "payments", "PPPPPPPPPPPPPPPPPPPPPP", 3, ("cc" * 32,), "dag run 7", 20)
    with RemoteLogMetadataStore(metadata_url) as store:
        store.record_erasure(first)
        store.record_erasure(other)
        going = replace(first, segments=(SegmentErasure("old-1", None, 4),), segments_read=2)
        store.record_erasure(going)
        assert store.erasures("orders") == [going] and going.records_removed == 0  # under way
        going = replace(going, segments=(SegmentErasure("old-1", "new-1", 4),))
        store.record_erasure(going)
        done = replace(
            going, segments=(*going.segments, SegmentErasure("old-2", "new-2", 1)), outcome=FINISHED, finished_ms=30
        )
        store.record_erasure(done)
        assert store.erasures() == [other, done]
        assert store.erasures("orders") == [done]
        assert done.records_removed == 5 and done.to_dict()["records_removed"] == 5
        assert done.local_segments is None  # not looked at

        local = LocalSegments(
            "/var/lib/kafka",
            (
                LocalSegment(0, "00000000000000000000.log", 3, 1_000, copied=True, removed_by_time_ms=61_000),
                LocalSegment(9, "00000000000000000009.log", 1, 2_000, active=True, copied=False),
            ),
            segments_read=2,
            local_retention_ms=60_000,
            local_retention_bytes=-1,
            checked_ms=40,
        )
        named = replace(done, local_segments=local)
        store.record_erasure(named)
        assert store.erasures("orders") == [named] and named.to_dict()["local_segments"]["records"] == 4
        elsewhere = replace(done, local_segments=LocalSegments(None, not_checked="no log dir of orders-0 on this host"))
        store.record_erasure(elsewhere)
        assert store.erasures("orders") == [elsewhere]


def test_the_figures_count_each_topic_s_erasures_by_outcome_and_sum_what_they_removed(metadata_url: str) -> None:
    from tiering_core.metadata.erasures import STARTED, ErasureFigures

    done = ErasureRecord(
        "e-1", "orders", TIP.topic_id, 0, ("aa" * 32,), "tiering erase", 10,
        segments=(SegmentErasure("old-1", "new-1", 4), SegmentErasure("old-2", "new-2", 2)), outcome=FINISHED,
    )  # fmt: skip
    with RemoteLogMetadataStore(metadata_url) as store:
        assert store.erasure_figures().partitions == ()
        store.record_erasure(done)
        store.record_erasure(replace(done, partition=1, segments=(SegmentErasure("old-3", "new-3", 1),)))
        killed = replace(done, erasure_id="e-2", segments=(SegmentErasure("old-4", None, 9),), outcome=STARTED)
        store.record_erasure(killed)  # the copy under way is not counted as removed
        store.record_erasure(replace(done, erasure_id="e-3", topic="payments", segments=()))
        assert store.erasure_figures().partitions == (
            ErasureFigures("orders", FINISHED, 2, 7),
            ErasureFigures("orders", STARTED, 1, 0),
            ErasureFigures("payments", FINISHED, 1, 0),
        )
        assert store.erasure_figures("payments").partitions == (ErasureFigures("payments", FINISHED, 1, 0),)


def test_a_table_s_erasure_is_updated_as_it_goes_and_read_back_by_topic_and_table(metadata_url: str) -> None:
    going = TableErasureRecord("e-1", "orders", "kafka.orders", "1" * 36, 10, rows_deleted=3)
    other = TableErasureRecord("e-2", "payments", "kafka.payments", "2" * 36, 20)
    dead_letters = TableErasureRecord("e-1", "orders", "kafka.orders_dead_letters", "3" * 36, 11)
    with RemoteLogMetadataStore(metadata_url) as store:
        for record in (going, other, dead_letters):
            store.record_table_erasure(record)
        going = replace(going, snapshots_expired=4, pending=("s3://w/a.parquet", "s3://w/snap-1.avro"))
        store.record_table_erasure(going)
        assert store.table_erasures("orders") == [dead_letters, going]
        assert going.to_dict()["pending"] == 2  # by count
        done = replace(going, data_files_deleted=1, pending=(), outcome=FINISHED, finished_ms=30)
        store.record_table_erasure(done)
        held = replace(dead_letters, outcome=HELD, finished_ms=31)
        store.record_table_erasure(held)
        assert store.table_erasures() == [other, held, done]
        assert store.table_erasures(table_uuid="1" * 36) == [done]
        assert store.erasure_figures().tables == (
            TableErasureFigures("orders", 2, 3, 4),
            TableErasureFigures("payments", 1, 0, 0),
        )
        assert store.erasure_figures("payments").tables == (TableErasureFigures("payments", 1, 0, 0),)
