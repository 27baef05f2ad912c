"""The generated DAGs: clean DagBag import, parse purity, config errors, and real runs of the copy
and retention DAGs (``dag.test()`` and ``airflow dags test``) against moto's S3 server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import yaml

from tests.airflow_support import AIRFLOW_BIN, ROOT, airflow_env, task_runs
from tests.dags.conftest import SECRET
from tests.engine_support import TieringEnv, kafka_deletes_topic, tip_of, write_segments
from tiering_airflow.dag_ids import FIXED_DAG_IDS
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.storage.identity import IDENTITY_OBJECT
from tiering_core.storage.partition_state import partition_state_key

DAGS = ROOT / "dags"
OURS = (str(DAGS), str(ROOT / "plugins"))
DEFAULT_DAGS = ("tiering_copy_default_topics", "tiering_retention_default_topics")


def dagbag(path: Path = DAGS):
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(path))


def partitions_with_segments(env: TieringEnv, topic: str, count: int, segments: int) -> list[PartitionWriter]:
    writers = []
    for p in range(count):
        w = env.writer(topic, p)
        write_segments(w, segments)
        w.append_records(3)  # the active segment: never copied
        w.set_high_watermark()
        writers.append(w)
    return writers


def bucket_keys(s3_endpoint, env: TieringEnv) -> list[str]:
    listing = s3_endpoint.client().list_objects_v2(Bucket=env.remote["bucket"])
    return sorted(o["Key"] for o in listing.get("Contents", []))


def finished(env: TieringEnv, w: PartitionWriter) -> list[tuple[int, int]]:
    with env.context() as ctx:  # metadata only: the storage client is never used here
        return [
            (s.start_offset, s.end_offset)
            for s in ctx.metadata.list_segments(tip_of(w))
            if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        ]


def test_every_dag_file_imports_cleanly_for_several_topics(tiering: TieringEnv) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bag = dagbag()
    assert bag.import_errors == {}
    ours = [f"{w.filename}: {w.message}" for w in caught if w.filename.startswith(OURS)]
    assert ours == []
    expected = {f"tiering_{kind}__{topic}" for kind in ("copy", "retention") for topic in tiering.topics}
    assert set(bag.dag_ids) == expected | set(FIXED_DAG_IDS)  # dag_ids.py names every DAG there is

    copy = bag.dags["tiering_copy__clicks.v2"]
    assert set(copy.tags) == {"tiering", "copy", "clicks.v2"}
    assert copy.max_active_runs == 1 and copy.catchup is False
    sensor, listing, task = (copy.get_task(t) for t in ("wait_for_eligible_segment", "list_partitions", "copy"))
    assert sensor.deferrable and sensor.soft_fail and sensor.timeout < 10 * 60
    assert [t.task_id for t in sensor.downstream_list] == ["list_partitions"]
    assert task.pool == "tiering_uploads" and task.map_index_template == "{{ task.lane }}"
    assert task.retries == 3 and task.retry_exponential_backoff == 2.0 and task.max_retry_delay is not None
    assert listing.task_id in task.upstream_task_ids

    default_copy = bag.dags["tiering_copy_default_topics"]
    assert set(default_copy.tags) == {"tiering", "copy", "default-topics"} and default_copy.max_active_runs == 1
    default_sensor = default_copy.get_task("wait_for_eligible_segment")
    assert default_sensor.topic == "*" and default_sensor.deferrable and default_sensor.soft_fail
    assert default_copy.get_task("copy").pool == "tiering_uploads"
    assert bag.dags["tiering_retention_default_topics"].get_task("retention").map_index_template == ("{{ task.lane }}")

    retention = bag.dags["tiering_retention__payments"]
    assert set(retention.tags) == {"tiering", "retention", "payments"}
    assert retention.get_task("retention").map_index_template == "{{ task.lane }}"
    removal = bag.dags["tiering_delete_partition"]
    assert type(removal.timetable).__name__ == "NullTimetable" and "removal" in removal.tags
    delete_records = bag.dags["tiering_delete_records"]
    assert type(delete_records.timetable).__name__ == "NullTimetable" and "delete-records" in delete_records.tags


def test_parsing_reads_only_the_config_and_imports_nothing_heavy(tmp_path: Path) -> None:
    """A config whose log dir and metadata DB do not exist parses; no heavy module is imported."""
    config = tmp_path / "tiering.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "log_dirs": [str(tmp_path / "absent-logs")],
                "metadata": {"url": f"sqlite:///{tmp_path / 'absent' / 'm.db'}"},
                "remote": {"backend": "s3", "bucket": "never-contacted", "endpoint_url": "http://127.0.0.1:9"},
                "topics": {"orders": {}, "payments": {}},
            }
        )
    )
    script = textwrap.dedent(
        f"""
        import json, sys
        from airflow.dag_processing.dagbag import DagBag
        DagBag(dag_folder="/dev/null")  # Airflow's own imports first
        before = set(sys.modules)
        bag = DagBag(dag_folder={str(DAGS / "tiering_dags.py")!r})
        print(json.dumps({{"errors": bag.import_errors, "dags": sorted(bag.dag_ids),
                          "new": sorted(set(sys.modules) - before)}}))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, **airflow_env(), "TIERING_CONFIG": str(config)},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["errors"] == {}
    per_topic = [f"tiering_{k}__{t}" for k in ("copy", "retention") for t in ("orders", "payments")]
    assert out["dags"] == sorted(per_topic + list(DEFAULT_DAGS))
    heavy = ("boto3", "botocore", "fastapi", "tiering_core.runs.copy", "tiering_core.context", "tiering_core.metadata")
    assert [m for m in out["new"] if m.startswith(heavy)] == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiering.yaml"]  # no log dir, no DB created


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("unset", "set the environment variable TIERING_CONFIG or the Airflow Variable tiering_config"),
        ("missing", "cannot read config file"),
        ("bad-key", "remote.bukket: unknown key"),
        ("bad-topic", "topics.bad topic"),
    ],
)
def test_a_bad_config_is_one_clear_import_error_and_the_removal_dag_still_loads(
    setup: str, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = {
        "log_dirs": [str(tmp_path)],
        "metadata": {"url": "sqlite:///m.db"},
        "remote": {"backend": "filesystem", "root": "tier"},
    }
    config = tmp_path / "tiering.yaml"
    if setup == "unset":
        monkeypatch.delenv("TIERING_CONFIG", raising=False)
        monkeypatch.delenv("AIRFLOW_VAR_TIERING_CONFIG", raising=False)
    elif setup == "missing":
        monkeypatch.setenv("TIERING_CONFIG", str(tmp_path / "absent.yaml"))
    else:
        if setup == "bad-key":
            base["remote"] = {**base["remote"], "bukket": "x"}
        else:
            base["topics"] = {"bad topic": {}}
        config.write_text(yaml.safe_dump(base))
        monkeypatch.setenv("TIERING_CONFIG", str(config))
    bag = dagbag()
    assert list(bag.import_errors) == [str(DAGS / "tiering_dags.py")]
    assert message in bag.import_errors[str(DAGS / "tiering_dags.py")]
    assert {"tiering_delete_partition", "tiering_delete_records"} <= set(bag.dag_ids)


def test_config_path_from_the_airflow_variable(tiering: TieringEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TIERING_CONFIG")
    monkeypatch.setenv("AIRFLOW_VAR_TIERING_CONFIG", str(tiering.config_path))
    bag = dagbag(DAGS / "tiering_dags.py")
    assert bag.import_errors == {} and "tiering_copy__orders" in bag.dag_ids


def test_topic_names_longer_than_airflow_ids_still_make_distinct_dags(
    tiering: TieringEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    long_a, long_b = "a" * 248 + "x", "a" * 248 + "y"  # Kafka allows 249 characters
    tiering.write_config(**{long_a: {}, long_b: {}})
    bag = dagbag(DAGS / "tiering_dags.py")
    assert bag.import_errors == {}
    long_ids = [d for d in bag.dag_ids if "aaaa" in d]
    assert len(long_ids) == 4 and all(len(d) <= 250 for d in long_ids)
    assert all(len(tag) <= 100 for d in long_ids for tag in bag.dags[d].tags)


def test_copy_dag_lands_segments_and_returns_results_per_partition(
    tiering: TieringEnv, s3_endpoint, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    writers = partitions_with_segments(tiering, "orders", 3, 2)
    dag = dagbag(DAGS / "tiering_dags.py").dags["tiering_copy__orders"]
    run = dag.test()
    assert run.state == "success"

    keys = bucket_keys(s3_endpoint, tiering)
    for w in writers:
        assert finished(tiering, w) == [(0, 4), (5, 9)]
        prefix = f"t/orders-{w.topic_id}/{w.tp.partition}/"
        assert sum(k.startswith(prefix) and k.endswith(".log") for k in keys) == 2
        assert sum(k.startswith(prefix) and k.endswith("manifest.json") for k in keys) == 2

    sensor = task_runs(dag.dag_id, run.run_id, "wait_for_eligible_segment")
    assert [r.result for r in sensor.values()] == [[0, 1, 2]]
    copies = task_runs(dag.dag_id, run.run_id, "copy")
    assert sorted(copies) == ["orders-0", "orders-1", "orders-2"]
    for label, task in copies.items():
        assert task.state == "success"
        (result,) = task.result  # the lane of one partition: one result
        assert f"{result['topic']}-{result['partition']}" == label
        assert (result["segments_copied"], result["copy_lag_segments"], result["copy_lag_bytes"]) == (2, 0, 0)
        assert result["bytes_copied"] > 0 and result["highest_copied_offset"] == 9 and result["gaps"] == []
    logs = "".join(capfd.readouterr()) + caplog.text
    assert f"Connection 'aws_default': endpoint {s3_endpoint.url}" in logs  # the task logs were captured
    assert SECRET not in logs


def test_copy_dag_fails_loudly_without_retries_on_a_tiering_gap(tiering: TieringEnv, s3_endpoint) -> None:
    (w,) = partitions_with_segments(tiering, "orders", 1, 2)
    dag = dagbag(DAGS / "tiering_dags.py").dags["tiering_copy__orders"]
    assert dag.test().state == "success"  # [0..4], [5..9] copied
    write_segments(w, 3)  # the active segment closes as [10..17]; then [18..22], [23..27]
    w.set_high_watermark()
    w.delete_oldest_segments(3)  # drops [0..4], [5..9] (copied) and [10..17] (never copied): a gap
    run = dag.test()
    assert run.state == "failed"
    (task,) = task_runs(dag.dag_id, run.run_id, "copy").values()
    assert (task.label, task.state, task.try_number) == ("orders-0", "failed", 1)  # no retry hid it
    assert task.result[0]["gaps"] == [[10, 17]] and task.result[0]["segments_copied"] == 2
    assert finished(tiering, w)[-2:] == [(18, 22), (23, 27)]  # what remained was copied first


def test_retention_dag_deletes_what_breaches_retention(tiering: TieringEnv, s3_endpoint) -> None:
    (w,) = partitions_with_segments(tiering, "payments", 1, 3)
    bag = dagbag(DAGS / "tiering_dags.py")
    assert bag.dags["tiering_copy__payments"].test().state == "success"
    assert len(finished(tiering, w)) == 3 and bucket_keys(s3_endpoint, tiering)
    dag = bag.dags["tiering_retention__payments"]  # retention.bytes = 0
    run = dag.test()
    assert run.state == "success"
    (task,) = task_runs(dag.dag_id, run.run_id, "retention").values()
    assert task.label == "payments-0" and task.result[0]["segments_deleted"] == 3
    assert finished(tiering, w) == []
    # the log start it moved, and the store the prefix is bound to
    assert bucket_keys(s3_endpoint, tiering) == sorted([partition_state_key(tip_of(w), "t/"), f"t/{IDENTITY_OBJECT}"])


def test_airflow_dags_test_cli_from_outside_the_project(tiering: TieringEnv, tmp_path: Path) -> None:
    """``airflow dags test`` in a fresh process, started elsewhere, without PYTHONPATH."""
    (w,) = partitions_with_segments(tiering, "clicks.v2", 1, 2)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [AIRFLOW_BIN, "dags", "test", "tiering_copy__clicks.v2"],
        env={**env, **airflow_env()},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    assert "dag_id=tiering_copy__clicks.v2" in output and "state=success" in output
    assert finished(tiering, w) == [(0, 4), (5, 9)]
    assert SECRET not in output


def test_copy_dag_defers_while_nothing_is_eligible_and_copies_once_a_segment_rolls(
    tiering: TieringEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tiering_airflow.triggers.tiering import EligibleSegmentTrigger

    monkeypatch.setenv("TIERING_SENSOR_POKE_SECONDS", "0.2")
    w = tiering.writer("orders", 0)
    w.append_records(5)  # only the active segment
    w.set_high_watermark()
    polls: list[float] = []
    check = EligibleSegmentTrigger.eligible_partitions

    def poll(trigger: EligibleSegmentTrigger) -> list[int]:
        polls.append(trigger.poll_interval)
        if len(polls) == 3:  # the broker rolls the segment while the trigger waits
            w.roll()
            w.append_records(1)
            w.set_high_watermark()
        return check(trigger)

    monkeypatch.setattr(EligibleSegmentTrigger, "eligible_partitions", poll)
    dag = dagbag(DAGS / "tiering_dags.py").dags["tiering_copy__orders"]
    run = dag.test()
    assert run.state == "success"
    # The sensor deferred (only its trigger polls through this method): two empty polls, then the
    # one that saw the rolled segment, at the interval the DAG was parsed with.
    assert polls == [0.2, 0.2, 0.2]
    (sensor,) = task_runs(dag.dag_id, run.run_id, "wait_for_eligible_segment").values()
    assert sensor.result == [0]
    (copy,) = task_runs(dag.dag_id, run.run_id, "copy").values()
    assert (copy.label, copy.result[0]["segments_copied"]) == ("orders-0", 1)
    assert finished(tiering, w) == [(0, 4)]


def test_every_dag_file_parses_without_warnings_or_errors_in_a_fresh_process(tiering: TieringEnv, tmp_path) -> None:
    """A fresh interpreter, as the DAG processor's: nothing imported or warned about earlier can hide a
    warning our files raise at import."""
    script = textwrap.dedent(
        """
        import json, sys
        from airflow.dag_processing.dagbag import DagBag
        bag = DagBag(dag_folder=sys.argv[1])
        print(json.dumps({"warnings": bag.captured_warnings, "errors": bag.import_errors,
                          "files": sorted({dag.fileloc for dag in bag.dags.values()})}))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(DAGS)],
        env={**os.environ, **airflow_env()},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["errors"] == {}
    assert out["warnings"] == {}
    assert out["files"] == sorted(str(path) for path in DAGS.glob("*.py"))


def set_default_topic_config(env: TieringEnv, **knobs: int) -> None:
    doc = yaml.safe_load(env.config_path.read_text())
    doc["topics"]["*"].update(knobs)
    env.config_path.write_text(yaml.safe_dump(doc))


def test_topics_under_the_default_are_tiered_by_the_catch_all_dags(tiering: TieringEnv, s3_endpoint) -> None:
    """``audit`` is not named in the config (orders, payments, clicks.v2 are): the ``"*"`` default
    covers it and only the catch-all DAGs tier it."""
    audit = partitions_with_segments(tiering, "audit", 2, 2)
    (orders,) = partitions_with_segments(tiering, "orders", 1, 2)
    bag = dagbag(DAGS / "tiering_dags.py")
    assert not any("audit" in dag_id for dag_id in bag.dag_ids)  # parsing never looked at the log dirs

    copy = bag.dags["tiering_copy_default_topics"]
    run = copy.test()
    assert run.state == "success"
    (sensor,) = task_runs(copy.dag_id, run.run_id, "wait_for_eligible_segment").values()
    assert sensor.result == ["audit-0", "audit-1"]
    copies = task_runs(copy.dag_id, run.run_id, "copy")
    assert sorted(copies) == ["audit-0", "audit-1"]
    assert all(t.state == "success" and t.result[0]["segments_copied"] == 2 for t in copies.values())
    assert [finished(tiering, w) for w in audit] == [[(0, 4), (5, 9)]] * 2
    assert finished(tiering, orders) == []  # a named topic: its own DAG's work

    set_default_topic_config(tiering, **{"retention.bytes": 0})
    retention = bag.dags["tiering_retention_default_topics"]
    run = retention.test()
    assert run.state == "success"
    deletions = task_runs(retention.dag_id, run.run_id, "retention")
    assert sorted(deletions) == ["audit-0", "audit-1"]
    assert all(t.result[0]["segments_deleted"] == 2 for t in deletions.values())
    assert [finished(tiering, w) for w in audit] == [[], []]


def test_without_a_triggerer_the_sensor_reschedules_until_a_segment_rolls(
    tiering: TieringEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.airflow_support import reschedules
    from tiering_airflow.sensors.tiering import EligibleSegmentSensor

    monkeypatch.setenv("TIERING_SENSOR_DEFERRABLE", "false")
    monkeypatch.setenv("TIERING_SENSOR_POKE_SECONDS", "0.2")
    w = tiering.writer("orders", 0)
    w.append_records(5)  # only the active segment
    w.set_high_watermark()
    modes: list[str] = []
    poke = EligibleSegmentSensor.poke

    def counted(sensor: EligibleSegmentSensor, context):
        modes.append(sensor.mode)
        if len(modes) == 3:  # the broker rolls the segment between the second and third poke
            w.roll()
            w.append_records(1)
            w.set_high_watermark()
        return poke(sensor, context)

    monkeypatch.setattr(EligibleSegmentSensor, "poke", counted)
    dag = dagbag(DAGS / "tiering_dags.py").dags["tiering_copy__orders"]
    assert dag.get_task("wait_for_eligible_segment").deferrable is False
    run = dag.test()
    assert run.state == "success"
    assert modes == ["reschedule"] * 3
    assert reschedules(dag.dag_id, run.run_id, "wait_for_eligible_segment") == 2
    (sensor,) = task_runs(dag.dag_id, run.run_id, "wait_for_eligible_segment").values()
    assert (sensor.result, sensor.try_number) == ([0], 1)  # a reschedule is not a retry
    (copy,) = task_runs(dag.dag_id, run.run_id, "copy").values()
    assert (copy.label, copy.result[0]["segments_copied"]) == ("orders-0", 1)


def test_a_bad_deferrable_switch_is_an_import_error_naming_it(
    tiering: TieringEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIERING_SENSOR_DEFERRABLE", "maybe")
    bag = dagbag(DAGS / "tiering_dags.py")
    assert (
        "TIERING_SENSOR_DEFERRABLE: expected true or false, got 'maybe'"
        in bag.import_errors[str(DAGS / "tiering_dags.py")]
    )


def airflow_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``airflow ...`` in a fresh process, started outside the project, without PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [AIRFLOW_BIN, *args], env={**env, **airflow_env()}, capture_output=True, text=True, timeout=300, cwd=cwd
    )


def test_airflow_dags_test_cli_runs_the_retention_and_removal_dags(
    tiering: TieringEnv, s3_endpoint, tmp_path: Path
) -> None:
    from tests.airflow_support import latest_run_id
    from tiering_airflow.hooks.tiering import TieringHook
    from tiering_core.runs.copy import run_copy

    (payments,) = partitions_with_segments(tiering, "payments", 1, 3)  # retention.bytes = 0
    (orders,) = partitions_with_segments(tiering, "orders", 1, 2)
    with TieringHook().get_conn() as ctx:
        for w in (payments, orders):
            run_copy(ctx, w.tp)
    assert len(finished(tiering, payments)) == 3 and len(finished(tiering, orders)) == 2

    proc = airflow_cli("dags", "test", "tiering_retention__payments", cwd=tmp_path)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    (task,) = task_runs(
        "tiering_retention__payments", latest_run_id("tiering_retention__payments"), "retention"
    ).values()
    assert (task.label, task.state, task.result[0]["segments_deleted"]) == ("payments-0", "success", 3)
    assert finished(tiering, payments) == []

    kafka_deletes_topic(orders)  # the topic was deleted: the controller's word, the -delete rename
    removal = "tiering_delete_partition"
    conf = {"topic": "orders", "partitions": [0], "confirm": "orders"}
    proc = airflow_cli("dags", "test", removal, "--conf", json.dumps(conf), cwd=tmp_path)  # dry run by default
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    (task,) = task_runs(removal, latest_run_id(removal), "delete_partition").values()
    assert (task.label, task.result["dry_run"], len(task.result["planned"])) == ("orders-0", True, 2)
    assert len(finished(tiering, orders)) == 2

    proc = airflow_cli("dags", "test", removal, "--conf", json.dumps({**conf, "dry_run": False}), cwd=tmp_path)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    (task,) = task_runs(removal, latest_run_id(removal), "delete_partition").values()
    assert (task.label, task.state, task.result["segments_deleted"]) == ("orders-0", "success", 2)
    assert task.result["state"] == "DELETE_PARTITION_FINISHED" and finished(tiering, orders) == []
    assert SECRET not in proc.stdout + proc.stderr


def test_a_compacted_topic_s_dags_say_why_it_is_not_tiered_and_its_sensor_skips(
    tiering: TieringEnv, s3_endpoint, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """``ledger`` is compacted and inherits remote storage from ``"*"``: not tiered (Kafka refuses
    it), and the other topics are. Its DAGs say why; its copy sensor skips at once with the reason."""
    reason = "cleanup.policy compact: Kafka never tiers a compacted topic"
    tiering.write_config(ledger={"cleanup.policy": "compact"})
    (ledger,) = partitions_with_segments(tiering, "ledger", 1, 2)
    (orders,) = partitions_with_segments(tiering, "orders", 1, 2)
    bag = dagbag(DAGS / "tiering_dags.py")
    assert bag.import_errors == {}
    for kind in ("copy", "retention"):
        assert bag.dags[f"tiering_{kind}__ledger"].description.endswith(f"Not tiered: {reason}")
        assert "Not tiered" not in bag.dags[f"tiering_{kind}__orders"].description
    dag = bag.dags["tiering_copy__ledger"]
    run = dag.test()
    assert run.state == "success"
    (sensor,) = task_runs(dag.dag_id, run.run_id, "wait_for_eligible_segment").values()
    assert sensor.state == "skipped"
    assert [t.state for t in task_runs(dag.dag_id, run.run_id, "list_partitions").values()] == ["skipped"]
    assert f"ledger: not tiered: {reason}" in "".join(capfd.readouterr()) + caplog.text
    assert finished(tiering, ledger) == []
    assert bag.dags["tiering_copy__orders"].test().state == "success"
    assert finished(tiering, orders) == [(0, 4), (5, 9)]
