"""``tiering export``: progress and summary, exactly once across a kill -9 and reruns, a corrupt
batch failing its segment only, one-line errors for an unreachable catalog or warehouse, and
``status`` showing the exported offsets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import boto3
import pytest

from tests.engine_support import TieringEnv
from tests.export.support import (
    build_partition,
    export_killed_at_commit,
    sqlite_catalog,
    wait_until_table_is_free,
    with_export,
    with_lease_ms,
)
from tiering_core.cli import main
from tiering_core.engine.segment_ops import segment_ref
from tiering_core.export import load_catalog, open_table, table_name
from tiering_core.export.write import ATTEMPTS_DIR, referenced_files
from tiering_core.kafka.isolation import IsolationLevel
from tiering_core.kafka.topic import TopicPartition
from tiering_core.read.reader import open_reader
from tiering_core.runs.copy import run_copy
from tiering_core.storage.layout import ObjectKind

TOPIC = "orders.eu"


def tiered(env: TieringEnv, partitions: int = 2) -> dict[int, list[int]]:
    """Partitions tiered; the read_committed offsets fetch returns for each."""
    writers = [build_partition(env, TOPIC, p) for p in range(partitions)]
    want = {}
    with env.context() as ctx:
        for w in writers:
            run_copy(ctx, w.tp)
            reader = open_reader(ctx, w.tp)
            want[w.tp.partition] = [r.offset for r in reader.read(0, 100_000, IsolationLevel.READ_COMMITTED)]
    return want


def table_offsets(env: TieringEnv) -> dict[int, list[int]]:
    with env.context() as ctx:
        table = open_table(load_catalog(ctx.config), table_name(ctx.config.export, TOPIC), create=False)
        assert table is not None
        got = table.scan().to_arrow()
    out: dict[int, list[int]] = {}
    for partition, offset in zip(got["partition"].to_pylist(), got["offset"].to_pylist(), strict=True):
        out.setdefault(partition, []).append(offset)
    return {p: sorted(o) for p, o in out.items()}


def snapshots(env: TieringEnv) -> int:
    with env.context() as ctx:
        table = open_table(load_catalog(ctx.config), table_name(ctx.config.export, TOPIC), create=False)
        return 0 if table is None else len(table.snapshots())


def uncommitted_files(env: TieringEnv, warehouse: Path) -> list[Path]:
    with env.context() as ctx:
        table = open_table(load_catalog(ctx.config), table_name(ctx.config.export, TOPIC), create=False)
        assert table is not None
        referenced = {p.removeprefix("file://") for p in referenced_files(table)}
    return [p for p in warehouse.rglob("*.parquet") if ATTEMPTS_DIR in p.parts and str(p) not in referenced]


def export(env: TieringEnv, *extra: str) -> int:
    return main(["--config", str(env.config_path), "export", "--topic", TOPIC, *extra])


def test_export_command_progress_summary_rerun_and_status(
    tiering_env: TieringEnv, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    want = tiered(tiering_env)
    with_export(tiering_env, sqlite_catalog(tmp_path))
    assert export(tiering_env, "--dry-run") == 0
    out = capsys.readouterr().out
    assert "would export orders.eu-0: segment" in out and "20 segment(s) to export" in out
    assert snapshots(tiering_env) == 0
    assert export(tiering_env) == 0
    out = capsys.readouterr().out
    assert out.count("row(s) in") == 20 and "kafka.orders.eu: exported 20 segment(s)" in out
    assert table_offsets(tiering_env) == want
    before = snapshots(tiering_env)
    assert export(tiering_env) == 0
    assert "up to date, nothing to export" in capsys.readouterr().out
    assert snapshots(tiering_env) == before
    assert main(["--config", str(tiering_env.config_path), "--json", "export", "--topic", TOPIC]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["table"] == "kafka.orders.eu" and summary["planned"] == [] and summary["snapshots"] == []
    assert main(["--config", str(tiering_env.config_path), "--json", "status", "--topic", TOPIC]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert sorted(r["partition"] for r in rows) == [0, 1]
    assert all(r["exported_up_to"] == r["highest_copied_offset"] for r in rows)
    assert main(["--config", str(tiering_env.config_path), "status", "--topic", TOPIC]) == 0
    assert "EXPORTED" in capsys.readouterr().out


def test_export_to_another_table_and_one_partition(tiering_env: TieringEnv, tmp_path: Path) -> None:
    want = tiered(tiering_env)
    with_export(tiering_env, sqlite_catalog(tmp_path), namespace="raw")
    assert export(tiering_env, "--partition", "1", "--table", "lake.orders_eu") == 0
    with tiering_env.context() as ctx:
        catalog = load_catalog(ctx.config)
        table = catalog.load_table(("lake", "orders_eu"))
        got = table.scan().to_arrow()
        assert sorted(got["offset"].to_pylist()) == want[1] and set(got["partition"].to_pylist()) == {1}
        assert open_table(catalog, table_name(ctx.config.export, TOPIC), create=False) is None


def test_kill_9_during_export_then_rerun_is_exactly_once(tiering_env: TieringEnv, tmp_path: Path) -> None:
    """The rerun is another export: it waits until the killed one's table lease has expired
    (an Airflow retry of the same task would take it over at once)."""
    want = tiered(tiering_env)
    catalog = sqlite_catalog(tmp_path)
    with_export(tiering_env, catalog)
    with_lease_ms(tiering_env, 5_000)
    export_killed_at_commit(tiering_env.config_path, TOPIC, tmp_path / "flag", commit=3)  # its data files written
    warehouse = tmp_path / "warehouse"
    left = uncommitted_files(tiering_env, warehouse)
    assert left  # the killed attempt's files of its uncommitted segment
    partial = table_offsets(tiering_env)
    assert sum(len(o) for o in partial.values()) < sum(len(o) for o in want.values())
    wait_until_table_is_free(tiering_env, f"kafka.{TOPIC}")
    assert export(tiering_env) == 0
    assert table_offsets(tiering_env) == want  # no duplicate, no missing offset
    assert uncommitted_files(tiering_env, warehouse) == []
    assert not [p for p in left if p.exists()]
    before = snapshots(tiering_env)
    assert export(tiering_env) == 0
    assert snapshots(tiering_env) == before


def test_corrupt_batch_fails_its_segment_only(
    tiering_env: TieringEnv, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    want = tiered(tiering_env, partitions=1)
    with_export(tiering_env, sqlite_catalog(tmp_path))
    with tiering_env.context() as ctx:
        tp = open_reader(ctx, TopicPartition(TOPIC, 0)).view.tip
        segments = sorted(ctx.metadata.list_segments(tp), key=lambda s: s.start_offset)
        bad = segments[3]
        key = segment_ref(bad).key(ObjectKind.LOG, ctx.storage.prefix)
        client = boto3.client("s3", endpoint_url=ctx.config.remote.endpoint_url, region_name=ctx.config.remote.region)
        body = bytearray(client.get_object(Bucket=ctx.config.remote.bucket, Key=key)["Body"].read())
        body[-10] ^= 0xFF  # inside the last batch's records: its CRC no longer matches
        client.put_object(Bucket=ctx.config.remote.bucket, Key=key, Body=bytes(body))
    assert export(tiering_env) == 1
    captured = capsys.readouterr()
    assert f"segment {bad.segment_id}" in captured.err and "at offset" in captured.err
    assert "FAILED" in captured.out
    got = table_offsets(tiering_env)[0]
    assert got == [o for o in want[0] if not bad.start_offset <= o <= bad.end_offset]
    assert export(tiering_env) == 1  # a rerun retries the failed segment only
    assert table_offsets(tiering_env)[0] == got
    assert uncommitted_files(tiering_env, tmp_path / "warehouse") == []


def test_unreachable_catalog_and_unwritable_warehouse_are_one_line(
    tiering_env: TieringEnv, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tiered(tiering_env, partitions=1)
    with_export(
        tiering_env,
        {"type": "sql", "uri": "postgresql+psycopg2://u:secret@127.0.0.1:1/none", "warehouse": f"file://{tmp_path}"},
    )
    assert export(tiering_env) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("tiering: cannot open the export catalog") or err.startswith("tiering: cannot")
    assert "\n" not in err and "secret" not in err
    with_export(tiering_env, sqlite_catalog(tmp_path, warehouse="s3://no-such-bucket-for-export/wh"))
    assert export(tiering_env) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("tiering: cannot") and "\n" not in err, err


def test_status_with_an_unreachable_catalog_still_shows_the_tier(
    tiering_env: TieringEnv, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tiered(tiering_env, partitions=1)
    with_export(tiering_env, {"uri": "postgresql+psycopg2://u:pw@127.0.0.1:1/none", "warehouse": f"file://{tmp_path}"})
    assert main(["--config", str(tiering_env.config_path), "status", "--topic", TOPIC]) == 0
    captured = capsys.readouterr()
    assert "EXPORTED" in captured.out and "orders.eu-0" in captured.out
    assert captured.err.startswith("tiering: status: exported offsets unknown: cannot open the export catalog")


def test_the_library_imports_pyiceberg_only_when_a_table_is_used() -> None:
    code = "import sys, tiering_core.export, tiering_core.cli.main; print('pyiceberg' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def corrupt_every_segment(env: TieringEnv) -> None:
    """Flip a byte in the last batch of every remote segment of ``TOPIC``-0: each fails its export."""
    with env.context() as ctx:
        tip = open_reader(ctx, TopicPartition(TOPIC, 0)).view.tip
        client = boto3.client("s3", endpoint_url=ctx.config.remote.endpoint_url, region_name=ctx.config.remote.region)
        for segment in ctx.metadata.list_segments(tip):
            key = segment_ref(segment).key(ObjectKind.LOG, ctx.storage.prefix)
            body = bytearray(client.get_object(Bucket=ctx.config.remote.bucket, Key=key)["Body"].read())
            body[-10] ^= 0xFF
            client.put_object(Bucket=ctx.config.remote.bucket, Key=key, Body=bytes(body))


def table_exists(env: TieringEnv, topic: str = TOPIC) -> bool:
    with env.context() as ctx:
        return open_table(load_catalog(ctx.config), table_name(ctx.config.export, topic), create=False) is not None


def test_a_failed_export_leaves_no_table_and_never_drops_one_it_did_not_create(
    tiering_env: TieringEnv, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tiered(tiering_env, partitions=1)
    with_export(tiering_env, sqlite_catalog(tmp_path))
    code = main(["--config", str(tiering_env.config_path), "export", "--topic", "nosuch"])
    err = capsys.readouterr().err
    assert code == 1 and err == "tiering: topic nosuch has no remote data\n"
    assert not table_exists(tiering_env, "nosuch")
    assert export(tiering_env, "--partition", "9") == 1
    assert "partition 9 has no remote data" in capsys.readouterr().err and not table_exists(tiering_env)

    corrupt_every_segment(tiering_env)
    assert export(tiering_env) == 1  # created the table, then every segment failed: nothing committed
    assert "segment(s) failed" in capsys.readouterr().out
    assert not table_exists(tiering_env)
    assert sorted(p.name for p in (tmp_path / "warehouse").rglob("*.parquet")) == []

    with tiering_env.context() as ctx:  # someone else's table, empty: a failed export keeps it
        open_table(load_catalog(ctx.config), table_name(ctx.config.export, TOPIC), create=True)
    assert export(tiering_env) == 1
    assert table_exists(tiering_env) and snapshots(tiering_env) == 0
