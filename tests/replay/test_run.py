"""A record kafka-python cannot send fails its partition's replay by name, after what came before
it was committed, and leaves the other partitions replayed; a rerun stops at it again and never
doubles what the target holds; a deleted topic's undecided transaction is reported, exit 3 (a real
Kafka target, the tier on moto's S3 server)."""

from __future__ import annotations

import time
import uuid

from tests.engine_support import TieringEnv
from tests.real_kafka import conftest as real_kafka
from tests.real_kafka.cluster import KafkaCluster
from tests.real_kafka.support import consume
from tiering_core.config import KafkaConfig
from tiering_core.kafka.checkpoints import uuid_to_topic_id
from tiering_core.replay import RangeRequest, ReplayRequest, SourceMark, replay
from tiering_core.runs import copy as copy_run

# The real-Kafka fixtures, for this module too.
kafka_dist = real_kafka.kafka_dist
kafka = real_kafka.kafka


def test_a_record_the_client_cannot_send_fails_only_its_partition(
    tiering_env: TieringEnv, kafka: KafkaCluster, monkeypatch
) -> None:
    import tiering_core.replay.run as run

    monkeypatch.setattr(run, "TRANSACTION_RECORDS", 10)  # the first transactions commit before the bad record
    now = int(time.time() * 1000)
    topic_id = uuid_to_topic_id(uuid.uuid4())
    writers = [tiering_env.writer("orders", p, topic_id=topic_id, clock=lambda: now) for p in range(2)]
    for w in writers:
        w.append([(f"k{i}".encode(), b"v") for i in range(25)])
        if w.tp.partition == 0:
            w.append([(None, None)])  # Kafka takes it; kafka-python refuses to send one
        w.append([(b"after", b"v")])
        w.roll()
        w.append([(b"active", b"v")])
        w.set_high_watermark()
    target = f"replay-failure-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(target, partitions=2, configs={"retention.ms": "-1"})
    request = ReplayRequest("orders", target, RangeRequest(from_offset=0), concurrency=2)
    cluster = KafkaConfig(bootstrap_servers=tuple(kafka.bootstrap_servers.split(",")))
    with tiering_env.context() as ctx:
        for w in writers:
            copy_run.run_copy(ctx, w.tp)
        for attempt in range(2):
            result = replay(ctx, request, cluster)
            failed, done = result.partitions
            assert (failed.outcome, done.outcome) == ("failed", "replayed" if attempt == 0 else "up to date")
            assert "offset 25 cannot be sent" in (failed.detail or ""), failed.detail
            assert failed.records == (20 if attempt == 0 else 0)  # two transactions of ten, then the bad one
            assert failed.resumed_after == (None if attempt == 0 else 19)
    committed = [SourceMark.of(r.headers) for r in consume(kafka, target, 0, isolation_level="read_committed")]
    assert [m.offset for m in committed if m is not None] == list(range(20))
    # The failed transactions are aborted: what of them the producer had sent before the bad record
    # only a read_uncommitted consumer sees, none of it past the bad record.
    marks = [SourceMark.of(r.headers) for r in consume(kafka, target, 0)]
    assert {m.offset for m in marks if m is not None} - set(range(20)) <= set(range(20, 25))
    assert [SourceMark.of(r.headers).offset for r in consume(kafka, target, 1)] == list(range(26))  # type: ignore[union-attr]


def test_a_deleted_topics_undecided_transaction_is_reported_and_the_command_exits_3(
    tiering_env: TieringEnv, kafka: KafkaCluster, capsys
) -> None:
    """``tiering replay`` of the tier alone: the records before the transaction whose marker was
    never tiered go out, its offsets on are listed as not replayed, the exit status is 3."""
    import json
    import shutil

    from tests.read.test_isolation import build, consumer_view
    from tiering_core.cli.main import main

    w = build(tiering_env)
    with tiering_env.context() as ctx:
        copy_run.run_copy(ctx, w.tp)
    first_of_9 = min(r.offset for r in consumer_view(w, False) if r.key == b"abort9-0")
    want = [r for r in consumer_view(w, True) if r.offset < first_of_9]
    shutil.rmtree(w.path)  # the topic deleted
    target = f"replay-undecided-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(target, configs={"retention.ms": "-1"})
    tiering_env.sections = {"replay": {"targets": {"local": {"bootstrap_servers": kafka.bootstrap_servers}}}}
    tiering_env.write_config()
    argv = ["replay", "--config", str(tiering_env.config_path), "--topic", "orders", "--from-offset", "0"]
    argv += ["--target-topic", target, "--target", "local", "--json"]
    assert main(argv) == 3
    out, err = capsys.readouterr()
    (partition,) = json.loads(out)["partitions"]
    assert partition["outcome"] == "replayed" and partition["records"] == len(want)
    assert [(g["start"], g["reason"].split(":")[0]) for g in partition["gaps"]] == [
        (first_of_9, "a transaction open at the end of the tier")
    ]
    assert f"offsets {first_of_9}-" in err and "NOT replayed" in err
    got = consume(kafka, target, 0)
    assert [(r.key, r.value) for r in got] == [(r.key, r.value) for r in want]
