"""``tiering demo``: the whole product on embedded defaults, in one command.

Builds a demo Kafka log dir with the writer (several topics and partitions, a leader-epoch
change, committed and aborted transactions, one transaction left open), starts a local S3
endpoint (moto's server on 127.0.0.1) or uses the filesystem backend, writes a config file,
copies every partition, prints the status, verifies what was stored and reads a few records
back from the remote tier.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import yaml

from tiering_core.config import load_config
from tiering_core.context import TieringContext
from tiering_core.copy import format_copy_summary, run_copy
from tiering_core.errors import TieringError
from tiering_core.kafka.topic import TopicPartition
from tiering_core.kafka.writer import build_demo_log_dir
from tiering_core.remote_read import open_reader
from tiering_core.status import collect_status, format_status_table
from tiering_core.verify import format_verify_summary, verify_partition

DEMO_BUCKET = "kafka-tiered-demo"


@contextlib.contextmanager
def local_s3_endpoint() -> Iterator[str]:
    """moto's S3 server on a free loopback port, for the demo only."""
    import os

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


def run_demo(root: Path, *, backend: str = "s3", as_json: bool = False) -> int:
    root = root.resolve()
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    log_dir = root / "kafka-logs"
    log_dir.mkdir()
    partitions = build_demo_log_dir(log_dir)
    print(f"demo: built a Kafka log dir with {len(partitions)} partitions in {log_dir}")
    endpoint_cm = local_s3_endpoint() if backend == "s3" else contextlib.nullcontext(None)
    with endpoint_cm as endpoint:
        config_path = write_demo_config(root, backend, endpoint)
        config = load_config(config_path)
        if backend == "s3":
            import boto3

            boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=DEMO_BUCKET)
            print(f"demo: local S3 endpoint {endpoint}, bucket {DEMO_BUCKET}")
        print(f"demo: config {config_path}")
        with TieringContext.open(config) as ctx:
            results = [run_copy(ctx, log.topic_partition) for log in ctx.partitions()]
            print(format_copy_summary(results))
            rows = collect_status(ctx)
            checked = [r for log in ctx.partitions() for r in verify_partition(ctx, log.topic_partition)]
            print(f"demo: {format_verify_summary(checked)}")
            reader = open_reader(ctx, TopicPartition("orders", 0))
            start = reader.log_start_offset
            if start is not None:
                print(f"demo: the first records of orders-0 read back from the remote tier (offset {start} on):")
                for record in reader.read(start, 3):
                    print(
                        f"demo:   offset {record.offset} leader_epoch {record.leader_epoch} "
                        f"key {record.key!r} value {(record.value or b'')[:40]!r}"
                    )
        if as_json:
            print(json.dumps([r.to_dict() for r in rows], indent=2))
        else:
            print(format_status_table(rows))
        print(f"demo: try `tiering --config {config_path} segments --topic orders --partition 0`")
    return 0
