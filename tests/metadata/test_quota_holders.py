"""The holders of a broker's quotas in the store: real processes split one cap, a dead process drops
out when its entry expires, one that leaves gives its part back at once, and the throttle figures
stay for the metrics."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tests.metadata.support import ROOT
from tiering_core.metadata.quota_holders import StoreQuotaShare, close_quotas, open_quotas
from tiering_core.metadata.store import RemoteLogMetadataStore
from tiering_core.storage.quota import COPY, FETCH, QuotaConfig, ThrottleStats, TokenBucket

CAP = 1 << 30  # large: the takes below never wait, they only refresh the share
WAIT = 60.0


class QuotaProcess:
    """A real OS process drawing on broker 7's copy quota (``tests.metadata.quota_workers``)."""

    def __init__(self, url: str, ttl_ms: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.metadata.quota_workers", url, "7", str(CAP), str(ttl_ms)],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.holder = self.line("READY")[1]

    def line(self, expected: str) -> list[str]:
        assert self.proc.stdout is not None
        words = self.proc.stdout.readline().split()
        if not words or words[0] != expected:
            self.proc.kill()
            raise AssertionError(f"expected {expected}, got {words}: {self.proc.communicate()[1]}")
        return words

    def take(self) -> tuple[int, int]:
        assert self.proc.stdin is not None
        self.proc.stdin.write("take 1\n")
        self.proc.stdin.flush()
        _, holders, rate = self.line("SHARE")
        return int(holders), int(rate)

    def leave(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("leave\n")
        self.proc.stdin.flush()
        self.line("LEFT")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate(timeout=WAIT)


@pytest.fixture()
def processes(metadata_url: str) -> Iterator[list[QuotaProcess]]:
    started: list[QuotaProcess] = []
    yield started
    for p in started:
        p.stop()


def test_two_processes_split_one_cap_and_a_dead_one_drops_out(metadata_url: str, processes: list[QuotaProcess]) -> None:
    RemoteLogMetadataStore(metadata_url).close()  # the schema created once, before the processes race to it
    first = QuotaProcess(metadata_url, ttl_ms=60_000)
    processes.append(first)
    assert first.take() == (1, CAP)
    second = QuotaProcess(metadata_url, ttl_ms=1_500)
    processes.append(second)
    assert second.take() == (2, CAP // 2)
    assert first.take() == (2, CAP // 2)  # its next refresh sees the newcomer
    second.proc.kill()  # dies without leaving: its entry expires on its own
    second.stop()
    deadline = time.monotonic() + WAIT
    while (share := first.take()) != (1, CAP):
        assert share == (2, CAP // 2) and time.monotonic() < deadline, share
    first.leave()
    with RemoteLogMetadataStore(metadata_url) as store:
        assert store.quota_holders(7, COPY) == 0  # left: its part given back at once


def test_holders_are_counted_per_broker_and_kind(store: RemoteLogMetadataStore) -> None:
    none = ThrottleStats()
    assert store.heartbeat_quota(1, COPY, "a", none) == 1
    assert store.heartbeat_quota(1, COPY, "b", none) == 2
    assert store.heartbeat_quota(1, FETCH, "a", none) == 1
    assert store.heartbeat_quota(2, COPY, "a", none) == 1
    assert store.heartbeat_quota(1, COPY, "a", none) == 2  # a heartbeat renews, never adds
    store.leave_quota(1, COPY, "b", none)
    assert store.quota_holders(1, COPY) == 1


def test_throttle_figures_sum_the_holders_and_outlive_their_leaving(store: RemoteLogMetadataStore) -> None:
    store.heartbeat_quota(1, COPY, "a", ThrottleStats(300.0, 3, 150.0))
    store.heartbeat_quota(1, COPY, "b", ThrottleStats(100.0, 1, 100.0))
    store.leave_quota(1, COPY, "b", ThrottleStats(500.0, 2, 400.0))
    store.heartbeat_quota(2, FETCH, "c", ThrottleStats())
    figures = {(f.broker_id, f.kind): f.stats for f in store.throttle_figures()}
    assert figures == {(1, COPY): ThrottleStats(800.0, 5, 400.0), (2, FETCH): ThrottleStats(0.0, 0, 0.0)}
    assert figures[(1, COPY)].avg_ms == 160.0
    assert store.throttle_figures(window_ms=-60_000) == []  # none heard from a minute in the future


def test_a_store_share_and_the_process_buckets(store: RemoteLogMetadataStore) -> None:
    share = StoreQuotaShare(store, 4, FETCH, ttl_ms=60_000)
    bucket = TokenBucket(1000, share=share)
    bucket.take(1)
    assert store.quota_holders(4, FETCH) == 1
    bucket.close()
    assert store.quota_holders(4, FETCH) == 0
    quotas = open_quotas(store, 5, QuotaConfig(copy_bytes_per_second=1 << 30))
    assert quotas.fetch is None and quotas.copy is not None
    quotas.take_copy(10)
    assert store.quota_holders(5, COPY) == 1
    close_quotas(quotas)
    assert store.quota_holders(5, COPY) == 0
