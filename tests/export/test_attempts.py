"""Data files of attempts that never committed are removed, and only those: files proven ours
(under an attempt directory whose marker names this table and that directory, of an attempt that
is over, referenced by no snapshot). An attempt is over when the table's export lease passed to a
newer export and the table moved on since, never by its process id, host or age (containers share
host names across PID namespaces). Planned segments and attempts travel to other processes."""

from __future__ import annotations

import json
import os
import pickle
import socket
from pathlib import Path

from tests.engine_support import TieringEnv
from tests.export.support import build_partition, sqlite_catalog, with_export
from tests.services import S3Endpoint
from tiering_core.export import clean_abandoned_attempts, exporting, write_segment_files
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
        with exporting(ctx, "orders") as first:  # an export that never gets to its end
            planned = first.plan("orders")
            one, two, three = planned[0], planned[1], planned[2]
            attempt = pickle.loads(pickle.dumps(first.start_attempt()))  # as a Spark executor gets it
            committed = write_segment_files(ctx.storage, pickle.loads(pickle.dumps(one)), attempt)
            first.commit(attempt, [(one, committed)])
            uncommitted = write_segment_files(ctx.storage, two, attempt)
            assert uncommitted and committed
            token = first.held.lease.token
            # while its export holds the table, its attempt is never over, whatever the clock says
            far_later = 2 * STALE_ATTEMPT_MS + 2_000_000_000_000
            assert clean_abandoned_attempts(first.table, token, None, now_ms=far_later) == []
        # not ours: a file beside, without a marker, and an attempt directory of another table
        prefix = attempt.location.removeprefix(f"s3://{bucket}/").rsplit("/", 1)[0]
        s3.put_object(Bucket=bucket, Key=f"{prefix}/someone-else/partition=0/x.parquet", Body=b"x")
        s3.put_object(Bucket=bucket, Key=f"{prefix}/other-table/partition=0/y.parquet", Body=b"y")
        s3.put_object(
            Bucket=bucket,
            Key=f"{prefix}/other-table/{MARKER}",
            Body=json.dumps(
                {"attempt_id": "other-table", "table_uuid": "00000000-0000-0000-0000-000000000000", "lease_token": 0}
            ).encode(),
        )
        with exporting(ctx, "orders") as second:
            assert second.held.lease.token == token + 1
            # the table has not moved on since the lease passed: the first export could still land
            assert clean_abandoned_attempts(second.table, second.held.lease.token, second.since) == []
            again = second.plan("orders")
            assert [s.segment_id for s in again][:2] == [two.segment_id, three.segment_id]
            mine = second.start_attempt()
            second.commit(mine, [(again[0], write_segment_files(ctx.storage, again[0], mine))])
            deleted = second.finish(mine)
        assert sorted(deleted) == sorted(uncommitted)
        keys = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix)["Contents"]}
        assert {f"{prefix}/someone-else/partition=0/x.parquet", f"{prefix}/other-table/partition=0/y.parquet"} <= keys
        assert all(f.removeprefix(f"s3://{bucket}/") in keys for f in committed)
        assert not any(f.removeprefix(f"s3://{bucket}/") in keys for f in uncommitted)
        assert set(committed) <= referenced_files(second.table)


def test_an_attempt_is_over_by_its_lease_never_by_its_process(tiering_env: TieringEnv, tmp_path: Path) -> None:
    """A marker naming this host and a process id nobody here has (another PID namespace), or
    started long ago, is not over while its lease is current; one written before export leases
    (no token) is over only after ``STALE_ATTEMPT_MS``."""
    w = build_partition(tiering_env, "orders", 0)
    with_export(tiering_env, sqlite_catalog(tmp_path))
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
        with exporting(ctx, "orders") as export:
            segment, other = export.plan("orders")[:2]
            attempt = export.start_attempt()
            files = write_segment_files(ctx.storage, segment, attempt)
            marker = Path(attempt.location.removeprefix("file://")) / MARKER
            doc = json.loads(marker.read_text())
            assert doc["lease_token"] == export.held.lease.token and doc["host"] == socket.gethostname()
            marker.write_text(json.dumps({**doc, "pid": 2**22 + 12345, "started_ms": 0}))  # no such process
            mine = export.start_attempt()
            export.commit(mine, [(other, write_segment_files(ctx.storage, other, mine))])  # the table moves on
            token = export.held.lease.token
            assert clean_abandoned_attempts(export.table, token, None) == []  # same token: not over
            assert all(Path(f.removeprefix("file://")).exists() for f in files)
            # written before export leases: no token; over once STALE_ATTEMPT_MS has passed
            marker.write_text(json.dumps({k: v for k, v in doc.items() if k != "lease_token"}))
            started = int(doc["started_ms"])
            assert clean_abandoned_attempts(export.table, token, None, now_ms=started + 1000) == []
            late = started + STALE_ATTEMPT_MS + 1000
            assert clean_abandoned_attempts(export.table, token, None, now_ms=late) == files
            assert not marker.exists() and not any(Path(f.removeprefix("file://")).exists() for f in files)
            assert os.path.exists(mine.location.removeprefix("file://"))
