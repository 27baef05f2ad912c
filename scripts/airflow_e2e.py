"""End to end through a real Airflow: the copy DAG triggered over the REST API, then the Tiering page.

Starts ``airflow standalone`` (API server, scheduler, dag-processor, triggerer; SQLite and the
LocalExecutor) on a free port with an isolated AIRFLOW_HOME, the project's DAGs and plugin, a
demo broker log dir and a local S3 endpoint whose address and credentials reach the tasks only
through the Airflow connection ``aws_default``. Then, through REST API v2 with a token from the
simple auth manager:

1. triggers ``tiering_copy__orders`` and waits for success; reads each mapped task's label and
   result (XCom);
2. triggers it again with nothing eligible: the sensor defers to the triggerer; a new partition
   with a closed segment appears; the trigger fires and the run copies it;
3. checks that invalid params for ``tiering_delete_partition`` are refused (HTTP 400);
4. reads ``/tiering/api/partitions`` and screenshots ``/tiering/`` with headless Chromium (when
   /usr/bin/chromium exists) to ``test-artifacts/tiering-page.png``.

Every process it started is stopped at the end, whatever happened.

    python scripts/airflow_e2e.py [--artifacts DIR] [--timeout SECONDS] [--keep]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DAG_ID = "tiering_copy__orders"
REMOVAL_DAG_ID = "tiering_delete_partition"
CHROMIUM = Path("/usr/bin/chromium")
BUCKET = "kafka-tiered-e2e"
T = TypeVar("T")


class E2EError(Exception):
    """A step of the end-to-end run did not go as required."""


def say(line: str) -> None:
    print(f"e2e: {line}", flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(what: str, check: Callable[[], T | None], timeout: float, interval: float = 1.0) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            result = check()
        except (OSError, urllib.error.URLError, KeyError, ValueError):
            result = None
        if result:
            return result
        time.sleep(interval)
    raise E2EError(f"timed out after {timeout:.0f} s waiting for {what}")


class Api:
    """Airflow's REST API v2 with a bearer token."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.token: str | None = None

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        req = urllib.request.Request(
            self.base + path, data=None if body is None else json.dumps(body).encode(), method=method
        )
        req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=15) as resp:
                status, text = resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            status, text = exc.code, exc.read().decode()
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def ok(self, method: str, path: str, body: Any = None) -> Any:
        status, answer = self.call(method, path, body)
        if status not in (200, 201):
            raise E2EError(f"{method} {path} answered {status}: {str(answer)[:500]}")
        return answer

    def login(self, password: str) -> None:
        self.token = self.ok("POST", "/auth/token", {"username": "admin", "password": password})["access_token"]

    def run_path(self, dag_id: str, run_id: str) -> str:
        return f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}"

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None) -> str:
        return str(
            self.ok("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf or {}})["dag_run_id"]
        )

    def wait_run(self, dag_id: str, run_id: str, timeout: float) -> str:
        def finished() -> str | None:
            state = self.ok("GET", self.run_path(dag_id, run_id))["state"]
            return state if state in ("success", "failed") else None

        return wait_for(f"run {run_id} of {dag_id}", finished, timeout, 2)

    def task_state(self, dag_id: str, run_id: str, task_id: str) -> str | None:
        return self.ok("GET", f"{self.run_path(dag_id, run_id)}/taskInstances/{task_id}").get("state")

    def xcom(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> Any:
        path = f"{self.run_path(dag_id, run_id)}/taskInstances/{task_id}/xcomEntries/return_value"
        value = self.ok("GET", f"{path}?map_index={map_index}")["value"]
        return json.loads(value) if isinstance(value, str) else value

    def mapped_results(self, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
        listed = self.ok("GET", f"{self.run_path(dag_id, run_id)}/taskInstances/{task_id}/listMapped")
        return {
            ti["rendered_map_index"]: self.xcom(dag_id, run_id, task_id, ti["map_index"])
            for ti in listed["task_instances"]
            if ti["state"] == "success"
        }


def write_config(work: Path) -> Path:
    import yaml

    from tiering_core.kafka.writer import build_demo_log_dir

    build_demo_log_dir(work / "kafka-logs")
    config = work / "tiering.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "log_dirs": [str(work / "kafka-logs")],
                "metadata": {"url": f"sqlite:///{work / 'metadata.db'}"},
                # No endpoint here: it comes from the Airflow connection aws_default.
                "remote": {"backend": "s3", "bucket": BUCKET, "prefix": "e2e/", "region": "us-east-1"},
                "topics": {"*": {"retention.ms": -1}, "orders": {}, "payments": {}, "clicks": {}},
            }
        )
    )
    return config


def add_partition_with_a_closed_segment(log_dir: Path, topic: str, partition: int) -> None:
    """The broker gains a partition of ``topic`` (same topic id) whose first segment is closed."""
    from tiering_core.kafka.checkpoints import PARTITION_METADATA, read_partition_metadata
    from tiering_core.kafka.topic import TopicPartition
    from tiering_core.kafka.writer import PartitionWriter

    topic_id = read_partition_metadata(log_dir / f"{topic}-0" / PARTITION_METADATA)
    writer = PartitionWriter(log_dir, TopicPartition(topic, partition), topic_id=topic_id)
    writer.append_records(20, value_size=100)
    writer.roll()
    writer.append_records(2)
    writer.set_high_watermark()


def screenshot(url: str, out: Path) -> bool:
    if not CHROMIUM.exists():
        say(f"{CHROMIUM} is not installed; no screenshot taken")
        return False
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="e2e-chromium-") as profile:
        subprocess.run(
            [
                str(CHROMIUM),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                f"--user-data-dir={profile}",
                "--hide-scrollbars",
                "--window-size=1760,480",
                f"--screenshot={out}",
                url,
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
    return out.exists() and out.stat().st_size > 0


def airflow_env(work: Path, port: int, endpoint: str, config: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("AIRFLOW")}
    venv_bin = str(Path(sys.executable).parent)
    return {
        **env,
        "PATH": f"{venv_bin}:{env.get('PATH', '')}",
        "AIRFLOW_HOME": str(work / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        # Only the runs triggered here: scheduled runs would race them for the same segments.
        "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
        "AIRFLOW_CONN_AWS_DEFAULT": json.dumps(
            {
                "conn_type": "aws",
                "login": "e2e-access-key",
                "password": "e2e-secret-key",
                "extra": {"endpoint_url": endpoint, "region_name": "us-east-1"},
            }
        ),
        "TIERING_CONFIG": str(config),
        "TIERING_SENSOR_POKE_SECONDS": "2",
    }


def run(work: Path, artifacts: Path, timeout: float) -> None:
    import boto3

    from tiering_core.demo import local_s3_endpoint

    airflow = str(Path(sys.executable).parent / "airflow")
    config = write_config(work)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with local_s3_endpoint() as endpoint:
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=BUCKET)
        env = airflow_env(work, port, endpoint, config)
        subprocess.run([airflow, "db", "migrate"], env=env, check=True, capture_output=True, timeout=300)
        subprocess.run(
            [airflow, "pools", "set", "tiering_uploads", "4", "concurrent uploads"],
            env=env,
            check=True,
            capture_output=True,
            timeout=120,
        )
        with (work / "standalone.log").open("w") as log:
            proc = subprocess.Popen([airflow, "standalone"], env=env, stdout=log, stderr=subprocess.STDOUT)
        say(f"airflow standalone (pid {proc.pid}) on {base}, log {work / 'standalone.log'}")
        try:
            exercise(Api(base), work, env, artifacts, timeout)
        finally:
            stop(proc)


def exercise(api: Api, work: Path, env: dict[str, str], artifacts: Path, timeout: float) -> None:
    started = time.monotonic()
    wait_for("the API server", lambda: api.call("GET", "/api/v2/monitor/health")[0] == 200, 150)
    passwords = Path(env["AIRFLOW_HOME"]) / "simple_auth_manager_passwords.json.generated"
    api.login(wait_for("the admin password", lambda: json.loads(passwords.read_text()).get("admin"), 30))
    wait_for(f"{DAG_ID} to be parsed", lambda: api.call("GET", f"/api/v2/dags/{DAG_ID}")[0] == 200, 90)
    api.ok("PATCH", f"/api/v2/dags/{DAG_ID}", {"is_paused": False})
    say(f"API up, token issued, {DAG_ID} parsed and unpaused after {time.monotonic() - started:.0f} s")

    first = api.trigger(DAG_ID)
    state = api.wait_run(DAG_ID, first, timeout)
    say(f"run {first} finished: {state}")
    if state != "success":
        raise E2EError(f"run {first} of {DAG_ID} ended {state}")
    results = api.mapped_results(DAG_ID, first, "copy")
    say("copied per partition: " + json.dumps({k: v["segments_copied"] for k, v in sorted(results.items())}))
    if sorted(results) != ["orders-0", "orders-1", "orders-2"] or not all(
        r["segments_copied"] > 0 and f"{r['topic']}-{r['partition']}" == label for label, r in results.items()
    ):
        raise E2EError(f"unexpected per-partition results: {results}")

    second = api.trigger(DAG_ID)
    wait_for(
        "the sensor to defer", lambda: api.task_state(DAG_ID, second, "wait_for_eligible_segment") == "deferred", 90
    )
    say(f"run {second}: nothing eligible, the sensor is deferred to the triggerer")
    add_partition_with_a_closed_segment(work / "kafka-logs", "orders", 3)
    state = api.wait_run(DAG_ID, second, timeout)
    fired = api.xcom(DAG_ID, second, "wait_for_eligible_segment")
    late = api.mapped_results(DAG_ID, second, "copy")
    say(f"deferred run {second} finished: {state}; trigger fired for partitions {fired}")
    if state != "success" or fired != [3] or late.get("orders-3", {}).get("segments_copied") != 1:
        raise E2EError(f"the deferred run did not copy the new segment: {state} {fired} {late}")

    status, answer = api.call(
        "POST",
        f"/api/v2/dags/{REMOVAL_DAG_ID}/dagRuns",
        {"logical_date": None, "conf": {"topic": "bad topic!", "partitions": [-1], "confirm": "bad topic!"}},
    )
    say(f"invalid removal params refused with HTTP {status}")
    if status != 400:
        raise E2EError(f"invalid removal params were not refused: {status} {answer}")

    status, partitions = api.call("GET", "/tiering/api/partitions")
    if status != 200:
        raise E2EError(f"/tiering/api/partitions answered {status}: {partitions}")
    remote = {f"{p['topic']}-{p['partition']}": p["remote_segments"] for p in partitions}
    say("Tiering page: remote segments per partition: " + json.dumps(remote, sort_keys=True))
    expected = {label: r["segments_copied"] for label, r in results.items()} | {"orders-3": 1}
    if {k: remote.get(k) for k in expected} != expected:
        raise E2EError(f"the Tiering page disagrees with the runs: {remote} vs {expected}")
    shot = artifacts / "tiering-page.png"
    if screenshot(f"{api.base}/tiering/", shot):
        say(f"screenshot saved to {shot}")
    say(f"OK in {time.monotonic() - started:.0f} s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop standalone and every process under it (its components run in sessions of their own)."""
    import psutil

    try:
        family = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        family = []
    for member in [*family, psutil.Process(proc.pid)]:
        try:
            member.terminate()
        except psutil.NoSuchProcess:
            pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    _, alive = psutil.wait_procs(family, timeout=20)
    for member in alive:  # anything that ignored SIGTERM
        try:
            member.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=10)
    say(f"airflow stopped ({len(family)} processes under standalone, {len(alive)} needed SIGKILL)")


def main() -> int:
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # the local S3 endpoint's request log
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a polite kill still stops Airflow
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifacts", type=Path, default=ROOT / "test-artifacts")
    parser.add_argument("--timeout", type=float, default=120, help="seconds each DAG run may take")
    parser.add_argument("--keep", action="store_true", help="keep the work dir (logs, AIRFLOW_HOME)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tiering-e2e-"))
    try:
        run(work, args.artifacts, args.timeout)
        return 0
    except (E2EError, subprocess.CalledProcessError) as exc:
        say(f"FAILED: {exc}")
        log = work / "standalone.log"
        if log.exists():
            print(log.read_text()[-6000:], file=sys.stderr)
        return 1
    finally:
        if args.keep:
            say(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
