"""A segment's key filter: no false negatives, false positives near the rate it was sized for,
a stable serialised form, and hostile bytes refused before anything is allocated."""

from __future__ import annotations

import hashlib
import struct
import tracemalloc
from pathlib import Path

import pytest

import tiering_core.storage.key_filter as key_filter_module
from tiering_core.errors import CorruptLogError
from tiering_core.kafka.batch import CODEC_ZSTD
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.kafka.records import iter_records
from tiering_core.kafka.topic import TopicPartition
from tiering_core.storage.key_filter import (
    HEADER,
    MAX_BITS,
    KeyFilter,
    KeyFilterError,
    build_key_filter,
    optimal_sizes,
    segment_key_filter,
    with_key_filter,
)
from tiering_core.storage.layout import ObjectKind


def keys(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(count)]


@pytest.mark.parametrize("rate", [0.01, 0.001])
def test_no_false_negatives_and_false_positives_near_the_target(rate: float) -> None:
    present = keys("present", 20_000)
    kf = build_key_filter(present, len(present), rate)
    assert all(kf.may_contain(k) for k in present)
    absent = keys("absent", 200_000)
    measured = sum(kf.may_contain(k) for k in absent) / len(absent)
    assert rate / 2 < measured < rate * 1.5, f"measured {measured:.5f} for a target of {rate}"


def test_the_default_is_a_one_per_mille_filter_sized_from_the_count() -> None:
    bits, hashes = optimal_sizes(1000)
    assert (bits, hashes) == (14378, 10)  # -n ln(0.001) / ln(2)^2 bits, (m / n) ln 2 hashes
    kf = build_key_filter(keys("k", 1000), 1000)
    assert (kf.bits, kf.hashes) == (bits, hashes) and len(kf.bit_array) == (bits + 7) // 8


def test_the_serialised_form_round_trips_and_its_digest_is_of_those_bytes() -> None:
    kf = build_key_filter([*keys("k", 500), None], 501)
    data = kf.to_bytes()
    magic, version, hashes, bits = HEADER.unpack_from(data)
    assert (magic, version, hashes, bits) == (b"TKBF", 1, kf.hashes, kf.bits)
    assert KeyFilter.from_bytes(data) == kf
    assert kf.sha256 == hashlib.sha256(data).hexdigest()
    assert build_key_filter(reversed(keys("k", 500)), 501).to_bytes() == data  # order does not matter


def test_a_segments_filter_holds_every_non_null_key_and_no_control_record(tmp_path: Path) -> None:
    w = PartitionWriter(tmp_path, TopicPartition("orders", 0), codec=CODEC_ZSTD, clock=lambda: 1_700_000_000_000)
    w.append_records(300, per_batch=12, key_prefix="user")
    w.append([(None, b"no key"), (b"", b"empty key")])
    w.begin_transaction(5)
    w.append([(b"txn-key", b"v")], producer_id=5)
    w.abort(5)
    w.roll()
    log_path = w.path / "00000000000000000000.log"
    kf = segment_key_filter(log_path)
    data_keys = [r.key for r in iter_records(log_path) if not r.is_control and r.key is not None]
    assert len(data_keys) == 302 and all(kf.may_contain(k) for k in data_keys)
    assert (kf.bits, kf.hashes) == optimal_sizes(303)  # sized from the data batches' record counts
    control_key = struct.pack(">hh", 0, 0)  # the abort marker's key
    assert not kf.may_contain(control_key)
    assert sum(kf.may_contain(k) for k in keys("absent", 10_000)) < 300


def test_every_copy_carries_the_filter_of_its_log_unless_it_cannot_have_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beside the log's file its filter; a log given as bytes, or with more keys than a filter may
    hold, goes without one (an erasure then reads the whole segment)."""
    w = PartitionWriter(tmp_path, TopicPartition("orders", 0), clock=lambda: 1_700_000_000_000)
    w.append_records(40, key_prefix="user")
    w.roll()
    log_path = w.path / "00000000000000000000.log"
    files = {ObjectKind.LOG: log_path, ObjectKind.OFFSET_INDEX: b"\0" * 8}
    with_filter = with_key_filter(files)
    assert with_filter == {**files, ObjectKind.KEY_FILTER: segment_key_filter(log_path).to_bytes()}
    assert files == {ObjectKind.LOG: log_path, ObjectKind.OFFSET_INDEX: b"\0" * 8}  # the caller's left alone
    assert with_key_filter({ObjectKind.LOG: log_path.read_bytes()}) == {ObjectKind.LOG: log_path.read_bytes()}
    monkeypatch.setattr(key_filter_module, "MAX_BITS", 64)
    assert with_key_filter(with_filter) == files  # a stale filter is never carried


def test_a_damaged_segment_is_refused_by_the_reader(tmp_path: Path) -> None:
    w = PartitionWriter(tmp_path, TopicPartition("orders", 0), clock=lambda: 1_700_000_000_000)
    w.append_records(20, per_batch=5)
    w.roll()
    log_path = w.path / "00000000000000000000.log"
    data = bytearray(log_path.read_bytes())
    data[-3] ^= 0xFF
    log_path.write_bytes(bytes(data))
    with pytest.raises(CorruptLogError, match="CRC mismatch"):
        segment_key_filter(log_path)


def _header(hashes: int = 7, bits: int = 1024, magic: bytes = b"TKBF", version: int = 1) -> bytes:
    return HEADER.pack(magic, version, hashes, bits)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"TKBF\0\1", "shorter than its 16-byte header"),
        (_header(magic=b"NOPE") + bytes(128), "not a key filter"),
        (_header(version=2) + bytes(128), "version 2 is not supported"),
        (_header(hashes=0) + bytes(128), "0 hashes"),
        (_header(hashes=33) + bytes(128), "33 hashes"),
        (_header(bits=8) + bytes(1), "8 bits, outside"),
        (_header(bits=2**63) + bytes(128), "outside"),
        (_header() + bytes(127), "needs 128 bytes of bit array, has 127"),
        (_header() + bytes(129), "needs 128 bytes of bit array, has 129"),
        (_header(bits=1020) + bytes(127) + b"\x80", "bits set beyond its bit count"),
    ],
)
def test_hostile_bytes_are_refused_by_name(data: bytes, reason: str) -> None:
    with pytest.raises(KeyFilterError, match=reason):
        KeyFilter.from_bytes(data)


def test_a_header_claiming_the_largest_filter_is_refused_without_allocating_it() -> None:
    data = _header(bits=MAX_BITS) + bytes(16)
    tracemalloc.start()
    try:
        with pytest.raises(KeyFilterError, match="needs"):
            KeyFilter.from_bytes(data)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024, f"{peak} bytes traced"


def test_sizes_beyond_the_bounds_are_refused() -> None:
    with pytest.raises(KeyFilterError, match="more than"):
        optimal_sizes(2**31 - 1)
    with pytest.raises(KeyFilterError, match="not between 0 and 1"):
        optimal_sizes(10, 1.0)
    with pytest.raises(KeyFilterError, match="out of bounds"):
        KeyFilter(0, 1, b"")
