"""The orphan sweep over real remote storage (moto's S3 server, the filesystem backend) and a real
SQLite metadata store: objects of segments the store deleted, objects of segments it has no record
of (kept), unfinished multipart uploads, stale temp files, the grace period, and copies racing the
sweep."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.engine_support import TieringEnv, tip_of, write_segments
from tiering_core.context import TieringContext
from tiering_core.errors import ConfigError, TieringError
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.metadata.values import RemoteLogSegmentMetadata
from tiering_core.runs.copy import run_copy
from tiering_core.runs.orphans import INCOMPLETE_UPLOAD, OBJECT, TEMP_FILE, UNRECORDED, OrphanObject, find_orphans
from tiering_core.storage.filesystem import FilesystemRemoteStorage
from tiering_core.storage.layout import ObjectKind, RemoteSegmentRef, partition_prefix
from tiering_core.storage.partition_state import PartitionState, partition_state_key
from tiering_core.storage.s3 import S3RemoteStorage

HOUR = 3_600_000
UNKNOWN = TopicIdPartition("UUUUUUUUUUUUUUUUUUUUUU", TopicPartition("orders", 0))  # a topic id nothing records


def make_env(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> TieringEnv:
    """Log dir + SQLite metadata + S3 (moto's server) or the filesystem backend, prefix "t/"."""
    log_dir = tmp_path / "kafka-logs"
    log_dir.mkdir()
    if backend == "s3":
        endpoint = request.getfixturevalue("s3_endpoint")
        remote: dict[str, Any] = {
            "backend": "s3",
            "bucket": endpoint.new_bucket(),
            "prefix": "t/",
            "endpoint_url": endpoint.url,
            "region": "us-east-1",
        }
    else:
        remote = {"backend": "filesystem", "root": str(tmp_path / "tier"), "prefix": "t/"}
    tiering = TieringEnv(tmp_path, log_dir, tmp_path / "tiering.yaml", remote, f"sqlite:///{tmp_path / 'm.db'}")
    tiering.write_config()
    return tiering


def tier(env: TieringEnv) -> PartitionWriter:
    """orders-0 with three segments copied (COPY_SEGMENT_FINISHED)."""
    w = env.writer()
    write_segments(w, 3)
    w.set_high_watermark()
    with env.context() as ctx:
        assert run_copy(ctx, w.tp).segments_copied == 3
    return w


@pytest.fixture(params=["s3", "filesystem"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> TieringEnv:
    return make_env(request.param, request, tmp_path)


@pytest.fixture()
def tiered(env: TieringEnv) -> PartitionWriter:
    return tier(env)


def unrecorded(ctx: TieringContext, tip: TopicIdPartition, base: int = 0) -> list[str]:
    """The objects of a finished segment the store has no record of at all (what a store restored
    from an older backup sees of the segments copied since): a log and its manifest."""
    ref = RemoteSegmentRef(tip, base, uuid.uuid4())
    ctx.storage.copy_segment(ref, {ObjectKind.LOG: b"copied after the backup"})
    return sorted([ref.key(ObjectKind.LOG, ctx.storage.prefix), ref.key(ObjectKind.MANIFEST, ctx.storage.prefix)])


def killed_copy(ctx: TieringContext, tip: TopicIdPartition, base: int = 0) -> list[str]:
    """The objects a copy killed after its uploads leaves once the next run has cleaned it up and
    a delete failed part-way: the store records the segment's deletion (DELETE_SEGMENT_FINISHED),
    yet a log and a manifest under its id survive."""
    segment = RemoteLogSegmentMetadata(
        segment_id=uuid.uuid4(),
        topic_id_partition=tip,
        start_offset=base,
        end_offset=base + 4,
        max_timestamp=0,
        leader_epochs={0: base},
        size_bytes=11,
        state=RemoteLogSegmentState.COPY_SEGMENT_STARTED,
        writer_token=0,
        event_time=0,
    )
    ctx.metadata.register_partition(tip)
    lease = ctx.metadata.acquire_lease(tip, holder="killed-copy")
    ctx.metadata.add_segment(segment, lease)
    for state in (RemoteLogSegmentState.DELETE_SEGMENT_STARTED, RemoteLogSegmentState.DELETE_SEGMENT_FINISHED):
        ctx.metadata.update_segment_state(segment.segment_id, state, lease)
    ctx.metadata.release_lease(lease)
    ref = RemoteSegmentRef(tip, base, segment.segment_id)
    ctx.storage.copy_segment(ref, {ObjectKind.LOG: b"killed copy"})
    return sorted([ref.key(ObjectKind.LOG, ctx.storage.prefix), ref.key(ObjectKind.MANIFEST, ctx.storage.prefix)])


def live_keys(ctx: TieringContext, tip: TopicIdPartition) -> set[str]:
    segments = ctx.metadata.list_segments(tip)
    ids = {str(s.segment_id) for s in segments}
    assert ids
    return {o.key for o in ctx.storage.list_objects(tip) if any(i in o.key for i in ids)}


def assert_live_data_intact(ctx: TieringContext, tip: TopicIdPartition) -> None:
    for segment in ctx.metadata.list_segments(tip):
        ref = RemoteSegmentRef(tip, segment.start_offset, segment.segment_id)
        assert ctx.storage.verify_segment(ref) == [], segment


def leave_multipart_upload(ctx: TieringContext, tip: TopicIdPartition, data: bytes) -> str:
    """A multipart upload a killed process started and never finished, made with boto3."""
    storage = ctx.storage
    assert isinstance(storage, S3RemoteStorage)
    key = RemoteSegmentRef(tip, 500, uuid.uuid4()).key(ObjectKind.LOG, storage.prefix)
    upload = storage.client.create_multipart_upload(Bucket=storage.bucket, Key=key)
    storage.client.upload_part(Bucket=storage.bucket, Key=key, UploadId=upload["UploadId"], PartNumber=1, Body=data)
    return key


def leave_temp_file(ctx: TieringContext, tip: TopicIdPartition, data: bytes, age_s: float) -> str:
    """A temp file a killed write left in the partition's directory, last written ``age_s`` ago."""
    storage = ctx.storage
    assert isinstance(storage, FilesystemRemoteStorage)
    target = RemoteSegmentRef(tip, 500, uuid.uuid4()).key(ObjectKind.LOG, storage.prefix)
    head, _, name = target.rpartition("/")
    key = f"{head}/.tmp-{name}.{uuid.uuid4().hex}"
    path = storage.root / key
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    then = time.time() - age_s
    os.utime(path, (then, then))
    return key


def by_key(orphans: list[OrphanObject]) -> dict[str, OrphanObject]:
    return {o.key: o for o in orphans}


# --- finding -----------------------------------------------------------------------------------


def test_orphans_of_a_known_partition_are_listed_and_a_dry_listing_deletes_nothing(
    env: TieringEnv, tiered: PartitionWriter
) -> None:
    tip = tip_of(tiered)
    with env.context() as ctx:
        live = live_keys(ctx, tip)
        stray = killed_copy(ctx, tip)
        foreign = f"{partition_prefix(tip, 't/')}not-a-segment.txt"
        ctx.storage.put_object(foreign, b"stray file")
        before = {o.key for o in ctx.storage.list_objects(tip)}

        orphans = find_orphans(ctx, grace_ms=1, delete=False)

        assert sorted(by_key(orphans)) == sorted([*stray, foreign])
        assert all(o.kind == OBJECT and not o.deleted and o.age_ms >= 0 for o in orphans)
        assert by_key(orphans)[foreign].size == len(b"stray file")
        assert not set(by_key(orphans)) & live  # objects of live segments are never orphans
        assert {o.key for o in ctx.storage.list_objects(tip)} == before  # listing only
        assert [o.key for o in find_orphans(ctx, "orders", 0, grace_ms=1)] == [o.key for o in orphans]
        assert find_orphans(ctx, "orders", 1, grace_ms=1) == []
        assert find_orphans(ctx, "payments", grace_ms=1) == []
        assert by_key(orphans)[foreign].to_dict() == {
            "key": foreign,
            "size": len(b"stray file"),
            "age_ms": by_key(orphans)[foreign].age_ms,
            "deleted": False,
            "kind": "object",
        }


def test_the_partitions_state_object_is_no_orphan(env: TieringEnv, tiered: PartitionWriter) -> None:
    """Outside every segment's layout, yet neither listed nor deleted, however old; nor is the one
    of a partition the metadata store does not know (what a store rebuilt from the bucket reads)."""
    tip = tip_of(tiered)
    with env.context() as ctx:
        state = PartitionState(tip, 0, None, (), 1)
        ctx.storage.write_partition_state(state)
        ctx.storage.write_partition_state(PartitionState(UNKNOWN, 100, None, ((120, 129),), 1))
        stray = killed_copy(ctx, tip)
        time.sleep(0.05)
        assert sorted(o.key for o in find_orphans(ctx, grace_ms=1)) == stray
        swept = find_orphans(ctx, grace_ms=10, delete=True)
        assert sorted(o.key for o in swept if o.deleted) == stray
        assert ctx.storage.read_partition_state(tip) == state
        assert ctx.storage.read_partition_state(UNKNOWN) == PartitionState(UNKNOWN, 100, None, ((120, 129),))
        assert [o.key for o in ctx.storage.list_objects(UNKNOWN)] == [partition_state_key(UNKNOWN, "t/")]


def test_objects_of_segments_the_store_has_no_record_of_are_listed_and_never_deleted(
    env: TieringEnv, tiered: PartitionWriter
) -> None:
    """A partition no store row names (a topic id whose metadata a restored backup lacks) and a
    known partition's segment the store never recorded: a finished manifest may vouch for either,
    and a store that lost their records cannot tell them from garbage, so they stay (``tiering
    recover`` adds them back). The objects of a partition's segment the store deleted still go."""
    tip = tip_of(tiered)
    with env.context() as ctx:
        assert ctx.metadata.get_partition(UNKNOWN) is None
        kept = unrecorded(ctx, UNKNOWN, base=100) + unrecorded(ctx, tip, base=0)
        stray = killed_copy(ctx, tip, base=5)
        orphans = by_key(find_orphans(ctx, "orders", grace_ms=1))
        assert {k: o.kind for k, o in orphans.items()} == {
            **dict.fromkeys(kept, UNRECORDED),
            **dict.fromkeys(stray, OBJECT),
        }
        time.sleep(0.05)
        deleted = by_key(find_orphans(ctx, grace_ms=10, delete=True))
        assert sorted(k for k, o in deleted.items() if o.deleted) == stray
        assert all(ctx.storage.object_size(k) is not None for k in kept)
        assert UNKNOWN in ctx.storage.remote_partitions()
        assert_live_data_intact(ctx, tip)


def test_objects_of_deleted_segments_are_orphans(env: TieringEnv, tiered: PartitionWriter) -> None:
    """A segment whose metadata reached DELETE_SEGMENT_FINISHED while an object survived (a
    delete that failed part-way): the object is an orphan; the other segments' are not."""
    tip = tip_of(tiered)
    with env.context() as ctx:
        first = ctx.metadata.list_segments(tip)[0]
        ref = RemoteSegmentRef(tip, first.start_offset, first.segment_id)
        survivor = ref.key(ObjectKind.LOG, "t/")
        data = ctx.storage.get_range(survivor, 0, None)
        lease = ctx.metadata.acquire_lease(tip, holder="test")
        from tiering_core.engine.segment_ops import delete_remote_segment

        delete_remote_segment(ctx.metadata, ctx.storage, first, lease)
        ctx.metadata.release_lease(lease)
        ctx.storage.put_object(survivor, data)  # what a partial delete left
        assert [o.key for o in find_orphans(ctx, grace_ms=HOUR)] == [survivor]


# --- unfinished uploads ------------------------------------------------------------------------


def test_an_unfinished_multipart_upload_is_an_orphan(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    env = make_env("s3", request, tmp_path)
    tip = tip_of(tier(env))
    with env.context() as ctx:
        key = leave_multipart_upload(ctx, tip, b"p" * 1000)
        other = leave_multipart_upload(ctx, UNKNOWN, b"q" * 10)  # a partition with only an upload
        orphans = by_key(find_orphans(ctx, grace_ms=HOUR, delete=True))
        assert orphans[key].kind == INCOMPLETE_UPLOAD and orphans[key].size == 1000
        assert orphans[other].kind == INCOMPLETE_UPLOAD and orphans[other].size == 10
        assert not any(o.deleted for o in orphans.values())  # an hour's grace: it may be in flight
        storage = ctx.storage
        assert isinstance(storage, S3RemoteStorage)
        assert len(storage.client.list_multipart_uploads(Bucket=storage.bucket).get("Uploads", [])) == 2

        time.sleep(0.05)
        orphans = by_key(find_orphans(ctx, grace_ms=10, delete=True))
        assert orphans[key].deleted and orphans[other].deleted
        assert storage.client.list_multipart_uploads(Bucket=storage.bucket).get("Uploads", []) == []
        assert find_orphans(ctx, grace_ms=10) == []
        assert_live_data_intact(ctx, tip)


def test_a_stale_temp_file_is_an_orphan_and_a_fresh_one_is_kept(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    env = make_env("filesystem", request, tmp_path)
    tip = tip_of(tier(env))
    with env.context() as ctx:
        stale = leave_temp_file(ctx, tip, b"half written", age_s=7200)
        fresh = leave_temp_file(ctx, tip, b"being written", age_s=0)
        only = leave_temp_file(ctx, UNKNOWN, b"x", age_s=7200)  # a partition holding nothing else
        orphans = by_key(find_orphans(ctx, grace_ms=HOUR, delete=True))
        assert {k: (o.kind, o.deleted) for k, o in orphans.items()} == {
            stale: (TEMP_FILE, True),
            fresh: (TEMP_FILE, False),
            only: (TEMP_FILE, True),
        }
        assert orphans[stale].size == len(b"half written") and orphans[stale].age_ms >= 7_100_000
        assert isinstance(ctx.storage, FilesystemRemoteStorage)
        assert not (ctx.storage.root / stale).exists() and (ctx.storage.root / fresh).exists()
        assert not (ctx.storage.root / only).parent.exists()  # the emptied partition directory went too
        assert_live_data_intact(ctx, tip)


# --- deleting ----------------------------------------------------------------------------------


def test_delete_respects_the_grace_period(env: TieringEnv, tiered: PartitionWriter) -> None:
    tip = tip_of(tiered)
    with env.context() as ctx:
        stray = killed_copy(ctx, tip)
        kept = find_orphans(ctx, grace_ms=HOUR, delete=True)
        assert sorted(o.key for o in kept) == stray and not any(o.deleted for o in kept)
        assert all(ctx.storage.object_size(k) is not None for k in stray)

        time.sleep(0.05)
        gone = find_orphans(ctx, grace_ms=10, delete=True)
        assert sorted(o.key for o in gone) == stray and all(o.deleted for o in gone)
        assert all(ctx.storage.object_size(k) is None for k in stray)
        assert find_orphans(ctx, grace_ms=10) == []
        assert_live_data_intact(ctx, tip)


@pytest.mark.parametrize("grace", [0, -1, True, 1.5, None])
def test_a_grace_period_that_is_not_positive_is_refused(env: TieringEnv, tiered: PartitionWriter, grace: Any) -> None:
    tip = tip_of(tiered)
    with env.context() as ctx:
        stray = killed_copy(ctx, tip)
        with pytest.raises(TieringError, match="grace_ms must be a positive number of milliseconds"):
            find_orphans(ctx, grace_ms=grace, delete=True)
        assert all(ctx.storage.object_size(k) is not None for k in stray)


def test_a_copy_that_starts_while_the_sweep_lists_is_not_deleted(env: TieringEnv, tiered: PartitionWriter) -> None:
    """The sweep reads the live segments, then lists the objects; a copy that begins between
    the two writes its segment's metadata, then its objects, which the listing sees but the
    first read does not name. The partition's live segments are read again before deleting,
    so that copy's objects stay."""
    tip = tip_of(tiered)
    write_segments(tiered, 1)
    tiered.set_high_watermark()
    with env.context() as ctx:
        stray = killed_copy(ctx, tip)
        before = {s.segment_id for s in ctx.metadata.list_segments(tip)}
        listing = ctx.storage.list_objects
        copied: list[int] = []

        def copy_then_list(listed: TopicIdPartition) -> Any:
            if listed == tip and not copied:
                copied.append(run_copy(ctx, tiered.tp).segments_copied)
                time.sleep(0.05)  # its objects are older than the grace period below
            return listing(listed)

        ctx.storage.list_objects = copy_then_list  # type: ignore[method-assign]
        orphans = find_orphans(ctx, grace_ms=10, delete=True)
        ctx.storage.list_objects = listing  # type: ignore[method-assign]

        assert copied == [1]
        (new,) = [s for s in ctx.metadata.list_segments(tip) if s.segment_id not in before]
        assert sorted(o.key for o in orphans) == stray and all(o.deleted for o in orphans)
        assert ctx.storage.verify_segment(RemoteSegmentRef(tip, new.start_offset, new.segment_id)) == []
        assert_live_data_intact(ctx, tip)


def test_orphaned_manifests_go_before_their_objects(env: TieringEnv, tiered: PartitionWriter) -> None:
    tip = tip_of(tiered)
    with env.context() as ctx:
        stray = killed_copy(ctx, tip)
        deletes: list[list[str]] = []
        real = ctx.storage.delete_keys

        def recording(keys: Any) -> None:
            batch = list(keys)
            deletes.append(batch)
            real(batch)

        ctx.storage.delete_keys = recording  # type: ignore[method-assign]
        time.sleep(0.05)
        find_orphans(ctx, grace_ms=10, delete=True)
        manifest, log = sorted(stray, key=lambda k: not k.endswith("manifest.json"))
        assert deletes == [[manifest], [log]]


def test_empty_remote_storage_has_no_orphans(env: TieringEnv) -> None:
    with env.context() as ctx:
        assert find_orphans(ctx, grace_ms=HOUR, delete=True) == []


@pytest.mark.parametrize("backend", ["s3", "filesystem"])
def test_a_deployment_never_sweeps_another_deployments_objects(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Two deployments on one bucket (or root): a prefix without its trailing '/' ("pro" would
    hold every key of "prod") is refused, and "pro/"'s sweep deletes its own orphans only: none of
    "prod/"'s objects, nor a key under its prefix that is not of the platform's layout."""
    if backend == "s3":
        endpoint = request.getfixturevalue("s3_endpoint")
        shared: dict[str, Any] = {"backend": "s3", "bucket": endpoint.new_bucket(), "endpoint_url": endpoint.url}
        shared["region"] = "us-east-1"
    else:
        shared = {"backend": "filesystem", "root": str(tmp_path / "tier")}

    def deployment(name: str, prefix: str) -> TieringEnv:
        home = tmp_path / name
        (home / "kafka-logs").mkdir(parents=True)
        remote = {**shared, "prefix": prefix}
        return TieringEnv(home, home / "kafka-logs", home / "tiering.yaml", remote, f"sqlite:///{home / 'm.db'}")

    with pytest.raises(ConfigError, match=r"remote\.prefix"):
        deployment("unslashed", "pro").write_config()
    prod, pro = deployment("prod", "prod/"), deployment("pro", "pro/")
    prod.write_config()
    pro.write_config()
    prod_tip, pro_tip = tip_of(tier(prod)), tip_of(tier(pro))
    with prod.context() as ctx:
        prod_keys = {o.key for o in ctx.storage.list_objects(prod_tip)}
        assert prod_keys and find_orphans(ctx, grace_ms=1) == []
    with pro.context() as ctx:
        stray = killed_copy(ctx, pro_tip)
        foreign = f"{partition_prefix(pro_tip, 'pro/')}not-a-segment.txt"
        ctx.storage.put_object(foreign, b"not ours")
        time.sleep(0.05)
        swept = by_key(find_orphans(ctx, grace_ms=10, delete=True))
        assert sorted(k for k, o in swept.items() if o.deleted) == stray
        assert not swept[foreign].deleted and ctx.storage.object_size(foreign) == len(b"not ours")
        assert_live_data_intact(ctx, pro_tip)
    with prod.context() as ctx:
        assert {o.key for o in ctx.storage.list_objects(prod_tip)} == prod_keys
        assert_live_data_intact(ctx, prod_tip)
