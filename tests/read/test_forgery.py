"""A tamper-evident tier (docs/segment-format.md, "Integrity"): someone who can write to the bucket
and holds no private key replaces a finished segment with other records of the same offsets, in
each form the bucket alone would accept (a manifest downgraded to format 1, ``encryption: null``,
a data key wrapped again with the public key, the objects and renamed manifest of another segment
the platform wrote). Every reader refuses it before a byte is served or written: fetch, find-offset,
export (nothing of it in the table), restore (nothing in the target), rebuild-indexes and verify, each
naming the segment; the segments the forgery did not touch still read. Against moto's S3 server."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import S3Endpoint
from tests.engine_support import TieringEnv, tip_of
from tests.export.support import sqlite_catalog, with_export
from tests.storage.forgery_support import (
    Forgery,
    downgrade_to_format_1,
    rewrap_with_public_key,
    strip_encryption,
    swap_in,
)
from tests.storage.keys_support import KeyPair, write_key_pair
from tiering_core.cli import main
from tiering_core.engine.segment_ops import segment_ref
from tiering_core.export import load_catalog
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.runs.copy import run_copy
from tiering_core.storage.layout import ObjectKind

SEGMENTS = 3
RECORDS = 120
FORGED_KINDS = (ObjectKind.LOG, ObjectKind.OFFSET_INDEX, ObjectKind.TIME_INDEX)


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    return write_key_pair(tmp_path_factory.mktemp("keys"), "k1")


def _env(tmp_path: Path, s3_endpoint: S3Endpoint, key: KeyPair | None) -> TieringEnv:
    log_dir = tmp_path / "kafka-logs"
    log_dir.mkdir()
    remote: dict[str, object] = {
        "backend": "s3",
        "bucket": s3_endpoint.new_bucket(),
        "prefix": "t/",
        "endpoint_url": s3_endpoint.url,
        "region": "us-east-1",
    }
    if key is not None:
        remote.update(
            compression="zstd",
            chunk_size=8192,
            encryption={
                "key_id": key.key_id,
                "public_key_file": str(key.public),
                "private_key_files": {"k1": str(key.private)},
            },
        )
    env = TieringEnv(tmp_path, log_dir, tmp_path / "tiering.yaml", remote, f"sqlite:///{tmp_path / 'm.db'}")
    env.write_config(orders={"index.interval.bytes": 512})
    with_export(env, sqlite_catalog(tmp_path))
    return env


def _fill(w: PartitionWriter) -> None:
    for _ in range(SEGMENTS):
        w.append_records(RECORDS, value_size=150)
        w.roll()
    w.append_records(3)  # active
    w.set_high_watermark()


def _forged_files(tmp_path: Path, w: PartitionWriter) -> dict[ObjectKind, bytes]:
    """The first segment's files in another log of the same shape: the same offsets, other values."""
    other = tmp_path / "forged-logs"
    other.mkdir()
    forged = PartitionWriter(other, w.tp, seed="forged", segment_bytes=10**9, index_interval_bytes=512)
    _fill(forged)
    base = forged.segment_bases()[0]
    suffix = {ObjectKind.LOG: "log", ObjectKind.OFFSET_INDEX: "index", ObjectKind.TIME_INDEX: "timeindex"}
    return {kind: (forged.path / f"{base:020d}.{suffix[kind]}").read_bytes() for kind in FORGED_KINDS}


def _finished(env: TieringEnv, w: PartitionWriter) -> list:  # type: ignore[type-arg]
    with env.context() as ctx:
        listed = ctx.metadata.list_segments(tip_of(w))
    return sorted(
        (s for s in listed if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED), key=lambda s: s.start_offset
    )


def _cli(env: TieringEnv, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["--config", str(env.config_path), "--json", *args])
    out, err = capsys.readouterr()
    return code, out, err


def _every_reader_refuses(
    env: TieringEnv, w: PartitionWriter, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    forged_segment = _finished(env, w)[0]
    named = str(forged_segment.segment_id)
    beyond = _finished(env, w)[1].start_offset

    code, out, err = _cli(env, capsys, "fetch", "--topic", "orders", "--partition", "0", "--offset", "0")
    assert code != 0 and named in err and out == "", (code, out, err)
    code, out, err = _cli(env, capsys, "fetch", "--topic", "orders", "--partition", "0", "--offset", str(beyond))
    assert code == 0 and json.loads(out)[0]["offset"] == beyond  # an untouched segment still reads

    first_timestamp = 0  # the log's first record: its time index and log are both read
    code, out, err = _cli(
        env, capsys, "find-offset", "--topic", "orders", "--partition", "0", "--timestamp", str(first_timestamp)
    )
    assert code != 0 and named in err, (code, out, err)

    code, out, err = _cli(env, capsys, "export", "--topic", "orders")
    assert code != 0 and named in out + err, (code, out, err)
    with env.context() as ctx:  # the other segments are exported, nothing of the forged one
        assert ctx.config.export is not None
        table = load_catalog(ctx.config).load_table(f"{ctx.config.export.namespace}.orders")
        rows = table.scan(selected_fields=("partition", "offset")).to_arrow().to_pylist()
    exported = sorted(r["offset"] for r in rows if r["partition"] == 0)
    assert exported == list(range(beyond, beyond + (SEGMENTS - 1) * RECORDS)), exported

    target = tmp_path / "restored"
    target.mkdir()
    code, out, err = _cli(env, capsys, "restore", "--topic", "orders", "--partition", "0", "--to", str(target))
    assert code != 0 and named in err, (code, out, err)
    assert list(target.iterdir()) == []  # nothing restored

    code, out, err = _cli(env, capsys, "rebuild-indexes", "--topic", "orders", "--partition", "0", "--check-only")
    assert code != 0 and named in out + err, (code, out, err)

    code, out, err = _cli(env, capsys, "verify", "--topic", "orders")
    results = {r["segment_id"]: r for r in json.loads(out)}
    assert code != 0 and not results[named]["ok"], results[named]
    assert any("SHA-256" in p and "metadata store" in p for p in results[named]["problems"]), results[named]
    assert all(r["ok"] for sid, r in results.items() if sid != named)


FORGERIES: dict[str, Callable[[KeyPair], Forgery]] = {
    "format-1-downgrade": lambda _key: downgrade_to_format_1,
    "encryption-null": lambda _key: strip_encryption,
    "rewrapped-data-key": lambda key: rewrap_with_public_key(key.public, key.key_id),
}


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_a_forged_encrypted_segment_is_refused_by_every_reader(
    tmp_path: Path, s3_endpoint: S3Endpoint, key: KeyPair, capsys: pytest.CaptureFixture[str], forgery: str
) -> None:
    env = _env(tmp_path, s3_endpoint, key)
    w = env.writer("orders", 0, index_interval_bytes=512)
    _fill(w)
    with env.context() as ctx:
        run_copy(ctx, w.tp)
    segment = _finished(env, w)[0]
    forged = _forged_files(tmp_path, w)
    assert forged[ObjectKind.LOG] != (w.path / f"{segment.start_offset:020d}.log").read_bytes()
    with env.context() as ctx:
        FORGERIES[forgery](key)(ctx.storage, segment_ref(segment), forged)
    _every_reader_refuses(env, w, tmp_path, capsys)


def test_the_objects_and_renamed_manifest_of_another_segment_are_refused(
    tmp_path: Path, s3_endpoint: S3Endpoint, capsys: pytest.CaptureFixture[str]
) -> None:
    """Plaintext segments: the other segment's chunks carry SHA-256s the platform wrote itself, so
    only the digest the metadata store holds tells the manifest is not this segment's."""
    env = _env(tmp_path, s3_endpoint, None)
    w = env.writer("orders", 0, index_interval_bytes=512)
    _fill(w)
    other = env.writer("orders", 1, index_interval_bytes=512, seed="other")  # the same offsets, other values
    _fill(other)
    with env.context() as ctx:
        run_copy(ctx, w.tp)
        run_copy(ctx, other.tp)
    segment, theirs = _finished(env, w)[0], _finished(env, other)[0]
    assert (segment.start_offset, segment.end_offset) == (theirs.start_offset, theirs.end_offset)
    with env.context() as ctx:
        swap_in(ctx.storage, segment_ref(segment), segment_ref(theirs))
    _every_reader_refuses(env, w, tmp_path, capsys)
