"""Format 2 on Spark's executors (local[2]): the parallel upload stores compressed, encrypted
segments with the key files each executor reads itself, and the verify job checks every chunk,
naming a tampered one."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

from tests.engine_support import tip_of, write_segments
from tests.spark_apps.test_rebuild_indexes import s3_env
from tests.storage.keys_support import write_key_pair
from tiering_core.engine.segment_ops import segment_ref
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.runs.copy_many import copy_partitions
from tiering_core.storage.layout import ObjectKind
from tiering_core.storage.manifest import CHUNKED_FORMAT, CopyRecord

FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


def test_parallel_upload_and_verify_on_format_2(tmp_path: Path, spark, s3_endpoint, capsys) -> None:
    from spark_apps.runtime import SparkExecutor
    from spark_apps.verify_segments import main
    from tiering_core.read.reader import open_reader

    env = s3_env(tmp_path, s3_endpoint)
    key = write_key_pair(tmp_path / "keys", "k1")
    env.remote.update(
        compression="zstd",
        chunk_size=8192,
        encryption={"key_id": "k1", "public_key_file": str(key.public), "private_key_files": {"k1": str(key.private)}},
    )
    env.write_config()
    writers = []
    for p in range(2):
        w = env.writer("orders", p)
        write_segments(w, 3, records=120)  # logs of 8 KiB: three chunks each
        w.set_high_watermark()
        writers.append(w)
    with env.context() as ctx:
        report = copy_partitions(
            ctx, [w.tp for w in writers], SparkExecutor(spark.sparkContext, ctx.config.remote), run_id=uuid.uuid4().hex
        )
        assert sum(r.segments_copied for r in report.results) == 6
        segments = [s for w in writers for s in ctx.metadata.list_segments(tip_of(w)) if s.state == FINISHED]
        assert {CopyRecord.of_segment(s).format_version for s in segments} == {CHUNKED_FORMAT}
        assert len(open_reader(ctx, writers[1].tp).read(0, 1000)) == 360
        victim = segments[4]
        object_key = segment_ref(victim).key(ObjectKind.LOG, ctx.storage.prefix)
        manifest = ctx.storage.read_manifest(segment_ref(victim))
        assert manifest is not None
        chunk = (manifest.objects[ObjectKind.LOG].chunks or ())[1]
        stored = bytearray(ctx.storage.get_range(object_key, 0, None))
        stored[chunk.stored_offset + 30] ^= 0x08
        ctx.storage.put_object(object_key, bytes(stored))

    code = main(["--config", str(env.config_path), "--topic", "orders"], spark=spark)
    out, _ = capsys.readouterr()
    assert code == 1
    assert re.search(rf"{victim.segment_id}\): log: .*log chunk 1: crc32c", out), out
    assert "6 finished segment(s)" in out and "1 with problems" in out


def test_the_spark_export_refuses_a_forged_segment_and_commits_nothing(
    tmp_path: Path, spark, s3_endpoint, capsys
) -> None:
    """A segment forged by someone who can write to the bucket and holds no private key (its
    manifest downgraded to format 1, its chunks stored with ``encryption: null``, its data key
    wrapped again with the public key: every check the bucket alone carries passes) is refused on
    the executor that reads it, naming the segment; the driver commits the other segments and no
    row of it (docs/segment-format.md, "Integrity")."""
    from spark_apps.export_table import main
    from tests.spark_apps.test_export_table import with_export
    from tests.storage.forgery_support import downgrade_to_format_1, rewrap_with_public_key, strip_encryption
    from tiering_core.config import load_config
    from tiering_core.export import load_catalog

    env = s3_env(tmp_path, s3_endpoint)
    key = write_key_pair(tmp_path / "keys", "k1")
    env.remote.update(
        compression="zstd",
        chunk_size=8192,
        encryption={"key_id": "k1", "public_key_file": str(key.public), "private_key_files": {"k1": str(key.private)}},
    )
    env.write_config()
    with_export(env, tmp_path)
    w = env.writer("orders", 0)
    write_segments(w, 3, records=120)
    w.set_high_watermark()
    other = env.writer("forged", 0, seed="forged")  # the same shape: the same offsets, other values
    write_segments(other, 3, records=120)
    with env.context() as ctx:
        from tiering_core.runs.copy import run_copy

        run_copy(ctx, w.tp)
        victim = min(
            (s for s in ctx.metadata.list_segments(tip_of(w)) if s.state == FINISHED), key=lambda s: s.start_offset
        )
        base = other.segment_bases()[0]
        forged = {
            kind: (other.path / f"{base:020d}.{suffix}").read_bytes()
            for kind, suffix in ((ObjectKind.LOG, "log"), (ObjectKind.OFFSET_INDEX, "index"))
        }

    for forge in (downgrade_to_format_1, strip_encryption, rewrap_with_public_key(key.public, "k1")):
        with env.context() as ctx:
            forge(ctx.storage, segment_ref(victim), forged)
        code = main(["--config", str(env.config_path), "--topic", "orders"], spark=spark)
        out, err = capsys.readouterr()
        assert code != 0 and str(victim.segment_id) in out + err, (forge, out, err)
        table = load_catalog(load_config(env.config_path)).load_table(("kafka", "orders"))
        exported = sorted(table.scan().to_arrow().column("offset").to_pylist())
        assert exported == list(range(victim.end_offset + 1, 360)), forge  # the others, nothing of the forged one
