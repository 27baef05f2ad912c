"""What a broker's log dir says about itself: ``meta.properties`` names the broker that owns it,
and a ``<topic>-<partition>.<id>-delete`` directory is the trace of a deleted partition.

A broker writes ``meta.properties`` into every log dir it uses (``version``, ``node.id`` (KRaft;
``broker.id`` in version 0), ``cluster.id`` and, with KRaft, ``directory.id``), so a directory
without it is not (or no longer) a live log dir: an empty or unmounted mount point. When a
partition is deleted the broker renames its directory to ``<topic>-<partition>.<uuid>-delete``
(``LocalLog.logDeleteDirName``: a dash-less UUID, the topic cut so the name fits 255 characters)
and removes it the broker's ``log.segment.delete.delay.ms`` later (its default ``file.delete.delay.ms``:
the deleted topic's own config is gone); until then it still holds ``partition.metadata``.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tiering_core.errors import CorruptLogError, TieringError
from tiering_core.kafka.checkpoints import PARTITION_METADATA, read_partition_metadata
from tiering_core.kafka.files import read_regular
from tiering_core.kafka.topic import TopicPartition

META_PROPERTIES = "meta.properties"
DELETE_DIR_SUFFIX = "-delete"
MAX_DIR_NAME = 255
MAX_META_PROPERTIES_BYTES = 64 * 1024

FUTURE_DIR_SUFFIX = "-future"
_TRACE_DIR = re.compile(r"(?P<topic>.*)-(?P<partition>0|[1-9][0-9]*)\.(?P<uid>[0-9a-f]{32})(?P<suffix>-delete|-future)")


class LogDirError(TieringError):
    """A log dir that is not a live Kafka log dir; names the directory and what is missing."""


@dataclass(frozen=True)
class LogDirIdentity:
    """A live log dir's ``meta.properties``: the broker (node) owning it and its cluster."""

    path: Path
    node_id: int
    cluster_id: str | None
    directory_id: str | None


def parse_properties(text: str) -> dict[str, str]:
    """Java properties as Kafka writes them: ``key=value`` lines, ``#`` and ``!`` comments."""
    props: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            key, _, value = line.partition(":")
        props[key.strip()] = value.strip()
    return props


def read_log_dir_identity(log_dir: Path) -> LogDirIdentity:
    """The broker owning ``log_dir`` by its ``meta.properties``; LogDirError naming what is missing."""
    path = Path(log_dir) / META_PROPERTIES
    try:
        data = read_regular(path, MAX_META_PROPERTIES_BYTES, META_PROPERTIES)  # never a FIFO, a link or a huge file
    except FileNotFoundError:
        raise LogDirError(
            f"log dir {log_dir} has no {META_PROPERTIES}: not a live Kafka log dir (empty or unmounted?)"
        ) from None
    except CorruptLogError as exc:
        raise LogDirError(f"log dir {log_dir}: {exc}") from exc
    except OSError as exc:
        raise LogDirError(f"log dir {log_dir}: cannot read {META_PROPERTIES} ({exc.strerror or exc})") from exc
    props = parse_properties(data.decode("utf-8", errors="replace"))
    version = props.get("version")
    key = "broker.id" if version == "0" else "node.id"
    if version not in ("0", "1"):
        raise LogDirError(f"log dir {log_dir}: {META_PROPERTIES} has no supported version (got {version!r})")
    node = props.get(key, "")
    if not re.fullmatch(r"[0-9]+", node, re.ASCII):
        raise LogDirError(f"log dir {log_dir}: {META_PROPERTIES} names no broker ({key} is {node or 'missing'})")
    return LogDirIdentity(Path(log_dir), int(node), props.get("cluster.id"), props.get("directory.id"))


def common_identity(log_dirs: Sequence[Path], what: str = "the log dirs") -> LogDirIdentity:
    """The one node of one cluster that ``log_dirs`` belong to (each one's ``meta.properties``):
    a LogDirError naming each when they belong to more than one (``what`` names them), or when
    one is not a live log dir."""
    identities = [read_log_dir_identity(d) for d in dict.fromkeys(log_dirs)]
    if not identities:
        raise LogDirError(f"{what}: no log dir configured")
    if len({(i.node_id, i.cluster_id or "") for i in identities}) > 1:
        which = ", ".join(f"{i.path} (node {i.node_id}, cluster {i.cluster_id})" for i in identities)
        raise LogDirError(f"{what} belong to more than one broker or cluster ({which})")
    return identities[0]


def encode_meta_properties(node_id: int, cluster_id: str, directory_id: str) -> bytes:
    """A KRaft broker's ``meta.properties`` (version 1)."""
    lines = ["#", "#tiering demo", f"node.id={node_id}", f"directory.id={directory_id}", "version=1"]
    return ("\n".join([*lines, f"cluster.id={cluster_id}", ""])).encode()


def delete_dir_name(tp: TopicPartition) -> str:
    """The name the broker gives a deleted partition's directory (``LocalLog.logDeleteDirName``)."""
    suffix = f"-{tp.partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
    return tp.topic[: MAX_DIR_NAME - len(suffix)] + suffix


def deleted_topic_ids(log_dir: Path, tp: TopicPartition) -> dict[str, Path]:
    """Topic id -> ``-delete`` directory, of ``tp``'s deleted directories still in ``log_dir``
    (the topic id is read from the ``partition.metadata`` each still holds; one without a readable
    topic id proves nothing and is left out)."""
    return _renamed_topic_ids(log_dir, tp, DELETE_DIR_SUFFIX)


def future_topic_ids(log_dir: Path, tp: TopicPartition) -> dict[str, Path]:
    """Topic id -> ``-future`` directory: ``tp`` being moved into ``log_dir`` from another log dir
    of the broker (``LocalLog.logFutureDirName``). The move ends by renaming the current directory
    to ``-delete`` and this one to the partition's name, so for a moment the partition is only
    here: a partition with a ``-future`` directory is live, whatever ``-delete`` trace it left."""
    return _renamed_topic_ids(log_dir, tp, FUTURE_DIR_SUFFIX)


def _renamed_topic_ids(log_dir: Path, tp: TopicPartition, suffix: str) -> dict[str, Path]:
    found: dict[str, Path] = {}
    try:
        entries = sorted(Path(log_dir).iterdir())
    except OSError:
        return found
    for entry in entries:
        match = _TRACE_DIR.fullmatch(entry.name)
        if match is None or match.group("suffix") != suffix or int(match.group("partition")) != tp.partition:
            continue
        if not (match.group("topic") and tp.topic.startswith(match.group("topic"))):
            continue
        if match.group("topic") != tp.topic and len(entry.name) < MAX_DIR_NAME:
            continue  # only a name cut at 255 characters may carry a shortened topic
        try:
            if entry.is_symlink() or not entry.is_dir():
                continue
            found[read_partition_metadata(entry / PARTITION_METADATA)] = entry
        except (TieringError, OSError, ValueError):
            continue
    return found
