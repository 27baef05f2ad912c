"""Upload and fetch quotas of a broker host (KIP-956): a token bucket per (broker, copy or fetch),
shared by every thread of a process and split among the processes of the same broker.

``remote.log.manager.copy.max.bytes.per.second`` caps the bytes a broker's copies send to the
remote tier, ``remote.log.manager.fetch.max.bytes.per.second`` the bytes its fetches, restores and
exports read from it (docs/operations.md, "Upload and fetch quotas"). A thread takes tokens before
its bytes go out (an upload) or as they come in (a read); a chunk larger than the bucket's burst
(one second of the rate) is taken in burst-sized steps, so one big object never blows through
the cap. Taking is a reservation: the balance may go negative and the thread sleeps until its
reservation is paid off, so threads are served in the order they asked and the bytes granted over
any window never exceed the burst plus the rate times the window.

Processes of one broker share its cap through a ``QuotaShare`` (the metadata store's table of
holders, ``metadata.quota_holders``): each process's rate is the cap divided by the live holders,
re-read every ``refresh_seconds``; a process that died drops out when its entry expires.
"""

from __future__ import annotations

import io
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, BinaryIO, Protocol

log = logging.getLogger(__name__)

#: Kafka's config names (KIP-956); Kafka's default is unlimited.
COPY_QUOTA_KEY = "remote.log.manager.copy.max.bytes.per.second"
FETCH_QUOTA_KEY = "remote.log.manager.fetch.max.bytes.per.second"
#: The two kinds of quota a broker has.
COPY = "copy"
FETCH = "fetch"
#: Seconds of the rate the bucket may hold: the largest burst after an idle spell.
BURST_SECONDS = 1.0
#: How often a process heartbeats its holder entry and re-reads how many share the cap.
REFRESH_SECONDS = 2.0
#: Stream reads taken from the fetch quota at a time.
READ_CHUNK = 1 << 20


@dataclass(frozen=True)
class QuotaConfig:
    """A broker's caps in bytes per second (None: unlimited, Kafka's default)."""

    copy_bytes_per_second: int | None = None
    fetch_bytes_per_second: int | None = None

    def cap(self, kind: str) -> int | None:
        return self.copy_bytes_per_second if kind == COPY else self.fetch_bytes_per_second


@dataclass(frozen=True)
class ThrottleStats:
    """How long takes of one bucket waited: the total and the longest (ms), and how many waited
    (Kafka's ``remote-copy-throttle-time-avg`` is ``throttle_ms / throttles``)."""

    throttle_ms: float = 0.0
    throttles: int = 0
    throttle_ms_max: float = 0.0

    @property
    def avg_ms(self) -> float | None:
        return self.throttle_ms / self.throttles if self.throttles else None


class QuotaShare(Protocol):
    """Where a process learns how many processes of its broker draw on the same cap."""

    def refresh(self, stats: ThrottleStats) -> int:
        """Heartbeat this process's entry (with its throttle figures); the live holders, >= 1."""
        ...

    def leave(self, stats: ThrottleStats) -> None:
        """This process no longer draws on the cap (its figures stay for the metrics)."""
        ...


class TokenBucket:
    """A token bucket of ``cap`` bytes per second shared by every thread of a process (module
    docstring). ``clock`` and ``sleep`` are injectable; so is the ``share`` of the cap."""

    def __init__(
        self,
        cap: int,
        *,
        share: QuotaShare | None = None,
        burst_seconds: float = BURST_SECONDS,
        refresh_seconds: float = REFRESH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if cap <= 0:
            raise ValueError(f"a quota must be positive: {cap}")
        self._clock = clock
        self._sleep = sleep
        self._share = share
        self._burst_seconds = burst_seconds
        self._refresh_seconds = refresh_seconds
        self._lock = threading.Lock()
        self._refresh_lock = threading.Lock()
        self._refreshed = False
        self._next_refresh = float("-inf")
        self._cap = float(cap)
        self._holders = 1
        self._tokens = 0.0
        self._last = clock()
        self._stats = ThrottleStats()
        self.granted_bytes = 0

    @property
    def rate(self) -> float:
        """This process's share of the cap, bytes per second."""
        return self._cap / self._holders

    @property
    def burst(self) -> float:
        return max(1.0, self.rate * self._burst_seconds)

    @property
    def holders(self) -> int:
        return self._holders

    @property
    def stats(self) -> ThrottleStats:
        with self._lock:
            return self._stats

    def current_rate(self) -> float:
        """This process's share of the cap now, its holder entry heartbeated when due: a process
        whose bytes others send (a Spark driver, whose tasks upload) stays a holder of the cap
        while it hands the work out, and splits its share among them."""
        self._maybe_refresh()
        return self.rate

    def set_cap(self, cap: int) -> None:
        with self._lock:
            self._refill(self._clock())
            self._cap = float(cap)

    def take(self, n: int) -> float:
        """Take ``n`` tokens, sleeping until they are granted; the seconds slept."""
        waited = 0.0
        while n > 0:
            self._maybe_refresh()
            with self._lock:
                now = self._clock()
                self._refill(now)
                step = min(n, max(1, int(self.burst)))
                self._tokens -= step
                self.granted_bytes += step
                wait = -self._tokens / self.rate if self._tokens < 0 else 0.0
            if wait > 0:
                self._sleep(wait)
                waited += wait
            n -= step
        if waited > 0:
            with self._lock:
                s, ms = self._stats, waited * 1000
                self._stats = ThrottleStats(s.throttle_ms + ms, s.throttles + 1, max(s.throttle_ms_max, ms))
        return waited

    def _refill(self, now: float) -> None:
        """Add what the rate earned since the last refill (repaying reservations first), up to the burst."""
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
        self._last = now

    def _maybe_refresh(self) -> None:
        """Heartbeat and re-read the holders when due: by one thread, the others go on at the
        current rate (the first time every thread waits for it: a new process learns its share
        before it sends anything). A failed refresh keeps the current share and is logged."""
        if self._share is None or self._clock() < self._next_refresh:
            return
        if not self._refresh_lock.acquire(blocking=not self._refreshed):
            return
        try:
            now = self._clock()
            if now < self._next_refresh:
                return
            try:
                holders = max(1, int(self._share.refresh(self.stats)))
            except Exception as exc:  # the cap still holds at the last known share
                log.warning(
                    "quota: cannot refresh the holders of the cap, keeping a share of 1/%d: %s", self._holders, exc
                )
            else:
                with self._lock:
                    self._refill(now)
                    self._holders = holders
            self._refreshed = True
            self._next_refresh = now + self._refresh_seconds
        finally:
            self._refresh_lock.release()

    def close(self) -> None:
        """Leave the share (a process that stops drawing on the cap gives its part back at once)."""
        if self._share is None or not self._refreshed:
            return
        try:
            self._share.leave(self.stats)
        except Exception as exc:  # its entry expires on its own
            log.warning("quota: cannot leave the holders of the cap: %s", exc)


@dataclass
class StorageQuotas:
    """The buckets a remote storage takes from: ``copy`` for segment uploads, ``fetch`` for reads
    (None: unlimited)."""

    copy: TokenBucket | None = None
    fetch: TokenBucket | None = None

    def take_copy(self, n: int) -> None:
        if self.copy is not None and n > 0:
            self.copy.take(n)

    def take_fetch(self, n: int) -> None:
        if self.fetch is not None and n > 0:
            self.fetch.take(n)


class SplitQuota:
    """A process's share of a cap, split evenly among the ``slots`` workers it hands the bytes to
    (a Spark driver's tasks, each uploading in a Python worker of its own): the process stays one
    holder of the cap (``TokenBucket.current_rate``, heartbeated as long as ``rate`` is asked),
    and each worker sends through a bucket of ``rate()``, read as its work is handed out
    (``capped_copies``). At most ``slots`` run at once, so together they send no more than the
    process's share; a share that shrinks meanwhile binds from the next piece of work on."""

    def __init__(self, bucket: TokenBucket | None, slots: int) -> None:
        self.bucket = bucket
        self.slots = max(1, slots)

    def rate(self) -> float | None:
        """Each worker's bytes per second now (None: uncapped)."""
        return None if self.bucket is None else self.bucket.current_rate() / self.slots


@contextmanager
def capped_copies(holder: Any, bytes_per_second: float | None) -> Iterator[None]:
    """``holder``'s (a storage's) uploads through a bucket of ``bytes_per_second`` of its own while
    the block runs (None: as they are), its quotas put back after."""
    if bytes_per_second is None:
        yield
        return
    before: StorageQuotas = holder.quotas
    holder.quotas = StorageQuotas(copy=TokenBucket(max(1, int(bytes_per_second))), fetch=before.fetch)
    try:
        yield
    finally:
        holder.quotas = before


class ThrottledReader(io.RawIOBase):
    """A stream whose reads take fetch tokens as their bytes come in."""

    def __init__(self, inner: BinaryIO, take: Callable[[int], Any]) -> None:
        self._inner = inner
        self._take = take

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = int(self._inner.readinto(buffer))  # type: ignore[attr-defined]
        if n > 0:
            self._take(n)
        return n

    def close(self) -> None:
        if not self.closed:
            self._inner.close()
        super().close()


def throttled(stream: BinaryIO, bucket: TokenBucket | None) -> BinaryIO:
    """``stream``, its reads taken from ``bucket`` (unchanged without one)."""
    if bucket is None:
        return stream
    return io.BufferedReader(ThrottledReader(stream, bucket.take), READ_CHUNK)  # type: ignore[return-value]


#: The process's buckets, by (scope, broker, kind), with how many users hold each.
_buckets: dict[tuple[str, int, str], tuple[TokenBucket, int]] = {}
_buckets_lock = threading.Lock()


def shared_bucket(
    scope: str, broker_id: int, kind: str, cap: int, share: Callable[[], QuotaShare | None]
) -> TokenBucket:
    """The process's one bucket of ``broker_id``'s ``kind`` quota within ``scope`` (the metadata
    store the processes share): made with ``share()`` on first use, shared after; ``release``
    it when done."""
    key = (scope, broker_id, kind)
    with _buckets_lock:
        found = _buckets.get(key)
        if found is None:
            bucket = TokenBucket(cap, share=share())
        else:
            bucket = found[0]
            bucket.set_cap(cap)
        _buckets[key] = (bucket, (found[1] if found else 0) + 1)
        return bucket


def release_bucket(bucket: TokenBucket) -> None:
    """One user of a shared bucket is done; the last one closes it (leaving the share)."""
    with _buckets_lock:
        for key, (known, users) in list(_buckets.items()):
            if known is bucket:
                if users > 1:
                    _buckets[key] = (known, users - 1)
                    return
                del _buckets[key]
                break
        else:
            return
    bucket.close()
