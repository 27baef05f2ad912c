"""Leases and fencing on SQLite and PostgreSQL: in one process, and across real OS processes that
race, stall past their lease, and get SIGKILLed."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, create_engine, text

from tests.engine_support import expire_lease, wait_until
from tests.metadata.support import finish, segment, start_in, tip, worker
from tiering_core.kafka.epoch import EpochEntry
from tiering_core.kafka.topic import TopicIdPartition
from tiering_core.metadata.errors import FencedError, LeaseHeldError
from tiering_core.metadata.states import RemoteLogSegmentState, RemotePartitionDeleteState
from tiering_core.metadata.store import Lease, RemoteLogMetadataStore

S = RemoteLogSegmentState
TIP = tip("CCCCCCCCCCCCCCCCCCCCCC", "orders", 1)  # the partition the workers contend for


def snapshot(store: RemoteLogMetadataStore) -> tuple[Any, ...]:
    """Everything a write could change."""
    record = store.get_partition(TIP)
    return (
        record.delete_state if record else None,
        record.remote_log_start_offset if record else None,
        store.list_segments(TIP, include_deleted=True),
        store.highest_offset_for_epoch(TIP, 0),
        store.get_recorded_lineage(TIP),
        store.get_delete_records_offset(TIP),
        store.list_gaps(TIP),
        store.state_history(TIP),
    )


WRITES: dict[str, Callable[[RemoteLogMetadataStore, Lease, uuid.UUID], object]] = {
    "add_segment": lambda st, lease, _: st.add_segment(segment(TIP, 100, 199), lease),
    "finish": lambda st, lease, sid: st.update_segment_state(sid, S.COPY_SEGMENT_FINISHED, lease),
    "delete": lambda st, lease, sid: st.update_segment_state(sid, S.DELETE_SEGMENT_STARTED, lease),
    "finish_copied": lambda st, lease, sid: st.finish_copied_segment(
        sid, lease, custom_metadata={"x": 1}, lineage=[EpochEntry(0, 0)]
    ),
    "mark_partition": lambda st, lease, _: st.mark_partition_for_deletion(TIP, lease),
    "delete_state": lambda st, lease, _: st.update_partition_delete_state(
        TIP, RemotePartitionDeleteState.DELETE_PARTITION_MARKED, lease
    ),
    "remote_log_start": lambda st, lease, _: st.set_remote_log_start_offset(TIP, 99, lease),
    "lineage": lambda st, lease, _: st.record_lineage(TIP, [EpochEntry(0, 0), EpochEntry(1, 5)], lease),
    "delete_records": lambda st, lease, _: st.record_delete_records(TIP, 7, lease),
    "gap": lambda st, lease, _: st.record_gap(TIP, 1, 2, lease),
    "renew": lambda st, lease, _: st.renew_lease(lease),
}


def wait_until_expired(store: RemoteLogMetadataStore, tp: TopicIdPartition) -> None:
    """Poll (on the store's clock) until the partition's lease has expired."""
    wait_until(lambda: not store.is_lease_active(tp), what=f"the lease of {tp} to expire")


@pytest.mark.parametrize("how", ["superseded", "expired", "released", "other-holder"])
def test_a_stale_lease_writes_nothing(metadata_url: str, how: str) -> None:
    with RemoteLogMetadataStore(metadata_url) as store:
        first = store.acquire_lease(TIP, "first", ttl_ms=60_000)
        meta = segment(TIP, 0, 99)
        store.add_segment(meta, first)
        if how == "superseded":
            store.release_lease(first)
            store.acquire_lease(TIP, "second")
        elif how == "expired":
            expire_lease(store, TIP)
        elif how == "released":
            store.release_lease(first)
        stale = first if how != "other-holder" else Lease(TIP, "impostor", first.token, first.expires_at_ms)
        before = snapshot(store)
        for name, write in sorted(WRITES.items()):
            with pytest.raises(FencedError) as err:
                write(store, stale, meta.segment_id)
            assert str(TIP) in str(err.value), name
            assert snapshot(store) == before, name


def test_tokens_only_grow_and_a_held_lease_names_its_holder(store) -> None:
    tokens = []
    for i in range(4):
        lease = store.acquire_lease(TIP, f"run-{i}", ttl_ms=60_000)
        tokens.append(lease.token)
        with pytest.raises(LeaseHeldError) as err:
            store.acquire_lease(TIP, "other")
        assert f"run-{i}" in str(err.value) and str(lease.expires_at_ms) in str(err.value)
        with pytest.raises(LeaseHeldError):
            store.acquire_lease(TIP, f"run-{i}")  # the same holder name does not take it twice
        store.release_lease(lease)
    assert tokens == sorted(set(tokens)) and tokens[0] >= 1
    record = store.get_partition(TIP)
    assert record.fencing_token == tokens[-1] and record.lease_holder is None


def test_renew_extends_and_current_lease_tells_whether_a_run_is_live(store) -> None:
    assert store.current_lease(TIP) is None and not store.is_lease_active(TIP)
    probe_tip = tip("PPPPPPPPPPPPPPPPPPPPPP", "orders", 9)
    lease = store.acquire_lease(TIP, "copier", ttl_ms=3_000, run_id="r1")  # renewed below well before it ends
    probe = store.acquire_lease(probe_tip, "probe", ttl_ms=3_000)  # expires no earlier than ``lease``
    current = store.current_lease(TIP)
    assert current is not None and (current.holder, current.token) == ("copier", lease.token)
    renewed = store.renew_lease(lease, ttl_ms=120_000)
    assert renewed.token == lease.token and renewed.expires_at_ms > lease.expires_at_ms
    wait_until_expired(store, probe_tip)  # past the first expiry, well within the renewed one
    assert probe.expires_at_ms >= lease.expires_at_ms
    store.add_segment(segment(TIP, 0, 9), renewed)
    assert store.is_lease_active(TIP)
    short = store.renew_lease(renewed, ttl_ms=300)
    wait_until_expired(store, TIP)
    assert store.current_lease(TIP) is None
    with pytest.raises(FencedError, match="expired"):
        store.renew_lease(short)
    with pytest.raises(FencedError):
        store.release_lease(Lease(TIP, "never-held", 0, 0))


def test_releasing_at_the_end_of_a_run_gives_up_only_a_current_lease(store) -> None:
    old = store.acquire_lease(TIP, "copier", ttl_ms=300)
    wait_until_expired(store, TIP)
    newer = store.acquire_lease(TIP, "retention", ttl_ms=60_000)
    assert store.release_lease_if_current(old) is False  # superseded: the newer run keeps it
    current = store.current_lease(TIP)
    assert current is not None and (current.holder, current.token) == ("retention", newer.token)
    assert store.release_lease_if_current(newer) is True
    assert store.current_lease(TIP) is None and store.get_partition(TIP).lease_holder is None


# --- real processes -------------------------------------------------------------------------


def test_two_processes_race_exactly_one_wins_and_the_loser_is_fenced(metadata_url: str) -> None:
    """Two attempts of the same copier (same holder name) race for the lease. Both come back with
    the lease an earlier attempt held, which expired: the loser's write with that real, older
    token must be refused by the token check alone (holder name and expiry would let it pass)."""
    with RemoteLogMetadataStore(metadata_url) as store:  # also creates the schema before the race
        earlier = store.acquire_lease(TIP, "copier", ttl_ms=1_000, run_id="attempt-0")
        wait_until_expired(store, TIP)
    start_at = start_in(2.0)
    procs = [
        worker("race", metadata_url, start_at, "copier", f"attempt-{i}", "60000", str(earlier.token)) for i in (1, 2)
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outputs]
    lines = sorted((out.splitlines() for out, _ in outputs), key=lambda ls: ls[0])
    lost, won = lines
    assert won[0].startswith("WON") and won[1].startswith("WROTE")
    winner_token = int(won[0].split()[1])
    assert winner_token > earlier.token
    assert lost[0].startswith("LOST") and "copier" in json.loads(lost[0].split(" ", 1)[1])
    assert lost[1].startswith("FENCED")
    refusal = json.loads(lost[1].split(" ", 1)[1])
    assert f"lease token {earlier.token} of copier is fenced (current token {winner_token}" in refusal
    with RemoteLogMetadataStore(metadata_url) as store:
        (only,) = store.list_segments(TIP)
        assert str(only.segment_id) == won[1].split()[1] and only.state == S.COPY_SEGMENT_FINISHED
        assert only.writer_token == winner_token
        assert {h.token for h in store.state_history(TIP)} == {winner_token}
        with pytest.raises(LeaseHeldError, match="copier"):
            store.acquire_lease(TIP, "latecomer")


def test_a_sigkilled_holder_expires_its_copy_is_cleaned_and_it_stays_fenced(metadata_url: str) -> None:
    RemoteLogMetadataStore(metadata_url).close()
    proc = worker("hang", metadata_url, "doomed", "600000")  # outlives the kill, the open and the checks below
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    assert line[0] == "STARTED", proc.stderr.read() if proc.stderr else ""
    stale_token, started_id = int(line[1]), uuid.UUID(line[2])
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=10) == -signal.SIGKILL
    with RemoteLogMetadataStore(metadata_url) as store:
        assert store.is_lease_active(TIP)  # the dead process's lease still runs
        with pytest.raises(LeaseHeldError, match="doomed"):
            store.acquire_lease(TIP, "too-early")
        expire_lease(store, TIP)  # as its time to live runs out
        successor = store.acquire_lease(TIP, "successor")
        assert successor.token > stale_token
        # The dead run's COPY_SEGMENT_STARTED has no live lease behind it: the successor cleans it.
        (dangling,) = store.list_segments(TIP)
        assert dangling.segment_id == started_id and dangling.writer_token == stale_token
        store.update_segment_state(started_id, S.DELETE_SEGMENT_STARTED, successor)
        store.update_segment_state(started_id, S.DELETE_SEGMENT_FINISHED, successor)
        stale = Lease(TIP, "doomed", stale_token, successor.expires_at_ms)
        meta = segment(TIP, 0, 99)
        with pytest.raises(FencedError, match="fenced"):
            store.add_segment(meta, stale)
        assert store.list_segments(TIP) == []
        finish(store, successor, meta)
        assert store.get_segment(meta.segment_id).writer_token == successor.token


def test_a_process_stalled_past_its_lease_is_fenced_when_it_wakes(metadata_url: str) -> None:
    RemoteLogMetadataStore(metadata_url).close()
    proc = worker("stale", metadata_url, "stalled", "500")
    assert proc.stdout is not None
    first = proc.stdout.readline().split()
    assert first[0] == "WON", proc.stderr.read() if proc.stderr else ""
    with RemoteLogMetadataStore(metadata_url) as store:
        taker: list[Lease] = []

        def taken() -> bool:  # once the stalled holder's lease has lapsed
            try:
                taker.append(store.acquire_lease(TIP, "taker"))
            except LeaseHeldError:
                return False
            return True

        wait_until(taken, what="the stalled holder's lease to lapse")
        out, err = proc.communicate("wake up\n", timeout=60)
        assert proc.returncode == 0, err
        assert out.split("\n")[:3] == ["FENCED add", "FENCED renew", "FENCED start-offset"]
        assert taker[0].token > int(first[1])
        assert store.list_segments(TIP) == [] and store.get_remote_log_start_offset(TIP) is None
        assert store.current_lease(TIP).holder == "taker"


def test_contending_processes_never_interleave_tokens(metadata_url: str, tmp_path: Path) -> None:
    """Three processes fight for one lease for a few seconds (from when all three are ready),
    sometimes stalling past it. In commit order, the tokens of landed writes never go down: no
    stale holder ever wrote after a newer one."""
    RemoteLogMetadataStore(metadata_url).close()
    ready = tmp_path / "ready"
    ready.mkdir()
    procs = [worker("storm", metadata_url, f"storm-{i}", "150", "2", str(i), str(ready), "3") for i in range(3)]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [err for _, err in outputs]
    counts = [json.loads(out.split(" ", 1)[1]) for out, _ in outputs]
    assert sum(c["fenced"] for c in counts) >= 1
    assert sum(c["held"] for c in counts) >= 1
    with RemoteLogMetadataStore(metadata_url) as store:
        history = store.state_history(TIP)
        tokens = [h.token for h in history]
        assert tokens == sorted(tokens)
        assert len(set(tokens)) >= 2
        finished = [h for h in history if h.to_state == S.COPY_SEGMENT_FINISHED.value]
        assert len(finished) == sum(c["wrote"] for c in counts)
        assert {h.run_id for h in history} <= {f"storm-{i}" for i in range(3)}
        for meta in store.list_segments(TIP):  # each segment was finished by the run that started it
            steps = store.state_history(meta.segment_id)
            assert len({h.token for h in steps}) == 1


# --- PostgreSQL: the row lock, the clock and the write ------------------------------------------


def _db_now_ms(conn: Connection) -> int:
    return int(conn.execute(text("SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)")).scalar_one())


def _wait_for_lock_waiter(engine: Engine, done: threading.Event) -> None:
    """Until some session of this database waits for a row lock (or ``done`` is set)."""
    deadline = time.monotonic() + 30
    with engine.connect() as conn:
        while not done.is_set():
            waiting = conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
            ).scalar_one()
            conn.rollback()
            if waiting:
                return
            assert time.monotonic() < deadline, "the write never waited for the partition row lock"
            time.sleep(0.01)


class _Call(threading.Thread):
    """Runs ``fn`` after a barrier; keeps its result or exception."""

    def __init__(self, fn: Callable[[], object], barrier: threading.Barrier) -> None:
        super().__init__(daemon=True)
        self.fn, self.barrier = fn, barrier
        self.result: object = None
        self.error: BaseException | None = None
        self.done = threading.Event()

    def run(self) -> None:
        self.barrier.wait(timeout=30)
        try:
            self.result = self.fn()
        except BaseException as exc:  # handed to the test thread
            self.error = exc
        finally:
            self.done.set()


def test_postgres_a_lease_that_expires_while_waiting_for_the_row_lock_is_fenced(pg_url: str) -> None:
    """The clock is read once the partition row is locked: a write queued behind another transaction
    while its lease ran out is rejected, and a renewal's expiry counts from when it got the lock."""
    with RemoteLogMetadataStore(pg_url) as store:
        lease = store.acquire_lease(TIP, "slow", ttl_ms=600_000)
        renewer_tip = tip("RRRRRRRRRRRRRRRRRRRRRR", "orders", 2)
        long_lease = store.acquire_lease(renewer_tip, "renewer", ttl_ms=600_000)
        meta = segment(TIP, 0, 99)
        engine = create_engine(pg_url)
        try:
            # 1. A write waits for the row lock while its lease is valid; the lease expires meanwhile.
            barrier = threading.Barrier(2)
            call = _Call(lambda: store.add_segment(meta, lease), barrier)
            with engine.connect() as holder:
                lease = store.renew_lease(lease, ttl_ms=3_000)  # from now on: it runs out while the write waits
                holder.begin()
                holder.execute(text("SELECT id FROM tiering_partitions FOR UPDATE"))
                call.start()
                barrier.wait(timeout=30)
                _wait_for_lock_waiter(engine, call.done)
                assert not call.done.is_set(), call.error
                assert _db_now_ms(holder) < lease.expires_at_ms, "the write must start waiting before the expiry"
                while _db_now_ms(holder) <= lease.expires_at_ms:
                    time.sleep(0.05)
                holder.commit()
            call.join(timeout=30)
            assert isinstance(call.error, FencedError) and "expired" in str(call.error), call.error
            assert store.list_segments(TIP, include_deleted=True) == []

            # 2. A renewal that waited for the lock gets its full time to live from when it got it.
            barrier = threading.Barrier(2)
            call = _Call(lambda: store.renew_lease(long_lease, ttl_ms=2_000), barrier)
            with engine.connect() as holder:
                holder.begin()
                holder.execute(text("SELECT id FROM tiering_partitions FOR UPDATE"))
                call.start()
                barrier.wait(timeout=30)
                _wait_for_lock_waiter(engine, call.done)
                time.sleep(1.0)  # the renewal waits at least this long
                released_at = _db_now_ms(holder)
                holder.commit()
            call.join(timeout=30)
            assert call.error is None, call.error
            assert isinstance(call.result, Lease)
            assert call.result.expires_at_ms >= released_at + 2_000
        finally:
            engine.dispose()


def test_postgres_token_check_and_write_are_one_step(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer paused between its fencing check and its write holds the partition row: a newer
    lease cannot be taken until the write committed, so no write lands after a newer token exists."""
    with RemoteLogMetadataStore(pg_url) as store_a, RemoteLogMetadataStore(pg_url) as store_b:
        # Long enough for its check on a busy machine; it runs out inside the write, below.
        lease_a = store_a.acquire_lease(TIP, "a", ttl_ms=3_000)
        checked, go = threading.Event(), threading.Event()
        fenced = store_a._fenced

        def check_then_pause(conn: Connection, lease: Lease) -> Any:
            row = fenced(conn, lease)
            checked.set()
            assert go.wait(timeout=60)
            return row

        monkeypatch.setattr(store_a, "_fenced", check_then_pause)
        meta = segment(TIP, 0, 99)
        barrier_a, barrier_b = threading.Barrier(2), threading.Barrier(2)
        writer = _Call(lambda: store_a.add_segment(meta, lease_a), barrier_a)
        taker = _Call(lambda: store_b.acquire_lease(TIP, "b", ttl_ms=60_000), barrier_b)
        engine = create_engine(pg_url)
        try:
            writer.start()
            barrier_a.wait(timeout=30)
            assert checked.wait(timeout=30)  # a's check passed; its write is not done yet
            with engine.connect() as conn:
                while _db_now_ms(conn) <= lease_a.expires_at_ms:  # a's lease runs out meanwhile
                    time.sleep(0.05)
            taker.start()
            barrier_b.wait(timeout=30)
            _wait_for_lock_waiter(engine, taker.done)
            assert not taker.done.is_set(), f"a newer lease was taken inside a's write: {taker.result}"
            go.set()
            writer.join(timeout=30)
            taker.join(timeout=30)
        finally:
            go.set()
            engine.dispose()
        assert writer.error is None, writer.error
        assert taker.error is None, taker.error
        lease_b = taker.result
        assert isinstance(lease_b, Lease) and lease_b.token > lease_a.token
        monkeypatch.undo()
        (landed,) = store_b.list_segments(TIP)
        assert landed.segment_id == meta.segment_id and landed.writer_token == lease_a.token
        with pytest.raises(FencedError, match="fenced"):
            store_a.update_segment_state(meta.segment_id, S.COPY_SEGMENT_FINISHED, lease_a)
        assert [h.token for h in store_b.state_history(TIP)] == [lease_a.token]
