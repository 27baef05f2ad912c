"""Cluster-mode metadata cost on SQLite: 3 brokers x 10,000 partitions of replica observations.

Every run on a broker records what it saw of its partitions, and a copy run asks which replica is
best before copying. With p50/p99 per partition, each beside the 5 ms target:

- ``record_run``: one broker's run recording all its partitions (one ``record_observations``
  call, one transaction), per partition; a run per broker and round, the first of them also
  pruning a day-old bucket of chart points of every replica (as the first run after a bucket
  expires does);
- ``record_one``: a run of one partition recording its observation alone (one transaction);
- ``best_replica``: the best fresh replica of a random partition (one query).

Then the cluster view: ``latest_observations()`` of every replica (10,000 partitions x 3 brokers)
with the choice made per partition (``best_replica_of``), beside a plain listing of the same rows
(the driver's cursor, tuples, no values built), against its 300 ms target.

The series is prefilled (Core ``executemany``, not the API) with a few buckets of points per
replica, inside and just past their horizons, so pruning has rows to find and skip.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import insert

from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.metadata.observations import POINTS, SERIES_RESOLUTIONS, VALUE_COLUMNS, best_replica_of
from tiering_core.metadata.store import RemoteLogMetadataStore, ReplicaObservation

TARGET_MS = 5.0
VIEW_TARGET_MS = 300.0
STALENESS_MS = 3 * 3_600_000  # three hourly copy schedules
PREFILLED_BUCKETS = 6  # chart points per replica and resolution loaded before measuring


def tip_of(p: int) -> TopicIdPartition:
    return TopicIdPartition(f"T{p // 100:021d}", TopicPartition(f"bench-{p // 100}", p % 100))


def observation(broker: int, tip: TopicIdPartition, round_: int, rng: random.Random) -> ReplicaObservation:
    lso = 1_000_000 + round_ * 1000 + rng.randrange(1000)
    return ReplicaObservation(
        broker_id=broker,
        topic_id_partition=tip,
        high_watermark=lso + rng.randrange(10),
        last_stable_offset=lso,
        log_end_offset=lso + 50,
        local_log_start_offset=lso - 500_000,
        local_bytes=1 << 30,
        leader_epoch=7 + rng.randrange(2),
        leader_epoch_start_offset=900_000,
        at_risk=rng.random() < 0.01,
        headroom_seconds=None if rng.random() < 0.5 else 3600.0 * rng.random(),
    )


def prefill(store: RemoteLogMetadataStore, brokers: int, tips: list[TopicIdPartition]) -> int:
    """Chart points per replica: the latest buckets of each resolution, and one just past its horizon."""
    now = store.database_now_ms()
    values = dict.fromkeys(VALUE_COLUMNS, 1) | {"at_risk": False, "headroom_seconds": None, "observed_ms": now}
    rows = 0
    with store.engine.begin() as conn:
        for resolution, horizon in SERIES_RESOLUTIONS:
            newest = now - now % resolution
            buckets = [newest - i * resolution for i in range(1, PREFILLED_BUCKETS)]
            buckets.append(newest - horizon - resolution)  # expired: the first write prunes it
            for bucket in buckets:
                batch = [
                    {
                        **values,
                        "topic_id": t.topic_id,
                        "partition": t.partition,
                        "broker_id": b,
                        "resolution_ms": resolution,
                        "bucket_ms": bucket,
                        "observed_ms": bucket,
                    }
                    for b in range(1, brokers + 1)
                    for t in tips
                ]
                conn.execute(insert(POINTS), batch)
                rows += len(batch)
    return rows


Figures = tuple[float, float, float]  # wall p50, wall p99, CPU p99 (ms)
Timing = tuple[float, float]  # wall, this thread's CPU time (ms)


def p99(values: list[float]) -> float:
    return sorted(values)[min(len(values) - 1, int(len(values) * 0.99))]


def figures(timings: list[Timing], per: int = 1) -> Figures:
    """p50 and p99 of the wall-clock times and p99 of the CPU times, each divided by ``per``: on
    a busy machine the wall time includes waiting for a core, the CPU time is the store's own."""
    wall = [w / per for w, _ in timings]
    cpu = [c / per for _, c in timings]
    return statistics.median(wall), p99(wall), p99(cpu)


def timed(fn: Callable[[], object]) -> Timing:
    c0, t0 = time.thread_time(), time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000, (time.thread_time() - c0) * 1000


def run(
    brokers: int, partitions: int, rounds: int, samples: int, url: str
) -> tuple[dict[str, Figures], dict[str, Timing]]:
    rng = random.Random(1)
    tips = [tip_of(p) for p in range(partitions)]
    per_partition: dict[str, Figures] = {}
    view: dict[str, Timing] = {}
    with RemoteLogMetadataStore(url) as store:
        t0 = time.perf_counter()
        loaded = prefill(store, brokers, tips)
        print(
            f"prefilled {loaded:,} chart points for {brokers} brokers x {partitions:,} partitions "
            f"in {time.perf_counter() - t0:.1f} s"
        )

        runs: list[Timing] = []
        allowed = range(1, brokers + 1)
        for round_ in range(rounds):
            for broker in range(1, brokers + 1):
                batch = [observation(broker, t, round_, rng) for t in tips]
                runs.append(timed(lambda: store.record_observations(batch, brokers=allowed)))  # noqa: B023
        print("record_run ms per run (wall):", " ".join(f"{wall:.0f}" for wall, _ in runs))
        per_partition["record_run"] = figures(runs, per=partitions)

        def record_one() -> None:
            broker = rng.randrange(1, brokers + 1)
            store.record_observations([observation(broker, rng.choice(tips), rounds, rng)])

        per_partition["record_one"] = figures([timed(record_one) for _ in range(samples)])

        def best() -> None:
            assert store.best_replica(rng.choice(tips), staleness_ms=STALENESS_MS) is not None

        per_partition["best_replica"] = figures([timed(best) for _ in range(samples)])

        def cluster_view() -> None:
            latest = store.latest_observations()
            chosen = [
                best_replica_of(replicas.values(), now_ms=latest.db_now_ms, staleness_ms=STALENESS_MS)
                for replicas in latest.replicas.values()
            ]
            assert len(chosen) == partitions and all(c is not None for c in chosen)

        def plain_listing() -> None:
            with store.engine.connect() as conn:
                cursor = conn.connection.cursor()
                cursor.execute("SELECT * FROM tiering_replica_observations")
                assert len(cursor.fetchall()) == partitions * brokers
                cursor.close()

        repeats = 5
        for name, fn in (("plain_listing", plain_listing), ("cluster_view", cluster_view)):
            fn()  # warm the page cache
            timings = [timed(fn) for _ in range(repeats)]
            view[name] = statistics.median(w for w, _ in timings), statistics.median(c for _, c in timings)
    return per_partition, view


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3, help="runs recorded per broker")
    parser.add_argument("--samples", type=int, default=1000, help="calls measured per single-partition figure")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke test")
    parser.add_argument("--url", default=None, help="another metadata database (default: SQLite in a temp dir)")
    parser.add_argument("--dir", type=Path, default=None, help="where to put the database (default: a temp dir)")
    args = parser.parse_args()
    if args.quick:
        args.partitions, args.rounds, args.samples = 200, 2, 50
    root = Path(tempfile.mkdtemp(prefix="bench-cluster-", dir=args.dir))
    try:
        per_partition, view = run(
            args.brokers, args.partitions, args.rounds, args.samples, args.url or f"sqlite:///{root / 'meta.db'}"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    load = os.getloadavg()[0]
    print(f"machine: {os.cpu_count()} CPUs, load average {load:.1f} while measuring")
    print(f"{args.brokers} brokers x {args.partitions:,} partitions")
    for name, (p50, wall99, cpu99) in per_partition.items():
        print(f"{name:<14} per partition  p50 {p50:7.3f} ms  p99 {wall99:7.3f} ms  (p99 CPU time {cpu99:7.3f} ms)")
    (view_ms, view_cpu), (plain_ms, plain_cpu) = view["cluster_view"], view["plain_listing"]
    print(
        f"cluster view of {args.partitions * args.brokers:,} replicas: {view_ms:.1f} ms (CPU time {view_cpu:.1f} ms), "
        f"plain listing of the same rows {plain_ms:.1f} ms (CPU time {plain_cpu:.1f} ms)"
    )
    for name, (p50, wall99, _) in per_partition.items():
        print(f"RATIO {name}_p50/target = {p50 / TARGET_MS:.2f} (target <= 1.0)")
        print(f"RATIO {name}_p99/target = {wall99 / TARGET_MS:.2f} (target <= 1.0)")
    print(f"RATIO cluster_view/target = {view_ms / VIEW_TARGET_MS:.2f} (target <= 1.0)")
    print(f"RATIO cluster_view/plain_listing = {view_ms / plain_ms:.2f}")
    print(
        json.dumps(
            {
                **{
                    name: {"p50_ms": round(a, 4), "p99_ms": round(b, 4), "p99_cpu_ms": round(c, 4)}
                    for name, (a, b, c) in per_partition.items()
                },
                **{name: {"ms": round(w, 2), "cpu_ms": round(c, 2)} for name, (w, c) in view.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
