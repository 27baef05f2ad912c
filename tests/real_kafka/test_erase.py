"""``tiering erase`` on what a real Kafka 4.4.0 broker wrote, proved end to end.

Real producers write plain, lz4 and zstd batches and committed and aborted transactions, records
of two keys to erase among them over several segments (some segments hold none); ``tiering copy``
tiers the closed segments and ``tiering export`` exports them twice, so the Iceberg table holds
the keys' rows at more than one snapshot. A dry run writes nothing and names the broker's own
segments still holding the keys; an erasure killed with SIGKILL right after its second segment's
switch is finished by a rerun. Then no path gives a key back and every other record is what a
real consumer read at its offset: ``tiering fetch`` at both isolation levels, the table at every
snapshot it keeps (a new export adds nothing), ``tiering replay`` into another topic, and
``tiering restore`` of the partition, which Kafka's ``DumpLogSegments`` finds valid and a
restarted broker loads and serves to a consumer. Segments without the keys keep their ids and
objects.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.engine_support import expire_lease
from tests.export.support import sqlite_catalog
from tests.real_kafka.cluster import KafkaCluster
from tests.real_kafka.conftest import PrivateKafka
from tests.real_kafka.support import BesideKafka, ConsumedRecord, consume
from tests.real_kafka.test_cleaner import dump, dumped
from tests.real_kafka.test_recover import bucket_objects
from tests.runs.switch_faults import KILL_AT_SWITCH
from tests.services import S3Endpoint
from tiering_core.config import load_config
from tiering_core.context import TieringContext
from tiering_core.export import load_catalog, open_table, table_name
from tiering_core.kafka.checkpoints import uuid_to_topic_id
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.replay import SOURCE_HEADER, SourceMark

pytestmark = pytest.mark.xdist_group("erase")

TOPIC = "erased"
SEGMENT_BYTES = 16 * 1024
#: Keys no other record holds; the first in every kind of batch, the second outside transactions only.
ERASED = (b"subject-7f3a9c-erase-me", b"subject-51d2e0-erase-me")
ROOT = Path(__file__).resolve().parents[2]
#: The test cluster as the config's replay target.
TARGET = "cluster"
LEVELS = ("read_committed", "read_uncommitted")
KILL_DURING_ERASE = KILL_AT_SWITCH + textwrap.dedent(
    """
    from tiering_core.cli import main
    sys.exit(main(["--config", sys.argv[1], "erase", "--topic", sys.argv[3], "--key-file", sys.argv[4], "--yes"]))
    """
)

#: A data record's line of DumpLogSegments (its key may be null: not the cleaner test's pattern).
_DATA_RECORD = re.compile(r"^\| offset: (\d+) (?!.*endTxnMarker)")

Selected = tuple[bytes | None, bytes | None, tuple[tuple[str, bytes], ...], int]


def _noise(seed: str) -> bytes:
    """A value compression does not shrink much, so that compressed batches still fill segments."""
    return hashlib.sha256(seed.encode()).hexdigest().encode() * 2


def _produce(cluster: KafkaCluster, phase: int) -> None:
    """Plain, lz4 and zstd batches (headers, null keys, the keys to erase among them), committed
    and aborted transactions holding the first key, then filler that fills segments of its own."""
    for codec in (None, "lz4", "zstd"):
        producer = cluster.producer(linger_ms=5, batch_size=4096, compression_type=codec)
        for i in range(90):
            key = ERASED[i % 2] if i % 17 == 3 else None if i % 31 == 0 else f"k{phase}-{codec}-{i}".encode()
            headers = [("h", f"{i}".encode()), ("empty", b"")] if i % 4 == 0 else []
            producer.send(TOPIC, key=key, value=_noise(f"{phase} {codec} {i}"), headers=headers)
        producer.flush()
        producer.close()
    txn = cluster.producer(transactional_id=f"{TOPIC}-txn-{phase}", linger_ms=5, batch_size=4096)
    txn.init_transactions()
    for n, commit in enumerate((True, False, True)):
        txn.begin_transaction()
        for i in range(30):
            key = ERASED[0] if i % 10 == 4 else f"t{phase}-{n}-{i}".encode()
            txn.send(TOPIC, key=key, value=_noise(f"txn {phase} {n} {i}"))
        txn.flush()  # in the log before the marker: an abort must have something to abort
        txn.commit_transaction() if commit else txn.abort_transaction()
    txn.close()
    filler = cluster.producer(linger_ms=5, batch_size=4096)
    for i in range(250):
        filler.send(TOPIC, key=f"filler-{phase}-{i}".encode(), value=os.urandom(120))
    filler.flush()
    filler.close()


def _tiered(cluster: KafkaCluster, platform: BesideKafka) -> int:
    """Copy once the broker has checkpointed the partition's LSO up to its end; the highest
    copied offset."""
    end = consume(cluster, TOPIC, 0)[-1].offset + 1
    cluster.wait_until("the checkpointed LSO", lambda: platform.status(TOPIC)["last_stable_offset"] >= end)
    platform.ok("copy", "--topic", TOPIC)
    return int(platform.status(TOPIC)["highest_copied_offset"])


def _table(platform: BesideKafka) -> Any:
    config = load_config(platform.config_path)
    assert config.export is not None
    table = open_table(load_catalog(config), table_name(config.export, TOPIC), create=False)
    assert table is not None
    return table


def _rows_at_every_snapshot(platform: BesideKafka) -> dict[int, list[dict[str, Any]]]:
    """Each snapshot the table keeps, with every row a time-travel scan of it reads."""
    table = _table(platform)
    return {
        s.snapshot_id: table.scan(snapshot_id=s.snapshot_id, selected_fields=("offset", "key")).to_arrow().to_pylist()
        for s in table.snapshots()
    }


def _holding(snapshots: dict[int, list[dict[str, Any]]]) -> set[int]:
    """The snapshots with a row of the keys."""
    return {sid for sid, rows in snapshots.items() if any(r["key"] in ERASED for r in rows)}


def _current_rows(platform: BesideKafka) -> list[tuple[int, bytes | None, bytes | None]]:
    """The table's current rows as (offset, key, value), by offset."""
    rows = _table(platform).scan(selected_fields=("offset", "key", "value")).to_arrow().to_pylist()
    return sorted((r["offset"], r["key"], r["value"]) for r in rows)


def _segments(platform: BesideKafka) -> dict[str, dict[str, Any]]:
    rows = platform.ok("--json", "segments", "--topic", TOPIC, "--partition", "0").json()
    return {row["segment_id"]: row for row in rows}


def _store_and_lake(platform: BesideKafka, s3: S3Endpoint) -> tuple[bytes, bytes, dict[str, str], list[str]]:
    """What a dry run must leave as it is: the metadata store, the Iceberg catalog, the bucket's
    objects and the warehouse's files."""
    store = (platform.root / "metadata.db").read_bytes()
    catalog = (platform.root / "iceberg.db").read_bytes()
    warehouse = sorted(str(p) for p in (platform.root / "warehouse").rglob("*"))
    return store, catalog, bucket_objects(s3, platform), warehouse


def _fetched(platform: BesideKafka, count: int, level: str) -> list[ConsumedRecord]:
    """``count`` records ``tiering fetch`` serves from offset 0 on."""
    rows = platform.remote_records(TOPIC, 0, 0, count, "--isolation-level", level)
    return [ConsumedRecord.from_fetch(r) for r in rows]


def _erase(platform: BesideKafka, key_file: Path, *args: str) -> dict[str, Any]:
    """``tiering erase`` of the keys in ``key_file`` (never a key in argv); its JSON. It never
    prints a key."""
    result = platform.run("--json", "erase", "--topic", TOPIC, "--key-file", str(key_file), *args)
    assert not any(key.decode() in result.stdout + result.stderr for key in ERASED)
    found: dict[str, Any] = result.json()
    return found


def _kill_during_erase(platform: BesideKafka, key_file: Path, tmp_path: Path) -> None:
    """``tiering erase`` in a child process, killed with SIGKILL once its second segment's switch
    committed."""
    scratch = tmp_path / "scratch"  # what the killed run could not remove stays in the test's directory
    scratch.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", KILL_DURING_ERASE, str(platform.config_path), "switch", TOPIC, str(key_file)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(scratch)},
        capture_output=True,
        timeout=180,
    )
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    assert not any(key in proc.stdout + proc.stderr for key in ERASED)


def _source(record: ConsumedRecord) -> Selected:
    return record.key, record.value, record.headers, record.timestamp


def _unmarked(record: ConsumedRecord) -> Selected:
    assert record.headers and record.headers[-1][0] == SOURCE_HEADER, record
    return record.key, record.value, record.headers[:-1], record.timestamp


def _kept(records: list[ConsumedRecord]) -> list[ConsumedRecord]:
    return [r for r in records if r.key not in ERASED]


def _assert_replay_leaves_out_the_keys(
    cluster: KafkaCluster, platform: BesideKafka, before: list[ConsumedRecord]
) -> None:
    """``tiering replay`` of the whole tier writes every committed record but the keys' records,
    each marked with its source offset."""
    target = f"{TOPIC}-replayed"
    cluster.create_topic(target)
    done = platform.ok(
        "replay", "--target", TARGET, "--json", "--topic", TOPIC, "--from-offset", "0", "--target-topic", target
    ).json()
    assert [p["outcome"] for p in done["partitions"]] == ["replayed"], done
    got = consume(cluster, target, 0, isolation_level="read_committed")
    want = _kept(before)
    assert not any(r.key in ERASED for r in got)
    assert [_unmarked(r) for r in got] == [_source(r) for r in want]
    marks = [SourceMark.of(r.headers) for r in got]
    assert [m.offset if m else None for m in marks] == [r.offset for r in want]


def _assert_restored_partition_serves_no_key(
    cluster: KafkaCluster, platform: BesideKafka, hco: int, before: dict[str, list[ConsumedRecord]]
) -> None:
    """The partition's directory lost and ``tiering restore`` writing it back from the erased
    tier: a restarted broker serves every kept record at its offset and none of the keys'."""
    path = cluster.partition_dir(1, TOPIC, 0)
    cluster.stop_node(1)  # controlled shutdown
    shutil.rmtree(path)
    restored = platform.ok(
        "restore", "--topic", TOPIC, "--partition", "0", "--to", str(path.parent), "--force", "--json"
    ).json()
    assert restored["end_offset"] == hco and restored["log_start_offset"] == 0
    # Kafka's own DumpLogSegments reads every restored batch (decompressed) and index entry.
    output = dump(cluster, sorted(f for f in path.iterdir() if f.suffix in (".log", ".index", ".timeindex")))
    valid, _keyed = dumped(output)
    assert valid and set(valid) == {"true"}, "every batch's CRC valid"
    assert "mismatch" not in output.lower(), "the indexes agree with the logs"
    listed = [int(m.group(1)) for line in output.splitlines() if (m := _DATA_RECORD.match(line))]
    assert listed == [r.offset for r in _kept(before["read_uncommitted"])]
    assert not any(key.decode() in output for key in ERASED)
    cluster.start_node(1)
    cluster.wait_ready()
    cluster.wait_until("the partition's leader", lambda: cluster.leader(TOPIC, 0) == 1)
    for level, records in before.items():
        after = consume(cluster, TOPIC, 0, isolation_level=level, until=hco + 1)
        assert after == _kept(records), level
    producer = cluster.producer()  # and the broker goes on from the restored end
    assert producer.send(TOPIC, value=b"after the restore").get(timeout=30).offset == hco + 1
    producer.close()


def _tier_and_export_twice(cluster: KafkaCluster, platform: BesideKafka) -> int:
    """Two rounds of producing, tiering and exporting, so that the table holds the keys' rows at
    more than one snapshot; the highest copied offset."""
    hco = -1
    for phase in (1, 2):
        _produce(cluster, phase)
        hco = _tiered(cluster, platform)
        exported = platform.ok("export", "--topic", TOPIC, "--json").json()
        assert exported["rows"] > 0 and not exported["failed"], exported
    assert len(_holding(_rows_at_every_snapshot(platform))) >= 2, "the keys' rows at more than one snapshot"
    return hco


def _local_holding(cluster: KafkaCluster, records: list[ConsumedRecord]) -> list[tuple[int, str, int]]:
    """The broker's own segments holding records of the keys, by base offset and file name, with
    the count of those records (``records``: all the partition holds)."""
    bases = sorted(int(p.stem) for p in cluster.partition_dir(1, TOPIC, 0).glob("*.log"))
    found = []
    for base, end in zip(bases, [*bases[1:], None], strict=True):
        n = sum(r.key in ERASED for r in records if r.offset >= base and (end is None or r.offset < end))
        if n:
            found.append((base, f"{base:020d}.log", n))
    return found


def _dry_run_writes_nothing(
    platform: BesideKafka, s3: S3Endpoint, key_file: Path, erased: int, local: list[tuple[int, str, int]]
) -> set[str]:
    """A dry run names the segments holding the keys, the records it would remove and the
    broker's own segments still holding them (``local``), and writes nothing; the segment ids it
    names."""
    untouched = _store_and_lake(platform, s3)
    dry = _erase(platform, key_file, "--dry-run")
    assert _store_and_lake(platform, s3) == untouched
    (planned,) = dry["partitions"]
    assert dry["records_removed"] == erased and dry["dry_run"], dry
    named = planned["local_segments"]["segments"]
    assert [(s["base_offset"], s["file_name"], s["records"]) for s in named] == local
    assert all(s["copied"] and not s["active"] for s in named), named
    return {h["segment_id"] for h in planned["hits"]}


def _killed_then_rerun(platform: BesideKafka, key_file: Path, tmp_path: Path, topic_id: str, erased: int) -> None:
    """An erasure killed right after its second switch; a rerun, once the lease lapsed, finishes
    it (its leftover cleaned up, the export table erased); another finds nothing more."""
    _kill_during_erase(platform, key_file, tmp_path)
    (killed,) = platform.ok("--json", "erase", "--status", "--topic", TOPIC).json()
    assert killed["outcome"] == "started", killed
    # the trail counts the first switch; the second is named, its switch not recorded before the kill
    assert [s["new_segment_id"] is None for s in killed["segments"]] == [False, True], killed
    with TieringContext.open(load_config(platform.config_path)) as ctx:
        expire_lease(ctx.metadata, TopicIdPartition(topic_id, TopicPartition(TOPIC, 0)))
    rerun = _erase(platform, key_file, "--yes")
    (partition,) = rerun["partitions"]
    assert partition["segments_cleaned_up"] >= 1 and not rerun["failures"], rerun
    assert sum(s["records_removed"] for s in killed["segments"]) + rerun["records_removed"] == erased
    (table,) = rerun["tables"]
    assert table["rows_deleted"] > 0 and table["snapshots_expired"] >= 2, table
    again = _erase(platform, key_file, "--yes")
    assert again["records_removed"] == 0 and again["tables"][0]["rows_deleted"] == 0, again


def _assert_other_segments_kept(
    platform: BesideKafka, s3: S3Endpoint, before: dict[str, dict[str, Any]], objects: dict[str, str], hits: set[str]
) -> None:
    """Segments without the keys keep their ids, rows and objects; those with them are new
    copies, and the old copies' objects are gone."""
    after = _segments(platform)
    kept_ids = set(before) - hits
    assert {sid: after[sid] for sid in kept_ids} == {sid: before[sid] for sid in kept_ids}
    assert not hits & set(after) and len(after) == len(before)
    objects_after = bucket_objects(s3, platform)
    for sid in kept_ids:
        own = {k: v for k, v in objects.items() if sid in k}
        assert own and {k: v for k, v in objects_after.items() if sid in k} == own
    assert not [k for k in objects_after if any(sid in k for sid in hits)], "the old copies' objects deleted"


def _assert_table_holds_no_key(platform: BesideKafka, holding: set[int], committed: list[ConsumedRecord]) -> None:
    """An export adds nothing; no snapshot the table keeps holds a row of the keys (those that
    did are expired), and its current rows are every other committed record's."""
    exported = platform.ok("export", "--topic", TOPIC, "--json").json()
    assert exported["rows"] == 0 and exported["snapshots"] == [], exported
    snapshots = _rows_at_every_snapshot(platform)
    assert snapshots and not holding & set(snapshots)
    assert not _holding(snapshots)
    assert _current_rows(platform) == [(r.offset, r.key, r.value) for r in _kept(committed)]


def test_an_erasure_of_a_real_brokers_records_leaves_no_key_on_any_path(
    private_kafka: PrivateKafka, beside: Callable[..., BesideKafka], s3_endpoint: S3Endpoint, tmp_path: Path
) -> None:
    key_file = tmp_path / "keys.txt"
    key_file.write_bytes(b"\n".join(ERASED) + b"\n")
    with private_kafka() as cluster:
        topic_id = uuid_to_topic_id(uuid.UUID(cluster.create_topic(TOPIC, segment_bytes=SEGMENT_BYTES)))
        platform = beside(cluster)
        platform.document["export"] = {"catalog": sqlite_catalog(platform.root)}
        platform.document["replay"] = {"targets": {TARGET: {"bootstrap_servers": cluster.bootstrap_servers}}}
        platform.write()
        hco = _tier_and_export_twice(cluster, platform)
        holding = _holding(_rows_at_every_snapshot(platform))
        before = {level: consume(cluster, TOPIC, 0, isolation_level=level, until=hco + 1) for level in LEVELS}
        assert len(before["read_committed"]) < len(before["read_uncommitted"])  # aborted records are hidden
        erased = sum(r.key in ERASED for r in before["read_uncommitted"])
        segments_before = _segments(platform)
        objects_before = bucket_objects(s3_endpoint, platform)

        local = _local_holding(cluster, consume(cluster, TOPIC, 0))
        hits = _dry_run_writes_nothing(platform, s3_endpoint, key_file, erased, local)
        assert 3 <= len(hits) < len(segments_before), "the keys in several segments, not in all"
        _killed_then_rerun(platform, key_file, tmp_path, topic_id, erased)
        _assert_other_segments_kept(platform, s3_endpoint, segments_before, objects_before, hits)

        # tiering fetch: every other record as the consumer read it, at its offset.
        for level in LEVELS:
            kept = _kept(before[level])
            assert kept[-1].offset == hco  # the tier's last record is filler: the fetch covers it all
            assert _fetched(platform, len(kept), level) == kept, level
        _assert_table_holds_no_key(platform, holding, before["read_committed"])
        _assert_replay_leaves_out_the_keys(cluster, platform, before["read_committed"])
        _assert_restored_partition_serves_no_key(cluster, platform, hco, before)
