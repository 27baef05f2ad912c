"""The generated DAGs in the cluster form (``brokers:``): a task group per broker whose tasks run on
that broker's queue and name it, parsed while no log dir exists, and real runs (``dag.test()``)
on two brokers' log dirs against moto's S3 server and a SQLite metadata store, in which each
broker's tasks read only their own broker's disks."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.airflow_support import task_runs
from tests.dags.conftest import SECRET
from tests.dags.test_tiering_dags import DAGS, DEFAULT_DAGS, dagbag
from tests.engine_support import counted_view_builds, tip_of, write_segments
from tests.services import S3Endpoint
from tiering_core.config import load_config
from tiering_core.context import TieringContext
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.kafka.topic import TopicPartition
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.storage.identity import IDENTITY_OBJECT
from tiering_core.storage.partition_state import partition_state_key

QUEUES = {1: "tiering-broker-1", 2: "kafka-b-host"}  # broker 2's queue is named in the config


@dataclass
class Cluster:
    """Two brokers' log dirs (each with its ``meta.properties``), one config naming both."""

    root: Path
    config_path: Path
    doc: dict[str, Any]

    def log_dir(self, broker_id: int) -> Path:
        return self.root / f"broker-{broker_id}"

    def writer(self, broker_id: int, topic: str, partition: int) -> PartitionWriter:
        return PartitionWriter(
            self.log_dir(broker_id), TopicPartition(topic, partition), node_id=broker_id, segment_bytes=10**9
        )

    def write(self) -> None:
        self.config_path.write_text(yaml.safe_dump(self.doc))

    def finished(self, w: PartitionWriter) -> list[tuple[int, int]]:
        with TieringContext.open(load_config(self.config_path)) as ctx:
            return [
                (s.start_offset, s.end_offset)
                for s in ctx.metadata.list_segments(tip_of(w))
                if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
            ]

    def observers(self, w: PartitionWriter) -> list[int]:
        """The brokers that recorded an observation of the writer's partition."""
        with TieringContext.open(load_config(self.config_path)) as ctx:
            seen, _ = ctx.metadata.observations_of(tip_of(w))
        return sorted(seen)


def cluster_doc(root: Path, remote: dict[str, Any], **topics: Any) -> dict[str, Any]:
    return {
        "brokers": {
            1: {"log_dirs": [str(root / "broker-1")]},
            2: {"log_dirs": [str(root / "broker-2")], "queue": QUEUES[2]},
        },
        "metadata": {"url": f"sqlite:///{root / 'm.db'}", "lease_ms": 30_000},
        "remote": remote,
        "topics": {"*": {"retention.ms": -1, "retention.bytes": -1}, **topics},
    }


@pytest.fixture()
def cluster(tmp_path: Path, s3_endpoint: S3Endpoint, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    """The config of two brokers, S3 credentials from the ``aws_default`` connection only."""
    remote = {"backend": "s3", "bucket": s3_endpoint.new_bucket(), "prefix": "t/", "region": "us-east-1"}
    c = Cluster(tmp_path, tmp_path / "tiering.yaml", cluster_doc(tmp_path, remote, orders={"retention.bytes": 0}))
    c.write()
    monkeypatch.setenv("TIERING_CONFIG", str(c.config_path))
    monkeypatch.setenv("TIERING_SENSOR_POKE_SECONDS", "0.2")
    monkeypatch.delenv("TIERING_SENSOR_DEFERRABLE", raising=False)
    monkeypatch.delenv("TIERING_BROKER_ID", raising=False)
    monkeypatch.setenv(
        "AIRFLOW_CONN_AWS_DEFAULT",
        json.dumps(
            {
                "conn_type": "aws",
                "login": "AKIDTIERINGTEST",
                "password": SECRET,
                "extra": {"endpoint_url": s3_endpoint.url, "region_name": "us-east-1"},
            }
        ),
    )
    return c


def with_segments(w: PartitionWriter, segments: int) -> PartitionWriter:
    write_segments(w, segments)
    w.append_records(3)  # the active segment: never copied
    w.set_high_watermark()
    return w


def broker_arguments(task: Any) -> tuple[str, Any]:
    """A task's queue and the broker id it names (an operator's argument, or a listing's)."""
    if hasattr(task, "op_args"):  # list_partitions: (topic, broker_id) or (broker_id,)
        return task.queue, task.op_args[-1]
    partial = getattr(task, "partial_kwargs", None)
    if partial is not None and "broker_id" in partial:
        return task.queue, partial["broker_id"]
    return task.queue, task.broker_id


def test_each_broker_has_a_task_group_on_its_queue_naming_it_and_parsing_reads_no_log_dir(cluster: Cluster) -> None:
    assert not cluster.log_dir(1).exists() and not cluster.log_dir(2).exists()
    bag = dagbag(DAGS / "tiering_dags.py")
    assert bag.import_errors == {}
    copy_ids = ("wait_for_eligible_segment", "list_partitions", "copy")
    shapes = {
        "tiering_copy__orders": copy_ids,
        "tiering_retention__orders": ("list_partitions", "retention"),
        DEFAULT_DAGS[0]: copy_ids,
        DEFAULT_DAGS[1]: ("list_partitions", "retention"),
    }
    for dag_id, task_ids in shapes.items():
        dag = bag.dags[dag_id]
        assert sorted(dag.task_group.children) == ["broker_1", "broker_2"]
        expected = {f"broker_{b}.{t}" for b in (1, 2) for t in task_ids}
        assert set(dag.task_ids) == expected
        for broker_id in (1, 2):
            for task_id in task_ids:
                task = dag.get_task(f"broker_{broker_id}.{task_id}")
                assert task.task_group.group_id == f"broker_{broker_id}"
                assert broker_arguments(task) == (QUEUES[broker_id], broker_id), task.task_id
            if "copy" in task_ids:
                group = f"broker_{broker_id}"
                sensor = dag.get_task(f"{group}.wait_for_eligible_segment")
                # A triggerer elsewhere cannot read this broker's disks: the sensor pokes on its queue.
                assert sensor.deferrable is False and sensor.mode == "reschedule" and sensor.soft_fail
                assert [t.task_id for t in sensor.downstream_list] == [f"{group}.list_partitions"]
                copy = dag.get_task(f"{group}.copy")
                assert f"{group}.list_partitions" in copy.upstream_task_ids
                assert copy.pool == "tiering_uploads"
                assert copy.map_index_template == "{{ task.lane }}"
    assert bag.dags["tiering_copy__orders"].get_task("broker_2.wait_for_eligible_segment").topic == "orders"
    assert bag.dags[DEFAULT_DAGS[0]].get_task("broker_1.wait_for_eligible_segment").topic == "*"
    assert sorted(p.name for p in cluster.root.iterdir()) == ["tiering.yaml"]  # no log dir, no DB created


def test_one_broker_under_brokers_gets_its_group_and_queue_and_a_triggerer_per_host_can_be_chosen(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    del cluster.doc["brokers"][2]
    cluster.write()
    monkeypatch.setenv("TIERING_SENSOR_DEFERRABLE", "true")  # a triggerer serves each broker's queue
    dag = dagbag(DAGS / "tiering_dags.py").dags["tiering_copy__orders"]
    assert sorted(dag.task_group.children) == ["broker_1"]
    sensor = dag.get_task("broker_1.wait_for_eligible_segment")
    assert sensor.deferrable is True and broker_arguments(sensor) == (QUEUES[1], 1)
    assert broker_arguments(dag.get_task("broker_1.copy")) == (QUEUES[1], 1)


def test_copy_and_retention_dags_run_each_broker_s_tasks_on_its_own_log_dirs(
    cluster: Cluster, s3_endpoint: S3Endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_1 = [with_segments(cluster.writer(1, "orders", p), 2) for p in (0, 2)]
    on_2 = [with_segments(cluster.writer(2, "orders", 1), 3)]
    # The worker's default broker is 2: the tasks that name broker 1 still read broker 1's disks.
    monkeypatch.setenv("TIERING_BROKER_ID", "2")
    bag = dagbag(DAGS / "tiering_dags.py")
    dag = bag.dags["tiering_copy__orders"]
    run = dag.test()
    assert run.state == "success"

    for group, partitions, segments in (("broker_1", [0, 2], 2), ("broker_2", [1], 3)):
        (sensor,) = task_runs(dag.dag_id, run.run_id, f"{group}.wait_for_eligible_segment").values()
        (listing,) = task_runs(dag.dag_id, run.run_id, f"{group}.list_partitions").values()
        assert sensor.result == partitions and [lane["lane"] for lane in listing.result] == [
            f"orders-{p}" for p in partitions
        ]
        copies = task_runs(dag.dag_id, run.run_id, f"{group}.copy")
        assert sorted(copies) == [f"orders-{p}" for p in partitions]
        for task in copies.values():
            assert task.state == "success" and task.result[0]["segments_copied"] == segments
    assert [cluster.finished(w) for w in on_1] == [[(0, 4), (5, 9)]] * 2
    assert [cluster.finished(w) for w in on_2] == [[(0, 4), (5, 9), (10, 14)]]
    # What each broker's tasks saw is recorded under that broker alone: none read the other's disks.
    assert [cluster.observers(w) for w in on_1 + on_2] == [[1], [1], [2]]

    retention = bag.dags["tiering_retention__orders"]  # retention.bytes = 0
    run = retention.test()
    assert run.state == "success"
    for group, partitions, segments in (("broker_1", [0, 2], 2), ("broker_2", [1], 3)):
        (listing,) = task_runs(retention.dag_id, run.run_id, f"{group}.list_partitions").values()
        assert [lane["partitions"] for lane in listing.result] == [[["orders", [p]]] for p in partitions]
        deletions = task_runs(retention.dag_id, run.run_id, f"{group}.retention")
        assert sorted(deletions) == [f"orders-{p}" for p in partitions]
        assert all(t.result[0]["segments_deleted"] == segments for t in deletions.values())
    assert [cluster.finished(w) for w in on_1 + on_2] == [[], [], []]
    assert [cluster.observers(w) for w in on_1 + on_2] == [[1], [1], [2]]
    listing = s3_endpoint.client().list_objects_v2(Bucket=cluster.doc["remote"]["bucket"])
    prefix = cluster.doc["remote"]["prefix"]
    assert sorted(o["Key"] for o in listing.get("Contents", [])) == sorted(  # each partition's state object alone
        [*(partition_state_key(tip_of(w), prefix) for w in on_1 + on_2), f"{prefix}{IDENTITY_OBJECT}"]
    )  # and the store the prefix is bound to


def replica(cluster: Cluster, broker_id: int, partition: int) -> PartitionWriter:
    """A replica of ``orders-<partition>`` as every broker holds it: the same topic id and bytes."""
    clock = itertools.count(1_700_000_000_000, 7)
    return PartitionWriter(
        cluster.log_dir(broker_id),
        TopicPartition("orders", partition),
        topic_id="mYmOgOlwTqyLnR1xXuOhUA",
        node_id=broker_id,
        segment_bytes=10**9,
        clock=lambda: next(clock),
        seed=partition,
    )


def test_a_cluster_run_plans_once_building_each_replica_s_view_at_most_twice(cluster: Cluster) -> None:
    """Each broker's sensor plans its replicas (the replica choice among them) and hands the plan
    on; a lane reads a replica's view under the partition's lease and nothing else does."""
    shared = [with_segments(replica(cluster, b, 0), 2) for b in (1, 2)]
    own = [with_segments(replica(cluster, 1, 1), 2), with_segments(replica(cluster, 2, 2), 1)]
    dag = dagbag(DAGS / "tiering_dags.py").dags["tiering_copy__orders"]
    with counted_view_builds() as builds:
        run = dag.test()
    assert run.state == "success"
    assert sorted(builds) == sorted(w.path for w in shared + own)
    assert max(builds.values()) <= 2, {str(path): count for path, count in builds.items()}
    assert [cluster.finished(w) for w in shared + own] == [[(0, 4), (5, 9)]] * 3 + [[(0, 4)]]
    assert [cluster.observers(w) for w in own] == [[1], [2]]
    assert cluster.observers(shared[0]) == [1, 2]  # both replicas seen: the choice was made among them


def test_catch_all_dags_run_per_broker_and_a_broker_without_partitions_is_skipped(cluster: Cluster) -> None:
    audit_1 = with_segments(cluster.writer(1, "audit", 0), 2)
    audit_2 = with_segments(cluster.writer(2, "audit", 1), 1)
    orders = with_segments(cluster.writer(2, "orders", 0), 1)  # a named topic: its own DAGs' work
    bag = dagbag(DAGS / "tiering_dags.py")
    copy = bag.dags[DEFAULT_DAGS[0]]
    run = copy.test()
    assert run.state == "success"
    for group, label, segments in (("broker_1", "audit-0", 2), ("broker_2", "audit-1", 1)):
        (sensor,) = task_runs(copy.dag_id, run.run_id, f"{group}.wait_for_eligible_segment").values()
        assert sensor.result == [label]
        (task,) = task_runs(copy.dag_id, run.run_id, f"{group}.copy").values()
        assert (task.label, task.state, task.result[0]["segments_copied"]) == (label, "success", segments)
    assert (cluster.finished(audit_1), cluster.finished(audit_2)) == ([(0, 4), (5, 9)], [(0, 4)])
    assert cluster.finished(orders) == []
    assert (cluster.observers(audit_1), cluster.observers(audit_2)) == ([1], [2])

    audit_2.delete()  # broker 2 now holds no partition of a topic under the default
    cluster.doc["topics"]["*"]["retention.bytes"] = 0
    cluster.write()
    retention = bag.dags[DEFAULT_DAGS[1]]
    run = retention.test()
    assert run.state == "success"
    (listing,) = task_runs(retention.dag_id, run.run_id, "broker_2.list_partitions").values()
    assert listing.state == "skipped"
    assert task_runs(retention.dag_id, run.run_id, "broker_2.retention") != {}
    assert all(t.state == "skipped" for t in task_runs(retention.dag_id, run.run_id, "broker_2.retention").values())
    (task,) = task_runs(retention.dag_id, run.run_id, "broker_1.retention").values()
    assert (task.label, task.result[0]["segments_deleted"]) == ("audit-0", 2)
    assert cluster.finished(audit_1) == [] and cluster.finished(audit_2) == [(0, 4)]


def test_a_task_naming_a_broker_no_longer_configured_fails_at_once_naming_it(cluster: Cluster) -> None:
    with_segments(cluster.writer(1, "orders", 0), 1)
    dag = dagbag(DAGS / "tiering_dags.py").dags["tiering_retention__orders"]  # parsed with brokers 1 and 2
    del cluster.doc["brokers"][2]
    cluster.write()
    run = dag.test()
    assert run.state == "failed"
    (listing,) = task_runs(dag.dag_id, run.run_id, "broker_2.list_partitions").values()
    assert (listing.state, listing.try_number) == ("failed", 1)  # no retry: no worker has that disk
    (task,) = task_runs(dag.dag_id, run.run_id, "broker_1.retention").values()
    assert task.state == "success"
