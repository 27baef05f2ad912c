"""Every reader on format 2 (docs/segment-format.md), end to end against moto's S3 server behind a
byte-counting proxy: a partition copied partly in format 1 and partly in format 2 (compressed and
encrypted) is fetched, searched by timestamp, verified, restored byte for byte and its indexes
rebuilt-checked, unchanged; a fetch of one record reads at most two of its log's chunks, counted
where the bytes leave the endpoint; a tampered chunk is refused by fetch, verify and restore,
naming the segment and the chunk."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import S3Endpoint
from tests.engine_support import TieringEnv, tip_of
from tests.storage.countproxy import CountingProxy
from tests.storage.keys_support import KeyPair, write_key_pair
from tests.storage.legacy_support import make_legacy
from tiering_core.cli import main
from tiering_core.engine.segment_ops import segment_ref
from tiering_core.errors import TieringError
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.kafka.records import iter_batches
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.read.reader import open_reader
from tiering_core.read.restore import restore_partition
from tiering_core.runs.copy import run_copy
from tiering_core.storage.chunks import ChunkError
from tiering_core.storage.layout import ObjectKind
from tiering_core.storage.manifest import CHUNKED_FORMAT, CopyRecord

CHUNK = 8192
SUFFIXES = ("log", "index", "timeindex", "txnindex")


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    return write_key_pair(tmp_path_factory.mktemp("keys"), "k1")


@pytest.fixture()
def proxy(s3_endpoint: S3Endpoint) -> Iterator[CountingProxy]:
    with CountingProxy.before(s3_endpoint.url) as counting:
        yield counting


@pytest.fixture()
def env(tmp_path: Path, s3_endpoint: S3Endpoint, proxy: CountingProxy) -> TieringEnv:
    log_dir = tmp_path / "kafka-logs"
    log_dir.mkdir()
    remote = {
        "backend": "s3",
        "bucket": s3_endpoint.new_bucket(),
        "prefix": "t/",
        "endpoint_url": proxy.url,
        "region": "us-east-1",
    }
    env = TieringEnv(tmp_path, log_dir, tmp_path / "tiering.yaml", remote, f"sqlite:///{tmp_path / 'm.db'}")
    env.write_config(orders={"index.interval.bytes": 512})
    return env


def chunked(env: TieringEnv, key: KeyPair) -> None:
    """New copies from here on: format 2, zstd and RSA-wrapped keys, small chunks."""
    env.remote.update(
        chunk_size=CHUNK,
        compression="zstd",
        encryption={
            "key_id": key.key_id,
            "public_key_file": str(key.public),
            "private_key_files": {"k1": str(key.private)},
        },
    )
    env.write_config()


def build_mixed(env: TieringEnv, key: KeyPair) -> PartitionWriter:
    """Two segments copied in format 1 (by a release before digests), then three in format 2
    (one with an aborted transaction)."""
    w = env.writer("orders", 0, index_interval_bytes=512)
    for _ in range(2):
        w.append_records(60, value_size=200)
        w.roll()
    w.set_high_watermark()
    with env.context() as ctx:
        run_copy(ctx, w.tp)
        for segment in ctx.metadata.list_segments(tip_of(w)):
            make_legacy(ctx, segment)
    chunked(env, key)
    w.append_records(200, value_size=200)
    w.append([(b"t", b"x")], producer_id=7, transactional=True)
    w.roll()
    w.become_leader(3)
    w.append_records(150, value_size=200)
    w.abort(7)
    w.roll()
    w.append_records(400, value_size=200)
    w.roll()
    w.append_records(4)  # active
    w.set_high_watermark()
    with env.context() as ctx:
        run_copy(ctx, w.tp)
    return w


def finished(env: TieringEnv, w: PartitionWriter) -> list:
    with env.context() as ctx:
        return [
            s for s in ctx.metadata.list_segments(tip_of(w)) if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        ]


def cli(env: TieringEnv, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["--config", str(env.config_path), "--json", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_every_reader_reads_a_mixed_partition_unchanged(
    env: TieringEnv, key: KeyPair, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    w = build_mixed(env, key)
    originals = {
        (base, suffix): (w.path / f"{base:020d}.{suffix}").read_bytes()
        for base in w.segment_bases()[:-1]
        for suffix in SUFFIXES
        if (w.path / f"{base:020d}.{suffix}").exists()
    }
    expected = [
        (r.offset, r.value)
        for base in w.segment_bases()[:-1]
        for header, batch in iter_batches(w.path / f"{base:020d}.log")
        if not header.is_control
        for r in batch
    ]
    segments = finished(env, w)
    versions = [CopyRecord.of_segment(s).format_version for s in segments]
    assert versions == [1, 1, CHUNKED_FORMAT, CHUNKED_FORMAT, CHUNKED_FORMAT]

    # fetch: every record of every segment, in order, across the formats
    with env.context() as ctx:
        stored = ctx.storage.get_range(segment_ref(segments[2]).key(ObjectKind.LOG, ctx.storage.prefix), 0, None)
        assert b"customer" not in stored and len(stored) < segments[2].size_bytes  # compressed, sealed
        reader = open_reader(ctx, w.tp)
        records = reader.read(0, 10_000)
        assert [(r.offset, r.value) for r in records] == expected
        wanted = records[500].timestamp
        at = reader.offset_for_timestamp(wanted)
        assert at is not None and at.offset == min(r.offset for r in records if r.timestamp >= wanted)
    code, out, _ = cli(env, capsys, "fetch", "--topic", "orders", "--partition", "0", "--offset", "700")
    assert code == 0 and json.loads(out)[0]["offset"] == 700

    # verify: every chunk of every object
    code, out, _ = cli(env, capsys, "verify", "--topic", "orders")
    assert code == 0, out

    # rebuild-indexes (check only): the indexes rebuilt from each downloaded log match the stored ones
    code, out, err = cli(env, capsys, "rebuild-indexes", "--topic", "orders", "--partition", "0", "--check-only")
    assert code == 0, (out, err)

    # restore: the broker's files, byte for byte
    with env.context() as ctx:
        result = restore_partition(ctx, w.tp, tmp_path / "restored")
    assert result.segments == 5
    for (base, suffix), data in originals.items():
        assert (result.directory / f"{base:020d}.{suffix}").read_bytes() == data, (base, suffix)


def test_a_fetch_of_one_record_reads_at_most_two_chunks(env: TieringEnv, key: KeyPair, proxy: CountingProxy) -> None:
    w = build_mixed(env, key)
    big = max(finished(env, w), key=lambda s: s.size_bytes)
    with env.context() as ctx:
        manifest = ctx.storage.read_manifest(segment_ref(big))
        assert manifest is not None and manifest.chunked
        log = manifest.objects[ObjectKind.LOG]
        assert log.chunks is not None and len(log.chunks) >= 10
        two_chunks = sum(sorted(c.stored_size for c in log.chunks)[-2:])
        ctx.storage.get_range(segment_ref(big).key(ObjectKind.OFFSET_INDEX, ctx.storage.prefix), 0, 0)
        reader = open_reader(ctx, w.tp)
        reader.cache.get(big, ObjectKind.OFFSET_INDEX)  # the index and manifest are read ahead of the count
        middle = (big.start_offset + big.end_offset) // 2
        proxy.downloaded_by_key.clear()
        records = reader.read(middle, 1)
    assert [r.offset for r in records] == [middle]
    log_bytes = sum(n for target, n in proxy.downloaded_by_key if target.endswith(".log"))
    assert 0 < log_bytes <= two_chunks
    assert not [t for t, _ in proxy.downloaded_by_key if not t.endswith(".log")]  # nothing else was read


@pytest.mark.parametrize("kind", [ObjectKind.LOG, ObjectKind.OFFSET_INDEX])
def test_a_tampered_chunk_is_refused_by_fetch_verify_and_restore(
    env: TieringEnv, key: KeyPair, tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: ObjectKind
) -> None:
    w = build_mixed(env, key)
    segment = finished(env, w)[3]
    ref = segment_ref(segment)
    with env.context() as ctx:
        object_key = ref.key(kind, ctx.storage.prefix)
        manifest = ctx.storage.read_manifest(ref)
        assert manifest is not None
        index = 1 if kind is ObjectKind.LOG else 0
        chunk = (manifest.objects[kind].chunks or ())[index]
        data = bytearray(ctx.storage.get_range(object_key, 0, None))
        data[chunk.stored_offset + 40] ^= 0x40
        ctx.storage.put_object(object_key, bytes(data))
    named = re.escape(f"orders-0 segment {segment.start_offset} ({segment.segment_id}): {kind.value} chunk {index}: ")
    with env.context() as ctx:
        if kind is ObjectKind.LOG:
            with pytest.raises(ChunkError, match=named):
                open_reader(ctx, w.tp).read(segment.start_offset, 10_000)
        else:  # a damaged index is not used: the segment is scanned from its start
            middle = (segment.start_offset + segment.end_offset) // 2
            assert [r.offset for r in open_reader(ctx, w.tp).read(middle, 2)] == [middle, middle + 1]
        with pytest.raises(TieringError, match=named):
            restore_partition(ctx, w.tp, tmp_path / "restored")
    assert not (tmp_path / "restored" / "orders-0").exists()
    code, out, _ = cli(env, capsys, "verify", "--topic", "orders")
    problems = [p for s in json.loads(out) for p in s["problems"]]
    assert code != 0 and any(re.search(named, p) for p in problems), problems
