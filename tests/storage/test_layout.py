"""Object key layout: exact keys, parsing back, and hostile names/prefixes refused before I/O."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tiering_core.errors import ConfigError, InvalidTopicError
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition, validate_topic_name
from tiering_core.storage.filesystem import FilesystemRemoteStorage
from tiering_core.storage.layout import ObjectKind, RemoteSegmentRef, parse_segment_key, partition_prefix
from tiering_core.storage.s3 import S3RemoteStorage

TOPIC_ID = "AbCdEfGhIjKlMnOpQr_-12"
TIP = TopicIdPartition(TOPIC_ID, TopicPartition("orders.v1", 7))
SEGMENT = uuid.UUID("0b7f7a3e-7c1e-4c7e-9d55-1f0e2a3b4c5d")


def test_key_layout_is_exact() -> None:
    ref = RemoteSegmentRef(TIP, 1234, SEGMENT)
    assert ref.key(ObjectKind.LOG, "prod/") == f"prod/orders.v1-{TOPIC_ID}/7/00000000000000001234-{SEGMENT}.log"
    assert ref.key(ObjectKind.MANIFEST).endswith("-0b7f7a3e-7c1e-4c7e-9d55-1f0e2a3b4c5d.manifest.json")
    assert partition_prefix(TIP, "x-") == f"x-orders.v1-{TOPIC_ID}/7/"
    assert [k.value for k in ObjectKind] == [
        "log",
        "index",
        "timeindex",
        "txnindex",
        "snapshot",
        "leader-epoch-checkpoint",
        "keyfilter",
        "manifest.json",
    ]


@pytest.mark.parametrize("kind", list(ObjectKind))
@pytest.mark.parametrize("prefix", ["", "prod/", "a/b-"])
def test_parse_inverts_key(kind: ObjectKind, prefix: str) -> None:
    ref = RemoteSegmentRef(TopicIdPartition(TOPIC_ID, TopicPartition("a-b-c", 0)), 2**62, uuid.uuid4())
    assert parse_segment_key(ref.key(kind, prefix), prefix) == (ref, kind)


@pytest.mark.parametrize(
    "key",
    [
        "other/orders-AbCdEfGhIjKlMnOpQr_-12/0/00000000000000000000-0b7f7a3e-7c1e-4c7e-9d55-1f0e2a3b4c5d.log",
        "p/orders-AbCdEfGhIjKlMnOpQr_-12/0/00000000000000000000-0b7f7a3e-7c1e-4c7e-9d55-1f0e2a3b4c5d.exe",
        "p/orders-short/0/00000000000000000000-0b7f7a3e-7c1e-4c7e-9d55-1f0e2a3b4c5d.log",
        "p/..-AbCdEfGhIjKlMnOpQr_-12/0/00000000000000000000-0b7f7a3e-7c1e-4c7e-9d55-1f0e2a3b4c5d.log",
        "p/orders-AbCdEfGhIjKlMnOpQr_-12/0/00000000000000000000-zzzzzzzz-7c1e-4c7e-9d55-1f0e2a3b4c5d.log",
        "p/orders-AbCdEfGhIjKlMnOpQr_-12/0/123-0b7f7a3e-7c1e-4c7e-9d55-1f0e2a3b4c5d.log",
    ],
)
def test_foreign_keys_parse_to_none(key: str) -> None:
    assert parse_segment_key(key, "p/") is None


@pytest.mark.parametrize("topic", ["../x", "a/b", "with space", "x" * 250, "..", ".", "", "naïve", "a\x00b"])
def test_hostile_topic_names_rejected(topic: str) -> None:
    with pytest.raises(InvalidTopicError):
        RemoteSegmentRef(TopicIdPartition(TOPIC_ID, TopicPartition(topic, 0)), 0, uuid.uuid4())


@pytest.mark.parametrize(
    "topic_id", ["../../etc/passwd-xxxxx", "short", "A" * 23, "AAAAAAAAAAAAAAAAAAAA/A", "A" * 21 + "="]
)
def test_hostile_topic_ids_rejected(topic_id: str) -> None:
    with pytest.raises(InvalidTopicError):
        RemoteSegmentRef(TopicIdPartition(topic_id, TopicPartition("t", 0)), 0, uuid.uuid4())


def test_bad_base_offsets_rejected() -> None:
    for base in (-1, 10**20):
        with pytest.raises(InvalidTopicError):
            RemoteSegmentRef(TIP, base, uuid.uuid4())


@pytest.mark.parametrize("prefix", ["/abs/", "../up/", "a/../../b/", "./", "a//b/", "a\\b/", "a\nb/", ".."])
def test_hostile_prefixes_rejected_before_io(prefix: str, tmp_path: Path) -> None:
    root = tmp_path / "tier"
    with pytest.raises(ConfigError, match=r"remote\.prefix"):
        FilesystemRemoteStorage(root, prefix=prefix)
    assert not root.exists()
    # No endpoint answers on port 9: construction fails on the prefix, not on a connection.
    with pytest.raises(ConfigError, match=r"remote\.prefix"):
        S3RemoteStorage("bucket", prefix=prefix, endpoint_url="http://127.0.0.1:9", region="us-east-1")
    with pytest.raises(ConfigError):
        RemoteSegmentRef(TIP, 0, uuid.uuid4()).key(ObjectKind.LOG, prefix)


# --- whole-string checks: a trailing newline (which "$" would let through) is refused ----------


@pytest.mark.parametrize("topic", ["orders\n", "orders\r\n", "\norders", "orders\n\n"])
def test_topic_names_ending_in_a_newline_are_rejected(topic: str) -> None:
    with pytest.raises(InvalidTopicError, match="characters Kafka does not allow"):
        validate_topic_name(topic)
    with pytest.raises(InvalidTopicError):
        RemoteSegmentRef(TopicIdPartition(TOPIC_ID, TopicPartition(topic, 0)), 0, uuid.uuid4())


def test_topic_id_ending_in_a_newline_is_rejected() -> None:
    with pytest.raises(InvalidTopicError, match="22-character"):
        partition_prefix(TopicIdPartition(TOPIC_ID + "\n", TopicPartition("t", 0)))
    with pytest.raises(InvalidTopicError, match="22-character"):
        partition_prefix(TopicIdPartition(TOPIC_ID[:-1] + "\n", TopicPartition("t", 0)))


def test_a_key_with_a_trailing_newline_or_a_non_canonical_spelling_does_not_parse() -> None:
    ref = RemoteSegmentRef(TIP, 5, SEGMENT)
    key = ref.key(ObjectKind.LOG, "p/")
    assert parse_segment_key(key, "p/") == (ref, ObjectKind.LOG)
    assert parse_segment_key(key + "\n", "p/") is None
    assert parse_segment_key(key.replace("/7/", "/07/"), "p/") is None  # partition 7, spelt another way
    hyphens_moved = key.replace(str(SEGMENT), str(SEGMENT).replace("-", "") + "----")
    assert parse_segment_key(hyphens_moved, "p/") is None  # uuid.UUID would accept it
    arabic_digits = key.replace("00000000000000000005", "0000000000000000000\u0665")
    assert parse_segment_key(arabic_digits, "p/") is None  # int() would accept it


@pytest.mark.parametrize("base", [True, False, "0", 1.0])
def test_base_offset_must_be_an_int(base: object) -> None:
    with pytest.raises(InvalidTopicError, match=r"base offset .* is not an integer"):
        RemoteSegmentRef(TIP, base, SEGMENT)  # type: ignore[arg-type]
