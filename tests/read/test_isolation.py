"""Reads across transactions. At read_committed the batches of aborted transactions are dropped,
whose ABORT marker (and so the txn index entry) may lie in a later segment, or not be tiered yet;
offsets by timestamp count transaction markers, as Kafka's do."""

from __future__ import annotations

import base64
import json

import pytest

from tests.engine_support import TieringEnv, tip_of
from tiering_core.cli import main
from tiering_core.engine.segment_ops import segment_ref
from tiering_core.errors import TieringError
from tiering_core.kafka.batch import RecordBatchHeader
from tiering_core.kafka.index import AbortedTxn, collect_aborted_txns, read_txn_index
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.kafka.records import Record, iter_batches
from tiering_core.read.reader import IsolationLevel, open_reader
from tiering_core.runs.copy import run_copy
from tiering_core.storage.layout import ObjectKind

COMMITTED = IsolationLevel.READ_COMMITTED


def rows(n: int, tag: str) -> list[tuple[bytes, bytes]]:
    return [(f"{tag}-{i}".encode(), f"value-{tag}-{i}".encode()) for i in range(n)]


def build(env: TieringEnv) -> PartitionWriter:
    """Segment 0: an aborted transaction (7) whose marker is in segment 1, a committed one (8)
    interleaved with it; segment 2: producer 9's aborted transaction whose marker lies in the
    active segment (never tiered); plain and idempotent records throughout."""
    w = env.writer("orders", 0)
    w.append(rows(3, "plain"))
    w.begin_transaction(7, 0)
    w.begin_transaction(8, 0)
    w.append(rows(4, "abort7"), producer_id=7)
    w.append(rows(2, "commit8"), producer_id=8)
    w.append(rows(2, "idem"), producer_id=11, producer_epoch=0)
    w.roll()  # producer 7's transaction spans the roll
    w.append(rows(3, "abort7"), producer_id=7)
    w.commit(8)
    w.abort(7)
    w.append(rows(2, "plain"))
    w.roll()
    w.begin_transaction(9, 0)
    w.append(rows(5, "abort9"), producer_id=9)
    w.append(rows(2, "plain"))
    w.roll()
    w.abort(9)  # in the active segment: the local .txnindex is the only record of it
    w.append(rows(1, "plain"))
    w.set_high_watermark()
    return w


def consumer_view(w: PartitionWriter, committed: bool) -> list[Record]:
    """What a consumer reads from the broker's closed segments: every txn index entry of the
    partition, then each batch judged on its own (control batches never returned)."""
    logs = sorted(w.path.glob("*.log"))
    aborted = [t for path in sorted(w.path.glob("*.txnindex")) for t in read_txn_index(path)]

    def dropped(h: RecordBatchHeader) -> bool:
        return (
            committed
            and h.is_transactional
            and any(
                t.producer_id == h.producer_id and t.first_offset <= h.base_offset <= t.last_offset for t in aborted
            )
        )

    return [
        r
        for path in logs[:-1]
        for h, records in iter_batches(path)
        if not h.is_control and not dropped(h)
        for r in records
    ]


def test_read_committed_drops_aborted_transactions_spanning_segments_and_untiered_markers(
    tiering_env: TieringEnv,
) -> None:
    w = build(tiering_env)
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
        reader = open_reader(ctx, w.tp)
        top = reader.highest_offset
        committed = reader.read(0, 1000, COMMITTED)
        uncommitted = reader.read(0, 1000)
    keys = [r.key for r in committed]
    assert not [k for k in keys if k and k.startswith(b"abort")]
    assert keys.count(b"commit8-0") == 1 and keys.count(b"idem-1") == 1 and keys.count(b"plain-1") == 3
    assert sum(1 for r in uncommitted if r.key and r.key.startswith(b"abort")) == 4 + 3 + 5
    assert top == consumer_view(w, False)[-1].offset  # the segment holding producer 9's data was tiered
    for got, committed_view in ((committed, True), (uncommitted, False)):
        assert [(r.offset, r.key, r.value) for r in got] == [
            (r.offset, r.key, r.value) for r in consumer_view(w, committed_view)
        ]


def test_read_committed_from_any_offset_and_in_small_reads(tiering_env: TieringEnv) -> None:
    w = build(tiering_env)
    want = consumer_view(w, True)
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
        reader = open_reader(ctx, w.tp)
        for start in range(reader.highest_offset + 1):
            got = reader.read(start, 2, COMMITTED)
            assert [r.offset for r in got] == [r.offset for r in want if r.offset >= start][:2], start


def test_a_small_read_fetches_only_the_txn_indexes_it_needs(tiering_env: TieringEnv) -> None:
    """Kafka's stop rule: the marker entry of segment 1 has a last stable offset past segment 0,
    so the txn indexes of later segments (each with an abort of its own) are never fetched."""
    w = tiering_env.writer("orders", 0)
    w.begin_transaction(7, 0)
    w.append(rows(3, "abort7"), producer_id=7)
    w.append(rows(3, "plain"))
    w.roll()
    w.abort(7)
    for n in range(3):
        w.append(rows(2, "plain"))
        w.roll()
        w.begin_transaction(20 + n, 0)
        w.append(rows(2, f"abort{20 + n}"), producer_id=20 + n)
        w.abort(20 + n)
    w.roll()
    w.append(rows(1, "plain"))
    w.set_high_watermark()
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
        reader = open_reader(ctx, w.tp)
        got = reader.read(0, 2, COMMITTED)
        fetched = [name for name in reader.cache._sizes if name.endswith(".txnindex")]
        assert [r.key for r in got] == [b"plain-0", b"plain-1"]
        assert len(fetched) == 1, fetched
        every = reader.read(0, 100, COMMITTED)
    assert [r.key for r in every if r.key and r.key.startswith(b"abort")] == []


def test_collect_aborted_txns_stops_at_an_entry_whose_lso_reaches_the_range_end() -> None:
    entries = [AbortedTxn(1, 0, 10, 5), AbortedTxn(2, 5, 12, 13), AbortedTxn(3, 14, 20, 21)]
    result = collect_aborted_txns(entries, 0, 13)
    assert result.aborted == tuple(entries[:2]) and result.is_complete
    result = collect_aborted_txns(entries, 11, 30)
    assert result.aborted == tuple(entries[1:]) and not result.is_complete


def test_find_offset_counts_transaction_markers_as_kafka_does(tiering_env: TieringEnv) -> None:
    """Kafka's ``searchForTimestamp`` does not skip control records: a marker stamped later than a
    following data record is the first record at or after a timestamp between the two."""
    now = [1_000]
    w = tiering_env.writer("orders", 0, clock=lambda: now[0])
    w.begin_transaction(7, 0)
    w.append(rows(2, "txn"), producer_id=7)  # stamped 1000
    now[0] = 2_000
    marker = w.commit(7)  # stamped 2000
    w.append(rows(2, "late"), timestamp=1_500)  # a producer's older timestamp, after the marker
    w.roll()
    w.append(rows(1, "plain"))
    w.set_high_watermark()
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
        reader = open_reader(ctx, w.tp)
        found = reader.offset_for_timestamp(1_200)
        assert found is not None and (found.offset, found.timestamp) == (marker, 2_000)
        found = reader.offset_for_timestamp(1_000)
        assert found is not None and (found.offset, found.timestamp) == (0, 1_000)
        assert [r.key for r in reader.read(marker, 1, COMMITTED)] == [b"late-0"]  # a consumer reads on from there


def test_a_damaged_txn_index_fails_read_committed_and_names_the_repair(fs_env: TieringEnv) -> None:
    """Without its txn index an aborted transaction would read as committed: an error, not a guess."""
    w = build(fs_env)
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
        segments = sorted(ctx.metadata.list_segments(tip_of(w)), key=lambda s: s.start_offset)
        storage = ctx.storage
        key = segment_ref(segments[1]).key(ObjectKind.TRANSACTION_INDEX, storage.prefix)
        damaged = bytearray(storage.fetch(segment_ref(segments[1]), ObjectKind.TRANSACTION_INDEX))
        damaged[9] ^= 0x01  # producer 7 would become another producer
        storage.put_object(key, bytes(damaged))
        reader = open_reader(ctx, w.tp)
        with pytest.raises(TieringError, match=r"transaction index of segment .* rebuild-indexes repairs it"):
            reader.read(0, 100, COMMITTED)
        assert len(reader.read(0, 100)) == len(consumer_view(w, False))


def test_fetch_isolation_option(fs_env: TieringEnv, capsys: pytest.CaptureFixture[str]) -> None:
    """``tiering fetch --isolation``: read_uncommitted by default (a consumer's default), same JSON."""
    w = build(fs_env)
    cfg = str(fs_env.config_path)
    select = ("--topic", "orders", "--partition", "0", "--offset", "0", "--max-records", "100")
    assert main(["--config", cfg, "copy"]) == 0
    capsys.readouterr()
    keys: dict[str, list[str | None]] = {}
    for level in ("", "read_uncommitted", "read_committed"):
        extra = ("--isolation", level) if level else ()
        assert main(["--config", cfg, "--json", "fetch", *select, *extra]) == 0
        rows = json.loads(capsys.readouterr().out)
        keys[level] = [base64.b64decode(r["key"]).decode() if r["key"] else None for r in rows]
    assert keys[""] == keys["read_uncommitted"] == [r.key.decode() for r in consumer_view(w, False) if r.key]
    assert keys["read_committed"] == [r.key.decode() for r in consumer_view(w, True) if r.key]
    with pytest.raises(SystemExit) as refused:
        main(["--config", cfg, "fetch", *select, "--isolation", "serializable"])
    assert refused.value.code == 2 and "invalid choice: 'serializable'" in capsys.readouterr().err
