"""``tiering recover`` over real remote storage (moto's S3 server, the filesystem backend) and real
SQLite and PostgreSQL stores: after copies with tiering gaps, retention, a DeleteRecords and a
rewrite, a store rebuilt from the bucket alone equals the lost one (segments, lineage, log start,
DeleteRecords, gaps, status), and the platform goes on with it as before; a dry run writes
nothing; segments copied before manifests held their metadata are recovered from their objects
and named; an unreadable manifest is named and leaves the prefix unbound; a recovery killed with
SIGKILL and run again gives the same store."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.engine_support import TieringEnv, tip_of, write_segments
from tests.runs.test_retention import gapped_partition
from tests.storage.legacy_support import make_legacy
from tiering_core.cli import main
from tiering_core.engine.segment_ops import segment_ref
from tiering_core.errors import StoreBindingError
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.read.reader import open_reader
from tiering_core.read.verify import verify_partition
from tiering_core.runs.copy import run_copy
from tiering_core.runs.delete_records import apply_delete_records
from tiering_core.runs.orphans import find_orphans
from tiering_core.runs.recover import recover_store
from tiering_core.runs.retention import run_retention
from tiering_core.runs.rewrite import run_rewrite
from tiering_core.storage.identity import read_identity
from tiering_core.storage.layout import ObjectKind
from tiering_core.tier.status import collect_status, list_remote_segments

ROOT = Path(__file__).resolve().parents[2]


def store_state(env: TieringEnv, w: PartitionWriter) -> dict[str, Any]:
    """Everything the store says of the partition that recovery must give back (counters aside)."""
    tip = tip_of(w)
    with env.context() as ctx:
        store = ctx.metadata
        return {
            "segments": list_remote_segments(ctx, w.tp.topic, w.tp.partition),
            "lineage": store.get_recorded_lineage(tip),
            "remote_log_start": store.get_remote_log_start_offset(tip),
            "delete_records": store.get_delete_records_offset(tip),
            "gaps": [(g.start, g.end) for g in store.list_gaps(tip)],
            "status": [row.to_dict() for row in collect_status(ctx, w.tp.topic, w.tp.partition)],
        }


def lived(env: TieringEnv) -> PartitionWriter:
    """A partition with a life: two tiering gaps, retention past the first segments, a
    DeleteRecords inside a segment, and a rewrite of what was left into another encoding."""
    w = gapped_partition(env)
    with env.context() as ctx:
        apply_delete_records(ctx, w.tp, 17)
    with env.context() as ctx:
        assert run_retention(ctx, w.tp).segments_deleted == 2  # [0..4] and [5..9], below the DeleteRecords
    env.remote.update(chunk_size=8192, compression="zstd")
    env.write_config()
    with env.context() as ctx:
        assert run_rewrite(ctx, w.tp).segments_rewritten == 3
    return w


def lost(env: TieringEnv, name: str) -> TieringEnv:
    """The same log dir and tier with a new, empty store: the old one is lost."""
    fresh = TieringEnv(env.root, env.log_dir, env.root / f"{name}.yaml", env.remote, f"sqlite:///{env.root / name}.db")
    fresh.topics = dict(env.topics)
    fresh.write_config()
    return fresh


@pytest.fixture(params=["s3", "filesystem"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> TieringEnv:
    from tests.runs.test_orphans import make_env

    return make_env(request.param, request, tmp_path)


def test_a_store_rebuilt_from_the_bucket_equals_the_lost_one(env: TieringEnv) -> None:
    w = lived(env)
    before = store_state(env, w)
    assert before["gaps"] == [(25, 34)] and before["delete_records"] == 17 and before["segments"]
    fresh = lost(env, "recovered")
    with fresh.context() as ctx:
        with pytest.raises(StoreBindingError):  # the empty store may not write: the prefix is the old store's
            run_copy(ctx, w.tp)
        result = recover_store(ctx)
        assert result.bound and not result.failed
        (part,) = result.partitions
        assert part.state_object and part.from_objects == [] and part.unreadable == []
        assert part.recorded == len(before["segments"])
        assert read_identity(ctx.storage).store_id == ctx.metadata.store_identity().store_id  # type: ignore[union-attr]
    assert store_state(fresh, w) == before
    with fresh.context() as ctx:  # and the platform goes on as before
        assert run_copy(ctx, w.tp).segments_copied == 0
        verified = verify_partition(ctx, w.tp)
        assert verified and all(v.ok and v.tamper_evident for v in verified)
        records = open_reader(ctx, w.tp).read(17, 100)
        assert [r.offset for r in records][:3] == [17, 18, 19]
        assert find_orphans(ctx, grace_ms=1) == []
    with env.context() as ctx, pytest.raises(StoreBindingError, match="binds the prefix to metadata store"):
        run_retention(ctx, w.tp)  # the lost store, found again, no longer writes there


def test_a_dry_run_writes_nothing_and_a_rerun_records_nothing_twice(env: TieringEnv) -> None:
    w = env.writer()
    write_segments(w, 3)
    w.set_high_watermark()
    with env.context() as ctx:
        run_copy(ctx, w.tp)
    fresh = lost(env, "dry")
    with fresh.context() as ctx:
        dry = recover_store(ctx, dry_run=True)
        assert [p.recorded for p in dry.partitions] == [3] and not dry.bound
        assert not ctx.metadata.holds_segments() and not ctx.metadata.store_identity().recovering
        assert recover_store(ctx).bound
        again = recover_store(ctx)  # the store bound to the prefix: nothing new to record
        assert [(p.recorded, p.already_recorded) for p in again.partitions] == [(0, 3)]
    assert store_state(fresh, w)["segments"] == store_state(env, w)["segments"]


def test_recover_refuses_a_store_with_segments_of_another_prefix(env: TieringEnv, tmp_path: Path) -> None:
    w = env.writer()
    write_segments(w, 2)
    w.set_high_watermark()
    with env.context() as ctx:
        run_copy(ctx, w.tp)
    elsewhere = TieringEnv(env.root, env.log_dir, tmp_path / "e.yaml", {**env.remote, "prefix": "e/"}, env.metadata_url)
    elsewhere.write_config()
    with elsewhere.context() as ctx, pytest.raises(StoreBindingError, match="already records segments"):
        recover_store(ctx)


def test_segments_copied_before_manifests_held_their_metadata_are_recovered_from_their_objects(
    env: TieringEnv,
) -> None:
    w = env.writer()
    w.append_records(5)
    w.become_leader(4)
    write_segments(w, 2)
    w.set_high_watermark()
    with env.context() as ctx:
        run_copy(ctx, w.tp)
        tip = tip_of(w)
        legacy_segments = ctx.metadata.list_segments(tip)[:2]
        for segment in legacy_segments:
            legacy = make_legacy(ctx, segment)
            key = segment_ref(segment).key(ObjectKind.MANIFEST, ctx.storage.prefix)
            ctx.storage.put_object(key, replace(legacy, segment=None).to_json())
    before = store_state(env, w)
    fresh = lost(env, "legacy")
    with fresh.context() as ctx:
        (part,) = recover_store(ctx).partitions
        assert sorted(part.from_objects) == sorted(str(segment_ref(s)) for s in legacy_segments)
    after = store_state(fresh, w)
    assert after["segments"] == before["segments"] and after["lineage"] == before["lineage"]


def test_an_unreadable_manifest_is_named_and_leaves_the_prefix_unbound(env: TieringEnv) -> None:
    w = env.writer()
    write_segments(w, 2)
    w.set_high_watermark()
    with env.context() as ctx:
        run_copy(ctx, w.tp)
        first = ctx.metadata.list_segments(tip_of(w))[0]
        ctx.storage.put_object(segment_ref(first).key(ObjectKind.MANIFEST, ctx.storage.prefix), b"{not json")
        owner = ctx.metadata.store_identity().store_id
    fresh = lost(env, "unreadable")
    with fresh.context() as ctx:
        result = recover_store(ctx)
        assert result.failed and not result.bound
        (part,) = result.partitions
        assert part.recorded == 1 and len(part.unreadable) == 1 and str(first.segment_id) in part.unreadable[0]
        assert read_identity(ctx.storage).store_id == owner  # type: ignore[union-attr]


def recover_killed_after_first_partition(env: TieringEnv) -> None:
    """``tiering recover`` in a child process, killed with SIGKILL once it has said it finished its
    first partition (it writes each partition's progress line after committing it; with ``--json``
    progress goes to stderr), while the other partitions are still to come."""
    child = subprocess.Popen(
        [sys.executable, "-m", "tiering_core.cli", "--config", str(env.config_path), "--json", "recover"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stderr is not None
    for line in child.stderr:
        if "recover: 1/" in line:
            child.send_signal(signal.SIGKILL)
            break
    child.wait(timeout=120)
    assert child.returncode == -signal.SIGKILL


def test_a_recovery_killed_part_way_then_run_again_gives_the_same_store(env: TieringEnv) -> None:
    writers = []
    for topic in [f"t{i:02d}" for i in range(12)]:  # the kill lands long before the last is recorded
        w = env.writer(topic)
        write_segments(w, 2)
        w.set_high_watermark()
        writers.append(w)
    with env.context() as ctx:
        for w in writers:
            run_copy(ctx, w.tp)
    before = [store_state(env, w) for w in writers]
    fresh = lost(env, "killed")
    recover_killed_after_first_partition(fresh)
    with fresh.context() as ctx:
        assert ctx.metadata.store_identity().recovering
        with pytest.raises(StoreBindingError, match="has not finished"):
            run_copy(ctx, writers[0].tp)
    code = main(["--config", str(fresh.config_path), "--json", "recover"])
    assert code == 0
    assert [store_state(fresh, w) for w in writers] == before


def test_the_cli_prints_what_it_recorded(env: TieringEnv, capsys: pytest.CaptureFixture[str]) -> None:
    w = env.writer()
    write_segments(w, 2)
    w.set_high_watermark()
    with env.context() as ctx:
        run_copy(ctx, w.tp)
    fresh = lost(env, "cli")
    assert main(["--config", str(fresh.config_path), "recover", "--dry-run", "--topic", "orders"]) == 0
    out = capsys.readouterr().out
    assert "orders-0" in out and "would record 2" in out and "0 segment(s)" not in out.splitlines()[-1]
    assert main(["--config", str(fresh.config_path), "--json", "recover", "--topic", "nosuch"]) == 0
    assert json.loads(capsys.readouterr().out)["partitions"] == []
