"""``verify``: finished segments against their manifests and the checksums recorded at copy time."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest

from tests.engine_support import TieringEnv, tip_of, write_segments
from tests.storage.legacy_support import make_legacy
from tiering_core.engine.segment_ops import segment_ref
from tiering_core.errors import TieringError
from tiering_core.kafka.crc import crc32c
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.read.verify import partitions_to_verify, verify_partition
from tiering_core.report.results import format_verification, format_verify_summary
from tiering_core.runs.copy import run_copy
from tiering_core.runs.rewrite import run_rewrite
from tiering_core.storage.checksum import crc_hex
from tiering_core.storage.layout import ObjectKind


def copied(env: TieringEnv, segments: int = 3):  # type: ignore[no-untyped-def]
    w = env.writer()
    write_segments(w, segments)
    w.append_records(2)
    w.set_high_watermark()
    with env.context() as ctx:
        run_copy(ctx, w.tp)
        finished = [
            s for s in ctx.metadata.list_segments(tip_of(w)) if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        ]
    return w, finished


def test_intact_tier_verifies_clean(tiering_env: TieringEnv) -> None:
    w, finished = copied(tiering_env)
    with tiering_env.context() as ctx:
        results = verify_partition(ctx, w.tp)
    assert [(r.start_offset, r.ok) for r in results] == [(s.start_offset, True) for s in finished]


def test_damage_of_every_kind_is_named(fs_env: TieringEnv) -> None:
    w, (seg0, seg1, seg2) = copied(fs_env)
    with fs_env.context() as ctx:
        storage = ctx.storage
        log_key = segment_ref(seg0).key(ObjectKind.LOG, storage.prefix)
        body = bytearray(storage.fetch(segment_ref(seg0), ObjectKind.LOG))
        body[100] ^= 0x01
        storage.put_object(log_key, bytes(body))  # same size, different bytes
        storage.delete_keys([segment_ref(seg1).key(ObjectKind.TIME_INDEX, storage.prefix)])
        # seg2: its log replaced and its manifest rewritten to match: consistent in storage, but
        # not what was copied.
        manifest = storage.read_manifest(segment_ref(seg2))
        assert manifest is not None
        entry = manifest.objects[ObjectKind.LOG]
        other = bytearray(storage.fetch(segment_ref(seg2), ObjectKind.LOG))
        other[-1] ^= 0x01
        storage.put_object(entry.key, bytes(other))
        forged = dict(manifest.objects)
        forged[ObjectKind.LOG] = replace(entry, crc32c=crc_hex(crc32c(bytes(other))))
        storage.put_object(
            segment_ref(seg2).key(ObjectKind.MANIFEST, storage.prefix), replace(manifest, objects=forged).to_json()
        )
        before = sorted(o.key for o in storage.list_objects(tip_of(w)))
        results = verify_partition(ctx, w.tp)
        assert sorted(o.key for o in storage.list_objects(tip_of(w))) == before  # verify changes nothing
    r0, r1, r2 = results
    assert len(r0.problems) == 1 and r0.problems[0].startswith("log: ") and "log chunk 0: crc32c" in r0.problems[0]
    assert len(r1.problems) == 1 and r1.problems[0].startswith("timeindex: object") and "is missing" in r1.problems[0]
    assert len(r2.problems) == 1 and "the metadata store recorded at copy" in r2.problems[0]
    assert r2.problems[0].startswith("manifest: ") and "SHA-256" in r2.problems[0]
    assert json.loads(json.dumps([r.to_dict() for r in results]))[0]["ok"] is False


def test_segments_copied_before_digests_are_named_and_rewrite_makes_them_tamper_evident(fs_env: TieringEnv) -> None:
    """An older release's segments (format 1, no manifest digest in the store) keep reading and
    verifying, the manifest still checked against the CRC-32Cs recorded at copy; verify names
    them as not tamper-evident until ``tiering rewrite`` copies them again with digests."""
    w, (seg0, seg1, _seg2) = copied(fs_env)
    with fs_env.context() as ctx:
        make_legacy(ctx, seg0)
        legacy = make_legacy(ctx, seg1)
    with fs_env.context() as ctx:
        results = verify_partition(ctx, w.tp)
        assert [(r.ok, r.tamper_evident) for r in results] == [(True, False), (True, False), (True, True)]
        assert format_verification(results[0]).endswith("ok (not tamper-evident: tiering rewrite makes it so)")
        assert "2 not tamper-evident" in format_verify_summary(results)
        # a legacy manifest rewritten with another log's CRC-32C is still caught by what the store recorded
        entry = legacy.objects[ObjectKind.LOG]
        original = ctx.storage.get_range(entry.key, 0, None)
        other = original[:-1] + bytes([original[-1] ^ 0x01])
        forged = replace(
            legacy, objects={**legacy.objects, ObjectKind.LOG: replace(entry, crc32c=crc_hex(crc32c(other)))}
        )
        ctx.storage.put_object(entry.key, other)
        ctx.storage.put_object(segment_ref(seg1).key(ObjectKind.MANIFEST, ctx.storage.prefix), forged.to_json())
    with fs_env.context() as ctx:
        damaged = verify_partition(ctx, w.tp)[1]
        assert any("recorded when the copy finished" in p for p in damaged.problems), damaged
        ctx.storage.put_object(entry.key, original)
        ctx.storage.put_object(segment_ref(seg1).key(ObjectKind.MANIFEST, ctx.storage.prefix), legacy.to_json())
    with fs_env.context() as ctx:
        rewritten = run_rewrite(ctx, w.tp)
    assert (rewritten.segments_rewritten, rewritten.segments_current) == (2, 1)
    with fs_env.context() as ctx:
        again = verify_partition(ctx, w.tp)
    assert [(r.start_offset, r.ok, r.tamper_evident) for r in again] == [
        (s.start_offset, True, True) for s in (seg0, seg1, _seg2)
    ]


def test_a_partition_whose_broker_directory_is_gone_is_still_verified_from_the_tier(fs_env: TieringEnv) -> None:
    w = fs_env.writer()
    write_segments(w, 2)
    w.set_high_watermark()
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
    shutil.rmtree(w.path)
    with fs_env.context() as ctx:
        assert partitions_to_verify(ctx, "orders", 0) == [tip_of(w)]
        assert partitions_to_verify(ctx, "orders") == [tip_of(w)]
        assert [r.ok for r in verify_partition(ctx, tip_of(w))] == [True, True]
        with pytest.raises(TieringError, match=r"topic 'orders' has no partition in the log dirs"):
            partitions_to_verify(ctx, "orders", 1)
