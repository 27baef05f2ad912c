"""An erasure names the broker's local segments that still hold the keys, read-only: each by base
offset and file name with its count of the keys' records and when local retention removes it
(largest timestamp + the effective ``local.retention.ms``; never the active segment before it
rolls); a key only in the tier names none; a partition with no log dir here is named as not
checked, never a failure; the audit trail keeps it and ``--status`` shows it; a dry run reports
the same and writes nothing. Expected counts and timestamps come from kafka-python's decoder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kafka.record import MemoryRecords

from tests.engine_support import TieringEnv
from tests.runs.test_erase import ERASED, OTHER_ERASED, SQLITE, copied, erase, served
from tiering_core.cli import main
from tiering_core.humanize import fmt_duration, fmt_utc
from tiering_core.kafka.batch import CODEC_LZ4, CODEC_NONE, CODEC_ZSTD
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.metadata.erasures import LocalSegment
from tiering_core.runs.erase_report import format_erasure

pytestmark = pytest.mark.xdist_group("erase")

RETENTION_MS = 3_600_000


def kafka_python_holding(w: PartitionWriter, keys: set[bytes]) -> list[tuple[int, str, int, int]]:
    """(base offset, file name, records of ``keys``, largest timestamp) of each local segment
    holding one, as kafka-python decodes the broker's files."""
    found = []
    for base in w.segment_bases():
        path = w.path / f"{base:020d}.log"
        records = MemoryRecords(path.read_bytes())
        count, largest = 0, -1
        while (batch := records.next_batch()) is not None:
            for r in batch:
                largest = max(largest, r.timestamp)
                count += r.key in keys
        if count:
            found.append((base, path.name, count, largest))
    return found


def with_late_records(env: TieringEnv, codec: int) -> PartitionWriter:
    """The tier holds four segments (three with the keys); the broker then wrote a closed segment
    not yet copied and an active one, both holding ``ERASED``."""
    env.write_config(orders={"local.retention.ms": RETENTION_MS, "local.retention.bytes": 1 << 30})
    w = copied(env, codec)
    w.append([(b"late", b"1"), (ERASED, b"2")])
    w.roll()
    w.append([(ERASED, b"3"), (b"last", b"4")])
    return w


@SQLITE
@pytest.mark.parametrize("codec", [CODEC_NONE, CODEC_LZ4, CODEC_ZSTD], ids=["plain", "lz4", "zstd"])
def test_the_local_segments_holding_the_keys_are_named_with_when_local_retention_removes_them(
    tiering_env: TieringEnv, codec: int, capsys: pytest.CaptureFixture[str]
) -> None:
    w = with_late_records(tiering_env, codec)
    expected = kafka_python_holding(w, {ERASED, OTHER_ERASED})
    files_before = {p.name: p.read_bytes() for p in w.path.iterdir()}
    result = erase(tiering_env, ERASED, OTHER_ERASED)

    assert not result.failures
    (partition,) = result.partitions
    local = partition.local_segments
    assert local is not None and local.not_checked is None and local.log_dir == str(tiering_env.log_dir)
    active_base = w.segment_bases()[-1]
    uncopied_base = w.segment_bases()[-2]
    assert list(local.segments) == [
        LocalSegment(
            base,
            name,
            count,
            largest,
            active=base == active_base,
            copied=base < uncopied_base,
            removed_by_time_ms=None if base == active_base else largest + RETENTION_MS,
        )
        for base, name, count, largest in expected
    ]
    assert len(local.segments) == 5 and local.segments_read == len(w.segment_bases())
    assert (local.local_retention_ms, local.local_retention_bytes) == (RETENTION_MS, 1 << 30)
    assert {p.name: p.read_bytes() for p in w.path.iterdir()} == files_before  # the broker's files untouched

    lines = format_erasure(result).splitlines()
    first = local.segments[0]
    assert (
        f"orders-0: local segment {first.file_name} (base offset 0): {first.records} record(s); by time from "
        f"{fmt_utc(first.largest_timestamp_ms + RETENTION_MS)} (largest timestamp {fmt_utc(first.largest_timestamp_ms)}"
        f" + local.retention.ms {fmt_duration(RETENTION_MS)}); local.retention.bytes {1 << 30} applies: sooner "
        "once the local log outgrows it (no time known)"
    ) in lines
    assert any(
        line.startswith(f"orders-0: local segment {uncopied_base:020d}.log") and "not yet: the next copy tiers" in line
        for line in lines
    )
    assert any(
        line.startswith(f"orders-0: local segment {active_base:020d}.log")
        and "the active segment: retention never removes it before it rolls" in line
        for line in lines
    )

    with tiering_env.context() as ctx:
        (record,) = ctx.metadata.erasures("orders")
    assert record.local_segments == local  # the audit trail keeps it as it was
    config = str(tiering_env.config_path)
    assert main(["--config", config, "erase", "--status", "--topic", "orders"]) == 0
    status = capsys.readouterr().out
    assert f"{result.erasure_id} orders-0: local segment {first.file_name} (base offset 0)" in status
    assert ERASED.decode() not in status and OTHER_ERASED.decode() not in status
    assert main(["--config", config, "--json", "erase", "--status", "--topic", "orders"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["local_segments"] == local.to_dict() and row["local_segments"]["records"] == sum(e[2] for e in expected)


@SQLITE
def test_a_key_only_in_the_tier_names_no_local_segment(tiering_env: TieringEnv) -> None:
    """The broker's local retention already removed the segments holding the keys: the tier is
    erased, and no local segment is named."""
    w = copied(tiering_env)
    w.delete_oldest_segments(3)
    assert kafka_python_holding(w, {ERASED, OTHER_ERASED}) == []
    result = erase(tiering_env, ERASED, OTHER_ERASED)
    (partition,) = result.partitions
    assert partition.records_removed == 5 and not result.failures
    local = partition.local_segments
    assert local is not None and local.segments == () and local.not_checked is None
    assert local.segments_read == len(w.segment_bases()) == 2
    assert (local.local_retention_ms, local.local_retention_bytes) == (None, None)  # not configured: not known
    assert (
        f"orders-0: no local segment holds the key(s) (2 read in {tiering_env.log_dir})"
        in format_erasure(result).splitlines()
    )


@SQLITE
def test_a_partition_without_a_log_dir_here_is_named_as_not_checked_and_still_erased(
    tiering_env: TieringEnv, tmp_path: Path
) -> None:
    w = copied(tiering_env)
    before = served(tiering_env, w)
    tiering_env.log_dir = tmp_path / "not-on-this-host"  # the erasure runs on a host without the broker's disks
    tiering_env.write_config()
    result = erase(tiering_env, ERASED)
    assert not result.failures
    (partition,) = result.partitions
    assert partition.records_removed == 4
    tiering_env.log_dir.mkdir()  # the reader serves the tier alone where the log dir holds no directory of it
    assert served(tiering_env, w) == [r for r in before if r.key != ERASED]
    local = partition.local_segments
    assert local is not None and local.log_dir is None and local.segments == ()
    assert local.not_checked == "no log dir of orders-0 on this host"
    assert (
        "orders-0: local segments not checked: no log dir of orders-0 on this host"
        in format_erasure(result).splitlines()
    )
    with tiering_env.context() as ctx:
        (record,) = ctx.metadata.erasures("orders")
    assert record.local_segments == local


@SQLITE
def test_a_directory_of_another_incarnation_of_the_topic_is_not_read(tiering_env: TieringEnv) -> None:
    """The topic was deleted and made again: the log dir's ``orders-0`` is the new topic's, not
    the tier's; its segments (holding the key too) are not named as the erased topic id's."""
    old = copied(tiering_env)
    old.delete()
    new = tiering_env.writer()
    new.append([(ERASED, b"new topic")])
    result = erase(tiering_env, ERASED)
    (partition,) = result.partitions
    assert partition.topic_id == old.topic_id and partition.records_removed == 4 and not result.failures
    local = partition.local_segments
    assert local is not None and local.segments == () and local.log_dir is None
    assert local.not_checked == (
        f"no log dir of orders-0 on this host: {new.path} holds topic id {new.topic_id}, another incarnation of orders"
    )


@SQLITE
def test_a_dry_run_names_the_same_local_segments_and_writes_nothing(tiering_env: TieringEnv) -> None:
    w = with_late_records(tiering_env, CODEC_ZSTD)
    store_file = Path(tiering_env.metadata_url.removeprefix("sqlite:///"))
    store_bytes = store_file.read_bytes()
    planned = erase(tiering_env, ERASED, dry_run=True).partitions[0].local_segments
    assert store_file.read_bytes() == store_bytes
    done = erase(tiering_env, ERASED).partitions[0].local_segments
    assert planned is not None and done is not None
    assert planned.segments == done.segments and planned.log_dir == done.log_dir
    assert [(s.base_offset, s.records) for s in planned.segments] == [
        (base, count) for base, _name, count, _largest in kafka_python_holding(w, {ERASED})
    ]
