"""Broker files that are not what they seem: a FIFO, a device or a huge sparse file where a
checkpoint, ``partition.metadata``, an index or a snapshot belongs is refused (or, for an index
used only to speed up a walk, ignored) at once and in bounded memory, never waited on or read
whole. Each case runs in a subprocess with a timeout, an address-space limit, and its peak RSS
measured.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from tests.memory import run_measured
from tiering_core.errors import CorruptLogError
from tiering_core.kafka.files import CHECKPOINT_READ_LIMIT, read_regular
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.kafka.partition_log import PartitionLog, discover_partitions
from tiering_core.kafka.topic import TopicPartition

SPARSE_BYTES = 10 << 30
RSS_LIMIT_MB = 512
ADDRESS_SPACE_LIMIT = 2 << 30  # far below the sparse file: reading it whole fails at once

_CHECK = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
from pathlib import Path
from tiering_core.errors import TieringError
from tiering_core.kafka.index import read_offset_index, read_time_index
from tiering_core.kafka.partition_log import PartitionLog
from tiering_core.kafka.producer_snapshot import read_producer_snapshot
log = PartitionLog(Path(sys.argv[1]))
try:
    print("result", repr(eval(sys.argv[2])))
except TieringError as exc:
    print("error", exc)
"""


def _run(partition: Path, expression: str) -> tuple[str, int]:
    return run_measured(_CHECK.format(limit=ADDRESS_SPACE_LIMIT), str(partition), expression, timeout=60)


def _replace(path: Path, kind: str) -> None:
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    else:
        with path.open("wb") as out:
            out.truncate(SPARSE_BYTES)


@pytest.fixture()
def partition(make_writer) -> Path:
    w = make_writer(segment_bytes=3000)
    w.append_records(100)  # several segments, snapshots at each roll
    w.set_high_watermark()
    return w.path


def _base(partition: Path, index: int) -> int:
    return sorted(int(p.stem) for p in partition.glob("*.log"))[index]


# (file relative to the partition dir, what replaces it, expression, expected outcome start)
CASES = [
    ("../replication-offset-checkpoint", "fifo", "log.high_watermark", "error {path}: at byte 0: is a FIFO"),
    ("../replication-offset-checkpoint", "sparse", "log.high_watermark", "error {path}: at byte 0: offset checkpoint"),
    ("../log-start-offset-checkpoint", "fifo", "log.log_start_offset", "error {path}: at byte 0: is a FIFO"),
    ("leader-epoch-checkpoint", "fifo", "log.leader_epoch_entries", "error {path}: at byte 0: is a FIFO"),
    ("leader-epoch-checkpoint", "sparse", "log.leader_epoch_entries", "error {path}: at byte 0: leader-epoch"),
    ("partition.metadata", "fifo", "log.topic_id", "error {path}: at byte 0: is a FIFO"),
    ("partition.metadata", "sparse", "log.topic_id", "error {path}: at byte 0: partition.metadata is"),
    ("{active}.index", "fifo", "log.log_end_offset", "result 100"),  # the walk starts at the segment's base
    ("{active}.index", "sparse", "log.log_end_offset", "result 100"),
    ("{first}.index", "fifo", "read_offset_index(Path('{path}'), 0)", "error {path}: at byte 0: is a FIFO"),
    ("{first}.index", "sparse", "read_offset_index(Path('{path}'), 0)", "error {path}: at byte 0: offset index"),
    ("{first}.timeindex", "sparse", "read_time_index(Path('{path}'), 0)", "error {path}: at byte 0: time index"),
    ("{second}.snapshot", "fifo", "read_producer_snapshot(Path('{path}'))", "error {path}: at byte 0: is a FIFO"),
    ("{second}.snapshot", "sparse", "read_producer_snapshot(Path('{path}'))", "error {path}: at byte 0: producer"),
    ("{active}.snapshot", "fifo", "log.last_stable_offset", "result 100"),  # skipped as a corrupt snapshot
]


@pytest.mark.parametrize(
    ("name", "kind", "expression", "expected"), CASES, ids=[f"{c[1]}-{c[0]}-{c[2].split('(')[0]}" for c in CASES]
)
def test_a_fifo_or_a_huge_sparse_file_is_refused_at_once_in_bounded_memory(
    partition: Path, name: str, kind: str, expression: str, expected: str
) -> None:
    names = {"active": f"{_base(partition, -1):020d}", "first": f"{_base(partition, 0):020d}"}
    names["second"] = f"{_base(partition, 1):020d}"
    path = (partition / name.format(**names)).resolve()
    _replace(path, kind)
    outcome, peak_mb = _run(partition, expression.format(path=path))
    assert outcome.startswith(expected.format(path=path)), outcome
    assert peak_mb < RSS_LIMIT_MB, f"peak RSS {peak_mb} MB"


def test_a_whole_file_read_is_refused_above_its_limit(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_bytes(b"0\n0\n")
    assert read_regular(path, CHECKPOINT_READ_LIMIT, "leader-epoch-checkpoint") == b"0\n0\n"
    with pytest.raises(CorruptLogError, match="is 4 bytes, more than the 3"):
        read_regular(path, 3, "leader-epoch-checkpoint")


def test_a_symlinked_partition_dir_is_skipped_with_a_warning(
    make_writer, log_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    make_writer("orders")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    elsewhere = PartitionWriter(outside, TopicPartition("payments", 0))
    elsewhere.append_records(5)
    (log_dir / "payments-0").symlink_to(elsewhere.path)
    with caplog.at_level(logging.WARNING):
        found = discover_partitions([log_dir])
    assert [str(p.topic_partition) for p in found] == ["orders-0"]
    assert "payments-0: a symbolic link" in caplog.text


@pytest.mark.parametrize(
    ("name", "expression"),
    [
        ("leader-epoch-checkpoint", "leader_epoch_entries"),
        ("partition.metadata", "topic_id"),
        ("../replication-offset-checkpoint", "high_watermark"),
        ("00000000000000000000.log", "segments"),
    ],
)
def test_a_symlinked_broker_file_is_not_followed(make_writer, tmp_path: Path, name: str, expression: str) -> None:
    w = make_writer()
    w.append_records(10)
    w.set_high_watermark()
    path = w.path / name
    target = tmp_path / "target"
    target.write_bytes(path.read_bytes())  # the same content: only the link is wrong
    path.unlink()
    path.symlink_to(target)
    with pytest.raises(CorruptLogError, match="symbolic link") as caught:
        getattr(PartitionLog(w.path), expression)
    assert os.path.normpath(caught.value.path) == os.path.normpath(path)


def test_a_meta_properties_that_is_a_fifo_is_no_evidence_and_never_hangs(tmp_path: Path) -> None:
    """Removal reads every log dir's meta.properties as evidence: a FIFO there is refused at once."""
    from tiering_core.kafka.log_dirs import LogDirError, read_log_dir_identity

    os.mkfifo(tmp_path / "meta.properties")
    with pytest.raises(LogDirError, match=r"meta\.properties: at byte 0: is a FIFO"):
        read_log_dir_identity(tmp_path)
