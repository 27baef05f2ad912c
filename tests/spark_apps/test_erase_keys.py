"""The erase app in local[2] over a topic of three partitions on S3: the keys' records leave the tier
exactly as ``tiering erase`` removes them from an identical copy (same lines and JSON but for the
ids it makes), segments without a key keep their ids, a dry run writes nothing, and a partition
another run holds is one failure line while the others are erased."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.engine_support import TieringEnv, segment_objects, tip_of
from tests.runs.test_erase import ERASED, OTHER_ERASED, write_plain_partition
from tests.services import S3Endpoint
from tests.spark_apps.test_rebuild_indexes import s3_env
from tiering_core.cli import main as tiering
from tiering_core.engine.lease import held_partition
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.metadata.erasures import FINISHED as ERASURE_FINISHED
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.read.reader import FetchedRecord, open_reader
from tiering_core.runs.copy import run_copy

pytestmark = pytest.mark.xdist_group("erase")

FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
PARTITIONS = 3
KEYS = {ERASED, OTHER_ERASED}
ABSENT_KEYS = 9_998


def tiered_topic(root: Path, s3_endpoint: S3Endpoint) -> tuple[TieringEnv, list[PartitionWriter]]:
    """orders-0..2 on S3: four segments each, three of them holding a key (the last partition's
    records shifted by one batch, so no two partitions are alike)."""
    root.mkdir()
    env = s3_env(root, s3_endpoint)
    writers = []
    for p in range(PARTITIONS):
        w = env.writer("orders", p)
        if p == PARTITIONS - 1:
            w.append([(b"z", b"0")])
        write_plain_partition(w)
        w.set_high_watermark()
        writers.append(w)
    with env.context() as ctx:
        for w in writers:
            run_copy(ctx, w.tp)
    return env, writers


def served(env: TieringEnv, w: PartitionWriter) -> list[FetchedRecord]:
    with env.context() as ctx:
        return open_reader(ctx, w.tp).read(0, 10_000)


def segment_ids(env: TieringEnv, w: PartitionWriter) -> dict[int, str]:
    """Each finished segment's id by its start offset."""
    with env.context() as ctx:
        return {s.start_offset: str(s.segment_id) for s in ctx.metadata.list_segments(tip_of(w)) if s.state == FINISHED}


def without_ids(document: dict[str, Any]) -> dict[str, Any]:
    """An erasure's JSON without what each copy of the tier names anew (the erasure id, the topic id,
    the segment ids: the offsets of each segment stay) and what each copy's own log dir holds
    apart from offsets and counts (its path, when it was read, its records' timestamps: each copy
    was written by its own writer)."""

    def hit(h: dict[str, Any]) -> dict[str, Any]:
        return {**h, "segment_id": None, "new_segment_id": h["new_segment_id"] is not None}

    def local(found: dict[str, Any] | None) -> dict[str, Any] | None:
        if found is None:
            return None
        segments = [{**s, "largest_timestamp_ms": None} for s in found["segments"]]
        return {**found, "log_dir": found["log_dir"] is not None, "checked_ms": None, "segments": segments}

    partitions = [
        {**p, "topic_id": None, "hits": [hit(h) for h in p["hits"]], "local_segments": local(p["local_segments"])}
        for p in document["partitions"]
    ]
    return {**document, "erasure_id": None, "partitions": partitions}


def test_the_app_erases_the_keys_as_tiering_erase_does(tmp_path: Path, spark, s3_endpoint, capsys) -> None:
    from spark_apps.erase_keys import main

    app_env, app_writers = tiered_topic(tmp_path / "app", s3_endpoint)
    cli_env, cli_writers = tiered_topic(tmp_path / "cli", s3_endpoint)
    key_file = tmp_path / "keys.txt"
    absent = [f"absent-{n:05}" for n in range(ABSENT_KEYS)]  # a large key file ships to the tasks whole
    key_file.write_text("".join(k + "\n" for k in [*absent, *(k.decode() for k in sorted(KEYS))]))
    before = [served(app_env, w) for w in app_writers]
    cli_before = [served(cli_env, w) for w in cli_writers]
    ids_before = [segment_ids(app_env, w) for w in app_writers]
    capsys.readouterr()

    erase = ["--topic", "orders", "--key-file", str(key_file), "--requested-by", "test", "--yes"]
    assert main(["--config", str(app_env.config_path), *erase, "--json"], spark=spark) == 0
    app_out = json.loads(capsys.readouterr().out)
    assert tiering(["--config", str(cli_env.config_path), "--json", "erase", *erase]) == 0
    cli_out = json.loads(capsys.readouterr().out)

    assert without_ids(app_out) == without_ids(cli_out)
    for w, records in zip(cli_writers, cli_before, strict=True):
        assert served(cli_env, w) == [r for r in records if r.key not in KEYS]
    assert [p["partition"] for p in app_out["partitions"]] == list(range(PARTITIONS))
    assert len(app_out["key_sha256"]) == ABSENT_KEYS + len(KEYS)
    assert app_out["records_removed"] == sum(r.key in KEYS for records in before for r in records) > 0
    for w, records, ids, hits in zip(app_writers, before, ids_before, app_out["partitions"], strict=True):
        assert served(app_env, w) == [r for r in records if r.key not in KEYS]
        copied = {h["start_offset"]: h["new_segment_id"] for h in hits["hits"]}
        assert segment_ids(app_env, w) == {start: copied.get(start, sid) for start, sid in ids.items()}
        assert len(copied) == 3 and len(ids) == 4  # the segment without a key keeps its id
    with app_env.context() as ctx:
        trail = ctx.metadata.erasures("orders")
        assert {(r.partition, r.outcome, r.requested_by) for r in trail} == {
            (p, ERASURE_FINISHED, "test") for p in range(PARTITIONS)
        }
        assert {r.erasure_id for r in trail} == {app_out["erasure_id"]}

    assert main(["--config", str(app_env.config_path), *erase], spark=spark) == 0  # again: nothing left
    out = capsys.readouterr().out
    assert out.rstrip().endswith("3 partition(s), removed 0 record(s)"), out
    assert not any(k.decode() in out for k in KEYS)


def test_a_dry_run_names_what_it_would_remove_and_writes_nothing(tmp_path: Path, spark, s3_endpoint, capsys) -> None:
    from spark_apps.erase_keys import main

    env, writers = tiered_topic(tmp_path / "t", s3_endpoint)
    key_file = tmp_path / "keys.txt"
    key_file.write_text(ERASED.hex() + "\n")
    with env.context() as ctx:
        objects = sorted((o.key, o.size) for w in writers for o in segment_objects(ctx, tip_of(w)))
    ids = [segment_ids(env, w) for w in writers]
    capsys.readouterr()

    argv = ["--config", str(env.config_path), "--topic", "orders", "--key-file", str(key_file), "--key-encoding", "hex"]
    assert main([*argv, "--partition", "0", "--partition", "2", "--dry-run"], spark=spark) == 0
    out = capsys.readouterr().out
    assert "orders-0: segment " in out and "would remove 3 record(s)" in out and "orders-1" not in out, out
    assert out.rstrip().endswith("2 partition(s), would remove 8 record(s)"), out

    with env.context() as ctx:
        assert sorted((o.key, o.size) for w in writers for o in segment_objects(ctx, tip_of(w))) == objects
        assert ctx.metadata.erasures("orders") == []
    assert [segment_ids(env, w) for w in writers] == ids
    assert main(argv, spark=spark) == 1  # neither --yes nor --dry-run: refused
    assert "without --yes" in capsys.readouterr().err
    other = ["--config", str(env.config_path), "--topic", "payments", "--key-file", str(key_file), "--dry-run"]
    assert main(other, spark=spark) == 1  # a topic the tier holds nothing of: refused as the command refuses it
    assert capsys.readouterr().err.strip() == (
        "erase_keys: failed: topic payments has nothing in the remote tier to erase from"
    )


def test_a_partition_that_fails_is_one_line_and_the_others_are_erased(
    tmp_path: Path, spark, s3_endpoint, capsys
) -> None:
    from spark_apps.erase_keys import main

    env, writers = tiered_topic(tmp_path / "t", s3_endpoint)
    key_file = tmp_path / "keys.txt"
    key_file.write_text(ERASED.decode() + "\n")
    before = [served(env, w) for w in writers]
    capsys.readouterr()

    with env.context() as ctx, held_partition(ctx.metadata, tip_of(writers[1]), holder="test:another-run"):
        code = main(
            ["--config", str(env.config_path), "--topic", "orders", "--key-file", str(key_file), "--yes"], spark=spark
        )
    out, err = capsys.readouterr()
    assert code == 1
    assert "2 partition(s), removed " in out and "1 failure(s)" in out, out
    (line,) = [x for x in err.splitlines() if x.startswith("erase_keys: failed: ")]
    assert line.startswith("erase_keys: failed: orders-1: ") and "test:another-run" in line, err
    for p in (0, 2):
        assert served(env, writers[p]) == [r for r in before[p] if r.key != ERASED]
    assert served(env, writers[1]) == before[1]  # the held partition untouched


def test_partitions_come_repeated_or_as_a_comma_list_and_blank_names_none(tmp_path: Path) -> None:
    from spark_apps.erase_keys import build_parser

    def partitions(*values: str) -> list[int] | None:
        argv = ["--topic", "orders", "--key", "k"] + [arg for v in values for arg in ("--partition", v)]
        return build_parser().parse_args(argv).erase_partitions

    assert partitions("0", "3") == [0, 3]
    assert partitions("0,2", "5") == [0, 2, 5]
    assert partitions(" 1 , 4 ") == [1, 4]
    assert partitions("") == []  # a templated argument left unset: every partition
    assert partitions() is None
    for bad in ("x", "1,-2", "1;2"):
        with pytest.raises(SystemExit):
            partitions(bad)


def test_with_a_key_dir_the_key_file_is_read_only_from_under_it(tmp_path: Path) -> None:
    from spark_apps import runtime
    from spark_apps.erase_keys import build_parser, read_request
    from tiering_core.runs.errors import ErasureRefusedError

    key_dir = tmp_path / "requests"
    key_dir.mkdir()
    (key_dir / "r-1.txt").write_text("user-1\n")
    (tmp_path / "outside.txt").write_text("user-2\n")
    (key_dir / "escape.txt").symlink_to(tmp_path / "outside.txt")

    def request(key_file: str, *more: str):  # type: ignore[no-untyped-def]
        args = build_parser().parse_args(["--topic", "orders", "--key-file", key_file, "--yes", *more])
        return read_request(args, runtime.parse_selection(args))

    assert request("r-1.txt", "--key-dir", str(key_dir)).keys == {b"user-1"}
    for name, reason in [("escape.txt", "leads out of dags.erase.key_dir"), ("../outside.txt", "without '..'")]:
        with pytest.raises(ErasureRefusedError, match=reason):
            request(name, "--key-dir", str(key_dir))
    assert request(str(tmp_path / "outside.txt")).keys == {b"user-2"}  # no --key-dir: the path as given
