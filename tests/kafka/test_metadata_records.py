"""KRaft's metadata records (``tiering_core/kafka/metadata_records.py``): every known version
decoded as encoded, unknown tagged fields and record types skipped, malformed values refused with
what is wrong (docs/kafka-rules.md section 7). The image built from them is tested in
test_cluster_metadata.py."""

from __future__ import annotations

import pytest

from tiering_core.kafka.checkpoints import new_topic_id
from tiering_core.kafka.metadata_records import (
    NO_LEADER,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
    decode_metadata_value,
    encode_metadata_record,
)


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def test_records_of_every_known_version_decode() -> None:
    topic_id = new_topic_id()
    created = PartitionRecord(topic_id, 3, (1, 2, 3), (1, 3), (2,), (3,), 1, 7, 9)
    for version in (0, 1, 2):
        assert decode_metadata_value(encode_metadata_record(created, version)) == (3, version, created)
    change = PartitionChangeRecord(topic_id, 3, isr=(1,), leader=NO_LEADER, replicas=(1, 4), adding_replicas=(4,))
    for version in (0, 1, 2):
        assert decode_metadata_value(encode_metadata_record(change, version)) == (5, version, change)
    unchanged = PartitionChangeRecord(topic_id, 0)  # an ISR-only change carries nothing else
    assert decode_metadata_value(encode_metadata_record(unchanged))[2] == unchanged
    assert decode_metadata_value(encode_metadata_record(TopicRecord("orders", topic_id))) == (
        2,
        0,
        TopicRecord("orders", topic_id),
    )
    assert decode_metadata_value(encode_metadata_record(RemoveTopicRecord(topic_id)))[2] == RemoveTopicRecord(topic_id)


def test_unknown_tagged_fields_and_other_record_types_are_skipped() -> None:
    topic_id = new_topic_id()
    plain = encode_metadata_record(PartitionChangeRecord(topic_id, 0, leader=2))
    # The same record with an extra tagged field (tag 9, four bytes) after the known ones.
    body = plain[3:]  # after the frame (three one-byte varints): partition id, topic id, tagged fields
    count, rest = body[20], body[21:]
    extended = plain[:3] + body[:20] + bytes([count + 1]) + rest + uvarint(9) + uvarint(4) + b"\0\0\0\1"
    assert decode_metadata_value(extended)[2] == PartitionChangeRecord(topic_id, 0, leader=2)
    # A ConfigRecord (api key 4) and a record type Kafka may add later: not decoded, not refused.
    assert decode_metadata_value(uvarint(1) + uvarint(4) + uvarint(0) + b"anything") == (4, 0, None)
    assert decode_metadata_value(uvarint(1) + uvarint(200) + uvarint(7) + b"") == (200, 7, None)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (uvarint(2) + uvarint(2) + uvarint(0), "frame version 2"),
        (uvarint(1) + uvarint(3) + uvarint(3), "PARTITION_RECORD version 3 is not one this reader knows"),
        (uvarint(1) + uvarint(9) + uvarint(0) + b"\1\2", "the topic id runs past the end"),
        (uvarint(1) + uvarint(2) + uvarint(0) + uvarint(6) + b"a b c" + bytes(17), "characters Kafka does not allow"),
        (uvarint(1) + uvarint(2) + uvarint(0) + b"\xff\xff\xff\xff\xff\x01", "longer than 5 bytes"),
        # A replica array claiming a billion entries: refused before anything is allocated.
        (
            uvarint(1) + uvarint(3) + uvarint(0) + bytes(4) + bytes(16) + uvarint(1_000_000_000),
            "claims 999999999 entries, more than the record holds",
        ),
        (uvarint(1) + uvarint(9) + uvarint(0) + bytes(16) + b"\0" + b"extra", "5 byte(s) left after"),
    ],
)
def test_malformed_values_say_what_is_wrong(value: bytes, reason: str) -> None:
    with pytest.raises(ValueError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        decode_metadata_value(value)
