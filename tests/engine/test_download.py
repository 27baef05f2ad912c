"""One object of a remote segment downloaded (``engine/download.py``): the bytes the broker wrote,
checked against the CRC-32C the copy recorded; a recorded object that is missing, or whose bytes
are not what was recorded, is an error naming the segment and leaves no file behind."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.engine_support import TieringEnv, tip_of, write_segments
from tiering_core.engine.download import download_object
from tiering_core.engine.segment_ops import segment_ref
from tiering_core.errors import TieringError
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.metadata.store import RemoteLogSegmentMetadata
from tiering_core.runs.copy import run_copy
from tiering_core.storage.layout import ObjectKind
from tiering_core.storage.manifest import CopyRecord


def copied(env: TieringEnv) -> tuple[PartitionWriter, list[RemoteLogSegmentMetadata]]:
    w = env.writer()
    write_segments(w, 2)
    w.set_high_watermark()
    with env.context() as ctx:
        assert run_copy(ctx, w.tp).segments_copied == 2
        return w, ctx.metadata.finished_segments(tip_of(w))


def test_the_log_downloaded_is_the_segment_the_broker_wrote(fs_env: TieringEnv, tmp_path: Path) -> None:
    w, segments = copied(fs_env)
    target = tmp_path / "00000000000000000000.log"
    with fs_env.context() as ctx:
        size = download_object(ctx.storage, segments[0], ObjectKind.LOG, target)
    assert target.read_bytes() == (w.path / "00000000000000000000.log").read_bytes()
    assert size == segments[0].size_bytes == target.stat().st_size


def test_a_missing_object_the_copy_recorded_is_an_error_and_leaves_no_file(fs_env: TieringEnv, tmp_path: Path) -> None:
    _, segments = copied(fs_env)
    target = tmp_path / "segment.timeindex"
    with fs_env.context() as ctx:
        ctx.storage.delete_keys([segment_ref(segments[0]).key(ObjectKind.TIME_INDEX, ctx.storage.prefix)])
        with pytest.raises(TieringError, match=rf"segment {segments[0].segment_id}: its timeindex object is missing"):
            download_object(ctx.storage, segments[0], ObjectKind.TIME_INDEX, target)
    assert not target.exists()


def test_an_object_the_copy_did_not_write_is_absent_not_an_error(fs_env: TieringEnv, tmp_path: Path) -> None:
    _, segments = copied(fs_env)
    assert CopyRecord.of_segment(segments[0]).crc(ObjectKind.TRANSACTION_INDEX) is None  # no aborted transaction
    target = tmp_path / "segment.txnindex"
    with fs_env.context() as ctx:
        assert download_object(ctx.storage, segments[0], ObjectKind.TRANSACTION_INDEX, target) == -1
    assert not target.exists()


def test_bytes_other_than_the_copy_recorded_are_an_error(fs_env: TieringEnv, tmp_path: Path) -> None:
    _, segments = copied(fs_env)
    record = CopyRecord.of_segment(segments[0])
    recorded = record.crc(ObjectKind.LOG)
    assert recorded is not None
    record.crc32c[ObjectKind.LOG.value] = "00000000"
    segment = replace(segments[0], custom_metadata=record.to_custom_metadata())
    with fs_env.context() as ctx, pytest.raises(TieringError, match=rf"log crc32c {recorded} != 00000000 recorded"):
        download_object(ctx.storage, segment, ObjectKind.LOG, tmp_path / "segment.log")
