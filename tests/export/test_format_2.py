"""The export on format 2: a topic exported, then rewritten compressed and encrypted, exports to a
new table the very rows it exported before (the export reads through the storage's chunks)."""

from __future__ import annotations

from pathlib import Path

from tests.engine_support import TieringEnv
from tests.export.support import build_partition, sqlite_catalog, with_export
from tests.storage.keys_support import write_key_pair
from tiering_core.export import load_catalog, run_export
from tiering_core.runs.copy import run_copy
from tiering_core.runs.rewrite import run_rewrite


def rows(ctx, table: str) -> list[dict[str, object]]:  # type: ignore[no-untyped-def]
    scanned = load_catalog(ctx.config).load_table(table).scan().to_arrow()
    return scanned.sort_by([("partition", "ascending"), ("offset", "ascending")]).to_pylist()


def test_a_rewritten_topic_exports_the_same_rows(fs_env: TieringEnv, tmp_path: Path) -> None:
    writers = [build_partition(fs_env, "orders", p) for p in range(2)]
    with_export(fs_env, sqlite_catalog(tmp_path))
    with fs_env.context() as ctx:
        for w in writers:
            run_copy(ctx, w.tp)
        before = run_export(ctx, "orders", table="v1.orders")
    key = write_key_pair(tmp_path / "keys", "k1")
    fs_env.remote.update(
        compression="zstd",
        chunk_size=8192,
        encryption={"key_id": "k1", "public_key_file": str(key.public), "private_key_files": {"k1": str(key.private)}},
    )
    fs_env.write_config()
    with_export(fs_env, sqlite_catalog(tmp_path))  # the same catalog, in the rewritten config
    with fs_env.context() as ctx:
        assert all(run_rewrite(ctx, w.tp).segments_rewritten > 0 for w in writers)
        after = run_export(ctx, "orders", table="v2.orders")
        assert not before.failed and not after.failed and after.rows == before.rows > 0
        assert rows(ctx, "v2.orders") == rows(ctx, "v1.orders")
