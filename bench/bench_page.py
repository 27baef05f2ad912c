"""The Tiering page and ``/tiering/metrics`` at 10,000 partitions x 3 brokers, on SQLite.

The store is loaded the way runs leave it (Core ``executemany``, not the API, for speed): 100
topics of 100 partitions, each partition with its finished segments, the latest observation of
each of its 3 replicas (recorded through the API, one run per broker) plus a few buckets of chart
points, counters rows per replica and for reads, and a tiering gap on one partition in fifty.

Then, through the plugin's real FastAPI app (Airflow's auth manager initialised as on an API
server, with a private Airflow home and metadata DB; a viewer's JWT for the page, the scrapers'
static bearer token for the exposition), p50 and p99 of the wall time of each request, each beside
its 300 ms target:

- ``page``: ``GET /`` (a summary row per topic, alerts);
- ``metrics``: ``GET /metrics`` (every partition's samples, text format 0.0.4);

and beside them a ``bare_query``: the same rows read with the driver's cursor and nothing built
(every latest observation, the finished segments' count and bytes grouped by partition, every
counters row): what the database alone costs.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import insert

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench_cluster import observation, p99, prefill  # noqa: E402

from tiering_core.kafka.topic import TopicIdPartition, TopicPartition  # noqa: E402
from tiering_core.metadata.counters import COUNTERS  # noqa: E402
from tiering_core.metadata.models import GapRow, PartitionRow, SegmentRow, registered_partition  # noqa: E402
from tiering_core.metadata.states import RemoteLogSegmentState  # noqa: E402
from tiering_core.metadata.store import RemoteLogMetadataStore  # noqa: E402
from tiering_core.metadata.values import NO_BROKER  # noqa: E402

TARGET_MS = 300.0
PER_TOPIC = 100
SEGMENTS = 10
SEGMENT_SPAN = 10_000
TOKEN = "bench-scraper-token-0123456789"


def tip_of(p: int) -> TopicIdPartition:
    return TopicIdPartition(f"T{p // PER_TOPIC:021d}", TopicPartition(f"bench-{p // PER_TOPIC}", p % PER_TOPIC))


def table(model: Any) -> Any:
    return model.__table__


def load(store: RemoteLogMetadataStore, tips: list[TopicIdPartition], brokers: int, segments: int) -> None:
    """Partitions, their finished segments, gaps and counters (Core), then one observation run
    per broker (the API) and chart points."""
    now = int(time.time() * 1000)
    rng = random.Random(2)
    with store.engine.begin() as conn:
        conn.execute(
            insert(table(PartitionRow)),
            [{**registered_partition(t, now), "id": i + 1, "finish_counter": segments} for i, t in enumerate(tips)],
        )
        conn.execute(
            insert(table(SegmentRow)),
            [
                {
                    "segment_id": str(uuid.uuid4()),
                    "partition_id": i + 1,
                    "start_offset": s * SEGMENT_SPAN,
                    "end_offset": (s + 1) * SEGMENT_SPAN - 1,
                    "max_timestamp": now - (segments - s) * 60_000,
                    "size_bytes": 1 << 20,
                    "state": RemoteLogSegmentState.COPY_SEGMENT_FINISHED.value,
                    "leader_epochs": {"0": s * SEGMENT_SPAN},
                    "writer_token": 1,
                    "event_time": now,
                    "finish_seq": s + 1,
                    "custom_metadata": {},
                }
                for i in range(len(tips))
                for s in range(segments)
            ],
        )
        conn.execute(
            insert(table(GapRow)),
            [
                {"partition_id": i + 1, "start_offset": 5, "end_offset": 9, "detected_ms": now}
                for i in range(0, len(tips), 50)
            ],
        )
        counts = {name: 0 for name in ("delete_requests", "delete_errors", "index_repairs", "scrub_failures")}
        conn.execute(
            insert(COUNTERS),
            [
                {
                    "topic_id": t.topic_id,
                    "topic": t.topic,
                    "partition": t.partition,
                    "broker_id": b,
                    **counts,
                    "copy_bytes": 0 if b == NO_BROKER else segments << 20,
                    "copy_requests": 0 if b == NO_BROKER else segments,
                    "copy_errors": 0,
                    "fetch_bytes": rng.randrange(1 << 20) if b == NO_BROKER else 0,
                    "fetch_requests": rng.randrange(10) if b == NO_BROKER else 0,
                    "fetch_errors": 0,
                    "last_copy_ms": None if b == NO_BROKER else now - rng.randrange(3_600_000),
                    "last_dag_id": None if b == NO_BROKER else f"tiering_copy__{t.topic}",
                    "last_run_id": None if b == NO_BROKER else "scheduled__2026-11-25T00:00:00+00:00",
                    "last_task_id": None if b == NO_BROKER else f"broker_{b}.copy",
                    "last_map_index": None if b == NO_BROKER else t.partition,
                    "last_try_number": None if b == NO_BROKER else 1,
                    "last_task_ms": None if b == NO_BROKER else now,
                    "updated_ms": now,
                }
                for t in tips
                for b in (*range(1, brokers + 1), NO_BROKER)
            ],
        )
    allowed = range(1, brokers + 1)
    for broker in allowed:
        store.record_observations([observation(broker, t, 0, rng) for t in tips], brokers=allowed)
    prefill(store, brokers, tips)


def bare_query(store: RemoteLogMetadataStore) -> int:
    """The same rows with the driver's cursor, nothing built."""
    finished = RemoteLogSegmentState.COPY_SEGMENT_FINISHED.value
    rows = 0
    with store.engine.connect() as conn:
        cursor = conn.connection.cursor()
        for sql in (
            "SELECT * FROM tiering_replica_observations",
            "SELECT partition_id, count(*), sum(size_bytes) FROM tiering_segments "
            f"WHERE state = '{finished}' GROUP BY partition_id",
            "SELECT * FROM tiering_partition_counters",
            "SELECT * FROM tiering_gaps",
        ):
            cursor.execute(sql)
            rows += len(cursor.fetchall())
        cursor.close()
    return rows


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def run(root: Path, partitions: int, brokers: int, segments: int, samples: int) -> dict[str, list[float]]:
    from tests.airflow_support import airflow_db, remove_airflow_home

    airflow_db()  # a private Airflow home and metadata DB (the auth manager checks tokens in it)
    try:
        return measure(root, partitions, brokers, segments, samples)
    finally:
        remove_airflow_home()


def measure(root: Path, partitions: int, brokers: int, segments: int, samples: int) -> dict[str, list[float]]:
    from fastapi.testclient import TestClient

    from tiering_airflow.ui.app import create_app

    log_dirs = {b: root / f"broker-{b}" for b in range(1, brokers + 1)}
    for d in log_dirs.values():
        d.mkdir()
    (root / "token").write_text(TOKEN)
    config = root / "tiering.yaml"
    url = f"sqlite:///{root / 'meta.db'}"
    config.write_text(
        yaml.safe_dump(
            {
                "brokers": {b: {"log_dirs": [str(d)]} for b, d in log_dirs.items()},
                "metadata": {"url": url},
                "remote": {"backend": "s3", "bucket": "bench-bucket", "endpoint_url": "http://127.0.0.1:9"},
                "metrics": {"bearer_token_file": str(root / "token")},
                "topics": {"*": {"remote.storage.enable": True}},
            }
        )
    )
    tips = [tip_of(p) for p in range(partitions)]
    with RemoteLogMetadataStore(url) as store:
        t0 = time.perf_counter()
        load(store, tips, brokers, segments)
        print(
            f"loaded {partitions:,} partitions x {brokers} brokers, {segments} segments each, in "
            f"{time.perf_counter() - t0:.1f} s"
        )
        expected_rows = bare_query(store)

        from airflow.api_fastapi.app import init_auth_manager
        from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

        jwt = init_auth_manager().generate_jwt(SimpleAuthManagerUser(username="viewer", role="viewer"))
        app = create_app(str(config))
        page = TestClient(app, cookies={"_token": jwt})
        scraper = TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"})

        def get_page() -> None:
            answer = page.get("/")
            assert answer.status_code == 200 and "bench-0" in answer.text, answer.status_code

        def get_metrics() -> None:
            answer = scraper.get("/metrics")
            assert answer.status_code == 200 and "tiering_remote_log_size_bytes" in answer.text, answer.status_code

        def query() -> None:
            assert bare_query(store) == expected_rows

        timings: dict[str, list[float]] = {"bare_query": [], "page": [], "metrics": []}
        for fn in (query, get_page, get_metrics):
            fn()  # warm: the page cache, the first request's imports
        for _ in range(samples):  # interleaved, so a busy moment weighs on all three alike
            timings["bare_query"].append(timed(query))
            timings["page"].append(timed(get_page))
            timings["metrics"].append(timed(get_metrics))
        size = len(scraper.get("/metrics").content)
        print(f"/metrics body: {size / 1e6:.1f} MB; page body: {len(page.get('/').content) / 1e3:.0f} kB")
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--segments", type=int, default=SEGMENTS, help="finished segments per partition")
    parser.add_argument("--samples", type=int, default=40, help="requests measured per route")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke test")
    parser.add_argument("--dir", type=Path, default=None, help="where to put the database (default: a temp dir)")
    args = parser.parse_args()
    if args.quick:
        args.partitions, args.segments, args.samples = 300, 3, 5
    root = Path(tempfile.mkdtemp(prefix="bench-page-", dir=args.dir))
    try:
        timings = run(root, args.partitions, args.brokers, args.segments, args.samples)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} while measuring")
    print(f"{args.brokers} brokers x {args.partitions:,} partitions, {args.samples} requests each")
    figures = {name: (statistics.median(values), p99(values)) for name, values in timings.items()}
    for name, (p50, high) in figures.items():
        print(f"{name:<11} p50 {p50:8.1f} ms  p99 {high:8.1f} ms")
    for name in ("page", "metrics"):
        print(f"RATIO {name}_p99/target = {figures[name][1] / TARGET_MS:.2f} (target <= 1.0)")
        print(f"RATIO {name}_p50/bare_query_p50 = {figures[name][0] / figures['bare_query'][0]:.2f}")
    print(json.dumps({name: {"p50_ms": round(a, 2), "p99_ms": round(b, 2)} for name, (a, b) in figures.items()}))


if __name__ == "__main__":
    main()
