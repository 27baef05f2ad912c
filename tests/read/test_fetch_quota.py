"""Reads under the fetch quota (``remote.log.manager.fetch.max.bytes.per.second``), end to end
against moto's S3 server behind a byte-counting proxy: a restore and a fetch take a token for every
byte they read from the endpoint, and wait as the cap says."""

from __future__ import annotations

import time
from pathlib import Path

from tests.conftest import S3Endpoint
from tests.storage.countproxy import CountingProxy
from tests.storage.quota_support import FETCH_KEY, MiB, quota_env, set_quotas, write_partition
from tiering_core.read.reader import open_reader
from tiering_core.read.restore import restore_partition
from tiering_core.runs.copy import run_copy

CAP = 4 * MiB


def test_a_restore_and_a_fetch_take_a_token_for_every_byte_they_read(tmp_path: Path, s3_endpoint: S3Endpoint) -> None:
    with CountingProxy.before(s3_endpoint.url) as proxy:
        env = quota_env(tmp_path, s3_endpoint.new_bucket(), proxy.url, {})
        w = write_partition(env, 8, segment_mb=3)
        with env.context() as ctx:
            assert ctx.storage.quotas.fetch is None
            run_copy(ctx, w.tp)
        set_quotas(env, {FETCH_KEY: CAP})
        read_before = proxy.downloaded.total
        with env.context() as ctx:
            bucket = ctx.storage.quotas.fetch
            assert bucket is not None and ctx.storage.quotas.copy is None
            started = time.monotonic()
            result = restore_partition(ctx, w.tp, tmp_path / "restored")
            restored = bucket.granted_bytes
            records = open_reader(ctx, w.tp).read(0, 10_000)
            granted, stats = bucket.granted_bytes, bucket.stats
            elapsed = time.monotonic() - started
        read = proxy.downloaded.total - read_before
    assert result.segments >= 2 and restored >= result.bytes > 6 * MiB  # every object restored took its bytes
    assert len(records) == 8000 and granted - restored > MiB  # the fetch read its segments' logs too
    assert read >= granted  # no token without a byte from the endpoint
    assert stats.throttles > 0
    assert elapsed >= (granted - CAP) / CAP * 0.99  # no faster than the cap allows (a lower bound only)
