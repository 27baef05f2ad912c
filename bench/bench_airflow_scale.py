"""One scheduled copy run of N partitions through a real Airflow, against ``tiering copy`` of the same.

A broker log dir holds N partitions (default 4,000) of one topic, each with a few small closed
segments. Both sides copy every closed segment of every partition from that log dir to the same
local S3 endpoint (moto's server), each into a metadata store and key prefix of its own, so each
starts from nothing:

- ``tiering copy --topic T``: the command, one process;
- the topic's copy DAG (``tiering_copy__<topic>``), triggered over the REST API of ``airflow
  standalone``: its scheduler, dag-processor and triggerer, the LocalExecutor running the tasks
  (not ``dag.test()``), the ``tiering_uploads`` pool as large as a run's lanes.

Before them, ``tiering copy`` also copies a broker of ``--baseline`` partitions (default 1,000; 0:
none) of the same shape, so the command's time per segment at N partitions is measured against
its time at the baseline in the same run (target <= 1.2). The DAG's lanes get a budget no shorter
than the command's time at N (``copy.budget_seconds``, at least its default; the copy DAG's
schedule hourly when that budget passes its 10-minute period), so one run can copy everything.

Printed: each side's wall time (the DAG's from the trigger to the run's end), the copy task's
task-instance count, the segments each side's store holds, the wall-time ratio (target <= 1.2),
the sensor's and the listing's durations together (target <= 20 s at 4,000 partitions), and the
CPU seconds the scheduler process spent during the run. Both sides must have copied every closed
segment, or the benchmark fails.

    python bench/bench_airflow_scale.py [--partitions 4000] [--segments 2] [--baseline 1000] [--lanes 16]
        [--timeout 3600]

With ``--catch-all`` the partitions belong to a topic the config does not name, copied by the
catch-all DAG (``tiering_copy_default_topics``) instead.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.airflow_e2e import Api, airflow_env, free_port, start_standalone, stop, wait_for  # noqa: E402

BUCKET = "kafka-tiered-scale"
TOPIC = "scale"
DEFAULT_COPY_DAG = "tiering_copy_default_topics"
DEFAULT_LANES = 16  # copy.lanes' default
DEFAULT_BUDGET_SECONDS = 480  # copy.budget_seconds' default
COPY_PERIOD_SECONDS = 600  # the copy DAG's default schedule, every 10 minutes
SENSOR_TASK, LISTING_TASK = "wait_for_eligible_segment", "list_partitions"


def say(line: str) -> None:
    print(line, flush=True)


def build_log_dir(log_dir: Path, partitions: int, segments: int) -> int:
    """N partitions of one topic (one topic id), each with ``segments`` closed segments and an
    active one; returns the number of closed segments."""
    from tiering_core.kafka.checkpoints import new_topic_id
    from tiering_core.kafka.log_writer import PartitionWriter, write_meta_properties
    from tiering_core.kafka.topic import TopicPartition

    log_dir.mkdir(parents=True)
    write_meta_properties(log_dir)
    topic_id = new_topic_id()
    started = time.monotonic()
    for partition in range(partitions):
        writer = PartitionWriter(log_dir, TopicPartition(TOPIC, partition), topic_id=topic_id)
        for _ in range(segments):
            writer.append_records(20, value_size=100)
            writer.roll()
        writer.append_records(2, value_size=100)
        writer.set_high_watermark()
        if (partition + 1) % 500 == 0:
            say(f"  wrote {partition + 1}/{partitions} partitions ({time.monotonic() - started:.0f} s)")
    return partitions * segments


def write_config(
    work: Path, side: str, log_dir: Path, lanes: int, catch_all: bool, endpoint: str | None, budget: int | None = None
) -> Path:
    """``endpoint``: written into the config (the command); None: the Airflow connection gives it.
    ``budget``: the lanes' ``copy.budget_seconds`` (None: the default), the copy DAG hourly when it
    is not shorter than the default schedule's period."""
    import yaml

    topics: dict[str, Any] = {"*": {"retention.ms": -1}}
    if not catch_all:
        topics[TOPIC] = {}
    remote = {"backend": "s3", "bucket": BUCKET, "prefix": f"{side}/", "region": "us-east-1"}
    if endpoint is not None:
        remote["endpoint_url"] = endpoint
    doc: dict[str, Any] = {
        "log_dirs": [str(log_dir)],
        "metadata": {"url": f"sqlite:///{work / f'{side}.db'}"},
        "remote": remote,
        "topics": topics,
    }
    copy: dict[str, Any] = {}
    if lanes != DEFAULT_LANES:
        copy["lanes"] = lanes
    if budget is not None and budget != DEFAULT_BUDGET_SECONDS:
        copy["budget_seconds"] = budget
        if budget >= COPY_PERIOD_SECONDS:
            doc["dags"] = {"copy": {"schedule": "@hourly"}}
    if copy:
        doc["copy"] = copy
    config = work / f"{side}.yaml"
    config.write_text(yaml.safe_dump(doc))
    return config


def lane_budget(cli_seconds: float) -> int:
    """The lanes' budget for the DAG's run: no shorter than the command's time, nor than the default."""
    return max(DEFAULT_BUDGET_SECONDS, math.ceil(cli_seconds))


def copied_segments(work: Path, side: str) -> int:
    with sqlite3.connect(work / f"{side}.db") as db:
        (count,) = db.execute("SELECT count(*) FROM tiering_segments WHERE state = 'COPY_SEGMENT_FINISHED'").fetchone()
    return int(count)


def cli_copy(work: Path, config: Path, timeout: float) -> float:
    from tiering_core.kafka.log_writer import DEMO_NODE_ID

    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": "scale-access-key",
        "AWS_SECRET_ACCESS_KEY": "scale-secret-key",
        "TIERING_BROKER_ID": str(DEMO_NODE_ID),
    }
    command = [sys.executable, "-m", "tiering_core.cli", "--config", str(config), "--json", "copy", "--topic", TOPIC]
    started = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, cwd=work)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"tiering copy failed ({done.returncode}): {done.stderr[-2000:]}")
    return seconds


def copy_baseline(
    work: Path, partitions: int, segments: int, lanes: int, catch_all: bool, endpoint: str, timeout: float
) -> tuple[int, float]:
    """``tiering copy`` of a broker of ``partitions`` partitions of the same shape: (closed segments, seconds)."""
    say(f"writing the baseline broker: {partitions} partitions x {segments} closed segments")
    closed = build_log_dir(work / "baseline-logs", partitions, segments)
    config = write_config(work, "baseline", work / "baseline-logs", lanes, catch_all, endpoint)
    say("tiering copy of the baseline broker ...")
    seconds = cli_copy(work, config, timeout)
    copied = copied_segments(work, "baseline")
    say(f"tiering copy at {partitions} partitions: {copied}/{closed} segments in {seconds:.1f} s")
    if copied != closed:
        raise SystemExit(f"the baseline copied {copied} of {closed} closed segments")
    return closed, seconds


def scheduler_cpu_seconds(root_pid: int) -> float:
    """CPU seconds (user + system) of the scheduler process under ``airflow standalone``."""
    import psutil

    for proc in psutil.Process(root_pid).children(recursive=True):
        try:
            if "scheduler" in " ".join(proc.cmdline()):
                times = proc.cpu_times()
                return float(times.user + times.system)
        except psutil.NoSuchProcess:
            continue
    raise SystemExit("no scheduler process under airflow standalone")


def airflow_copy(
    work: Path, config: Path, endpoint: str, lanes: int, catch_all: bool, timeout: float
) -> dict[str, Any]:
    port = free_port()
    env = airflow_env(work, port, endpoint, config)
    env["AIRFLOW_CONN_AWS_DEFAULT"] = json.dumps(
        {
            "conn_type": "aws",
            "login": "scale-access-key",
            "password": "scale-secret-key",
            "extra": {"endpoint_url": endpoint, "region_name": "us-east-1"},
        }
    )
    dag_id = DEFAULT_COPY_DAG if catch_all else f"tiering_copy__{TOPIC}"
    proc = start_standalone(work, env, upload_slots=lanes)
    try:
        api = Api(f"http://127.0.0.1:{port}")
        wait_for("the API server", lambda: api.call("GET", "/api/v2/monitor/health")[0] == 200, 300)
        passwords = Path(env["AIRFLOW_HOME"]) / "simple_auth_manager_passwords.json.generated"
        api.login(wait_for("the admin password", lambda: json.loads(passwords.read_text()).get("admin"), 60))
        wait_for(f"{dag_id} to be parsed", lambda: api.has_dag(dag_id), 300)
        api.ok("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
        cpu_before = scheduler_cpu_seconds(proc.pid)
        started = time.monotonic()
        run_id = api.trigger(dag_id)
        state = api.wait_run(dag_id, run_id, timeout)
        seconds = time.monotonic() - started
        cpu = scheduler_cpu_seconds(proc.pid) - cpu_before
        if state != "success":
            raise SystemExit(f"run {run_id} of {dag_id} ended {state}; log: {work / 'standalone.log'}")
        return {"seconds": seconds, "scheduler_cpu": cpu, "tasks": task_durations(api, dag_id, run_id)}
    finally:
        stop(proc)


def task_durations(api: Api, dag_id: str, run_id: str) -> dict[str, list[float]]:
    """The run's task instances: by task (its id without the group), each instance's duration."""
    listed = api.ok("GET", f"{api.run_path(dag_id, run_id)}/taskInstances?limit=1000")
    if int(listed["total_entries"]) > len(listed["task_instances"]):
        raise SystemExit(f"run {run_id} has {listed['total_entries']} task instances, more than one page")
    durations: dict[str, list[float]] = {}
    for ti in listed["task_instances"]:
        durations.setdefault(ti["task_id"].split(".")[-1], []).append(float(ti["duration"] or 0.0))
    return durations


def describe(durations: dict[str, list[float]]) -> str:
    """``copy 16 (40.2-120.5 s)``, per task, in the order the run listed them."""
    return ", ".join(
        f"{task} {len(seconds)} ({min(seconds):.1f}-{max(seconds):.1f} s)" for task, seconds in durations.items()
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=4000, help="partitions of the broker (default 4000)")
    parser.add_argument("--segments", type=int, default=2, help="closed segments per partition (default 2)")
    parser.add_argument(
        "--baseline", type=int, default=1000, help="partitions of the command's baseline broker (default 1000; 0: none)"
    )
    parser.add_argument(
        "--lanes", type=int, default=DEFAULT_LANES, help="copy.lanes, and the upload pool's slots (default 16)"
    )
    parser.add_argument("--catch-all", action="store_true", help="copy by the catch-all DAG, not the topic's own")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds each side may take")
    args = parser.parse_args(argv)

    import boto3

    from tiering_core.cli.demo import local_s3_endpoint

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server logs every request

    with tempfile.TemporaryDirectory(prefix="bench-airflow-scale-") as tmp:
        work = Path(tmp)
        log_dir = work / "kafka-logs"
        baseline: tuple[int, float] | None = None
        say(f"writing {args.partitions} partitions x {args.segments} closed segments")
        closed = build_log_dir(log_dir, args.partitions, args.segments)
        with local_s3_endpoint() as endpoint:
            boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=BUCKET)
            if args.baseline:
                baseline = copy_baseline(
                    work, args.baseline, args.segments, args.lanes, args.catch_all, endpoint, args.timeout
                )
            cli_config = write_config(work, "cli", log_dir, args.lanes, args.catch_all, endpoint)
            say("tiering copy ...")
            cli_seconds = cli_copy(work, cli_config, args.timeout)
            cli_copied = copied_segments(work, "cli")
            say(f"tiering copy: {cli_copied}/{closed} segments in {cli_seconds:.1f} s")

            budget = lane_budget(cli_seconds)
            dag_config = write_config(work, "dag", log_dir, args.lanes, args.catch_all, None, budget)
            say(f"copy DAG through airflow standalone (LocalExecutor), lanes' budget {budget} s ...")
            dag = airflow_copy(work, dag_config, endpoint, args.lanes, args.catch_all, args.timeout)
            dag_copied = copied_segments(work, "dag")
            copies = len(dag["tasks"].get("copy", []))
            say(f"copy DAG: {dag_copied}/{closed} segments in {dag['seconds']:.1f} s, {copies} copy task instances")
            say(f"  task instances: {describe(dag['tasks'])}")
        if cli_copied != closed or dag_copied != closed:
            raise SystemExit(f"not every closed segment was copied: cli {cli_copied}, dag {dag_copied} of {closed}")
        say(f"scheduler CPU seconds per run: {dag['scheduler_cpu']:.1f}")
        planning = sum(sum(dag["tasks"].get(task, [])) for task in (SENSOR_TASK, LISTING_TASK))
        say(f"sensor + listing: {planning:.1f} s (target <= 20 s at 4000 partitions)")
        say(f"RATIO dag_copy/tiering_copy = {dag['seconds'] / cli_seconds:.2f} (target <= 1.2)")
        if baseline is not None:
            per_segment, base_per_segment = cli_seconds / closed, baseline[1] / baseline[0]
            say(
                f"RATIO tiering_copy_per_segment at {args.partitions}/{args.baseline} partitions = "
                f"{per_segment / base_per_segment:.2f} ({per_segment * 1000:.1f} against "
                f"{base_per_segment * 1000:.1f} ms a segment; target <= 1.2)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
