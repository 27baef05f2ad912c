"""Publishing a partition's state object (``engine/partition_state.py``): what the store holds, whole;
not written again unchanged; a failure to write it is a warning naming the partition, never a
failed run, and the next change mends it. Each run that changes the state publishes it: their own
test modules check that (copy, retention, DeleteRecords), and orphans and removal what becomes of
the object."""

from __future__ import annotations

import logging

import pytest

from tests.engine_support import TieringEnv, assert_partition_state_published, tip_of, write_segments
from tiering_core.engine.partition_state import partition_state, publish_partition_state
from tiering_core.metadata.errors import MetadataStoreError
from tiering_core.runs.copy import run_copy
from tiering_core.runs.delete_records import apply_delete_records
from tiering_core.storage.errors import RemoteStorageError
from tiering_core.storage.partition_state import PartitionState, partition_state_key


def copied(env: TieringEnv):
    w = env.writer()
    write_segments(w, 3)
    w.set_high_watermark()
    with env.context() as ctx:
        assert run_copy(ctx, w.tp).segments_copied == 3
    return w


def test_it_writes_what_the_store_holds_and_not_the_same_again(fs_env: TieringEnv) -> None:
    w = copied(fs_env)
    tip = tip_of(w)
    with fs_env.context() as ctx:
        ctx.storage.delete_keys([partition_state_key(tip, ctx.storage.prefix)])
        written = publish_partition_state(ctx.metadata, ctx.storage, tip)
        assert written == partition_state(ctx.metadata, tip) == PartitionState(tip, 0, None, ())
        assert assert_partition_state_published(ctx, tip).updated_at_ms == written.updated_at_ms
        writes: list[PartitionState] = []
        ctx.storage.write_partition_state = writes.append  # type: ignore[method-assign]
        assert publish_partition_state(ctx.metadata, ctx.storage, tip, last=written) is written
        assert writes == []  # the same content: not written again
        lease = ctx.metadata.acquire_lease(tip, "test")
        ctx.metadata.record_delete_records(tip, 7, lease)
        ctx.metadata.release_lease(lease)
        assert publish_partition_state(ctx.metadata, ctx.storage, tip, last=written) == writes[0]
        assert writes[0].delete_records_offset == 7


def test_a_failed_write_is_a_warning_and_the_next_change_mends_it(
    fs_env: TieringEnv, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    w = fs_env.writer()
    write_segments(w, 3)
    w.set_high_watermark()

    def refuse(state: PartitionState) -> None:
        raise RemoteStorageError("injected: the bucket refused the write")

    with fs_env.context() as ctx, caplog.at_level(logging.WARNING):
        monkeypatch.setattr(ctx.storage, "write_partition_state", refuse)
        result = run_copy(ctx, w.tp)  # the first copy sets the remote log start: its publish fails
        monkeypatch.undo()
        assert result.segments_copied == 3
        assert ctx.storage.read_partition_state(tip_of(w)) is None
    assert f"{tip_of(w)}: could not write its partition-state.json" in caplog.text
    assert "injected: the bucket refused the write" in caplog.text
    with fs_env.context() as ctx:
        assert apply_delete_records(ctx, w.tp, 3).log_start_offset == 3
        state = assert_partition_state_published(ctx, tip_of(w))
    assert (state.remote_log_start_offset, state.delete_records_offset) == (0, 3)


def test_a_store_that_cannot_be_read_is_a_warning_too(
    fs_env: TieringEnv, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    w = copied(fs_env)
    with fs_env.context() as ctx, caplog.at_level(logging.WARNING):
        before = ctx.storage.read_partition_state(tip_of(w))

        def unreachable(tip: object) -> None:
            raise MetadataStoreError("injected: the store went away")

        monkeypatch.setattr(ctx.metadata, "list_gaps", unreachable)
        assert publish_partition_state(ctx.metadata, ctx.storage, tip_of(w), last=before) is before
        assert ctx.storage.read_partition_state(tip_of(w)) == before
    assert "could not write its partition-state.json" in caplog.text and "the store went away" in caplog.text
