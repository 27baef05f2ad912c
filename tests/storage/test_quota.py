"""The token bucket of the upload and fetch quotas, on an injected clock: the rate, the burst, one
big take in burst-sized steps, many threads never above the cap over any window, the share of the
cap among processes, and the throttle figures."""

from __future__ import annotations

import io
import logging
import random
import threading
from collections.abc import Callable

import pytest

from tiering_core.storage.quota import (
    SplitQuota,
    StorageQuotas,
    ThrottleStats,
    TokenBucket,
    capped_copies,
    release_bucket,
    shared_bucket,
    throttled,
)


class FakeClock:
    """A clock that moves only when told to (``advance``), or when a sleep moves it (``sleeps``)."""

    def __init__(self, *, sleeps: bool = True) -> None:
        self.now = 100.0
        self.slept: list[float] = []
        self._sleeps = sleeps
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.slept.append(seconds)
            if self._sleeps:
                self.now += seconds


def bucket_on(clock: FakeClock, cap: int, **kwargs: object) -> TokenBucket:
    return TokenBucket(cap, clock=clock, sleep=clock.sleep, **kwargs)  # type: ignore[arg-type]


def test_takes_are_granted_at_the_rate() -> None:
    clock = FakeClock()
    bucket = bucket_on(clock, 1000)
    start = clock()
    for _ in range(20):
        bucket.take(250)
    assert clock() - start == pytest.approx(5.0)  # 5,000 bytes at 1,000 per second, from an empty bucket
    assert bucket.granted_bytes == 5000


def test_an_idle_bucket_holds_one_second_of_the_rate_and_no_more() -> None:
    clock = FakeClock()
    bucket = bucket_on(clock, 1000)
    clock.advance(60)  # a minute idle earns one second's worth, not sixty
    assert bucket.take(1000) == 0.0
    assert bucket.take(500) == pytest.approx(0.5)


def test_a_take_larger_than_the_burst_is_granted_in_burst_sized_steps() -> None:
    clock = FakeClock()
    bucket = bucket_on(clock, 1000)
    assert bucket.take(4500) == pytest.approx(4.5)
    assert clock.slept == pytest.approx([1.0, 1.0, 1.0, 1.0, 0.5])  # no single step beyond the burst


def test_many_threads_never_exceed_the_cap_over_any_window() -> None:
    """16 threads take chunks of random sizes in rounds on a frozen clock (the clock moves a random
    step between rounds): each grant's instant is its round's clock plus the wait the bucket gave
    it. Over every window between two grants, the bytes granted stay within the rate times the
    window plus one burst."""
    clock = FakeClock(sleeps=False)
    cap = 10_000
    bucket = bucket_on(clock, cap)
    rng = random.Random(7)
    grants: list[tuple[float, int]] = []
    lock = threading.Lock()
    for _ in range(30):
        now = clock()
        sizes = [rng.randint(1, cap) for _ in range(16)]
        barrier = threading.Barrier(16)

        def worker(size: int, now: float = now, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            waited = bucket.take(size)
            with lock:
                grants.append((now + waited, size))

        threads = [threading.Thread(target=worker, args=(size,)) for size in sizes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        clock.advance(rng.uniform(0, 20))
    grants.sort()
    assert sum(size for _, size in grants) == bucket.granted_bytes
    worst = 0.0
    for i, (a, _) in enumerate(grants):
        total = 0
        for b, size in grants[i:]:
            total += size
            worst = max(worst, total - (cap * (b - a) + cap))
    assert worst <= 1e-6, f"granted {worst:.0f} bytes beyond the rate plus one burst"


class FakeShare:
    def __init__(self, holders: Callable[[], int]) -> None:
        self.holders = holders
        self.refreshes: list[ThrottleStats] = []
        self.left: list[ThrottleStats] = []

    def refresh(self, stats: ThrottleStats) -> int:
        self.refreshes.append(stats)
        return self.holders()

    def leave(self, stats: ThrottleStats) -> None:
        self.left.append(stats)


def test_the_cap_is_split_among_the_live_holders_re_read_when_due() -> None:
    clock = FakeClock()
    holders = [2]
    share = FakeShare(lambda: holders[0])
    bucket = bucket_on(clock, 1000, share=share, refresh_seconds=5.0)
    assert bucket.take(500) == pytest.approx(1.0)  # the first take learns the share: 500 per second
    assert len(share.refreshes) == 1 and bucket.rate == 500
    holders[0] = 1
    bucket.take(100)  # not due yet
    assert bucket.rate == 500 and len(share.refreshes) == 1
    clock.advance(5)
    bucket.take(100)
    assert bucket.rate == 1000 and len(share.refreshes) == 2
    bucket.close()
    assert share.left == [bucket.stats]


def test_a_process_handing_its_bytes_to_workers_splits_its_share_among_them_and_stays_a_holder() -> None:
    """A Spark driver sends nothing itself: asking the split heartbeats its holder entry when due
    (no take needed), and each of its slots gets the share over the slots."""
    clock = FakeClock()
    holders = [2]
    share = FakeShare(lambda: holders[0])
    split = SplitQuota(bucket_on(clock, 1200, share=share, refresh_seconds=5.0), 3)
    assert split.rate() == 200 and len(share.refreshes) == 1  # 1200 over 2 holders, over 3 slots
    holders[0] = 1
    assert split.rate() == 200 and len(share.refreshes) == 1  # not due yet
    clock.advance(5)
    assert split.rate() == 400 and len(share.refreshes) == 2
    assert SplitQuota(None, 3).rate() is None  # uncapped


def test_a_worker_s_uploads_go_through_a_bucket_of_its_own_rate_for_the_block_only() -> None:
    class Storage:
        quotas = StorageQuotas(fetch=TokenBucket(10))

    storage = Storage()
    before = storage.quotas
    with capped_copies(storage, 250.7):
        copy = storage.quotas.copy
        assert copy is not None and copy.rate == 250 and storage.quotas.fetch is before.fetch
    assert storage.quotas is before
    with capped_copies(storage, None):
        assert storage.quotas is before
    with pytest.raises(RuntimeError), capped_copies(storage, 100):
        raise RuntimeError("the upload failed")
    assert storage.quotas is before


def test_a_failing_share_keeps_the_last_known_share_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    answers = iter([4])

    def holders() -> int:
        try:
            return next(answers)
        except StopIteration:
            raise RuntimeError("metadata store unreachable") from None

    bucket = bucket_on(clock, 1000, share=FakeShare(holders), refresh_seconds=1.0)
    bucket.take(1)
    assert bucket.rate == 250
    clock.advance(2)
    with caplog.at_level(logging.WARNING, logger="tiering_core.storage.quota"):
        bucket.take(1)
    assert bucket.rate == 250  # never back to the whole cap because the store is down
    assert "metadata store unreachable" in caplog.text


def test_throttle_figures_count_the_takes_that_waited() -> None:
    clock = FakeClock()
    bucket = bucket_on(clock, 1000)
    clock.advance(1)
    bucket.take(1000)  # from the burst: no wait
    bucket.take(200)
    bucket.take(600)
    stats = bucket.stats
    assert stats.throttles == 2
    assert stats.throttle_ms == pytest.approx(800.0)
    assert stats.throttle_ms_max == pytest.approx(600.0)
    assert stats.avg_ms == pytest.approx(400.0)


def test_stream_reads_take_fetch_tokens_as_bytes_come_in() -> None:
    clock = FakeClock()
    bucket = bucket_on(clock, 1 << 20)
    data = bytes(range(256)) * 12_000
    with throttled(io.BytesIO(data), bucket) as stream:  # type: ignore[arg-type]
        assert stream.read() == data
    assert bucket.granted_bytes == len(data)
    assert sum(clock.slept) == pytest.approx(len(data) / (1 << 20))
    unthrottled = io.BytesIO(b"x")
    assert throttled(unthrottled, None) is unthrottled  # type: ignore[arg-type]
    quotas = StorageQuotas()
    quotas.take_copy(10)
    quotas.take_fetch(10)  # unlimited: nothing to take from


def test_one_bucket_per_scope_broker_and_kind_in_a_process() -> None:
    shares: list[FakeShare] = []

    def share() -> FakeShare:
        shares.append(FakeShare(lambda: 1))
        return shares[-1]

    first = shared_bucket("test-scope", 3, "copy", 1000, share)
    second = shared_bucket("test-scope", 3, "copy", 2000, share)
    other = shared_bucket("test-scope", 3, "fetch", 1000, share)
    assert first is second and first is not other and len(shares) == 2
    assert first.rate == 2000  # the cap as configured last
    first.take(1)
    release_bucket(first)
    assert shares[0].left == []  # one user left
    release_bucket(second)
    assert len(shares[0].left) == 1  # the last user leaves the share
    again = shared_bucket("test-scope", 3, "copy", 1000, share)
    assert again is not first
    release_bucket(again)
    release_bucket(other)
