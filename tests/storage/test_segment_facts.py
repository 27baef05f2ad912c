"""What a manifest says of its segment beyond its objects, read from and written to its document
directly: Kafka's bounds on offsets, timestamps and epochs held alike by the writer and every reader,
and the typed field getter every document of the bucket is parsed with. (A manifest carrying these
facts, read whole, is tested in test_manifest.py.)"""

from __future__ import annotations

from typing import Any

import pytest

from tiering_core.kafka.epoch import EpochEntry
from tiering_core.storage.errors import ManifestError
from tiering_core.storage.segment_facts import (
    MAX_EPOCH,
    MAX_EPOCH_ENTRIES,
    MAX_OFFSET,
    MIN_TIMESTAMP,
    SegmentFacts,
    manifest_field,
)

INT64_MAX = (1 << 63) - 1
INT32_MAX = (1 << 31) - 1


def facts(**changes: Any) -> SegmentFacts:
    values: dict[str, Any] = {
        "end_offset": 199,
        "max_timestamp": 1_700_000_000_000,
        "leader_epochs": (EpochEntry(2, 100), EpochEntry(3, 150)),
        "epoch_index": (EpochEntry(0, 0), EpochEntry(2, 90), EpochEntry(3, 150)),
    }
    return SegmentFacts(**{**values, **changes})


def test_the_bounds_are_kafka_s_int64_and_int32() -> None:
    assert (MAX_OFFSET, MIN_TIMESTAMP, MAX_EPOCH) == (INT64_MAX, -INT64_MAX - 1, INT32_MAX)


def test_a_document_round_trips_as_pairs_of_epoch_and_start_offset() -> None:
    made = facts()
    doc = made.to_doc()
    assert doc["leader_epochs"] == [[2, 100], [3, 150]] and doc["epoch_index"][1] == [2, 90]
    assert SegmentFacts.from_doc(doc) == made
    made.validate(100)


def test_the_extremes_kafka_allows_are_valid() -> None:
    widest = facts(
        end_offset=INT64_MAX,
        max_timestamp=-INT64_MAX - 1,
        leader_epochs=(EpochEntry(INT32_MAX, INT64_MAX),),
        epoch_index=(),
    )
    widest.validate(0)
    widest.validate(INT64_MAX)  # a segment of one record at the last offset
    facts(max_timestamp=INT64_MAX).validate(100)


@pytest.mark.parametrize(
    ("made", "base_offset", "message"),
    [
        (facts(end_offset=99), 100, r"end_offset 99 is outside \[100, "),
        (facts(end_offset=INT64_MAX + 1), 100, "end_offset .* is outside"),
        (facts(max_timestamp=INT64_MAX + 1), 100, "max_timestamp .* is not a 64-bit integer"),
        (facts(leader_epochs=()), 100, "leader_epochs is empty"),
        (facts(leader_epochs=(EpochEntry(INT32_MAX + 1, 100),)), 100, r"leader_epochs\[0\]: epoch .* out of range"),
        (facts(epoch_index=(EpochEntry(1, 5), EpochEntry(1, 6))), 100, r"epoch_index\[1\]: epoch 1 at 6 does not"),
        (facts(leader_epochs=(EpochEntry(2, 100), EpochEntry(3, 200))), 100, "leader epoch 3 starts at 200, outside"),
        (facts(), 101, "leader epoch 2 starts at 100, outside the segment 101..199"),
    ],
)
def test_validate_names_the_first_problem(made: SegmentFacts, base_offset: int, message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        made.validate(base_offset)


def test_too_many_entries_are_refused_before_they_are_read() -> None:
    doc = facts().to_doc()
    doc["epoch_index"] = [[0, 0]] * (MAX_EPOCH_ENTRIES + 1)
    with pytest.raises(ManifestError, match=f"epoch_index has {MAX_EPOCH_ENTRIES + 1} entries"):
        SegmentFacts.from_doc(doc)
    made = facts(epoch_index=tuple(EpochEntry(e, 0) for e in range(MAX_EPOCH_ENTRIES + 1)))
    with pytest.raises(ManifestError, match=f"epoch_index has {MAX_EPOCH_ENTRIES + 1} entries"):
        made.validate(100)


def test_manifest_field_takes_only_the_named_type_and_never_a_bool_for_an_int() -> None:
    doc = {"size": 10, "flag": True, "name": "x", "long": "y" * 500}
    assert manifest_field(doc, "size", int) == 10 and manifest_field(doc, "name", str) == "x"
    with pytest.raises(ManifestError, match="manifest field 'flag' must be int, got True"):
        manifest_field(doc, "flag", int)
    with pytest.raises(ManifestError, match="chunk field 'missing' must be str, got None"):
        manifest_field(doc, "missing", str, "chunk field")
    with pytest.raises(ManifestError) as raised:
        manifest_field(doc, "long", int)
    assert str(raised.value) == "manifest field 'long' must be int, got " + repr("y" * 500)[:80]
