"""Index rebuild: remote indexes checked against the .log, damaged ones repaired as a new copy."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engine_support import (
    TieringEnv,
    assert_manifest_holds_the_segment,
    expire_lease,
    segment_objects,
    tip_of,
    wait_until,
)
from tiering_core.engine.segment_ops import segment_ref
from tiering_core.kafka.index import parse_txn_index
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.report.results import format_index_check
from tiering_core.runs.copy import run_copy
from tiering_core.runs.rebuild import IndexStatus, rebuild_partition_indexes
from tiering_core.storage.layout import ObjectKind
from tiering_core.storage.partition_state import PARTITION_STATE_NAME
from tiering_core.tier.view import load_tier_view

FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
INTERVAL = 256


def build_partition(env: TieringEnv, partition: int = 0) -> PartitionWriter:
    """Three closed segments with dense indexes; an aborted transaction spans segments 0 and 1."""
    env.write_config(orders={"index.interval.bytes": INTERVAL})
    w = env.writer("orders", partition, index_interval_bytes=INTERVAL)
    w.append_records(40)
    w.append([(b"k", b"v")], producer_id=7, transactional=True)  # opens in segment 0
    w.append([(b"t", b"x")], producer_id=8, transactional=True)
    w.roll()
    w.append_records(30)
    w.abort(7)  # aborted in segment 1 while producer 8 is still open: LSO field = 8's first offset
    w.commit(8)
    w.append([(b"a", b"b")], producer_id=9, transactional=True)
    w.abort(9)
    w.roll()
    w.append_records(30)
    w.roll()
    w.append_records(5)  # the active segment
    w.set_high_watermark()
    return w


def broker_file(w: PartitionWriter, base: int, kind: ObjectKind) -> bytes | None:
    path = w.path / f"{base:020d}.{kind.value}"
    return path.read_bytes() if path.exists() else None


def finished(env: TieringEnv, w: PartitionWriter) -> list:
    with env.context() as ctx:
        return [s for s in ctx.metadata.list_segments(tip_of(w)) if s.state == FINISHED]


def test_intact_segments_rebuild_to_the_broker_written_indexes(fs_env: TieringEnv) -> None:
    w = build_partition(fs_env)
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
        result = rebuild_partition_indexes(ctx, w.tp, repair=True, local=True)
    remote = [c for c in result.checks if c.location == "remote"]
    local = [c for c in result.checks if c.location == "local"]
    assert [c.base_offset for c in remote] == [s.start_offset for s in finished(fs_env, w)]
    assert len(remote) == 3 and len(local) == 4  # three closed segments tiered; the active one checked locally
    assert all(c.status == IndexStatus.OK for c in result.checks), [format_index_check(c) for c in result.checks]
    # The spanning abort really needed the producer snapshot of the previous segment.
    txn = parse_txn_index(broker_file(w, remote[1].base_offset, ObjectKind.TRANSACTION_INDEX) or b"")
    assert [e.producer_id for e in txn] == [7, 9]
    assert txn[0].first_offset < remote[1].base_offset
    assert txn[0].last_stable_offset == txn[0].first_offset + 1  # producer 8 was still open
    assert result.log_bytes == sum(s.size_bytes for s in finished(fs_env, w)) + sum(
        p.stat().st_size for p in w.path.glob("*.log")
    )


def test_deleted_and_corrupted_remote_indexes_are_found_then_repaired(fs_env: TieringEnv) -> None:
    w = build_partition(fs_env)
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
        copied_before = load_tier_view(ctx.partitions("orders", 0)[0], ctx.metadata).highest_copied_offset
    seg0, seg1, seg2 = finished(fs_env, w)
    with fs_env.context() as ctx:
        storage = ctx.storage
        storage.delete_keys([segment_ref(seg0).key(ObjectKind.OFFSET_INDEX, storage.prefix)])
        body = bytearray(storage.fetch(segment_ref(seg1), ObjectKind.TIME_INDEX))
        body[5] ^= 0xFF
        storage.put_object(segment_ref(seg1).key(ObjectKind.TIME_INDEX, storage.prefix), bytes(body))
        storage.delete_keys([segment_ref(seg1).key(ObjectKind.TRANSACTION_INDEX, storage.prefix)])

        checked = rebuild_partition_indexes(ctx, w.tp, repair=False)
        assert [c.status for c in checked.checks] == [IndexStatus.MISSING, IndexStatus.MISSING, IndexStatus.OK]
        by_kind = {f.kind: f.status for f in checked.checks[1].findings}
        assert by_kind == {
            ObjectKind.OFFSET_INDEX: IndexStatus.OK,
            ObjectKind.TIME_INDEX: IndexStatus.DIFFERED,
            ObjectKind.TRANSACTION_INDEX: IndexStatus.MISSING,
        }
        assert finished(fs_env, w) == [seg0, seg1, seg2]  # a check changes nothing

        repaired = rebuild_partition_indexes(ctx, w.tp, repair=True)
        assert [c.status for c in repaired.checks] == [IndexStatus.REPAIRED, IndexStatus.REPAIRED, IndexStatus.OK]

    after = finished(fs_env, w)
    assert [(s.start_offset, s.end_offset, s.leader_epochs, s.size_bytes) for s in after] == [
        (s.start_offset, s.end_offset, s.leader_epochs, s.size_bytes) for s in (seg0, seg1, seg2)
    ]
    assert after[2].segment_id == seg2.segment_id
    assert {after[0].segment_id, after[1].segment_id}.isdisjoint({seg0.segment_id, seg1.segment_id})
    with fs_env.context() as ctx:
        storage = ctx.storage
        for old in (seg0, seg1):  # the damaged attempts are deleted the usual way
            assert ctx.metadata.get_segment(old.segment_id).state == RemoteLogSegmentState.DELETE_SEGMENT_FINISHED
        for s in after:
            ref = segment_ref(s)
            assert storage.verify_segment(ref) == []
            manifest = storage.read_manifest(ref)
            assert s.custom_metadata["crc32c"] == {k.value: e.crc32c for k, e in manifest.objects.items()}
            assert_manifest_holds_the_segment(ctx, s)  # the repaired copies' manifests too
            for kind in (ObjectKind.LOG, ObjectKind.OFFSET_INDEX, ObjectKind.TIME_INDEX, ObjectKind.TRANSACTION_INDEX):
                expected = broker_file(w, s.start_offset, kind)
                if expected is None:
                    assert kind not in manifest.objects
                else:  # byte for byte what the broker wrote
                    assert storage.fetch(ref, kind) == expected, (s.start_offset, kind)
        assert len(segment_objects(ctx, tip_of(w))) == sum(
            len(storage.read_manifest(segment_ref(s)).objects) + 1 for s in after
        )  # no orphans
        view = load_tier_view(ctx.partitions("orders", 0)[0], ctx.metadata)
        assert view.highest_copied_offset == copied_before
        again = rebuild_partition_indexes(ctx, w.tp, repair=True)
    assert [c.status for c in again.checks] == [IndexStatus.OK] * 3


def test_s3_repair_and_a_damaged_log_is_reported_not_repaired(tiering_env: TieringEnv) -> None:
    w = build_partition(tiering_env)
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
    seg0, seg1, _seg2 = finished(tiering_env, w)
    with tiering_env.context() as ctx:
        storage = ctx.storage
        storage.delete_keys([segment_ref(seg0).key(ObjectKind.TIME_INDEX, storage.prefix)])
        log_key = segment_ref(seg1).key(ObjectKind.LOG, storage.prefix)
        data = storage.fetch(segment_ref(seg1), ObjectKind.LOG)
        storage.put_object(log_key, data[: len(data) - 7])  # truncated mid-batch
        result = rebuild_partition_indexes(ctx, w.tp, repair=True)
    assert [c.status for c in result.checks] == [IndexStatus.REPAIRED, IndexStatus.ERROR, IndexStatus.OK]
    assert "byte" in (result.checks[1].error or "")
    after = finished(tiering_env, w)
    assert after[1].segment_id == seg1.segment_id  # nothing is repaired from a damaged log
    with tiering_env.context() as ctx:
        ref = segment_ref(after[0])
        assert ctx.storage.fetch(ref, ObjectKind.TIME_INDEX) == broker_file(w, seg0.start_offset, ObjectKind.TIME_INDEX)


def test_local_check_reports_damage_without_touching_the_broker_files(fs_env: TieringEnv, tmp_path: Path) -> None:
    w = build_partition(fs_env)
    index = w.path / f"{0:020d}.index"
    damaged = bytearray(index.read_bytes())
    damaged[7] ^= 0x01  # the first entry's position no longer starts a batch: lookups through it go wrong
    index.write_bytes(bytes(damaged))
    (w.path / f"{0:020d}.timeindex").unlink()
    with fs_env.context() as ctx:
        result = rebuild_partition_indexes(ctx, w.tp, repair=True, local=True)
    local = [c for c in result.checks if c.location == "local"]
    assert [c.status for c in local] == [IndexStatus.MISSING, IndexStatus.OK, IndexStatus.OK, IndexStatus.OK]
    finding = {f.kind: f for f in local[0].findings}[ObjectKind.OFFSET_INDEX]
    assert finding.status == IndexStatus.DIFFERED and "byte 0" in (finding.detail or ""), finding.detail
    assert index.read_bytes() == bytes(damaged) and not (w.path / f"{0:020d}.timeindex").exists()


def test_partition_held_by_another_run_is_not_checked(fs_env: TieringEnv) -> None:
    w = build_partition(fs_env)
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
        lease = ctx.metadata.acquire_lease(tip_of(w), holder="copy:other")
        result = rebuild_partition_indexes(ctx, w.tp, repair=True)
        ctx.metadata.release_lease(lease)
    assert result.busy and result.checks == []


def test_repair_killed_after_its_finish_is_completed_by_the_next_run(fs_env: TieringEnv) -> None:
    from tiering_core.runs.rebuild import (
        examine_remote_segment,
        remote_index_tasks,
        repair_task,
        start_index_repair,
    )
    from tiering_core.storage.manifest import CopyRecord

    w = build_partition(fs_env)
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
        seg0 = finished(fs_env, w)[0]
        ctx.storage.delete_keys([segment_ref(seg0).key(ObjectKind.OFFSET_INDEX, ctx.storage.prefix)])
        lease = ctx.metadata.acquire_lease(tip_of(w), holder="rebuild-indexes:killed")
        task = remote_index_tasks(ctx.metadata, tip_of(w), INTERVAL)[0]
        found = examine_remote_segment(ctx.storage, task)
        attempt = start_index_repair(ctx.metadata, seg0, lease)
        copied = examine_remote_segment(ctx.storage, repair_task(task, found, attempt))
        ctx.metadata.update_segment_state(
            attempt.segment_id,
            FINISHED,
            lease,
            custom_metadata=CopyRecord.of_manifest(copied.manifest).to_custom_metadata(),
        )
        ctx.metadata.release_lease(lease)  # killed here: the damaged attempt is still finished too
        assert [s.start_offset for s in finished(fs_env, w)][:2] == [0, 0]
        result = rebuild_partition_indexes(ctx, w.tp, repair=True)
    assert result.superseded_deleted == 1
    assert [c.status for c in result.checks] == [IndexStatus.OK] * 3
    assert finished(fs_env, w)[0].segment_id == attempt.segment_id


def test_rebuild_indexes_command_checks_then_repairs(fs_env: TieringEnv, capsys) -> None:
    import json

    from tiering_core.cli import main

    w = build_partition(fs_env)
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
        seg0 = finished(fs_env, w)[0]
        ctx.storage.delete_keys([segment_ref(seg0).key(ObjectKind.OFFSET_INDEX, ctx.storage.prefix)])
    cfg = str(fs_env.config_path)
    select = ("--topic", "orders", "--partition", "0")

    code = main(["--config", cfg, "--json", "rebuild-indexes", *select, "--check-only"])
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert code == 1 and (report["segments"], report["missing"], report["ok"], report["repaired"]) == (3, 1, 2, 0)
    assert "segment 0" in err and "index missing" in err  # the damaged segment is named on stderr
    assert finished(fs_env, w)[0].segment_id == seg0.segment_id  # --check-only changed nothing

    code = main(["--config", cfg, "rebuild-indexes", *select])
    out, err = capsys.readouterr()
    assert code == 0 and err == ""
    assert "repaired" in out and "rebuild-indexes: 1 partition(s), 3 segment(s): 2 ok, 0 missing" in out
    assert finished(fs_env, w)[0].segment_id != seg0.segment_id

    code = main(["--config", cfg, "rebuild-indexes", "--topic", "orders", "--partition", "9"])
    assert code == 1 and "partition orders-9 is not in the log dirs" in capsys.readouterr().err


# --- a damaged .log is never trusted -------------------------------------------------------

MAX_TIMESTAMP_MSB = 35  # first byte of the first batch's maxTimestamp


def flip_remote_byte(ctx, segment, kind: ObjectKind, position: int) -> None:
    """Storage rot: one bit of a stored object flips behind the platform's back."""
    ref = segment_ref(segment)
    data = bytearray(ctx.storage.fetch(ref, kind))
    data[position] ^= 0x01
    ctx.storage.put_object(ref.key(kind, ctx.storage.prefix), bytes(data))


def remote_state(env: TieringEnv, w: PartitionWriter) -> tuple[list, dict[str, bytes]]:
    """Every segment record (any state) and every stored object of the partition, bodies included."""
    with env.context() as ctx:
        tip = tip_of(w)
        segments = sorted(
            (str(s.segment_id), s.state.value, s.start_offset, s.end_offset, repr(s.custom_metadata))
            for s in ctx.metadata.list_segments(tip)
        )
        objects = {o.key: ctx.storage.get_range(o.key, 0, None) for o in ctx.storage.list_objects(tip)}
    return segments, objects


def test_a_flipped_header_bit_in_the_remote_log_is_a_damaged_log_and_nothing_is_repaired(
    fs_env: TieringEnv, capsys
) -> None:
    import json

    from tiering_core.cli import main

    w = build_partition(fs_env)
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
        seg1 = finished(fs_env, w)[1]
        flip_remote_byte(ctx, seg1, ObjectKind.LOG, MAX_TIMESTAMP_MSB)
        # The damaged header really makes the (correct) stored time index look wrong.
        log_path = fs_env.root / "flipped.log"
        log_key = segment_ref(seg1).key(ObjectKind.LOG, ctx.storage.prefix)
        log_path.write_bytes(ctx.storage.get_range(log_key, 0, None))  # stored byte for byte
        from tiering_core.kafka.index_rebuild import rebuild_indexes

        assert rebuild_indexes(log_path, seg1.start_offset, index_interval_bytes=INTERVAL).time_index != broker_file(
            w, seg1.start_offset, ObjectKind.TIME_INDEX
        )
    before = remote_state(fs_env, w)

    code = main(
        ["--config", str(fs_env.config_path), "--json", "rebuild-indexes", "--topic", "orders", "--partition", "0"]
    )
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert code == 1
    assert (report["ok"], report["error"], report["repaired"]) == (2, 1, 0)
    damaged = report["checks"][1]
    assert damaged["damaged_log"] and damaged["status"] == "error" and damaged["segment_id"] == str(seg1.segment_id)
    assert (
        "damaged log" in damaged["error"]
        and "CRC-32C" in damaged["error"]
        and "recorded at copy time" in (damaged["error"])
    )
    assert str(seg1.segment_id) in err and "damaged log" in err  # the segment is named on stderr
    assert remote_state(fs_env, w) == before  # nothing repaired, nothing deleted, no new attempt


def test_a_truncated_remote_log_is_damaged_even_where_its_batches_still_parse(fs_env: TieringEnv) -> None:
    w = build_partition(fs_env)
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
        seg0 = finished(fs_env, w)[0]
        ref = segment_ref(seg0)
        data = ctx.storage.fetch(ref, ObjectKind.LOG)
        headers = list(iter_batch_headers_of(data, fs_env.root / "copy.log"))
        cut = headers[-1].position  # drop the last whole batch: every remaining batch is valid
        ctx.storage.put_object(ref.key(ObjectKind.LOG, ctx.storage.prefix), data[:cut])
        ctx.storage.delete_keys([ref.key(ObjectKind.OFFSET_INDEX, ctx.storage.prefix)])  # and an index to repair
    before = remote_state(fs_env, w)
    with fs_env.context() as ctx:
        result = rebuild_partition_indexes(ctx, w.tp, repair=True)
    check = result.checks[0]
    assert check.status == IndexStatus.ERROR and check.damaged_log
    assert f"{cut} bytes" in (check.error or "") and str(seg0.segment_id) in (check.error or "")
    assert remote_state(fs_env, w) == before


def iter_batch_headers_of(data: bytes, path: Path):
    from tiering_core.kafka.batch import iter_batch_headers

    path.write_bytes(data)
    return iter_batch_headers(path)


def test_a_damaged_snapshot_a_repair_would_carry_over_stops_the_repair(fs_env: TieringEnv) -> None:
    w = build_partition(fs_env)
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
        seg2 = finished(fs_env, w)[2]
        ctx.storage.delete_keys([segment_ref(seg2).key(ObjectKind.TIME_INDEX, ctx.storage.prefix)])
        flip_remote_byte(ctx, seg2, ObjectKind.LEADER_EPOCH_CHECKPOINT, 0)
    before = remote_state(fs_env, w)
    with fs_env.context() as ctx:
        result = rebuild_partition_indexes(ctx, w.tp, repair=True)
    check = result.checks[2]
    assert check.status == IndexStatus.ERROR and check.damaged_log
    assert "damaged leader-epoch-checkpoint" in (check.error or "") and str(seg2.segment_id) in (check.error or "")
    assert [c.status for c in result.checks[:2]] == [IndexStatus.OK, IndexStatus.OK]
    assert remote_state(fs_env, w) == before


def test_a_damaged_previous_snapshot_is_not_used_to_rebuild_the_transaction_index(fs_env: TieringEnv) -> None:
    w = build_partition(fs_env)
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
        seg0 = finished(fs_env, w)[0]
        flip_remote_byte(ctx, seg0, ObjectKind.PRODUCER_SNAPSHOT, 20)  # segment 1's producer state at its base
    before = remote_state(fs_env, w)
    with fs_env.context() as ctx:
        result = rebuild_partition_indexes(ctx, w.tp, repair=True)
    assert [c.status for c in result.checks] == [IndexStatus.OK, IndexStatus.ERROR, IndexStatus.OK]
    assert "damaged snapshot" in (result.checks[1].error or "")
    assert str(seg0.segment_id) in (result.checks[1].error or "")
    assert remote_state(fs_env, w) == before


# --- leases: leftovers, fencing, long runs --------------------------------------------------


def test_started_leftovers_of_a_killed_repair_are_cleaned_up_by_the_next_rebuild(fs_env: TieringEnv) -> None:
    from tiering_core.runs.rebuild import (
        examine_remote_segment,
        remote_index_tasks,
        repair_task,
        start_index_repair,
    )

    w = build_partition(fs_env)
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
        seg0 = finished(fs_env, w)[0]
        ctx.storage.delete_keys([segment_ref(seg0).key(ObjectKind.OFFSET_INDEX, ctx.storage.prefix)])
        lease = ctx.metadata.acquire_lease(tip_of(w), holder="rebuild-indexes:killed")
        task = remote_index_tasks(ctx.metadata, tip_of(w), INTERVAL)[0]
        found = examine_remote_segment(ctx.storage, task)
        attempt = start_index_repair(ctx.metadata, seg0, lease)
        copied = examine_remote_segment(ctx.storage, repair_task(task, found, attempt))
        assert copied.manifest is not None  # uploaded, then killed before its FINISHED
        ctx.metadata.release_lease(lease)
        result = rebuild_partition_indexes(ctx, w.tp, repair=True)
        assert ctx.metadata.get_segment(attempt.segment_id).state == RemoteLogSegmentState.DELETE_SEGMENT_FINISHED
        assert ctx.storage.read_manifest(segment_ref(attempt)) is None
    assert result.segments_cleaned_up == 1
    assert [c.status for c in result.checks] == [IndexStatus.REPAIRED, IndexStatus.OK, IndexStatus.OK]
    segments, objects = remote_state(fs_env, w)
    live = [s for s in segments if s[1] == "COPY_SEGMENT_FINISHED"]
    assert len(live) == 3 and all(s[1] in ("COPY_SEGMENT_FINISHED", "DELETE_SEGMENT_FINISHED") for s in segments)
    segment_keys = [k for k in objects if not k.endswith(f"/{PARTITION_STATE_NAME}")]
    assert {k.rsplit("/", 1)[-1].split(".")[0].split("-", 1)[1] for k in segment_keys} == {s[0] for s in live}


def short_lease(env: TieringEnv, lease_ms: int) -> None:
    import yaml

    doc = yaml.safe_load(env.config_path.read_text())
    doc["metadata"]["lease_ms"] = lease_ms
    env.config_path.write_text(yaml.safe_dump(doc))


def test_a_repair_fenced_before_its_finish_leaves_no_orphan_objects(fs_env: TieringEnv, monkeypatch) -> None:
    import tiering_core.runs.rebuild.run as rebuild
    from tiering_core.errors import TieringError

    w = build_partition(fs_env)
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
        seg0 = finished(fs_env, w)[0]
        ctx.storage.delete_keys([segment_ref(seg0).key(ObjectKind.OFFSET_INDEX, ctx.storage.prefix)])
    originals = [s.segment_id for s in finished(fs_env, w)]
    attempts = []
    other: list = []
    real_examine = rebuild.examine_remote_segment

    def examine_then_lose_the_lease(storage, task, **kwargs):
        examination = real_examine(storage, task, **kwargs)
        if task.repair_ref is not None:  # the repair is uploaded: the lease lapses, another run takes over
            attempts.append(task.repair_ref)
            with fs_env.context() as ctx2:
                expire_lease(ctx2.metadata, tip_of(w))
                other.append(ctx2.metadata.acquire_lease(tip_of(w), holder="copy:other"))
        return examination

    monkeypatch.setattr(rebuild, "examine_remote_segment", examine_then_lose_the_lease)
    import tiering_core.engine.lease as lease_mod

    monkeypatch.setattr(lease_mod, "renew_interval", lambda lease_ms: 3600.0)  # a stalled run: no beat
    with fs_env.context() as ctx, pytest.raises(TieringError, match="lost the partition's lease"):
        rebuild_partition_indexes(ctx, w.tp, repair=True)
    monkeypatch.undo()
    assert len(attempts) == 1
    _, objects = remote_state(fs_env, w)
    assert not [k for k in objects if str(attempts[0].segment_id) in k]  # the repair's objects are gone
    assert [s.segment_id for s in finished(fs_env, w)] == originals  # nothing was replaced
    with fs_env.context() as ctx:  # the new holder gives up; the next rebuild finishes the job
        ctx.metadata.release_lease(other[0])
    with fs_env.context() as ctx:
        result = rebuild_partition_indexes(ctx, w.tp, repair=True)
    assert result.segments_cleaned_up == 1
    assert [c.status for c in result.checks] == [IndexStatus.REPAIRED, IndexStatus.OK, IndexStatus.OK]


def test_a_rebuild_longer_than_the_lease_renews_it_between_segments(fs_env: TieringEnv, monkeypatch) -> None:
    import tiering_core.runs.rebuild.run as rebuild

    w = build_partition(fs_env)
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
        seg2 = finished(fs_env, w)[2]
        ctx.storage.delete_keys([segment_ref(seg2).key(ObjectKind.OFFSET_INDEX, ctx.storage.prefix)])
    short_lease(fs_env, 3000)  # renewed every second: a busy machine's stalls do not outlast it
    real_examine = rebuild.examine_remote_segment
    with fs_env.context() as ctx:
        store = ctx.metadata
        first_expiry: list[int] = []

        def slow_examine(storage, task, **kwargs):  # a slow object store: the checks outlast the lease
            if task.repair_ref is None:
                if not first_expiry:  # the lease as it stood when the checks began
                    lease = store.current_lease(tip_of(w))
                    assert lease is not None
                    first_expiry.append(lease.expires_at_ms)
                wait_until(lambda: store.database_now_ms() > first_expiry[0], what="the lease's time to live to pass")
            return real_examine(storage, task, **kwargs)

        monkeypatch.setattr(rebuild, "examine_remote_segment", slow_examine)
        result = rebuild_partition_indexes(ctx, w.tp, repair=True)  # longer than the lease lives
    assert [c.status for c in result.checks] == [IndexStatus.OK, IndexStatus.OK, IndexStatus.REPAIRED]


def test_broker_indexes_written_across_a_restart_are_not_damage(fs_env: TieringEnv) -> None:
    """A broker restarted mid-segment restarts its index cadence: its file differs from a
    one-session rebuild yet every lookup through it is right, locally and once copied."""
    from tiering_core.kafka.index import OFFSET_ENTRY, parse_offset_index

    w = build_partition(fs_env)
    index = w.path / f"{0:020d}.index"
    entries = parse_offset_index(index.read_bytes(), 0)
    assert len(entries) >= 3
    del entries[1]  # as after a restart: one entry later than a one-session broker would add it
    index.write_bytes(b"".join(OFFSET_ENTRY.pack(e.offset, e.position) for e in entries))
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
        result = rebuild_partition_indexes(ctx, w.tp, repair=True, local=True)
    assert {c.status for c in result.checks} == {IndexStatus.OK}, [format_index_check(c) for c in result.checks]
    equivalent = [f.detail for c in result.checks for f in c.findings if f.kind == ObjectKind.OFFSET_INDEX and f.detail]
    assert len(equivalent) == 2 and all(d.startswith("equivalent") for d in equivalent)  # local and remote


# --- one driver, any executor ---------------------------------------------------------------


def damage_like_the_repair_test(ctx, w: PartitionWriter) -> None:
    """Segment 0 loses its offset index, segment 1's time index is corrupted and its transaction
    index deleted; segment 2 stays intact."""
    seg0, seg1, _seg2 = [s for s in ctx.metadata.list_segments(tip_of(w)) if s.state == FINISHED]
    storage = ctx.storage
    storage.delete_keys([segment_ref(seg0).key(ObjectKind.OFFSET_INDEX, storage.prefix)])
    flip_remote_byte(ctx, seg1, ObjectKind.TIME_INDEX, 5)
    storage.delete_keys([segment_ref(seg1).key(ObjectKind.TRANSACTION_INDEX, storage.prefix)])


def test_the_driver_on_a_thread_pool_repairs_what_it_repairs_serially(fs_env: TieringEnv) -> None:
    from tiering_core.engine.executor import InProcessExecutor
    from tiering_core.events import RunEvent
    from tiering_core.runs.rebuild import IndexChecked, RebuildPlanned, rebuild_indexes

    writers = [build_partition(fs_env, p) for p in range(3)]
    with fs_env.context() as ctx:
        for w in writers:
            run_copy(ctx, w.tp)
            damage_like_the_repair_test(ctx, w)
        serial = rebuild_indexes(ctx, [writers[0].tp], InProcessExecutor(ctx.storage), local=True)
        events: list[RunEvent] = []
        pooled = rebuild_indexes(
            ctx,
            [w.tp for w in writers[1:]],
            InProcessExecutor(ctx.storage, threads=2),
            local=True,
            events=events.append,
        )

    def verdicts(result) -> list[tuple]:
        return [
            (c.location, c.base_offset, c.end_offset, c.status, tuple((f.kind, f.status) for f in c.findings))
            for c in result.checks
        ]

    assert serial.ok and pooled.ok and not serial.failures and not pooled.failures
    assert [c.status for c in serial.checks if c.location == "remote"] == [
        IndexStatus.REPAIRED,
        IndexStatus.REPAIRED,
        IndexStatus.OK,
    ]
    assert [verdicts(r) for r in pooled.results] == [verdicts(serial.results[0])] * 2
    # One plan, then every segment's final verdict once: 3 remote and 4 local per partition.
    assert isinstance(events[0], RebuildPlanned) and (events[0].partitions, events[0].remote_segments) == (2, 6)
    checked = [e.check for e in events[1:] if isinstance(e, IndexChecked)]
    assert len(checked) == len(events) - 1 == 14
    assert sorted((c.partition, c.location, c.base_offset) for c in checked) == sorted(
        (c.partition, c.location, c.base_offset) for c in pooled.checks
    )
    with fs_env.context() as ctx:
        for w in writers:  # every partition now serves what its broker wrote, byte for byte
            after = [s for s in ctx.metadata.list_segments(tip_of(w)) if s.state == FINISHED]
            assert len(after) == 3
            for s in after:
                ref = segment_ref(s)
                assert ctx.storage.verify_segment(ref) == []
                manifest = ctx.storage.read_manifest(ref)
                for kind in (ObjectKind.OFFSET_INDEX, ObjectKind.TIME_INDEX, ObjectKind.TRANSACTION_INDEX):
                    stored = ctx.storage.fetch(ref, kind) if kind in manifest.objects else None
                    assert stored == broker_file(w, s.start_offset, kind), (w.tp, s.start_offset, kind)
            assert len(segment_objects(ctx, tip_of(w))) == sum(
                len(ctx.storage.read_manifest(segment_ref(s)).objects) + 1 for s in after
            )  # no orphans
