"""Leases and fencing on SQLite and PostgreSQL: in one process, and across real OS processes that
race, stall past their lease, and get SIGKILLed."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from tests.metadata.support import finish, segment, start_in, tip, worker
from tiering_core.kafka.epoch import EpochEntry
from tiering_core.metadata.errors import FencedError, LeaseHeldError
from tiering_core.metadata.states import RemoteLogSegmentState, RemotePartitionDeleteState
from tiering_core.metadata.store import Lease, RemoteLogMetadataStore

S = RemoteLogSegmentState
TIP = tip("CCCCCCCCCCCCCCCCCCCCCC", "orders", 1)  # the partition the workers contend for


@pytest.fixture()
def store(metadata_url: str):
    with RemoteLogMetadataStore(metadata_url) as s:
        yield s


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
    "mark_partition": lambda st, lease, _: st.mark_partition_for_deletion(TIP, lease),
    "delete_state": lambda st, lease, _: st.update_partition_delete_state(
        TIP, RemotePartitionDeleteState.DELETE_PARTITION_MARKED, lease
    ),
    "remote_log_start": lambda st, lease, _: st.set_remote_log_start_offset(TIP, 99, lease),
    "lineage": lambda st, lease, _: st.record_lineage(TIP, [EpochEntry(0, 0), EpochEntry(1, 5)], lease),
    "delete_records": lambda st, lease, _: st.record_delete_records(TIP, 7, lease, "test"),
    "gap": lambda st, lease, _: st.record_gap(TIP, 1, 2, lease),
    "renew": lambda st, lease, _: st.renew_lease(lease),
}


@pytest.mark.parametrize("how", ["superseded", "expired", "released", "other-holder"])
def test_a_stale_lease_writes_nothing(metadata_url: str, how: str) -> None:
    with RemoteLogMetadataStore(metadata_url) as store:
        first = store.acquire_lease(TIP, "first", ttl_ms=200 if how == "expired" else 60_000)
        meta = segment(TIP, 0, 99)
        store.add_segment(meta, first)
        if how == "superseded":
            store.release_lease(first)
            store.acquire_lease(TIP, "second")
        elif how == "expired":
            time.sleep(0.25)
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
    lease = store.acquire_lease(TIP, "copier", ttl_ms=500, run_id="r1")
    current = store.current_lease(TIP)
    assert current is not None and (current.holder, current.token) == ("copier", lease.token)
    time.sleep(0.3)
    renewed = store.renew_lease(lease, ttl_ms=500)
    assert renewed.token == lease.token and renewed.expires_at_ms > lease.expires_at_ms
    time.sleep(0.3)  # past the first expiry, within the renewed one
    store.add_segment(segment(TIP, 0, 9), renewed)
    assert store.is_lease_active(TIP)
    time.sleep(0.55)
    assert not store.is_lease_active(TIP) and store.current_lease(TIP) is None
    with pytest.raises(FencedError, match="expired"):
        store.renew_lease(renewed)
    with pytest.raises(FencedError):
        store.release_lease(Lease(TIP, "never-held", 0, 0))


# --- real processes -------------------------------------------------------------------------


def test_two_processes_race_exactly_one_wins_and_the_loser_is_fenced(metadata_url: str) -> None:
    RemoteLogMetadataStore(metadata_url).close()  # migrate before the race
    start_at = start_in(2.0)
    procs = [worker("race", metadata_url, start_at, f"racer-{i}", "60000") for i in range(2)]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outputs]
    lines = sorted((out.splitlines() for out, _ in outputs), key=lambda ls: ls[0])
    lost, won = lines
    assert lost[0].startswith("LOST") and lost[1] == "FENCED"
    assert "racer-" in json.loads(lost[0].split(" ", 1)[1])  # the held lease names its holder
    assert won[0].startswith("WON") and won[1].startswith("WROTE")
    with RemoteLogMetadataStore(metadata_url) as store:
        (only,) = store.list_segments(TIP)
        assert str(only.segment_id) == won[1].split()[1] and only.state == S.COPY_SEGMENT_FINISHED
        assert only.writer_token == int(won[0].split()[1])
        with pytest.raises(LeaseHeldError, match="racer-"):
            store.acquire_lease(TIP, "latecomer")


def test_a_sigkilled_holder_expires_its_copy_is_cleaned_and_it_stays_fenced(metadata_url: str) -> None:
    RemoteLogMetadataStore(metadata_url).close()
    proc = worker("hang", metadata_url, "doomed", "1000")
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
        deadline = time.time() + 10
        while store.is_lease_active(TIP) and time.time() < deadline:
            time.sleep(0.05)
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
    proc = worker("stale", metadata_url, "stalled", "500", "1.5")
    assert proc.stdout is not None
    first = proc.stdout.readline().split()
    assert first[0] == "WON", proc.stderr.read() if proc.stderr else ""
    with RemoteLogMetadataStore(metadata_url) as store:
        deadline = time.time() + 10
        while True:
            try:
                taker = store.acquire_lease(TIP, "taker")
                break
            except LeaseHeldError:
                assert time.time() < deadline
                time.sleep(0.05)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert out.split("\n")[:3] == ["FENCED add", "FENCED renew", "FENCED start-offset"]
        assert taker.token > int(first[1])
        assert store.list_segments(TIP) == [] and store.get_remote_log_start_offset(TIP) is None
        assert store.current_lease(TIP).holder == "taker"


def test_contending_processes_never_interleave_tokens(metadata_url: str) -> None:
    """Three processes fight for one lease for a few seconds, sometimes stalling past it. In commit
    order, the tokens of landed writes never go down: no stale holder ever wrote after a newer one."""
    RemoteLogMetadataStore(metadata_url).close()
    procs = [worker("storm", metadata_url, f"storm-{i}", "150", "2", str(i)) for i in range(3)]
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
