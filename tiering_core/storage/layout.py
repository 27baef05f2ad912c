"""The remote object layout: ``<prefix><topic>-<topicId>/<partition>/<base:020d>-<uuid>.<kind>``.

Topic names, topic ids and prefixes are validated so that no key can leave its prefix.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from enum import StrEnum

from tiering_core.errors import ConfigError, InvalidTopicError
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition, require_int, validate_topic_name

#: Whole-string patterns, used with ``fullmatch`` (``$`` would accept a trailing newline).
_TOPIC_ID = re.compile(r"[A-Za-z0-9_-]{22}")


class ObjectKind(StrEnum):
    LOG = "log"
    OFFSET_INDEX = "index"
    TIME_INDEX = "timeindex"
    TRANSACTION_INDEX = "txnindex"
    PRODUCER_SNAPSHOT = "snapshot"
    LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
    #: A Bloom filter of the segment's record keys (``key_filter.py``): the segments an erasure reads.
    KEY_FILTER = "keyfilter"
    MANIFEST = "manifest.json"


_KEY = re.compile(
    r"(?P<topic>[A-Za-z0-9._-]+)-(?P<tid>[A-Za-z0-9_-]{22})/(?P<partition>0|[1-9][0-9]*)/(?P<base>[0-9]{20})-"
    r"(?P<uuid>[0-9a-f-]{36})\.(?P<kind>" + "|".join(re.escape(k.value) for k in ObjectKind) + r")"
)


_PARTITION = re.compile(r"(?P<topic>[A-Za-z0-9._-]+)-(?P<tid>[A-Za-z0-9_-]{22})/(?P<partition>0|[1-9][0-9]*)/")


def validate_prefix(prefix: str) -> str:
    """A key prefix that cannot lead a key out of it: relative, no empty, '.' or '..'
    component, no backslash or control characters."""
    parts = prefix.split("/")
    if (
        prefix.startswith("/")
        or any(part in (".", "..") for part in parts)
        or "" in parts[:-1]
        or "\\" in prefix
        or any(ord(c) < 32 or ord(c) == 127 for c in prefix)
    ):
        raise ConfigError(f"remote.prefix: {prefix!r} must be relative, without '.', '..', '\\' or control characters")
    return prefix


def validate_deployment_prefix(prefix: str) -> str:
    """A deployment's prefix: a valid key prefix that is empty or ends with ``/``, so that no
    deployment's keys start with another's prefix (``pro`` would hold all of ``prod``'s keys)."""
    validate_prefix(prefix)
    if prefix and not prefix.endswith("/"):
        raise ConfigError(f"remote.prefix: {prefix!r} must be empty or end with '/' (as in {prefix + '/'!r})")
    return prefix


def partition_prefix(tip: TopicIdPartition, prefix: str = "") -> str:
    """``<prefix><topic>-<topicId>/<partition>/``: where every object of the partition lies."""
    validate_topic_name(tip.topic)
    if not isinstance(tip.topic_id, str) or not _TOPIC_ID.fullmatch(tip.topic_id):
        raise InvalidTopicError(f"topic id {tip.topic_id!r} is not a 22-character base64 UUID")
    return f"{validate_prefix(prefix)}{tip.topic}-{tip.topic_id}/{tip.partition}/"


@dataclass(frozen=True)
class RemoteSegmentRef:
    """A segment copy attempt's identity in object storage."""

    topic_id_partition: TopicIdPartition
    base_offset: int
    segment_id: uuid.UUID
    #: The manifest format the segment's metadata recorded (no part of its identity): 1 reads its
    #: objects byte for byte at once; None (unknown) or 2 reads the manifest first. A ref made
    #: from its parts alone is of unknown format; ``segment_ref(segment)`` carries what copy recorded.
    format_version: int | None = field(default=None, compare=False)
    #: The SHA-256 of the manifest the metadata store recorded at copy (no part of its identity):
    #: given, every read goes through that manifest and refuses any other (docs/segment-format.md).
    manifest_sha256: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        partition_prefix(self.topic_id_partition)  # hostile names fail here, before any I/O
        require_int("base offset", self.base_offset)
        if not 0 <= self.base_offset < 10**20:
            raise InvalidTopicError(f"base offset {self.base_offset} is outside [0, 10^20)")
        if not isinstance(self.segment_id, uuid.UUID):
            raise InvalidTopicError(f"segment id {self.segment_id!r} is not a UUID")

    def key(self, kind: ObjectKind, prefix: str = "") -> str:
        base = partition_prefix(self.topic_id_partition, prefix)
        return f"{base}{self.base_offset:020d}-{self.segment_id}.{kind.value}"

    def __str__(self) -> str:
        return f"{self.topic_id_partition.topic_partition} segment {self.base_offset} ({self.segment_id})"


def parse_segment_key(key: str, prefix: str = "") -> tuple[RemoteSegmentRef, ObjectKind] | None:
    """The segment and kind a key belongs to, or None for a key outside the layout."""
    if not key.startswith(prefix):
        return None
    match = _KEY.fullmatch(key[len(prefix) :])
    if match is None:
        return None
    try:
        tip = TopicIdPartition(match.group("tid"), TopicPartition(match.group("topic"), int(match.group("partition"))))
        ref = RemoteSegmentRef(tip, int(match.group("base")), uuid.UUID(match.group("uuid")))
    except (InvalidTopicError, ValueError):
        return None
    kind = ObjectKind(match.group("kind"))
    if ref.key(kind, prefix) != key:  # a non-canonical spelling (UUID form) names no key of ours
        return None
    return ref, kind


def parse_partition_prefix(key_prefix: str, prefix: str = "") -> TopicIdPartition | None:
    """The partition whose :func:`partition_prefix` is ``key_prefix``, or None for a prefix
    outside the layout (other data under the same root or bucket)."""
    if not key_prefix.startswith(prefix):
        return None
    match = _PARTITION.fullmatch(key_prefix[len(prefix) :])
    if match is None:
        return None
    try:
        tip = TopicIdPartition(match.group("tid"), TopicPartition(match.group("topic"), int(match.group("partition"))))
        if partition_prefix(tip, prefix) != key_prefix:
            return None
    except (InvalidTopicError, ValueError):
        return None
    return tip
