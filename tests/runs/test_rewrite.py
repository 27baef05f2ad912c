"""``tiering rewrite``: segments copied before the ``remote:`` settings changed are copied again in
the current format under new segment ids, switched in one transaction and their old objects
deleted; a key rotation leaves nothing under the old key; a run killed (SIGKILL) while uploading
or right after the switch is finished by the next one, with no orphan and no doubled coverage."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.engine_support import (
    TieringEnv,
    assert_manifest_holds_the_segment,
    expire_lease,
    segment_objects,
    tip_of,
    write_segments,
)
from tests.runs.switch_faults import KILL_AT_SWITCH
from tests.storage.keys_support import KeyPair, write_key_pair
from tests.storage.legacy_support import make_legacy
from tiering_core.cli import main
from tiering_core.engine.segment_ops import segment_ref
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.read.reader import open_reader
from tiering_core.runs.copy import run_copy
from tiering_core.runs.rewrite import run_rewrite
from tiering_core.storage.manifest import CHUNKED_FORMAT, CopyRecord

ROOT = Path(__file__).resolve().parents[2]
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, KeyPair]:
    root = tmp_path_factory.mktemp("keys")
    return {key_id: write_key_pair(root, key_id) for key_id in ("k1", "k2")}


def encrypt_with(env: TieringEnv, current: KeyPair, *held: KeyPair) -> None:
    env.remote.update(
        chunk_size=8192,
        compression="zstd",
        encryption={
            "key_id": current.key_id,
            "public_key_file": str(current.public),
            "private_key_files": {k.key_id: str(k.private) for k in (current, *held)},
        },
    )
    env.write_config()


def copied_partition(env: TieringEnv, segments: int = 3) -> PartitionWriter:
    w = env.writer()
    write_segments(w, segments)
    w.set_high_watermark()
    with env.context() as ctx:
        run_copy(ctx, w.tp)
    return w


def state(env: TieringEnv, w: PartitionWriter) -> tuple[list, list[tuple[int, bytes | None]], list[str]]:
    """The finished segments, every record the remote tier serves, and the stored segment objects' keys."""
    with env.context() as ctx:
        finished = [s for s in ctx.metadata.list_segments(tip_of(w)) if s.state == FINISHED]
        records = [(r.offset, r.value) for r in open_reader(ctx, w.tp).read(0, 10_000)]
        keys = [o.key for o in segment_objects(ctx, tip_of(w))]
    return finished, records, keys


def assert_whole(env: TieringEnv, w: PartitionWriter, before: list[tuple[int, bytes | None]], key_id: str) -> None:
    """Every segment once, in format 2 under ``key_id``, serving what it served; no other object."""
    finished, records, keys = state(env, w)
    assert records == before
    assert len({(s.start_offset, s.end_offset) for s in finished}) == len(finished)  # no doubled coverage
    with env.context() as ctx:
        for s in finished:
            assert CopyRecord.of_segment(s).format_version == CHUNKED_FORMAT
            manifest = ctx.storage.read_manifest(segment_ref(s))
            assert manifest is not None and manifest.encryption is not None
            assert manifest.encryption.key_id == key_id
            assert ctx.storage.verify_segment(segment_ref(s)) == []
            assert_manifest_holds_the_segment(ctx, s)
    referenced = {str(s.segment_id) for s in finished}
    assert all(any(sid in key for sid in referenced) for key in keys), keys  # no orphan


def test_rewrite_backfills_format_2_then_rotates_the_key(tiering_env: TieringEnv, keys: dict[str, KeyPair]) -> None:
    """Each copy it makes carries the segment's metadata, a segment copied before manifests did too."""
    w = copied_partition(tiering_env)
    with tiering_env.context() as ctx:
        oldest = min(ctx.metadata.list_segments(tip_of(w)), key=lambda s: s.start_offset)
        assert make_legacy(ctx, oldest).segment is None
    before_segments, before, _ = state(tiering_env, w)
    encrypt_with(tiering_env, keys["k1"])
    with tiering_env.context() as ctx:
        result = run_rewrite(ctx, w.tp)
    assert (result.segments_rewritten, result.segments_current) == (3, 0)
    assert result.stored_bytes_before == sum(sum(CopyRecord.of_segment(s).sizes.values()) for s in before_segments)
    assert result.stored_bytes_after > 0
    assert_whole(tiering_env, w, before, "k1")
    after_segments, _, _ = state(tiering_env, w)
    assert not {s.segment_id for s in before_segments} & {s.segment_id for s in after_segments}  # new ids

    encrypt_with(tiering_env, keys["k2"], keys["k1"])  # rotated: k1 only reads
    with tiering_env.context() as ctx:
        assert run_rewrite(ctx, w.tp).segments_rewritten == 3
        again = run_rewrite(ctx, w.tp)
    assert (again.segments_rewritten, again.segments_current) == (0, 3)
    encrypt_with(tiering_env, keys["k2"])  # k1 retired: nothing needs it any more
    assert_whole(tiering_env, w, before, "k2")


def test_the_command_prints_what_it_rewrote(
    fs_env: TieringEnv, keys: dict[str, KeyPair], capsys: pytest.CaptureFixture[str]
) -> None:
    copied_partition(fs_env, 2)
    encrypt_with(fs_env, keys["k1"])
    assert main(["--config", str(fs_env.config_path), "--json", "rewrite", "--topic", "orders"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["topic"], row["partition"], row["segments_rewritten"]) == ("orders", 0, 2)
    assert main(["--config", str(fs_env.config_path), "rewrite", "--topic", "orders", "--partition", "0"]) == 0
    assert capsys.readouterr().out.strip().splitlines() == [
        "orders-0: rewrote 0 segment(s), 2 already in the current format",
        "rewrite: 1 partition(s), rewrote 0 segment(s)",
    ]


KILL_DURING_REWRITE = KILL_AT_SWITCH + textwrap.dedent(
    """
    from tiering_core.kafka.topic import TopicPartition
    from tiering_core.runs.rewrite import run_rewrite
    with TieringContext.open(load_config(sys.argv[1])) as ctx:
        run_rewrite(ctx, TopicPartition("orders", 0))
    """
)


@pytest.mark.parametrize("where", ["upload", "switch"])
def test_a_rewrite_killed_is_finished_by_the_next_run(
    tiering_env: TieringEnv, keys: dict[str, KeyPair], where: str
) -> None:
    w = copied_partition(tiering_env)
    _, before, _ = state(tiering_env, w)
    encrypt_with(tiering_env, keys["k1"])
    proc = subprocess.run(
        [sys.executable, "-c", KILL_DURING_REWRITE, str(tiering_env.config_path), where],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    with tiering_env.context() as ctx:
        segments = ctx.metadata.list_segments(tip_of(w))
        left = sorted(s.state.value for s in segments if s.state != FINISHED)
        # killed mid-upload: the second copy STARTED; killed after the switch: the old one's deletion
        assert left == (["COPY_SEGMENT_STARTED"] if where == "upload" else ["DELETE_SEGMENT_STARTED"])
        finished = [s for s in segments if s.state == FINISHED]
        assert len({(s.start_offset, s.end_offset) for s in finished}) == len(finished) == 3  # one copy each
        assert [(r.offset, r.value) for r in open_reader(ctx, w.tp).read(0, 10_000)] == before  # served meanwhile
        expire_lease(ctx.metadata, tip_of(w))  # the killed run's lease lapses
    with tiering_env.context() as ctx:
        result = run_rewrite(ctx, w.tp)
    assert result.segments_cleaned_up == 1
    assert result.segments_rewritten == (2 if where == "upload" else 1)
    assert_whole(tiering_env, w, before, "k1")
