"""``tiering demo``: the whole product on embedded defaults, in one command.

Builds a demo Kafka log dir with the writer (several topics and partitions, a leader-epoch
change, committed and aborted transactions, one transaction left open), starts a local S3
endpoint (moto's server on 127.0.0.1) or uses the filesystem backend, writes a config file,
copies every partition (topic ``clicks`` through the Spark parallel upload app on local Spark,
the others with the in-process copy engine), prints the status, verifies what was stored and
reads a few records back from the remote tier.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import yaml

from tiering_core.config import load_config
from tiering_core.context import TieringContext
from tiering_core.errors import TieringError
from tiering_core.kafka.demo_log_dir import build_demo_log_dir
from tiering_core.kafka.topic import TopicPartition
from tiering_core.read.reader import open_reader
from tiering_core.read.verify import verify_partition
from tiering_core.report.lines import event_line
from tiering_core.report.results import format_verify_summary
from tiering_core.report.summaries import format_copy_summary
from tiering_core.report.tables import format_status_table
from tiering_core.runs.copy import run_copy
from tiering_core.tier.status import collect_status

DEMO_BUCKET = "kafka-tiered-demo"


@contextlib.contextmanager
def local_s3_endpoint() -> Iterator[str]:
    """moto's S3 server on a free loopback port, for the demo only."""
    try:
        from moto.server import ThreadedMotoServer
    except ImportError as exc:  # pragma: no cover - moto is in requirements.txt
        raise TieringError("the demo's local S3 endpoint needs moto[server]; use --backend filesystem") from exc
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "demo")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "demo")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def write_demo_config(root: Path, backend: str, endpoint_url: str | None) -> Path:
    remote: dict[str, object]
    if backend == "s3":
        remote = {
            "backend": "s3",
            "bucket": DEMO_BUCKET,
            "prefix": "demo/",
            "endpoint_url": endpoint_url,
            "region": "us-east-1",
        }
    else:
        remote = {"backend": "filesystem", "root": "remote-tier", "prefix": "demo/"}
    doc = {
        "log_dirs": ["kafka-logs"],
        "metadata": {"url": "sqlite:///metadata.db"},
        "remote": remote,
        "topics": {
            "*": {"remote.storage.enable": True, "retention.ms": 604800000, "retention.bytes": -1},
            "payments": {"retention.ms": 86400000, "local.retention.ms": 3600000},
        },
    }
    path = root / "tiering.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


#: Marks a directory the demo made, so a rerun may replace it; nothing else is ever deleted.
DEMO_MARKER = ".tiering-demo"


def prepare_demo_dir(root: Path) -> Path:
    """An empty demo directory: a new one, an empty one, or one an earlier demo made (replaced).

    Any other non-empty directory is refused: ``--dir /var/lib/kafka`` must never wipe a broker.
    """
    root = root.resolve()
    if root.exists():
        if not root.is_dir():
            raise TieringError(f"demo dir {root} exists and is not a directory")
        if any(root.iterdir()):
            if not (root / DEMO_MARKER).is_file():
                raise TieringError(
                    f"demo dir {root} is not empty and was not made by `tiering demo`; choose a new or empty directory"
                )
            shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)
    (root / DEMO_MARKER).write_text("made by `tiering demo`; a rerun replaces this directory\n")
    return root


#: The topic the demo uploads with the Spark parallel upload app (the others: the sequential engine).
SPARK_TOPIC = "clicks"


def spark_submit_command() -> list[str] | None:
    """``spark-submit`` and the parallel upload app, when both are here (a source checkout with
    pyspark installed); None otherwise, and the demo copies every topic without Spark."""
    app = Path(__file__).resolve().parents[2] / "spark_apps" / "parallel_upload.py"
    submit = shutil.which("spark-submit") or str(Path(sys.executable).with_name("spark-submit"))
    if not app.is_file() or not Path(submit).is_file() or shutil.which("java") is None:
        return None
    return [submit, "--master", "local[2]", "--conf", "spark.ui.enabled=false", str(app)]


def run_spark_upload(config_path: Path, topic: str, say: Callable[[str], None]) -> bool:
    """Upload one topic's partitions with the Spark app on local Spark, its output relayed."""
    command = spark_submit_command()
    if command is None:
        say("demo: spark-submit or the Spark apps are not available here; copying without Spark")
        return False
    say(f"demo: uploading topic {topic} with the Spark parallel upload app on local[2] (spark-submit)")
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    proc = subprocess.run(
        [*command, "--config", str(config_path), "--topic", topic],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    for line in proc.stdout.splitlines():
        say(f"demo:   {line}")
    if proc.returncode != 0:
        tail = " / ".join(proc.stderr.strip().splitlines()[-3:])
        raise TieringError(f"the Spark parallel upload of {topic} failed (exit {proc.returncode}): {tail}")
    return True


def run_demo(
    root: Path, *, say: Callable[[str], None], backend: str = "s3", as_json: bool = False, spark: bool = True
) -> int:
    """``say`` prints progress (the command's, which keeps stdout for the JSON document under --json)."""
    root = prepare_demo_dir(root)
    log_dir = root / "kafka-logs"
    log_dir.mkdir()
    partitions = build_demo_log_dir(log_dir)
    say(f"demo: built a Kafka log dir with {len(partitions)} partitions in {log_dir}")
    endpoint_cm = local_s3_endpoint() if backend == "s3" else contextlib.nullcontext(None)
    with endpoint_cm as endpoint:
        config_path = write_demo_config(root, backend, endpoint)
        config = load_config(config_path)
        if backend == "s3":
            import boto3

            boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=DEMO_BUCKET)
            say(f"demo: local S3 endpoint {endpoint}, bucket {DEMO_BUCKET}")
        say(f"demo: config {config_path}")
        with TieringContext.open(config) as ctx:
            by_spark = spark and run_spark_upload(config_path, SPARK_TOPIC, say)
            results = [
                run_copy(ctx, log.topic_partition, events=lambda event: say(event_line(event)))
                for log in ctx.partitions()
                if not (by_spark and log.topic_partition.topic == SPARK_TOPIC)
            ]
            say(format_copy_summary(results) + (f" (and topic {SPARK_TOPIC} on Spark)" if by_spark else ""))
            rows = collect_status(ctx)
            checked = [r for log in ctx.partitions() for r in verify_partition(ctx, log.topic_partition)]
            say(f"demo: {format_verify_summary(checked)}")
            reader = open_reader(ctx, TopicPartition("orders", 0))
            start = reader.log_start_offset
            if start is not None:
                say(f"demo: the first records of orders-0 read back from the remote tier (offset {start} on):")
                for record in reader.read(start, 3):
                    say(
                        f"demo:   offset {record.offset} leader_epoch {record.leader_epoch} "
                        f"key {record.key!r} value {(record.value or b'')[:40]!r}"
                    )
        if as_json:
            print(json.dumps([r.to_dict() for r in rows], indent=2))
        else:
            say(format_status_table(rows))
        say(f"demo: try `tiering --config {config_path} segments --topic orders --partition 0`")
    return 0
