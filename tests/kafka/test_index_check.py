"""Judging a broker's own index files against its ``.log``: identical to a rebuild, equivalent (as
real brokers write them after restarts, follower fetches, recoveries, or before Kafka 3.8), or
damaged with the entry and its byte named. The batches are read by kafka-python's record reader
(``test_index_against_kafka.py``); what a broker writes is modelled plainly here."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest

from tests.kafka.test_index_against_kafka import Batch, kafka_python_batches
from tiering_core.errors import CorruptLogError
from tiering_core.kafka.index_check import IndexVerdict, LogLayout, check_broker_index
from tiering_core.kafka.index_rebuild import rebuild_indexes
from tiering_core.kafka.partition_log import PartitionLog
from tiering_core.kafka.records import RecordSpec, encode_batch

# --- broker files that differ from a rebuild and are still right ------------------------------------


def broker_indexes(
    batches: list[Batch],
    base_offset: int,
    interval: int,
    *,
    appends: list[list[int]],
    restarts: set[int],
    final_time_entry: bool,
    record_offsets: dict[int, int] | None = None,
) -> tuple[bytes, bytes]:
    """A broker's index files when batches arrive in ``appends`` (a follower appends a fetched chunk
    with one ``LogSegment.append``) and the broker restarts before the appends numbered in
    ``restarts`` (``close`` writes the final time entry; the reloaded segment counts bytes from 0).
    ``record_offsets`` maps a batch to the record offset a broker before 3.8 put in the time index."""
    offset_index, time_index = b"", b""
    since = 0
    max_ts, max_ts_offset, last_time = -1, -1, -1

    def time_entry() -> None:
        nonlocal time_index, last_time
        if max_ts > last_time:
            time_index += struct.pack(">qi", max_ts, max_ts_offset - base_offset)
            last_time = max_ts

    for number, chunk in enumerate(appends):
        if number in restarts:
            time_entry()  # LogSegment.close
            since = 0  # a new LogSegment object: bytesSinceLastIndexEntry = 0
        group = [batches[i] for i in chunk]
        for i in chunk:
            b = batches[i]
            if b.max_timestamp > max_ts:
                max_ts = b.max_timestamp
                max_ts_offset = (record_offsets or {}).get(i, b.last_offset)
        if since > interval:
            offset_index += struct.pack(">ii", group[-1].last_offset - base_offset, group[0].position)
            time_entry()
            since = 0
        since += sum(b.size for b in group)
    if final_time_entry:
        time_entry()
    return offset_index, time_index


@pytest.fixture()
def one_segment(make_writer):  # type: ignore[no-untyped-def]
    rng = random.Random(5)
    clock = {"t": 1_700_000_000_000}

    def tick() -> int:
        clock["t"] += rng.randint(-800, 1_000)
        return clock["t"]

    w = make_writer("broker", segment_bytes=10**9, index_interval_bytes=300, clock=tick)
    for _ in range(120):
        w.append_records(rng.randint(1, 4), value_size=rng.randint(10, 200), per_batch=rng.randint(1, 4))
    clock["t"] += 100_000
    w.append([(b"late", b"1")])
    w.append([(b"later", b"2")], timestamp=clock["t"] + 1)  # never indexed before the roll's final entry
    w.roll()
    segment = PartitionLog(w.path).segments[0]
    return segment, kafka_python_batches(segment.log_path)


def _chunks(n: int, rng: random.Random) -> list[list[int]]:
    out, i = [], 0
    while i < n:
        size = rng.randint(1, 5)
        out.append(list(range(i, min(n, i + size))))
        i += size
    return out


@pytest.mark.parametrize(
    "scenario", ["one-session", "restarts", "follower-chunks", "restarts-and-chunks", "active-after-recovery"]
)
def test_what_real_brokers_write_is_equivalent_not_damage(one_segment, scenario: str) -> None:
    segment, batches = one_segment
    rng = random.Random(scenario)
    chunks = _chunks(len(batches), rng) if "chunks" in scenario else [[i] for i in range(len(batches))]
    restarts = set(rng.sample(range(1, len(chunks)), 6)) if "restarts" in scenario else set()
    active = scenario == "active-after-recovery"
    stored_offsets, stored_times = broker_indexes(
        batches, 0, 300, appends=chunks, restarts=restarts, final_time_entry=True
    )
    rebuilt = rebuild_indexes(segment.log_path, 0, index_interval_bytes=300, is_active=active)
    layout = LogLayout.read(segment.log_path)
    if active:  # recover() appended the final time entry; the file is pre-allocated
        stored_offsets += bytes(4096)
        stored_times += bytes(4092)
    offset_verdict = check_broker_index("offset", stored_offsets, rebuilt.offset_index, layout, 0, is_active=active)
    time_verdict = check_broker_index("time", stored_times, rebuilt.time_index, layout, 0, is_active=active)
    if scenario == "one-session":
        assert offset_verdict.verdict == time_verdict.verdict == IndexVerdict.IDENTICAL
        return
    if active:
        assert offset_verdict.verdict == IndexVerdict.IDENTICAL
        assert time_verdict.verdict == IndexVerdict.EQUIVALENT  # recover()'s final entry
        return
    assert stored_offsets != rebuilt.offset_index or stored_times != rebuilt.time_index
    assert offset_verdict.verdict != IndexVerdict.DAMAGED, offset_verdict
    assert time_verdict.verdict != IndexVerdict.DAMAGED, time_verdict
    assert IndexVerdict.EQUIVALENT in (offset_verdict.verdict, time_verdict.verdict)


def test_a_time_index_from_a_broker_before_3_8_is_equivalent(one_segment) -> None:
    """Older brokers stored the offset of the record with the largest timestamp, inside its batch."""
    segment, batches = one_segment
    multi = {i: b.base_offset for i, b in enumerate(batches) if b.last_offset > b.base_offset}
    assert multi
    _offsets, stored_times = broker_indexes(
        batches,
        0,
        300,
        appends=[[i] for i in range(len(batches))],
        restarts=set(),
        final_time_entry=True,
        record_offsets=multi,
    )
    rebuilt = rebuild_indexes(segment.log_path, 0, index_interval_bytes=300)
    assert stored_times != rebuilt.time_index
    judged = check_broker_index("time", stored_times, rebuilt.time_index, segment.log_path, 0, is_active=False)
    assert judged.verdict == IndexVerdict.EQUIVALENT


def _entry(data: bytes, i: int, fmt: str = ">ii") -> tuple[int, ...]:
    size = struct.calcsize(fmt)
    return struct.unpack_from(fmt, data, i * size)


def _with_entry(data: bytes, i: int, values: tuple[int, ...], fmt: str = ">ii") -> bytes:
    size = struct.calcsize(fmt)
    return data[: i * size] + struct.pack(fmt, *values) + data[(i + 1) * size :]


def test_damage_is_told_apart_and_named(one_segment) -> None:
    segment, _batches = one_segment
    rebuilt = rebuild_indexes(segment.log_path, 0, index_interval_bytes=300)
    offsets, times = rebuilt.offset_index, rebuilt.time_index
    layout = LogLayout.read(segment.log_path)
    assert len(offsets) >= 8 * 6 and len(times) >= 12 * 4

    def judge(kind: str, stored: bytes, *, active: bool = False):  # type: ignore[no-untyped-def]
        rebuilt_bytes = offsets if kind == "offset" else times
        return check_broker_index(kind, stored, rebuilt_bytes, layout, 0, is_active=active, path=Path("x.index"))

    entries = [_entry(offsets, i) for i in range(len(offsets) // 8)]
    base_at = dict(zip(layout.positions, layout.base_offsets, strict=True))
    rel, position = entries[3]
    # an entry whose batch starts more than one offset after the previous entry's offset
    low = next(i for i in range(1, len(entries)) if entries[i - 1][0] < base_at[entries[i][1]] - 1)
    # an entry followed by one whose batch holds several offsets
    high = next(i for i in range(len(entries) - 1) if base_at[entries[i + 1][1]] < entries[i + 1][0])
    damaged = {
        "inside a batch": ("offset", _with_entry(offsets, 3, (rel, position + 5)), "not the start of a batch", 24),
        "offset below its batch": (
            "offset",
            _with_entry(offsets, low, (base_at[entries[low][1]] - 1, entries[low][1])),
            "below the first",
            8 * low,
        ),
        "reaching the next batch": (
            "offset",
            _with_entry(offsets, high, (base_at[entries[high + 1][1]], entries[high][1])),
            "reaches into the batch of the next entry",
            8 * high,
        ),
        "going backwards": ("offset", _with_entry(offsets, 3, (entries[4][0], position)), "entries go backwards", 32),
        "beyond the segment": (
            "offset",
            offsets + struct.pack(">ii", 10**6, layout.positions[-1]),
            "beyond the segment's last offset",
            len(offsets),
        ),
        "odd size": ("offset", offsets + b"\0", "not a multiple", None),
        "zero tail on a closed segment": ("offset", offsets + bytes(16), "zero-filled entries", len(offsets)),
        "wrong timestamp": (
            "time",
            _with_entry(times, 2, (_entry(times, 2, ">qi")[0] - 1, _entry(times, 2, ">qi")[1]), ">qi"),
            "not the largest timestamp",
            24,
        ),
        "offset past the first batch reaching it": (
            "time",
            _with_entry(times, 1, (_entry(times, 1, ">qi")[0], _entry(times, 2, ">qi")[1]), ">qi"),
            "is not the largest timestamp up to offset",
            12,
        ),
    }
    flat = next(
        j
        for j in range(1, len(layout.positions))
        if layout.running_max_timestamps[j - 1] == layout.running_max_timestamps[j]
    )
    damaged["a later batch than the one reaching it"] = (
        "time",
        struct.pack(">qi", layout.running_max_timestamps[flat], layout.last_offsets[flat]),
        "is not in the first batch that reaches timestamp",
        0,
    )
    for name, (kind, stored, reason, byte) in damaged.items():
        judged = judge(kind, stored)
        assert judged.verdict == IndexVerdict.DAMAGED, name
        assert reason in (judged.detail or ""), (name, judged.detail)
        if byte is not None:
            assert f"at byte {byte}:" in (judged.detail or ""), (name, judged.detail)
    assert judge("offset", offsets).verdict == IndexVerdict.IDENTICAL
    assert judge("offset", offsets + bytes(64), active=True).verdict == IndexVerdict.IDENTICAL
    sparse = offsets[:8] + offsets[24:]  # fewer entries (a restart): lookups still right
    assert judge("offset", sparse).verdict == IndexVerdict.EQUIVALENT
    no_roll = times[:-12]
    missing_roll = judge("time", no_roll)
    assert missing_roll.verdict == IndexVerdict.EQUIVALENT and "without the roll's final entry" in missing_roll.detail


def test_an_active_segment_with_a_batch_being_written_is_judged_on_its_whole_batches(make_writer) -> None:
    """The broker may be mid-append: the tail is not damage, and entries added after our walk are not judged."""
    w = make_writer("live", segment_bytes=10**9, index_interval_bytes=200)
    w.append_records(80, value_size=60, per_batch=2)
    segment = PartitionLog(w.path).active_segment
    rebuilt = rebuild_indexes(segment.log_path, 0, index_interval_bytes=200, is_active=True)
    w.append_records(40, value_size=60, per_batch=2)  # entries appended after the rebuild's walk
    with segment.log_path.open("ab") as out:
        out.write(segment.log_path.read_bytes()[:150])  # and half a batch at the tail
    stored = segment.index_path.read_bytes()
    judged = check_broker_index("offset", stored, rebuilt.offset_index, segment.log_path, 0, is_active=True)
    assert judged.verdict == IndexVerdict.EQUIVALENT, judged
    times = segment.time_index_path.read_bytes()
    judged = check_broker_index("time", times, rebuilt.time_index, segment.log_path, 0, is_active=True)
    assert judged.verdict == IndexVerdict.EQUIVALENT, judged


# --- the log's layout, and what cannot be judged ----------------------------------------------------


def hand_made_log(tmp_path: Path) -> tuple[Path, list[bytes]]:
    """Three batches at offsets 100, 101-102 and 103, timestamps going back at the third."""

    def batch(offset: int, stamps: list[int]) -> bytes:
        specs = [RecordSpec(b"k", b"0123456789", ts) for ts in stamps]
        return encode_batch(specs, base_offset=offset, partition_leader_epoch=0)

    parts = [batch(100, [1000]), batch(101, [1200, 1100]), batch(103, [900])]
    log = tmp_path / "00000000000000000100.log"
    log.write_bytes(b"".join(parts))
    return log, parts


def test_a_layout_holds_each_batch_s_place_offsets_and_running_largest_timestamp(tmp_path: Path) -> None:
    log, parts = hand_made_log(tmp_path)
    layout = LogLayout.read(log)
    sizes = [len(p) for p in parts]
    assert layout.positions == [0, sizes[0], sizes[0] + sizes[1]] and layout.size == sum(sizes)
    assert (layout.base_offsets, layout.last_offsets) == ([100, 101, 103], [100, 102, 103])
    assert layout.running_max_timestamps == [1000, 1200, 1200]
    assert layout.last_offset == 103
    found = [layout.batch_containing(offset) for offset in (99, 100, 101, 102, 103, 104)]
    assert found == [None, 0, 1, 1, 2, None]
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    assert (LogLayout.read(empty).last_offset, LogLayout.read(empty).batch_containing(0)) == (None, None)


def test_an_active_segment_s_torn_tail_is_left_out_and_a_closed_one_s_is_damage(tmp_path: Path) -> None:
    log, parts = hand_made_log(tmp_path)
    log.write_bytes(b"".join(parts) + parts[0][:30])
    assert LogLayout.read(log, valid_prefix=True).last_offsets == [100, 102, 103]
    with pytest.raises(CorruptLogError, match=str(log)):
        LogLayout.read(log)


def test_an_index_over_a_log_that_cannot_be_walked_is_damaged(tmp_path: Path) -> None:
    log, parts = hand_made_log(tmp_path)
    rebuilt = rebuild_indexes(log, 100, index_interval_bytes=1)
    assert rebuilt.offset_index  # one entry a batch: something to differ from
    log.write_bytes(b"".join(parts) + parts[0][:30])
    judged = check_broker_index("offset", b"", rebuilt.offset_index, log, 100, is_active=False)
    assert judged.verdict == IndexVerdict.DAMAGED
    assert (judged.detail or "").startswith("the log cannot be walked to judge the index:")
    same = check_broker_index("offset", rebuilt.offset_index, rebuilt.offset_index, log, 100, is_active=False)
    assert same.verdict == IndexVerdict.IDENTICAL  # the log is read only when the index differs


def test_an_unknown_index_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="index kind 'txn' is neither 'offset' nor 'time'"):
        check_broker_index("txn", b"", b"", Path("x.log"), 0, is_active=False)
