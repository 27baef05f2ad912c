"""``verify``: finished segments against their manifests and the checksums recorded at copy time."""

from __future__ import annotations

import json
from dataclasses import replace

from tests.engine_support import TieringEnv, tip_of, write_segments
from tiering_core.kafka.crc import crc32c
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.read.verify import verify_partition
from tiering_core.runs.copy import run_copy
from tiering_core.runs.segment_ops import segment_ref
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
    assert len(r0.problems) == 1 and r0.problems[0].startswith("log: crc32c")
    assert len(r1.problems) == 1 and r1.problems[0].startswith("timeindex: object") and "is missing" in r1.problems[0]
    assert len(r2.problems) == 1 and "recorded when the copy finished" in r2.problems[0]
    assert r2.problems[0].startswith("log: manifest crc32c")
    assert json.loads(json.dumps([r.to_dict() for r in results]))[0]["ok"] is False
