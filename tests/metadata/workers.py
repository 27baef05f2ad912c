"""Processes for the lease and migration races: ``python -m tests.metadata.workers <command> ...``.

Each prints one line per event on stdout (``WON <token>``, ``LOST``, ``FENCED``, ...) so the test
can tell what happened in which process.
"""

from __future__ import annotations

import json
import random
import sys
import time
import uuid
from pathlib import Path

from tests.metadata.support import S, segment, tip
from tiering_core.metadata.errors import FencedError, LeaseHeldError
from tiering_core.metadata.migrations import current_revision
from tiering_core.metadata.store import Lease, RemoteLogMetadataStore

TIP = tip("CCCCCCCCCCCCCCCCCCCCCC", "orders", 1)


def say(*words: object) -> None:
    print(*words, flush=True)


def wait_until(instant: float) -> None:
    while time.time() < instant:
        time.sleep(0.0005)


def race(url: str, start_at: str, holder: str, run_id: str, ttl_ms: str, earlier_token: str) -> None:
    """Both racers take the lease at the same instant; the winner writes. The loser writes with
    the lease an earlier attempt of the same holder held (token ``earlier_token``, expired)."""
    with RemoteLogMetadataStore(url) as store:
        wait_until(float(start_at))
        meta = segment(TIP, 0, 99)
        try:
            lease = store.acquire_lease(TIP, holder, ttl_ms=int(ttl_ms), run_id=run_id)
        except LeaseHeldError as exc:
            say("LOST", json.dumps(str(exc)))
            current = store.current_lease(TIP)
            assert current is not None and current.holder == holder
            earlier = Lease(TIP, holder, int(earlier_token), current.expires_at_ms, run_id)
            try:
                store.add_segment(meta, earlier)
                say("WROTE")
            except FencedError as fenced:
                say("FENCED", json.dumps(str(fenced)))
            return
        say("WON", lease.token)
        store.add_segment(meta, lease)
        store.update_segment_state(meta.segment_id, S.COPY_SEGMENT_FINISHED, lease)
        say("WROTE", meta.segment_id)


def hang(url: str, holder: str, ttl_ms: str) -> None:
    """Take the lease, start a copy, and hang there until killed."""
    with RemoteLogMetadataStore(url) as store:
        lease = store.acquire_lease(TIP, holder, ttl_ms=int(ttl_ms))
        meta = segment(TIP, 0, 99)
        store.add_segment(meta, lease)
        say("STARTED", lease.token, meta.segment_id)
        time.sleep(120)


def stale(url: str, holder: str, ttl_ms: str) -> None:
    """Take the lease, pause past its expiry (a long GC pause, a stalled task: until the test
    writes a line, once another holder took the lease), then write."""
    with RemoteLogMetadataStore(url) as store:
        lease = store.acquire_lease(TIP, holder, ttl_ms=int(ttl_ms))
        say("WON", lease.token)
        sys.stdin.readline()
        meta = segment(TIP, 500, 599)
        for name, write in (
            ("add", lambda: store.add_segment(meta, lease)),
            ("renew", lambda: store.renew_lease(lease)),
            ("start-offset", lambda: store.set_remote_log_start_offset(TIP, 500, lease)),
        ):
            try:
                write()
                say("WROTE", name)
            except FencedError:
                say("FENCED", name)


def storm(url: str, holder: str, ttl_ms: str, duration_s: str, seed: str, ready_dir: str, racers: str) -> None:
    """Contend for the lease for a while, from when every racer is ready (each leaves a file in
    ``ready_dir``); sometimes stall past the lease while holding it."""
    rng = random.Random(int(seed))
    ttl = int(ttl_ms)
    counts = {"won": 0, "wrote": 0, "fenced": 0, "held": 0}
    with RemoteLogMetadataStore(url) as store:
        ready = Path(ready_dir)
        (ready / holder).touch()
        give_up = time.monotonic() + 120
        while len(list(ready.iterdir())) < int(racers):
            if time.monotonic() > give_up:
                raise TimeoutError(f"only {sorted(p.name for p in ready.iterdir())} of {racers} racers got ready")
            time.sleep(0.005)
        deadline = time.time() + float(duration_s)
        while time.time() < deadline:
            try:
                lease = store.acquire_lease(TIP, holder, ttl_ms=ttl, run_id=holder)
            except LeaseHeldError:
                counts["held"] += 1
                time.sleep(rng.uniform(0.005, 0.03))
                continue
            counts["won"] += 1
            try:
                for _ in range(rng.randint(1, 4)):
                    if rng.random() < 0.3:
                        time.sleep(ttl / 1000 * rng.uniform(1.2, 2.0))  # stall past expiry
                    start = rng.randrange(1_000_000) * 100
                    meta = segment(TIP, start, start + 99)
                    store.add_segment(meta, lease)
                    store.update_segment_state(meta.segment_id, S.COPY_SEGMENT_FINISHED, lease)
                    counts["wrote"] += 1
                store.release_lease(lease)
            except FencedError:
                counts["fenced"] += 1
    say("COUNTS", json.dumps(counts))


def open_store(url: str, start_at: str) -> None:
    """Open the store at the same instant as others: the first opener creates the schema."""
    wait_until(float(start_at))
    with RemoteLogMetadataStore(url) as store:
        store.register_partition(tip(uuid.uuid4().hex[:22], "opened", 0))
    say("REVISION", current_revision(url))


def table_lease(url: str, start_at: str) -> None:
    """Take a fresh export table's lease at the same instant as others (its row made by the race)."""
    holder = f"export:{uuid.uuid4().hex[:8]}"
    with RemoteLogMetadataStore(url) as store:
        wait_until(float(start_at))
        try:
            store.acquire_table_lease("tiering", "kafka.orders.eu", holder, ttl_ms=60_000)
        except LeaseHeldError:
            say(json.dumps({"won": False, "holder": holder}))
            return
        say(json.dumps({"won": True, "holder": holder}))


COMMANDS = {
    "race": race,
    "hang": hang,
    "stale": stale,
    "storm": storm,
    "open": open_store,
    "table_lease": table_lease,
}

if __name__ == "__main__":
    COMMANDS[sys.argv[1]](*sys.argv[2:])
