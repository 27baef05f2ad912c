"""Store and prefix know each other (``engine.binding``), over moto's S3 server with SQLite and
PostgreSQL stores: the first write binds the prefix; a store that is not the prefix's, an empty
store over a tier it never wrote, and a store with an unfinished recovery write and delete nothing
and say what to run; a store restored from its backup is the same store."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from tests.cli.test_commands import run
from tests.engine_support import TieringEnv, write_segments
from tiering_core import __version__
from tiering_core.engine.binding import check_binding
from tiering_core.errors import StoreBindingError
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.metadata.backup import backup_store
from tiering_core.runs.copy import run_copy
from tiering_core.runs.orphans import UNRECORDED, find_orphans
from tiering_core.runs.retention import run_retention
from tiering_core.storage.identity import IDENTITY_OBJECT, read_identity


def tiered(env: TieringEnv, segments: int = 3) -> PartitionWriter:
    w = env.writer()
    write_segments(w, segments)
    w.set_high_watermark()
    with env.context() as ctx:
        assert run_copy(ctx, w.tp).segments_copied == segments
    return w


def every_key(env: TieringEnv) -> list[str]:
    with env.context() as ctx:
        return sorted(o.key for o in ctx.storage.list_prefix(ctx.storage.prefix))


def with_store(env: TieringEnv, url: str) -> TieringEnv:
    """The same log dir and tier, another metadata store (a mistyped ``metadata.url``)."""
    other = TieringEnv(env.root, env.log_dir, env.root / "other.yaml", env.remote, url)
    other.write_config()
    return other


def test_the_first_write_binds_the_prefix_to_the_store(tiering_env: TieringEnv) -> None:
    tiered(tiering_env)
    with tiering_env.context() as ctx:
        found = read_identity(ctx.storage)
        assert found is not None
        assert found.store_id == ctx.metadata.store_identity().store_id
        assert found.platform_version == __version__
        assert abs(found.bound_at_ms - time.time() * 1000) < 600_000
        assert check_binding(ctx.metadata, ctx.storage) == found  # the same store passes


def test_an_empty_store_over_a_tier_it_never_wrote_deletes_and_copies_nothing(
    tiering_env: TieringEnv, tmp_path: Path
) -> None:
    """The typo case: a new, empty store over a tier another store wrote (here an older deployment
    that left no identity object): the orphan listing keeps every object, deleting them and
    copying again are refused in one line naming ``tiering recover``."""
    w = tiered(tiering_env)
    with tiering_env.context() as ctx:
        ctx.storage.delete_keys([ctx.storage.prefix + IDENTITY_OBJECT])
    before = every_key(tiering_env)
    typo = with_store(tiering_env, f"sqlite:///{tmp_path / 'typo.db'}")
    with typo.context() as ctx:
        listed = find_orphans(ctx, grace_ms=1)
        assert listed and all(o.kind == UNRECORDED and not o.deleted for o in listed)
        time.sleep(0.01)
        with pytest.raises(StoreBindingError, match=r"is empty.*finished segment.*tiering recover"):
            find_orphans(ctx, grace_ms=1, delete=True)
        with pytest.raises(StoreBindingError, match="tiering recover"):
            run_copy(ctx, w.tp)
        assert not ctx.metadata.holds_segments()  # refused before anything was recorded
    assert every_key(tiering_env) == before
    with tiering_env.context() as ctx:  # the store that wrote it binds the legacy prefix on its next write
        assert run_retention(ctx, w.tp).segments_deleted == 0
        found = read_identity(ctx.storage)
        assert found is not None and found.store_id == ctx.metadata.store_identity().store_id


def test_a_store_the_prefix_is_not_bound_to_is_refused_by_copy_retention_and_orphans(
    tiering_env: TieringEnv, tmp_path: Path
) -> None:
    """Two deployments in one bucket, each bound to its own prefix; store A's config then points at
    B's prefix (a copied config): everything A would write or delete there is refused."""
    w = tiered(tiering_env)
    b_prefix = {**tiering_env.remote, "prefix": "b/"}
    b = TieringEnv(
        tiering_env.root, tiering_env.log_dir, tmp_path / "b.yaml", b_prefix, f"sqlite:///{tmp_path / 'b.db'}"
    )
    b.write_config()
    with b.context() as ctx:
        assert run_copy(ctx, w.tp).segments_copied == 3
        owner = ctx.metadata.store_identity().store_id
    before = every_key(b)
    w.append_records(5)
    w.roll()
    w.set_high_watermark()
    a_at_b = TieringEnv(
        tiering_env.root, tiering_env.log_dir, tmp_path / "a-at-b.yaml", b_prefix, tiering_env.metadata_url
    )
    a_at_b.write_config(**{"*": {"retention.ms": 1, "retention.bytes": -1}})
    with a_at_b.context() as ctx:
        for refused in (
            lambda: run_copy(ctx, w.tp),
            lambda: run_retention(ctx, w.tp),
            lambda: find_orphans(ctx, grace_ms=1, delete=True),
        ):
            with pytest.raises(StoreBindingError) as caught:
                refused()
            message = str(caught.value)
            assert owner in message and ctx.metadata.store_identity().store_id in message
            assert "metadata.url" in message and "tiering recover" in message and "\n" not in message
    assert every_key(b) == before


def test_a_store_restored_from_its_backup_is_the_same_store(fs_env: TieringEnv, tmp_path: Path) -> None:
    """SQLite's ``tiering db backup`` (a PostgreSQL restore keeps the same row: pg_dump copies tables
    whole, tests/metadata/test_backup.py)."""
    tiering_env = fs_env
    w = tiered(tiering_env, 2)
    backup = tmp_path / "backup.db"
    with tiering_env.context() as ctx:
        backup_store(ctx.metadata.url, backup)
    restored = tmp_path / "restored.db"
    shutil.copyfile(backup, restored)
    again = with_store(tiering_env, f"sqlite:///{restored}")
    w.append_records(5)
    w.roll()
    w.set_high_watermark()
    with again.context() as ctx:
        assert run_copy(ctx, w.tp).segments_copied == 1


def test_an_unfinished_recovery_writes_nothing(tiering_env: TieringEnv) -> None:
    w = tiered(tiering_env, 1)
    with tiering_env.context() as ctx:
        ctx.metadata.begin_recovery()
        with pytest.raises(StoreBindingError, match=r"has not finished.*tiering recover"):
            run_retention(ctx, w.tp)
        ctx.metadata.end_recovery()
    with tiering_env.context() as ctx:
        assert run_retention(ctx, w.tp).segments_deleted == 0


def test_a_malformed_identity_object_is_refused_naming_it(tiering_env: TieringEnv) -> None:
    w = tiered(tiering_env, 1)
    with tiering_env.context() as ctx:
        key = ctx.storage.prefix + IDENTITY_OBJECT
        ctx.storage.put_object(key, json.dumps({"format_version": 1, "store_id": "not-a-uuid"}).encode())
    with tiering_env.context() as ctx, pytest.raises(Exception, match=rf"{IDENTITY_OBJECT}.*not a UUID"):
        run_retention(ctx, w.tp)


def test_the_cli_refuses_in_one_line(fs_env: TieringEnv, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tiered(fs_env, 1)
    other = with_store(fs_env, f"sqlite:///{tmp_path / 'other.db'}")
    for argv in (("copy",), ("retention", "--delete-orphans", "--grace-ms", "1")):
        code, _, err = run(capsys, "--config", str(other.config_path), *argv)
        assert code == 1 and "binds the prefix to metadata store" in err and err.count("\n") == 1, err
