"""``restore``: the remote tier written back as a partition directory a broker (and kafka-python) reads."""

from __future__ import annotations

import json
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from kafka.record import MemoryRecords

from tests.engine_support import TieringEnv, tip_of
from tiering_core.cli import main
from tiering_core.engine.segment_ops import segment_ref
from tiering_core.errors import TieringError
from tiering_core.events import RunEvent
from tiering_core.kafka.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    read_leader_epoch_checkpoint,
    read_offset_checkpoint,
)
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.kafka.partition_log import PartitionLog
from tiering_core.kafka.topic import TopicPartition
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.read.restore import restore_partition
from tiering_core.report.lines import event_line
from tiering_core.runs.copy import run_copy
from tiering_core.runs.delete_records import apply_delete_records
from tiering_core.storage.layout import ObjectKind

SUFFIXES = ("log", "index", "timeindex", "txnindex")


def build(env: TieringEnv) -> PartitionWriter:
    env.write_config(orders={"index.interval.bytes": 256})
    w = env.writer("orders", 0, index_interval_bytes=256)
    w.append_records(30)
    w.append([(b"t", b"x")], producer_id=7, transactional=True)
    w.roll()
    w.become_leader(3)
    w.append_records(20)
    w.abort(7)
    w.roll()
    w.append_records(25)
    w.roll()
    w.append_records(4)  # active
    w.set_high_watermark()
    return w


def kafka_python_offsets(log: Path) -> list[tuple[int, bytes | None]]:
    out = []
    records = MemoryRecords(log.read_bytes())
    while (batch := records.next_batch()) is not None:
        assert batch.validate_crc()
        out.extend((r.offset, r.value) for r in batch)
    return out


def test_restored_directory_is_what_the_broker_wrote(tiering_env: TieringEnv, tmp_path: Path) -> None:
    w = build(tiering_env)
    broker = PartitionLog(w.path)
    closed = broker.segments[:-1]
    originals = {
        (s.base_offset, suffix): (w.path / f"{s.base_offset:020d}.{suffix}").read_bytes()
        for s in closed
        for suffix in SUFFIXES
        if (w.path / f"{s.base_offset:020d}.{suffix}").exists()
    }
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
    w.delete_oldest_segments(2)  # the broker's own retention: only the remote tier has them now
    with tiering_env.context() as ctx:
        result = restore_partition(ctx, w.tp, tmp_path / "restored")
    restored = tmp_path / "restored" / "orders-0"
    active_base = broker.segments[-1].base_offset
    assert (result.directory, result.segments) == (restored, 3)
    assert (result.log_start_offset, result.end_offset) == (0, active_base - 1)
    for (base, suffix), data in originals.items():
        assert (restored / f"{base:020d}.{suffix}").read_bytes() == data, (base, suffix)
    assert not list((tmp_path / "restored").glob(".*"))  # no work directory left behind
    log = PartitionLog(restored)
    assert [s.base_offset for s in log.segments] == [s.base_offset for s in closed]
    assert log.topic_id == w.topic_id
    epochs = read_leader_epoch_checkpoint(restored / "leader-epoch-checkpoint")
    assert [(e.epoch, e.start_offset) for e in epochs] == [(0, 0), (3, 31)]
    end = result.end_offset
    assert end is not None
    for name in (RECOVERY_POINT_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT):
        assert read_offset_checkpoint(tmp_path / "restored" / name)[w.tp] == end + 1
    assert w.tp not in read_offset_checkpoint(tmp_path / "restored" / LOG_START_OFFSET_CHECKPOINT)
    # An independent reader sees every offset, 0..end, with valid CRCs.
    offsets = [o for s in log.segments for o, _ in kafka_python_offsets(s.log_path)]
    assert offsets == list(range(end + 1))
    assert (restored / f"{closed[1].base_offset:020d}.snapshot").exists()


def test_restore_after_delete_records_sets_the_log_start(fs_env: TieringEnv, tmp_path: Path) -> None:
    w = build(fs_env)
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
        apply_delete_records(ctx, w.tp, 40)
        result = restore_partition(ctx, w.tp, tmp_path / "r")
    assert result.log_start_offset == 40 and result.segments == 2  # segment [0..30] is wholly below the start
    assert read_offset_checkpoint(tmp_path / "r" / LOG_START_OFFSET_CHECKPOINT)[w.tp] == 40
    assert PartitionLog(tmp_path / "r" / "orders-0").log_start_offset == 40


def test_restore_refuses_to_overwrite_or_write_into_the_broker(fs_env: TieringEnv, tmp_path: Path) -> None:
    w = build(fs_env)
    with fs_env.context() as ctx:
        with pytest.raises(TieringError, match="holds no data to restore"):
            restore_partition(ctx, w.tp, tmp_path / "r")
        run_copy(ctx, w.tp)
        with pytest.raises(TieringError, match="inside the broker's log dir"):
            restore_partition(ctx, w.tp, fs_env.log_dir / "elsewhere")
        restore_partition(ctx, w.tp, tmp_path / "r")
        with pytest.raises(TieringError, match="already exists"):
            restore_partition(ctx, w.tp, tmp_path / "r")


def test_a_damaged_object_fails_the_restore_and_leaves_nothing(fs_env: TieringEnv, tmp_path: Path) -> None:
    w = build(fs_env)
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
        segment = [
            s for s in ctx.metadata.list_segments(tip_of(w)) if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        ][1]
        key = segment_ref(segment).key(ObjectKind.TIME_INDEX, ctx.storage.prefix)
        data = bytearray(ctx.storage.fetch(segment_ref(segment), ObjectKind.TIME_INDEX))
        data[0] ^= 0x01
        ctx.storage.put_object(key, bytes(data))
        with pytest.raises(TieringError, match=rf"\({segment.segment_id}\): timeindex chunk 0: crc32c"):
            restore_partition(ctx, w.tp, tmp_path / "r")
    assert list((tmp_path / "r").iterdir()) == []


def test_restore_command(fs_env: TieringEnv, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    w = build(fs_env)
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
    argv = ["--config", str(fs_env.config_path), "--json", "restore", "--topic", "orders", "--partition", "0"]
    assert main([*argv, "--to", str(tmp_path / "r")]) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert (report["segments"], report["log_start_offset"]) == (3, 0) and "restored segment" in err
    assert main([*argv, "--to", str(tmp_path / "r")]) == 1
    assert "already exists" in capsys.readouterr().err


def test_restore_refuses_a_kafka_log_dir_unless_forced_and_keeps_checkpoint_modes(
    fs_env: TieringEnv, tmp_path: Path
) -> None:
    """A target holding meta.properties or checkpoint files is some broker's log dir (not one the
    config names): refused unless forced. Rewritten checkpoints keep their modes; a target of an
    earlier restore takes more partitions."""
    w = build(fs_env)
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
    other_broker = tmp_path / "other-broker"
    payments = PartitionWriter(other_broker, TopicPartition("payments", 0))
    payments.append_records(2)
    payments.set_high_watermark()
    payments.write_checkpoints()
    checkpoints = [other_broker / RECOVERY_POINT_CHECKPOINT, other_broker / REPLICATION_OFFSET_CHECKPOINT]
    for path in checkpoints:
        path.chmod(0o644)
    only_checkpoints = tmp_path / "old-log-dir"
    only_checkpoints.mkdir()
    (only_checkpoints / RECOVERY_POINT_CHECKPOINT).write_text("0\n0\n")
    with fs_env.context() as ctx:
        for target, what in ((other_broker, "meta.properties"), (only_checkpoints, RECOVERY_POINT_CHECKPOINT)):
            with pytest.raises(TieringError, match=f"{what}.*--force"):
                restore_partition(ctx, w.tp, target)
            assert not (target / "orders-0").exists()
        result = restore_partition(ctx, w.tp, other_broker, force=True)
    assert result.segments == 3 and (other_broker / "orders-0").is_dir()
    assert [stat.S_IMODE(p.stat().st_mode) for p in checkpoints] == [0o644, 0o644]
    assert read_offset_checkpoint(checkpoints[0])[w.tp] == result.end_offset + 1

    second = fs_env.writer("orders", 1)
    second.append_records(3)
    second.roll()
    second.set_high_watermark()
    with fs_env.context() as ctx:
        run_copy(ctx, second.tp)
        restore_partition(ctx, w.tp, tmp_path / "r")
        assert restore_partition(ctx, second.tp, tmp_path / "r").segments == 1  # the target of a restore


def test_restore_command_force(fs_env: TieringEnv, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    w = build(fs_env)
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
    target = tmp_path / "broker"
    PartitionWriter(target, TopicPartition("payments", 0))
    argv = [
        "--config",
        str(fs_env.config_path),
        "restore",
        "--topic",
        "orders",
        "--partition",
        "0",
        "--to",
        str(target),
    ]
    assert main(argv) == 1
    assert "--force" in capsys.readouterr().err
    assert main([*argv, "--force"]) == 0


LOCK_HOLDER = (
    "import fcntl, os, sys, time\n"
    "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)\n"
    "fcntl.lockf(fd, fcntl.LOCK_EX)\n"
    "print('locked', flush=True)\n"
    "time.sleep(120)\n"
)


def test_disaster_recovery_restores_into_the_stopped_brokers_own_log_dir(fs_env: TieringEnv) -> None:
    """The partition's directory is lost: restore reads the remote tier from the metadata alone and
    writes into the broker's own log dir, only with --force and only while no broker holds the log
    dir's ``.lock`` (as a running broker does)."""
    w = build(fs_env)
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
    closed = PartitionLog(w.path).segments[:-1]
    originals = {s.base_offset: s.log_path.read_bytes() for s in closed}
    shutil.rmtree(w.path)  # the disk holding the partition is lost
    with fs_env.context() as ctx:
        with pytest.raises(TieringError, match=r"inside the broker's log dir.*--force"):
            restore_partition(ctx, w.tp, fs_env.log_dir)
        broker = subprocess.Popen(
            [sys.executable, "-c", LOCK_HOLDER, str(fs_env.log_dir / ".lock")], stdout=subprocess.PIPE, text=True
        )
        try:
            assert broker.stdout is not None and broker.stdout.readline().strip() == "locked"
            with pytest.raises(TieringError, match=r"log dir of a running broker.*stop the broker first"):
                restore_partition(ctx, w.tp, fs_env.log_dir, force=True)
            assert not w.path.exists() and not list(fs_env.log_dir.glob(".orders-0*"))
        finally:
            broker.kill()
            broker.wait()
        lines: list[str] = []
        staged: list[tuple[str, bool]] = []

        def progress(event: RunEvent) -> None:
            lines.append(event_line(event))
            staged.extend((p.name, (p / "partition.metadata").exists()) for p in fs_env.log_dir.iterdir() if p.is_dir())

        result = restore_partition(ctx, w.tp, fs_env.log_dir, force=True, events=progress)
    assert "not in the broker's log dirs; restoring topic id" in lines[0]
    # Staged under a name the broker parses (and deletes if a killed restore left it), never
    # holding the topic id that would make it the evidence of a deletion.
    names = {name for name, _ in staged}
    assert len(names) == 1 and re.fullmatch(r"orders-0\.[0-9a-f]{32}-delete", names.pop()), staged
    assert not any(has_metadata for _, has_metadata in staged)
    assert (result.segments, result.log_start_offset, result.end_offset) == (3, 0, closed[-1].base_offset + 24)
    restored = PartitionLog(w.path)
    assert restored.topic_id == w.topic_id
    assert {s.base_offset: s.log_path.read_bytes() for s in restored.segments} == originals
    assert [(e.epoch, e.start_offset) for e in restored.leader_epoch_entries] == [(0, 0), (3, 31)]
    assert read_offset_checkpoint(fs_env.log_dir / RECOVERY_POINT_CHECKPOINT)[w.tp] == result.end_offset + 1
    assert not (fs_env.log_dir / "tiering-restored").exists()  # a broker's log dir, not a restore target
