"""Copies under the upload quota (``remote.log.manager.copy.max.bytes.per.second``), end to end
against moto's S3 server behind a byte-counting proxy: every byte the endpoint receives took a
token first, and the bytes it receives never outrun the cap (an upper bound: a busy machine only
makes them slower)."""

from __future__ import annotations

import time
from pathlib import Path

from tests.conftest import S3Endpoint
from tests.engine_support import TieringEnv, tip_of
from tests.storage.countproxy import CountingProxy
from tests.storage.quota_support import COPY_KEY, MiB, quota_env, set_quotas, write_partition
from tiering_core.runs.copy import run_copy

CAP = 4 * MiB


def test_a_copy_takes_a_token_for_every_byte_the_endpoint_receives(tmp_path: Path, s3_endpoint: S3Endpoint) -> None:
    with CountingProxy.before(s3_endpoint.url) as proxy:
        env = quota_env(tmp_path, s3_endpoint.new_bucket(), proxy.url, {COPY_KEY: CAP})
        w = write_partition(env, 14, segment_mb=6)  # two segments in two parts each, one in one
        with env.context() as ctx:
            bucket = ctx.storage.quotas.copy
            assert bucket is not None and ctx.storage.quotas.fetch is None
            started = time.monotonic()
            result = run_copy(ctx, w.tp)
            elapsed = time.monotonic() - started
            segments = ctx.metadata.list_segments(tip_of(w))
            granted, stats = bucket.granted_bytes, bucket.stats
    assert result.segments_copied == len(segments) >= 2
    assert granted >= sum(s.size_bytes for s in segments)  # every object of every segment
    received = proxy.uploaded.total
    assert received == granted  # PutObject and UploadPart bodies: each byte took one token
    span = proxy.uploaded.span()
    assert span is not None
    burst = CAP  # one second of the rate
    assert received <= CAP * (span[1] - span[0]) + burst + MiB, (received, span)
    assert stats.throttles > 0  # the bucket starts empty: the first bytes waited, and the rest
    assert elapsed >= (granted - burst) / CAP * 0.99  # no faster than the cap allows (a lower bound only)


def test_a_copy_to_the_filesystem_takes_tokens_too(fs_env: TieringEnv) -> None:
    # Each segment's objects outweigh the one-second burst: the copy waits however long the
    # bucket filled before it started (on a busy machine, a while).
    set_quotas(fs_env, {COPY_KEY: 1 * MiB})
    w = write_partition(fs_env, 3, segment_mb=1)
    with fs_env.context() as ctx:
        bucket = ctx.storage.quotas.copy
        assert bucket is not None
        run_copy(ctx, w.tp)
        segments = ctx.metadata.list_segments(tip_of(w))
        granted = bucket.granted_bytes
    assert granted >= sum(s.size_bytes for s in segments) > 2 * MiB
    assert bucket.stats.throttles > 0
