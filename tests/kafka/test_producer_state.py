"""Producer state replayed from batch headers equals the snapshots the broker writes at each roll."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.kafka.partition_log import PartitionLog
from tiering_core.kafka.producer_snapshot import encode_producer_snapshot, read_producer_snapshot, snapshot_file_name
from tiering_core.kafka.producer_state import ProducerStateTracker
from tiering_core.kafka.topic import TopicPartition


def busy_partition(log_dir: Path, seed: int) -> PartitionWriter:
    """Idempotent and transactional producers, commits, aborts, an epoch bump, one transaction
    left open across rolls, and plain batches in between; a roll every few batches."""
    rng = random.Random(seed)
    clock = itertools.count(1_700_000_000_000, 7)
    w = PartitionWriter(log_dir, TopicPartition("payments", seed), clock=lambda: next(clock), segment_bytes=10**9)
    open_txns: set[int] = set()
    for step in range(120):
        roll = rng.random()
        pid = rng.choice([11, 12, 13, 14])
        if roll < 0.15 and open_txns:
            done = rng.choice(sorted(open_txns))
            (w.commit if rng.random() < 0.5 else w.abort)(done, coordinator_epoch=rng.randint(0, 5))
            open_txns.discard(done)
        elif roll < 0.45:
            w.append([(b"k", b"t%d" % step)], producer_id=pid, transactional=True)
            open_txns.add(pid)
        elif roll < 0.55 and pid not in open_txns:
            bumped = w.producers[pid].epoch + 1 if pid in w.producers else 0  # a producer restart
            w.append([(b"k", b"e")], producer_id=pid, producer_epoch=bumped)
        elif roll < 0.8:
            w.append([(None, b"i%d" % i) for i in range(rng.randint(1, 4))], producer_id=20 + pid, transactional=False)
        else:
            w.append_records(rng.randint(1, 5))
        if step % 9 == 8:
            w.roll()
    w.roll()
    return w


@pytest.mark.parametrize("seed", range(6))
def test_a_missing_snapshot_is_rebuilt_byte_for_byte(tmp_path: Path, seed: int) -> None:
    w = busy_partition(tmp_path, seed)
    snapshots = sorted(w.path.glob("*.snapshot"))
    assert len(snapshots) >= 10
    originals = {int(p.stem): p.read_bytes() for p in snapshots}
    # Every snapshot rebuilt from the one before it, and from none at all (the whole log replayed).
    for offset, original in sorted(originals.items()):
        (w.path / snapshot_file_name(offset)).unlink()
        rebuilt = PartitionLog.open(w.path).producer_state_at(offset)
        assert encode_producer_snapshot(rebuilt) == original, f"snapshot at {offset}"
    assert not list(w.path.glob("*.snapshot"))


def test_a_corrupt_older_snapshot_is_passed_over(tmp_path: Path) -> None:
    w = busy_partition(tmp_path, 99)
    offsets = sorted(int(p.stem) for p in w.path.glob("*.snapshot"))
    target, previous = offsets[-1], offsets[-2]
    original = (w.path / snapshot_file_name(target)).read_bytes()
    (w.path / snapshot_file_name(target)).unlink()
    damaged = bytearray((w.path / snapshot_file_name(previous)).read_bytes())
    damaged[-1] ^= 0xFF  # its CRC no longer matches
    (w.path / snapshot_file_name(previous)).write_bytes(bytes(damaged))
    assert encode_producer_snapshot(PartitionLog.open(w.path).producer_state_at(target)) == original


def test_the_tracker_starts_from_a_snapshots_entries(tmp_path: Path) -> None:
    w = busy_partition(tmp_path, 3)
    last = max(int(p.stem) for p in w.path.glob("*.snapshot"))
    entries = read_producer_snapshot(w.path / snapshot_file_name(last))
    tracker = ProducerStateTracker(entries)
    assert tracker.snapshot_entries() == sorted(entries, key=lambda e: e.producer_id)
    assert tracker.ongoing == {e.producer_id: e.current_txn_first_offset for e in entries if e.has_open_transaction}
