"""Topic partitions and Kafka's rules for legal topic names and internal topics.

Kafka refuses remote storage for its internal topics (``Topic.INTERNAL_TOPICS``), so they are
never tiered, whatever the ``"*"`` default says.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tiering_core.errors import InvalidTopicError

MAX_TOPIC_NAME_LENGTH = 249
#: Whole-string patterns, used with ``fullmatch``: ``$`` would also accept a trailing newline.
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
_PARTITION_DIR = re.compile(r"(?P<topic>.+)-(?P<partition>0|[1-9][0-9]*)")
#: Kafka's ``Topic.INTERNAL_TOPICS`` (group offsets, transaction state, share-group state).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


def is_internal_topic(topic: str) -> bool:
    """Whether ``topic`` is one of Kafka's internal topics (never tiered)."""
    return topic in INTERNAL_TOPICS


def validate_topic_name(topic: str) -> str:
    """Return ``topic`` if Kafka would accept it, else raise naming the problem.

    Kafka allows ASCII letters, digits, ``.``, ``_`` and ``-``, at most 249 characters, and
    neither ``.`` nor ``..``; this also keeps every object key inside its prefix.
    """
    if not isinstance(topic, str):
        raise InvalidTopicError(f"topic name {topic!r} is not a string")
    if not topic:
        raise InvalidTopicError("topic name is empty")
    if topic in (".", ".."):
        raise InvalidTopicError(f"topic name {topic!r} is not allowed")
    if len(topic) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"topic name {topic[:40]!r}... is {len(topic)} characters, more than {MAX_TOPIC_NAME_LENGTH}"
        )
    if not _LEGAL_TOPIC.fullmatch(topic):
        raise InvalidTopicError(
            f"topic name {topic!r} has characters Kafka does not allow (only ASCII letters, digits, '.', '_', '-')"
        )
    return topic


def require_int(name: str, value: object) -> int:
    """``value`` if it is a plain int: a bool (an int to Python) or a string would otherwise
    slip into keys and paths as ``True`` or ``"7"``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTopicError(f"{name} {value!r} is not an integer")
    return value


@dataclass(frozen=True, order=True)
class TopicPartition:
    """A topic name and partition number, as the broker names its directory."""

    topic: str
    partition: int

    def __post_init__(self) -> None:
        validate_topic_name(self.topic)
        require_int(f"partition of {self.topic!r}", self.partition)
        if self.partition < 0:
            raise InvalidTopicError(f"partition {self.partition} of {self.topic!r} is negative")

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"

    @classmethod
    def from_dir_name(cls, name: str) -> TopicPartition:
        """Parse a partition directory name ``<topic>-<n>``."""
        match = _PARTITION_DIR.fullmatch(name)
        if match is None:
            raise InvalidTopicError(f"directory name {name!r} is not <topic>-<partition>")
        return cls(match.group("topic"), int(match.group("partition")))


@dataclass(frozen=True, order=True)
class TopicIdPartition:
    """A partition together with its topic id (22-char URL-safe base64 UUID).

    The topic id distinguishes a recreated topic from the deleted one with the same name.
    """

    topic_id: str
    topic_partition: TopicPartition

    @property
    def topic(self) -> str:
        return self.topic_partition.topic

    @property
    def partition(self) -> int:
        return self.topic_partition.partition

    def __str__(self) -> str:
        return f"{self.topic_partition}({self.topic_id})"
