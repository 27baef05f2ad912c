"""Metadata store latency at scale on SQLite: 1,000 partitions x 1,000 segments = 1M segment rows.

The rows are bulk-loaded with Core ``executemany`` (not through the API) the way copy runs would
have left them: segments arrive in rounds of a few per partition, interleaved across partitions,
each finished with realistic custom metadata (object keys, sizes, CRCs of seven objects), a new
leader epoch every 100 segments. Then, through the public API, with p50/p99 over many calls:

- ``highest_offset_for_epoch`` and ``segment_for`` at random partitions, epochs and offsets;
- ``list_segments`` of one whole partition as runs list it (without custom metadata), three
  ways: ``fresh_process`` (the first call of a new process that just opened the store, as every
  Airflow task is; one process per sample), ``cold`` (a partition this process has not listed
  yet: every segment is decoded) and ``warm`` (a partition listed before, as copy and retention
  list theirs several times a run: the memoized values are reused);
- an ``add_segment`` + ``finish_copied_segment`` pair (two fenced write transactions, the
  copier's per-segment metadata writes).

Each wall-clock p50 and p99 is printed with its ratio to the 5 ms target, beside the p99 of the
calling thread's CPU time (the store's own cost, without waiting for a core on a busy machine).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import Table, insert

from tiering_core.kafka.epoch import EpochEntry
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.metadata.models import (
    EpochHighestRow,
    PartitionRow,
    SegmentEpochRow,
    SegmentRow,
    registered_partition,
)
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.metadata.store import RemoteLogMetadataStore, RemoteLogSegmentMetadata

TARGET_MS = 5.0
SEGMENT_SPAN = 1000  # offsets per segment
EPOCH_EVERY = 100  # a new leader epoch every 100 segments
PER_ROUND = 10  # segments a copy run uploads per partition before the next partition's run
KINDS = ("log", "index", "timeindex", "txnindex", "snapshot", "leader-epoch-checkpoint", "manifest")


def table(model: Any) -> Table:
    t = model.__table__
    assert isinstance(t, Table)
    return t


def topic_id(p: int) -> str:
    return f"P{p:021d}"


def tip_of(p: int) -> TopicIdPartition:
    return TopicIdPartition(topic_id(p), TopicPartition("bench", p))


def custom_metadata(p: int, start: int, sid: str) -> dict[str, Any]:
    key = f"prod/bench-{topic_id(p)}/{p}/{start:020d}-{sid}"
    return {
        "objects": {k: f"{key}.{k}" for k in KINDS},
        "sizes": {k: 1 << 20 for k in KINDS},
        "crc32c": {k: (start * 31 + i) & 0xFFFFFFFF for i, k in enumerate(KINDS)},
    }


def rounds(partitions: int, segments: int) -> Iterator[list[tuple[int, int]]]:
    """(partition, segment number) in the order copy runs would have finished them."""
    for first in range(0, segments, PER_ROUND):
        yield [(p, s) for p in range(partitions) for s in range(first, min(first + PER_ROUND, segments))]


def bulk_load(store: RemoteLogMetadataStore, partitions: int, segments: int) -> None:
    now = int(time.time() * 1000)
    with store.engine.connect() as conn:
        raw = conn.connection.driver_connection  # pragmas outside any transaction
        assert raw is not None
        raw.execute("PRAGMA synchronous=OFF")
        raw.execute("PRAGMA cache_size=-1048576")  # 1 GiB while loading
        with conn.begin():
            conn.execute(
                insert(table(PartitionRow)),
                [
                    {
                        **registered_partition(TopicIdPartition(topic_id(p), TopicPartition("bench", p)), now),
                        "id": p + 1,
                        "finish_counter": segments,
                    }
                    for p in range(partitions)
                ],
            )
            conn.execute(
                insert(table(EpochHighestRow)),
                [
                    {
                        "partition_id": p + 1,
                        "epoch": e,
                        "highest_offset": min(segments, (e + 1) * EPOCH_EVERY) * SEGMENT_SPAN - 1,
                        "max_span": SEGMENT_SPAN - 1,
                    }
                    for p in range(partitions)
                    for e in range((segments + EPOCH_EVERY - 1) // EPOCH_EVERY)
                ],
            )
        for batch in rounds(partitions, segments):
            seg_rows, epoch_rows = [], []
            for p, s in batch:
                sid = str(uuid.uuid4())
                start, end = s * SEGMENT_SPAN, (s + 1) * SEGMENT_SPAN - 1
                epoch = s // EPOCH_EVERY
                seg_rows.append(
                    {
                        "segment_id": sid,
                        "partition_id": p + 1,
                        "start_offset": start,
                        "end_offset": end,
                        "max_timestamp": now - (segments - s) * 60_000,
                        "size_bytes": 1 << 30,
                        "state": RemoteLogSegmentState.COPY_SEGMENT_FINISHED.value,
                        "leader_epochs": {str(epoch): start},
                        "writer_token": 1,
                        "event_time": now,
                        "finish_seq": s + 1,
                        "custom_metadata": custom_metadata(p, start, sid),
                    }
                )
                epoch_rows.append(
                    {
                        "segment_id": sid,
                        "epoch": epoch,
                        "partition_id": p + 1,
                        "start_offset": start,
                        "end_offset": end,
                        "finish_seq": s + 1,
                    }
                )
            with conn.begin():
                conn.execute(insert(table(SegmentRow)), seg_rows)
                conn.execute(insert(table(SegmentEpochRow)), epoch_rows)
        raw.execute("ANALYZE")
        raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        raw.execute("PRAGMA synchronous=NORMAL")
        raw.execute("PRAGMA cache_size=-32768")


Figures = tuple[float, float, float]  # wall p50, wall p99, CPU p99 (ms)


def p99(values: list[float]) -> float:
    return sorted(values)[min(len(values) - 1, int(len(values) * 0.99))]


def measure(fn: Callable[[], object], runs: int) -> Figures:
    """Wall-clock latency per call, and this thread's CPU time per call: on a busy machine the
    wall p99 includes waiting for a core, the CPU p99 is the store's own cost."""
    wall, cpu = [], []
    for _ in range(runs):
        c0, t0 = time.thread_time(), time.perf_counter()
        fn()
        wall.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.thread_time() - c0) * 1000)
    return statistics.median(wall), p99(wall), p99(cpu)


def first_listing(url: str, partition: int, segments: int) -> None:
    """In a new process: open the store, list one partition, print the listing's wall and CPU ms."""
    with RemoteLogMetadataStore(url) as store:
        c0, t0 = time.thread_time(), time.perf_counter()
        listed = store.list_segments(tip_of(partition), custom_metadata=False)
        wall, cpu = (time.perf_counter() - t0) * 1000, (time.thread_time() - c0) * 1000
        assert len(listed) == segments
    print(json.dumps({"wall_ms": wall, "cpu_ms": cpu}))


def first_listings(url: str, partitions: list[int], segments: int, samples: int) -> Figures:
    """The first listing of one process each, over ``samples`` fresh processes (one at a time)."""
    wall, cpu = [], []
    for partition in partitions[:samples]:
        out = subprocess.run(
            [sys.executable, __file__, "--first-listing", url, str(partition), str(segments)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        figures = json.loads(out.strip().splitlines()[-1])
        wall.append(figures["wall_ms"])
        cpu.append(figures["cpu_ms"])
    return statistics.median(wall), p99(wall), p99(cpu)


def run(partitions: int, segments: int, runs: int, root: Path) -> dict[str, Figures]:
    url = f"sqlite:///{root / 'meta.db'}"
    with RemoteLogMetadataStore(url) as store:
        t0 = time.perf_counter()
        bulk_load(store, partitions, segments)
        size_mb = (root / "meta.db").stat().st_size / 1e6
        print(
            f"loaded {partitions} partitions x {segments} segments = {partitions * segments:,} rows "
            f"in {time.perf_counter() - t0:.1f} s ({size_mb:,.0f} MB)"
        )
    rng = random.Random(1)
    max_epoch = (segments - 1) // EPOCH_EVERY
    results: dict[str, Figures] = {}
    # A fresh store (fresh process state) for the queries, as a new Airflow task would open it.
    with RemoteLogMetadataStore(url) as store:

        def hofe() -> None:
            epoch = rng.randint(0, max_epoch)
            assert store.highest_offset_for_epoch(tip_of(rng.randrange(partitions)), epoch) is not None

        def segment_for() -> None:
            offset = rng.randrange(segments * SEGMENT_SPAN)
            found = store.segment_for(tip_of(rng.randrange(partitions)), offset // (EPOCH_EVERY * SEGMENT_SPAN), offset)
            assert found is not None and found.start_offset <= offset <= found.end_offset

        results["highest_offset_for_epoch"] = measure(hofe, runs)
        results["segment_for"] = measure(segment_for, runs)

        cold_order = list(range(partitions))
        rng.shuffle(cold_order)
        fresh_runs = min(partitions - 1, max(3, runs // 20))
        cold_runs = min(partitions - 1 - fresh_runs, max(20, runs // 3))
        cold = iter(cold_order[1 + fresh_runs :])

        def list_cold() -> None:
            assert len(store.list_segments(tip_of(next(cold)), custom_metadata=False)) == segments

        results["list_segments_fresh_process"] = first_listings(url, cold_order[1:], segments, fresh_runs)
        results["list_segments_cold"] = measure(list_cold, cold_runs)
        hot = tip_of(cold_order[0])
        for _ in range(2):  # the store memoizes a partition's segments from its second listing on
            store.list_segments(hot, custom_metadata=False)

        def list_warm() -> None:
            assert len(store.list_segments(hot, custom_metadata=False)) == segments

        results["list_segments_warm"] = measure(list_warm, max(20, runs // 3))

        writer = tip_of(cold_order[0])
        lease = store.acquire_lease(writer, "bench", ttl_ms=3_600_000)
        next_start = [segments * SEGMENT_SPAN]

        def add_finish() -> None:
            start = next_start[0]
            next_start[0] += SEGMENT_SPAN
            sid = uuid.uuid4()
            meta = RemoteLogSegmentMetadata(
                sid,
                writer,
                start,
                start + SEGMENT_SPAN - 1,
                start,
                {max_epoch: start},
                1 << 30,
                RemoteLogSegmentState.COPY_SEGMENT_STARTED,
                lease.token,
                int(time.time() * 1000),
            )
            store.add_segment(meta, lease)
            store.finish_copied_segment(
                sid,
                lease,
                custom_metadata=custom_metadata(cold_order[0], start, str(sid)),
                lineage=[EpochEntry(e, e * EPOCH_EVERY * SEGMENT_SPAN) for e in range(max_epoch + 1)],
            )

        results["add+finish"] = measure(add_finish, max(20, runs // 2))
        store.release_lease(lease)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--segments", type=int, default=1000, help="segments per partition")
    parser.add_argument("--runs", type=int, default=600, help="calls measured per point query")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke test")
    parser.add_argument("--dir", type=Path, default=None, help="where to put the database (default: a temp dir)")
    parser.add_argument("--first-listing", nargs=3, metavar=("URL", "PARTITION", "SEGMENTS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.first_listing:
        url, partition, segments = args.first_listing
        first_listing(url, int(partition), int(segments))
        return
    if args.quick:
        args.partitions, args.segments, args.runs = 5, 50, 30
    root = Path(tempfile.mkdtemp(prefix="bench-meta-", dir=args.dir))
    try:
        results = run(args.partitions, args.segments, args.runs, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    load = os.getloadavg()[0]
    print(f"machine: {os.cpu_count()} CPUs, load average {load:.1f} while measuring")
    for name, (p50, wall99, cpu99) in results.items():
        print(f"{name:<28} p50 {p50:7.2f} ms  p99 {wall99:7.2f} ms  (p99 CPU time {cpu99:6.2f} ms)")
    for name, (p50, wall99, _) in results.items():
        print(f"RATIO {name}_p50/target = {p50 / TARGET_MS:.2f} (target <= 1.0)")
        print(f"RATIO {name}_p99/target = {wall99 / TARGET_MS:.2f} (target <= 1.0)")
    print(
        json.dumps(
            {
                name: {"p50_ms": round(a, 3), "p99_ms": round(b, 3), "p99_cpu_ms": round(c, 3)}
                for name, (a, b, c) in results.items()
            }
        )
    )


if __name__ == "__main__":
    main()
