"""``tiering recover`` benchmark (docs/upgrading.md, "Backup and recovery"): a store rebuilt from a bucket of
100,000 finished segments on moto's S3 server, into a new SQLite store, every S3 request counted
as the client sends it.

Prints the rate (segments recorded per second) and the requests per segment: the manifests read
(target: one GET per segment), every other GET (the prefix's identity object, each partition's
``partition-state.json``) and the LIST pages, per segment. The bucket holds what a copy leaves:
each segment's manifest (with its metadata, as every copy now writes it) and each partition's
state object; recovery reads nothing else.

Run: ``python bench/bench_recover.py [--segments 100000] [--partitions 100] [--quick]``.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from tests.services import S3Endpoint, free_port, port_answers  # noqa: E402
from tiering_core.config import load_config  # noqa: E402
from tiering_core.context import TieringContext  # noqa: E402
from tiering_core.kafka.epoch import EpochEntry  # noqa: E402
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition  # noqa: E402
from tiering_core.runs.recover import recover_store  # noqa: E402
from tiering_core.storage.checksum import crc32c, crc_hex  # noqa: E402
from tiering_core.storage.layout import ObjectKind, RemoteSegmentRef  # noqa: E402
from tiering_core.storage.manifest import ObjectEntry, SegmentManifest  # noqa: E402
from tiering_core.storage.partition_state import PartitionState  # noqa: E402
from tiering_core.storage.s3 import S3RemoteStorage  # noqa: E402
from tiering_core.storage.segment_facts import SegmentFacts  # noqa: E402

RECORDS_PER_SEGMENT = 1000
LOG = b"x" * 64


def topic_id(p: int) -> str:
    return f"BENCHRECOVER{p:010d}"


def fill_bucket(storage: S3RemoteStorage, partitions: int, per_partition: int) -> None:
    """Each partition's segments' manifests, as copies write them (with the segment's metadata), and
    its partition state, put from a pool of threads. The objects the manifests list are not put:
    recovery lists only the manifests' keys and reads nothing else, so they would only slow the
    filling."""
    crc = crc_hex(crc32c(LOG))

    def partition(p: int) -> None:
        tip = TopicIdPartition(topic_id(p), TopicPartition("bench-recover", p))
        for s in range(per_partition):
            base = s * RECORDS_PER_SEGMENT
            ref = RemoteSegmentRef(tip, base, uuid.uuid4())
            log_key = ref.key(ObjectKind.LOG, storage.prefix)
            facts = SegmentFacts(
                end_offset=base + RECORDS_PER_SEGMENT - 1,
                max_timestamp=1_700_000_000_000 + base,
                leader_epochs=(EpochEntry(0, base),),
                epoch_index=(EpochEntry(0, 0),),
            )
            entry = ObjectEntry(ObjectKind.LOG, log_key, len(LOG), crc)
            manifest = SegmentManifest.for_ref(ref, {ObjectKind.LOG: entry}, 1_700_000_000_000 + s, segment=facts)
            storage.put_object(ref.key(ObjectKind.MANIFEST, storage.prefix), manifest.to_json())
        storage.write_partition_state(PartitionState(tip, 0, None, ()))

    with ThreadPoolExecutor(max_workers=16) as pool:
        for n, _ in enumerate(pool.map(partition, range(partitions)), 1):
            if n % max(1, partitions // 10) == 0:
                print(f"  filled {n}/{partitions} partitions", file=sys.stderr, flush=True)


@contextlib.contextmanager
def moto_process() -> Any:
    """moto's S3 server in a process of its own, as a real endpoint is: its request handling does
    not share this process's interpreter with the recovery it serves."""
    port = free_port()
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while not port_answers("127.0.0.1", port):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"moto's S3 server did not start (exit {server.poll()})")
            time.sleep(0.05)
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
        yield S3Endpoint(f"http://127.0.0.1:{port}")
    finally:
        server.terminate()
        server.wait(timeout=30)


class RequestCounter:
    """S3 requests by operation, counted as the client sends them (botocore's before-call event)."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()

    def __call__(self, model: Any, **_: Any) -> None:
        with self._lock:
            self.counts[model.name] += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--segments", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="2,000 segments over 10 partitions")
    args = parser.parse_args()
    if args.quick:
        args.segments, args.partitions = 2_000, 10
    per_partition = max(1, args.segments // args.partitions)
    segments = per_partition * args.partitions
    with moto_process() as endpoint, tempfile.TemporaryDirectory(prefix="bench-recover-") as scratch:
        root = Path(scratch)
        (root / "logs").mkdir()
        bucket = endpoint.new_bucket()
        config = root / "tiering.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "log_dirs": [str(root / "logs")],
                    "metadata": {"url": f"sqlite:///{root / 'recovered.db'}"},
                    "remote": {
                        "backend": "s3",
                        "bucket": bucket,
                        "prefix": "t/",
                        "endpoint_url": endpoint.url,
                        "region": "us-east-1",
                    },
                }
            )
        )
        with TieringContext.open(load_config(config)) as ctx:
            storage = ctx.storage
            assert isinstance(storage, S3RemoteStorage)
            started = time.monotonic()
            print(f"filling the bucket: {segments} segments over {args.partitions} partitions", file=sys.stderr)
            fill_bucket(storage, args.partitions, per_partition)
            print(f"filled in {time.monotonic() - started:.1f}s", file=sys.stderr)
            counter = RequestCounter()
            storage.client.meta.events.register("before-call.s3", counter)
            started = time.monotonic()
            result = recover_store(ctx, progress=lambda line: print(line, file=sys.stderr, flush=True))
            seconds = time.monotonic() - started
        recorded = sum(p.recorded for p in result.partitions)
        assert recorded == segments and result.bound, (recorded, segments, result.bound)
        counts = counter.counts
        gets = counts["GetObject"]
        lists = counts["ListObjectsV2"] + counts["ListMultipartUploads"]
        others = {k: v for k, v in counts.items() if k not in ("GetObject", "ListObjectsV2", "ListMultipartUploads")}
        print(f"recovered {recorded} segments of {len(result.partitions)} partitions in {seconds:.1f}s")
        print(f"S3 requests: {dict(sorted(counts.items()))}")
        print(f"RATE recover_segments_per_second = {recorded / seconds:.0f}")
        manifest_gets = gets - args.partitions - 2  # each partition's state object; the identity, read and bound
        print(f"RATIO manifest_gets_per_segment = {manifest_gets / segments:.2f} (target <= 1.0)")
        print(f"RATIO get_requests_per_segment = {gets / segments:.3f} (informational: manifests, states, identity)")
        print(f"RATIO list_requests_per_segment = {lists / segments:.3f} (informational)")
        print(f"RATIO other_requests_per_segment = {sum(others.values()) / segments:.4f} (the binding: {others})")


if __name__ == "__main__":
    main()
