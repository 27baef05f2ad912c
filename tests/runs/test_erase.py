"""``tiering erase``: every record of the erased keys leaves the remote tier and every other record
stays at its offset with its timestamp, key, value and headers; only the segments holding a key
are copied again (the others keep their ids and objects); a dry run writes nothing; a run killed
(SIGKILL) while uploading or right after the switch is finished by the next one; the audit trail
holds the keys' SHA-256 and never a key."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.engine_support import (
    TieringEnv,
    assert_manifest_holds_the_segment,
    expire_lease,
    segment_objects,
    tip_of,
)
from tests.runs.switch_faults import KILL_AT_SWITCH
from tiering_core.cli import main
from tiering_core.engine.download import download_object
from tiering_core.engine.lease import held_partition
from tiering_core.engine.segment_ops import segment_ref
from tiering_core.kafka.batch import CODEC_LZ4, CODEC_NONE, CODEC_ZSTD
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.metadata.erasures import FINISHED as ERASURE_FINISHED
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.read.reader import FetchedRecord, IsolationLevel, open_reader
from tiering_core.runs.copy import run_copy
from tiering_core.runs.erase import ErasureRequest, run_erase
from tiering_core.runs.rewrite import replace_segment
from tiering_core.storage.key_filter import KeyFilter
from tiering_core.storage.layout import ObjectKind

pytestmark = pytest.mark.xdist_group("erase")

ROOT = Path(__file__).resolve().parents[2]
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
#: Keys no other byte string of the test's store or names holds, so that a grep of the store finds only them.
ERASED = b"subject-7f3a9c-erase-me"
OTHER_ERASED = b"subject-51d2e0-erase-me"
SQLITE = pytest.mark.parametrize("tiering_env", ["sqlite"], indirect=True)


def write_plain_partition(w: PartitionWriter) -> None:
    """Four segments: the first and third hold ``ERASED``, the second ``OTHER_ERASED`` beside
    others, the last neither; records with headers and a null key among them."""
    w.append([(b"a", b"1", [("h", b"x")]), (ERASED, b"2", [("h", b"y")]), (None, b"3"), (b"b", b"4")])
    w.append([(ERASED, b"5"), (ERASED, b"6")])  # a batch erased whole
    w.roll()
    w.append([(b"c", b"7"), (OTHER_ERASED, b"8", [("who", None)]), (b"c", b"9")])
    w.roll()
    w.append([(b"d", b"10"), (ERASED, b"11")])
    w.roll()
    w.append([(b"e", b"12"), (b"f", b"13")])
    w.roll()


def write_transactional_partition(w: PartitionWriter) -> None:
    """A committed and an aborted transaction holding ``ERASED``, an idempotent producer whose
    last batch holds only it (kept as Kafka's empty batch), and a segment without it."""
    w.append([(b"plain", b"p")])
    w.begin_transaction(7)
    w.append([(ERASED, b"t1"), (ERASED, b"t2")], producer_id=7, producer_epoch=0)
    w.append([(ERASED, b"t3"), (b"ok", b"t4")], producer_id=7)
    w.commit(7)
    w.begin_transaction(8)
    w.append([(ERASED, b"a1"), (b"fine", b"a2")], producer_id=8, producer_epoch=0)
    w.append([(ERASED, b"a3")], producer_id=8)
    w.abort(8)
    w.append([(ERASED, b"i1")], producer_id=9, producer_epoch=0)
    w.roll()
    w.append([(b"g", b"after")])
    w.roll()


def copied(env: TieringEnv, codec: int = CODEC_NONE, *, transactional: bool = False) -> PartitionWriter:
    w = env.writer(codec=codec)
    (write_transactional_partition if transactional else write_plain_partition)(w)
    w.set_high_watermark()
    with env.context() as ctx:
        run_copy(ctx, w.tp)
    return w


def served(env: TieringEnv, w: PartitionWriter) -> list[FetchedRecord]:
    with env.context() as ctx:
        return open_reader(ctx, w.tp).read(0, 10_000)


def finished(env: TieringEnv, w: PartitionWriter) -> list:
    with env.context() as ctx:
        return sorted(
            (s for s in ctx.metadata.list_segments(tip_of(w)) if s.state == FINISHED), key=lambda s: s.start_offset
        )


def objects(env: TieringEnv, w: PartitionWriter) -> dict[str, int]:
    with env.context() as ctx:
        return {o.key: o.size for o in segment_objects(ctx, tip_of(w))}


def assert_erased(env: TieringEnv, w: PartitionWriter, before: list[FetchedRecord], keys: set[bytes]) -> None:
    """The tier serves ``before`` without the keys' records; one intact segment per range, no orphan."""
    assert served(env, w) == [r for r in before if r.key not in keys]
    segments = finished(env, w)
    assert len({(s.start_offset, s.end_offset) for s in segments}) == len(segments)
    with env.context() as ctx:
        for s in segments:
            assert ctx.storage.verify_segment(segment_ref(s)) == []
            assert_manifest_holds_the_segment(ctx, s)
    referenced = {str(s.segment_id) for s in segments}
    assert all(any(sid in key for sid in referenced) for key in objects(env, w))


def erase(env: TieringEnv, *keys: bytes, dry_run: bool = False):  # type: ignore[no-untyped-def]
    with env.context() as ctx:
        return run_erase(ctx, ErasureRequest("orders", frozenset(keys), requested_by="dag run 42"), dry_run=dry_run)


@SQLITE
@pytest.mark.parametrize("codec", [CODEC_NONE, CODEC_LZ4, CODEC_ZSTD], ids=["plain", "lz4", "zstd"])
def test_erase_removes_the_keys_and_keeps_every_other_record_and_segment(tiering_env: TieringEnv, codec: int) -> None:
    w = copied(tiering_env, codec)
    before = served(tiering_env, w)
    segments_before = finished(tiering_env, w)
    objects_before = objects(tiering_env, w)
    read = maybe_holding(tiering_env, w, {ERASED, OTHER_ERASED})  # the 3 holding them, any false positive
    result = erase(tiering_env, ERASED, OTHER_ERASED)

    assert not result.failures
    (partition,) = result.partitions
    erased = [r for r in before if r.key in (ERASED, OTHER_ERASED)]
    assert partition.records_removed == len(erased) == 5
    assert (partition.segments_read, partition.segments_filtered_out, len(partition.hits)) == (read, 4 - read, 3)
    assert partition.segments_unchanged == read - 3
    assert_erased(tiering_env, w, before, {ERASED, OTHER_ERASED})
    after = finished(tiering_env, w)
    assert [(s.start_offset, s.end_offset, s.leader_epochs) for s in after] == [
        (s.start_offset, s.end_offset, s.leader_epochs) for s in segments_before
    ]
    untouched, last = segments_before[-1], after[-1]
    assert last.segment_id == untouched.segment_id  # no hit: same id, same objects
    assert {k: v for k, v in objects(tiering_env, w).items() if str(untouched.segment_id) in k} == {
        k: v for k, v in objects_before.items() if str(untouched.segment_id) in k
    }
    hit_ids = {h.segment_id for h in partition.hits}
    assert hit_ids == {str(s.segment_id) for s in segments_before[:3]}
    assert not hit_ids & {str(s.segment_id) for s in after}  # copied again under new ids
    assert {h.new_segment_id for h in partition.hits} == {str(s.segment_id) for s in after[:3]}
    with tiering_env.context() as ctx:
        assert ctx.metadata.get_remote_log_start_offset(tip_of(w)) == segments_before[0].start_offset

    again = erase(tiering_env, ERASED, OTHER_ERASED)
    assert (again.partitions[0].records_removed, len(again.partitions[0].hits)) == (0, 0)
    assert [s.segment_id for s in finished(tiering_env, w)] == [s.segment_id for s in after]


@SQLITE
def test_erase_of_committed_and_aborted_transactions_keeps_the_markers(tiering_env: TieringEnv) -> None:
    w = copied(tiering_env, CODEC_ZSTD, transactional=True)
    before = served(tiering_env, w)
    with tiering_env.context() as ctx:
        committed_before = open_reader(ctx, w.tp).read(0, 10_000, IsolationLevel.READ_COMMITTED)
    result = erase(tiering_env, ERASED)
    assert result.partitions[0].records_removed == sum(r.key == ERASED for r in before) == 6
    assert_erased(tiering_env, w, before, {ERASED})
    with tiering_env.context() as ctx:
        committed = open_reader(ctx, w.tp).read(0, 10_000, IsolationLevel.READ_COMMITTED)
    assert committed == [r for r in committed_before if r.key != ERASED]
    assert [r.value for r in committed] == [b"p", b"t4", b"after"]  # the aborted transaction's "fine" stays out


@SQLITE
def test_the_audit_trail_holds_the_keys_hashes_and_never_a_key(
    tiering_env: TieringEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    w = copied(tiering_env)
    read = maybe_holding(tiering_env, w, {ERASED})
    result = erase(tiering_env, ERASED)
    with tiering_env.context() as ctx:
        (record,) = ctx.metadata.erasures("orders")
    assert record.key_sha256 == (hashlib.sha256(ERASED).hexdigest(),) == result.key_sha256
    assert (record.requested_by, record.outcome, record.topic_id) == ("dag run 42", ERASURE_FINISHED, w.topic_id)
    assert [(s.old_segment_id, s.new_segment_id, s.records_removed) for s in record.segments] == [
        (h.segment_id, h.new_segment_id, h.records_removed) for h in result.partitions[0].hits
    ]
    assert record.records_removed == 4 and record.segments_read == read
    store_file = Path(tiering_env.metadata_url.removeprefix("sqlite:///"))
    stored = b"".join(p.read_bytes() for p in store_file.parent.glob(store_file.name + "*"))
    assert ERASED not in stored and ERASED.hex().encode() not in stored
    assert hashlib.sha256(ERASED).hexdigest().encode() in stored

    config = str(tiering_env.config_path)
    assert main(["--config", config, "--json", "erase", "--status", "--topic", "orders"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["erasure_id"], row["key_sha256"], row["records_removed"]) == (
        result.erasure_id,
        [hashlib.sha256(ERASED).hexdigest()],
        4,
    )


@SQLITE
def test_the_command_erases_names_what_it_did_and_never_echoes_a_key(
    tiering_env: TieringEnv, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    w = copied(tiering_env)
    before = served(tiering_env, w)
    key_file = tmp_path / "keys.b64"
    key_file.write_text(f"{base64.b64encode(ERASED).decode()}\n")
    config = str(tiering_env.config_path)
    argv = ["--config", config, "erase", "--topic", "orders", "--key-file", str(key_file), "--key-encoding", "base64"]
    assert main([*argv, "--yes"]) == 0
    captured = capsys.readouterr()
    lines = captured.out.strip().splitlines()
    assert len(lines) == 7 and lines[-1].endswith("1 key(s), 1 partition(s), removed 4 record(s)")
    assert all("removed" in line for line in lines[:2])
    assert lines[3].startswith(f"orders-0: 2 local segment(s) in {tiering_env.log_dir} still hold 4 record(s)")
    holding = [w.segment_bases()[i] for i in (0, 2)]  # the local segments holding it: the broker's, untouched
    assert [line.split(": ")[1] for line in lines[4:6]] == [
        f"local segment {b:020d}.log (base offset {b})" for b in holding
    ]
    assert ERASED.decode() not in captured.out + captured.err
    assert_erased(tiering_env, w, before, {ERASED})


@SQLITE
def test_a_dry_run_names_the_segments_and_writes_nothing(
    tiering_env: TieringEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    w = copied(tiering_env)
    before = served(tiering_env, w)
    segments_before = finished(tiering_env, w)
    objects_before = objects(tiering_env, w)
    store_file = Path(tiering_env.metadata_url.removeprefix("sqlite:///"))
    store_bytes = store_file.read_bytes()
    config = str(tiering_env.config_path)
    argv = ["--config", config, "--json", "erase", "--topic", "orders", "--key", ERASED.decode(), "--dry-run"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    (partition,) = out["partitions"]
    assert [(h["segment_id"], h["records_removed"], h["new_segment_id"]) for h in partition["hits"]] == [
        (str(segments_before[0].segment_id), 3, None),
        (str(segments_before[2].segment_id), 1, None),
    ]
    assert out["dry_run"] and out["records_removed"] == 4
    assert store_file.read_bytes() == store_bytes  # no store write
    assert objects(tiering_env, w) == objects_before  # no object
    assert finished(tiering_env, w) == segments_before and served(tiering_env, w) == before


KILL_DURING_ERASE = KILL_AT_SWITCH + textwrap.dedent(
    """
    from tiering_core.runs.erase import ErasureRequest, run_erase
    with TieringContext.open(load_config(sys.argv[1])) as ctx:
        run_erase(ctx, ErasureRequest("orders", frozenset({bytes.fromhex(sys.argv[3])})))
    """
)


@SQLITE
@pytest.mark.parametrize("where", ["upload", "switch"])
def test_an_erasure_killed_is_finished_by_the_next_run(tiering_env: TieringEnv, where: str, tmp_path: Path) -> None:
    w = copied(tiering_env)
    before = served(tiering_env, w)
    scratch = tmp_path / "scratch"  # what the killed run could not remove stays in the test's directory
    scratch.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", KILL_DURING_ERASE, str(tiering_env.config_path), where, ERASED.hex()],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(scratch)},
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    with tiering_env.context() as ctx:
        segments = ctx.metadata.list_segments(tip_of(w))
        left = sorted(s.state.value for s in segments if s.state != FINISHED)
        assert left == (["COPY_SEGMENT_STARTED"] if where == "upload" else ["DELETE_SEGMENT_STARTED"])
        done = [s for s in segments if s.state == FINISHED]
        assert len({(s.start_offset, s.end_offset) for s in done}) == len(done) == 4  # one copy each
        (killed,) = ctx.metadata.erasures("orders")
        assert killed.outcome == "started"
        # the first segment switched; the second named before its switch, which the kill cut
        assert [s.new_segment_id is None for s in killed.segments] == [False, True]
        assert killed.records_removed == killed.segments[0].records_removed
        expire_lease(ctx.metadata, tip_of(w))  # the killed run's lease lapses
    result = erase(tiering_env, ERASED)
    assert result.partitions[0].segments_cleaned_up == 1
    assert len(result.partitions[0].hits) == (1 if where == "upload" else 0)
    assert_erased(tiering_env, w, before, {ERASED})


def copied_before_filters(env: TieringEnv, w: PartitionWriter, index: int, work: Path) -> str:
    """The ``index``-th segment copied again as a release before key filters copied it: the same
    objects without a key filter; its new segment id."""
    with env.context() as ctx:
        segment = finished(env, w)[index]
        manifest = ctx.storage.read_manifest(segment_ref(segment))
        assert manifest is not None and ObjectKind.KEY_FILTER in manifest.objects
        files = {}
        for kind in manifest.objects:
            if kind != ObjectKind.KEY_FILTER:
                download_object(ctx.storage, segment, kind, work / kind.value)
                files[kind] = (work / kind.value).read_bytes()  # bytes: no filter is made of them
        with held_partition(ctx.metadata, tip_of(w), holder="test:old-release") as held:
            return replace_segment(ctx, segment, files, held).segment_id


def maybe_holding(env: TieringEnv, w: PartitionWriter, keys: set[bytes]) -> int:
    """How many finished segments have a key filter that may hold one of ``keys``."""
    filters = [key_filter_of(env, s) for s in finished(env, w)]
    assert all(f is not None for f in filters)
    return sum(any(f.may_contain(k) for k in keys) for f in filters if f is not None)


def key_filter_of(env: TieringEnv, segment) -> KeyFilter | None:  # type: ignore[no-untyped-def]
    with env.context() as ctx:
        manifest = ctx.storage.read_manifest(segment_ref(segment))
        assert manifest is not None
        if ObjectKind.KEY_FILTER not in manifest.objects:
            return None
        return KeyFilter.from_bytes(ctx.storage.fetch(segment_ref(segment), ObjectKind.KEY_FILTER))


@SQLITE
def test_only_segments_whose_filter_may_hold_a_key_are_read(tiering_env: TieringEnv, tmp_path: Path) -> None:
    """Copy writes each segment's key filter (checked like every object of the manifest); erase
    reads only the segments it may hold a key of, and every segment copied before filters, which
    gets one when it is copied again."""
    w = copied(tiering_env)
    before = served(tiering_env, w)
    segments = finished(tiering_env, w)
    filters = [key_filter_of(tiering_env, s) for s in segments]
    assert all(f is not None for f in filters)
    maybe = [f is not None and f.may_contain(OTHER_ERASED) for f in filters]
    assert maybe[1] and sum(maybe) < 4  # the segment holding it, and only a false positive beside it

    result = erase(tiering_env, OTHER_ERASED)
    (partition,) = result.partitions
    assert (partition.segments_read, partition.segments_filtered_out) == (sum(maybe), 4 - sum(maybe))
    assert [h.segment_id for h in partition.hits] == [str(segments[1].segment_id)]
    new = finished(tiering_env, w)[1]
    rebuilt = key_filter_of(tiering_env, new)
    assert rebuilt is not None and rebuilt.may_contain(b"c")
    assert_erased(tiering_env, w, before, {OTHER_ERASED})

    (tmp_path / "0").mkdir()
    (tmp_path / "3").mkdir()
    first = copied_before_filters(tiering_env, w, 0, tmp_path / "0")  # holds ERASED
    last = copied_before_filters(tiering_env, w, 3, tmp_path / "3")  # holds no key
    current = finished(tiering_env, w)
    assert key_filter_of(tiering_env, current[0]) is None and key_filter_of(tiering_env, current[3]) is None
    filtered = key_filter_of(tiering_env, current[1])
    assert filtered is not None
    again = erase(tiering_env, ERASED).partitions[0]
    expected_read = 2 + 1 + filtered.may_contain(ERASED)  # no filter: 0 and 3; the filter of 2 holds it
    assert (again.segments_read, again.segments_filtered_out) == (expected_read, 4 - expected_read)
    assert {h.segment_id for h in again.hits} == {first, str(current[2].segment_id)}
    after = finished(tiering_env, w)
    given = key_filter_of(tiering_env, after[0])  # copied again: now with a filter
    assert given is not None and given.may_contain(b"a") and given.may_contain(b"b")
    assert str(after[3].segment_id) == last and key_filter_of(tiering_env, after[3]) is None  # left alone
    assert_erased(tiering_env, w, before, {ERASED, OTHER_ERASED})


@SQLITE
def test_a_segment_left_without_records_stays_empty_and_reads_go_on_after_it(tiering_env: TieringEnv) -> None:
    """Every record of a segment erased (no producer id: no batch kept): the segment stays, with an
    empty log, its offsets unchanged; a fetch inside it returns the next kept record."""
    w = tiering_env.writer()
    w.append([(b"a", b"1")])
    w.roll()
    w.append([(ERASED, b"2"), (ERASED, b"3")])
    w.roll()
    w.append([(b"b", b"4")])
    w.roll()
    w.set_high_watermark()
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
    before = served(tiering_env, w)
    assert erase(tiering_env, ERASED).partitions[0].records_removed == 2
    assert [(s.start_offset, s.end_offset, s.size_bytes == 0) for s in finished(tiering_env, w)] == [
        (0, 0, False),
        (1, 2, True),
        (3, 3, False),
    ]
    assert_erased(tiering_env, w, before, {ERASED})
    with tiering_env.context() as ctx:
        assert [(r.offset, r.value) for r in open_reader(ctx, w.tp).read(1, 10)] == [(3, b"4")]


@SQLITE
def test_partition_selects_the_partitions_erased_and_an_unknown_one_is_refused(
    tiering_env: TieringEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    writers = []
    for partition in (0, 1):
        w = tiering_env.writer(partition=partition)
        w.append([(ERASED, b"x"), (b"kept", b"y")])
        w.roll()
        w.set_high_watermark()
        with tiering_env.context() as ctx:
            run_copy(ctx, w.tp)
        writers.append(w)
    config = str(tiering_env.config_path)
    argv = ["--config", config, "--json", "erase", "--topic", "orders", "--key", ERASED.decode(), "--yes"]
    assert main([*argv, "--partition", "7"]) == 1
    assert (
        capsys.readouterr().err.strip() == "tiering: partition(s) [7] of topic orders have nothing in the remote tier"
    )
    assert main([*argv, "--partition", "1"]) == 0
    assert [p["partition"] for p in json.loads(capsys.readouterr().out)["partitions"]] == [1]
    assert [r.key for r in served(tiering_env, writers[0])] == [ERASED, b"kept"]
    assert [r.key for r in served(tiering_env, writers[1])] == [b"kept"]
