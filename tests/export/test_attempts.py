"""Data files of attempts that never committed are removed, and only those: files proven ours
(under an attempt directory whose marker names this table and that directory, of an attempt that
is over, referenced by no snapshot). Planned segments and attempts travel to other processes."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

from tests.engine_support import TieringEnv
from tests.export.support import build_partition, with_export
from tests.services import S3Endpoint
from tiering_core.export import (
    clean_abandoned_attempts,
    commit_segments,
    end_attempt,
    load_catalog,
    open_table,
    plan_export,
    start_attempt,
    table_name,
    write_segment_files,
)
from tiering_core.export.write import MARKER, STALE_ATTEMPT_MS, referenced_files
from tiering_core.runs.copy import run_copy


def test_only_files_proven_ours_of_attempts_that_are_over_are_removed(
    tiering_env: TieringEnv, pg_url: str, s3_endpoint: S3Endpoint
) -> None:
    w = build_partition(tiering_env, "orders", 0)
    bucket = s3_endpoint.new_bucket()
    with_export(tiering_env, {"uri": pg_url, "warehouse": f"s3://{bucket}/wh"})
    s3 = s3_endpoint.client()
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
        table = open_table(load_catalog(ctx.config), table_name(ctx.config.export, "orders"))
        assert table is not None
        planned = plan_export(ctx, "orders", table=table)
        first, second, third = planned[0], planned[1], planned[2]
        attempt = pickle.loads(pickle.dumps(start_attempt(table)))  # as a Spark executor gets it
        committed = write_segment_files(ctx.storage, pickle.loads(pickle.dumps(first)), attempt)
        commit_segments(table, [(first, committed)])
        uncommitted = write_segment_files(ctx.storage, second, attempt)
        assert uncommitted and committed
        # not ours: a file beside, without a marker, and an attempt directory of another table
        prefix = attempt.location.removeprefix(f"s3://{bucket}/").rsplit("/", 1)[0]
        s3.put_object(Bucket=bucket, Key=f"{prefix}/someone-else/partition=0/x.parquet", Body=b"x")
        s3.put_object(Bucket=bucket, Key=f"{prefix}/other-table/partition=0/y.parquet", Body=b"y")
        s3.put_object(
            Bucket=bucket,
            Key=f"{prefix}/other-table/{MARKER}",
            Body=json.dumps(
                {
                    "attempt_id": "other-table",
                    "table_uuid": "00000000-0000-0000-0000-000000000000",
                    "host": "h",
                    "pid": 1,
                    "started_ms": 0,
                }
            ).encode(),
        )

        assert clean_abandoned_attempts(table) == []  # this process is alive: its attempt is not over
        later = 2 * STALE_ATTEMPT_MS + 2_000_000_000_000
        deleted = clean_abandoned_attempts(table, now_ms=later)
        assert sorted(deleted) == sorted(uncommitted)
        keys = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix)["Contents"]}
        assert {f"{prefix}/someone-else/partition=0/x.parquet", f"{prefix}/other-table/partition=0/y.parquet"} <= keys
        assert all(f.removeprefix(f"s3://{bucket}/") in keys for f in committed)
        assert not any(f.removeprefix(f"s3://{bucket}/") in keys for f in uncommitted)
        assert set(committed) <= referenced_files(table)
        # the next attempt goes on where the table says
        again = plan_export(ctx, "orders", table=table)
        assert [s.segment_id for s in again][:2] == [second.segment_id, third.segment_id]
        end_attempt(attempt)


def test_an_attempt_left_by_a_dead_process_is_over(tiering_env: TieringEnv, tmp_path: Path) -> None:
    w = build_partition(tiering_env, "orders", 0)
    (tmp_path / "wh").mkdir()
    with_export(tiering_env, {"uri": f"sqlite:///{tmp_path / 'c.db'}", "warehouse": f"file://{tmp_path / 'wh'}"})
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
        table = open_table(load_catalog(ctx.config), table_name(ctx.config.export, "orders"))
        assert table is not None
        segment = plan_export(ctx, "orders", table=table)[0]
        attempt = start_attempt(table)
        files = write_segment_files(ctx.storage, segment, attempt)
        marker = Path(attempt.location.removeprefix("file://")) / MARKER
        doc = json.loads(marker.read_text())
        marker.write_text(json.dumps({**doc, "pid": 2**22 + 12345}))  # no such process
        assert clean_abandoned_attempts(table) == files
        assert not marker.exists()
