"""Kafka format benchmark: index rebuild and CRC checks against plain reads, decode vs kafka-python.

Prints ratios measured side by side in one run on the same segment file:
- index rebuild time / plain sequential read time (target <= 1.0: only batch headers are touched)
- CRC verification throughput / the crc32c package's raw throughput on the same bytes (target >= 0.8)
- our full record decode vs kafka-python's decode of the same bytes (speed-up)
"""

from __future__ import annotations

import argparse
import mmap
import os
import shutil
import tempfile
import time
from pathlib import Path

import crc32c as raw_crc
from kafka.record import MemoryRecords

from tiering_core.kafka.batch import iter_batch_headers, verify_log_crc
from tiering_core.kafka.index import rebuild_indexes
from tiering_core.kafka.records import RecordSpec, iter_records
from tiering_core.kafka.topic import TopicPartition
from tiering_core.kafka.writer import PartitionWriter

CHUNK = 1 << 20


def build_segment(root: Path, size_mb: int, batch_records: int, value_bytes: int) -> Path:
    """One segment of ``size_mb`` written by the broker-faithful writer (10 MiB indexes, as the broker)."""
    writer = PartitionWriter(
        root,
        TopicPartition("bench", 0),
        segment_bytes=1 << 40,
        preallocate_index_bytes=10 << 20,
        clock=lambda: 1_700_000_000_000,
    )
    value = os.urandom(value_bytes)
    target = size_mb << 20
    n = 0
    while writer.active_size < target:
        specs = [RecordSpec(f"k{n + i}".encode(), value, 1_700_000_000_000 + n + i) for i in range(batch_records)]
        writer.append(specs)
        n += batch_records
    return writer.active_log_path


def best_of(runs: int, fn) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def plain_read(path: Path) -> None:
    with path.open("rb", buffering=0) as f:
        while f.read(CHUNK):
            pass


def raw_crc_pass(path: Path) -> None:
    """The package's raw speed: one call over the whole mapped file (no per-batch work)."""
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        raw_crc.crc32c(mm)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size-mb", type=int, default=512)
    parser.add_argument("--decode-mb", type=int, default=32, help="bytes decoded by both decoders")
    parser.add_argument("--batch-records", type=int, default=64, help="records per batch")
    parser.add_argument("--value-bytes", type=int, default=512, help="bytes per record value")
    parser.add_argument("--quick", action="store_true", help="8 MiB segment, 2 MiB decode")
    args = parser.parse_args()
    if args.quick:
        args.size_mb, args.decode_mb = 8, 2
    root = Path(tempfile.mkdtemp(prefix="bench-kafka-"))
    try:
        t0 = time.perf_counter()
        log = build_segment(root, args.size_mb, args.batch_records, args.value_bytes)
        size = log.stat().st_size
        batches = sum(1 for _ in iter_batch_headers(log))
        print(
            f"segment: {size / 2**20:.0f} MiB, {batches} batches of {args.batch_records} x {args.value_bytes} B "
            f"records, written in {time.perf_counter() - t0:.1f} s at {log}"
        )
        plain_read(log)  # warm the page cache so every side reads from memory
        runs = 3
        t_read = best_of(runs, lambda: plain_read(log))
        t_rebuild = best_of(runs, lambda: rebuild_indexes(log, 0))
        t_raw_crc = best_of(runs, lambda: raw_crc_pass(log))
        t_crc = best_of(runs, lambda: verify_log_crc(log))
        print(f"plain sequential read: {size / t_read / 2**20:.0f} MiB/s")
        print(f"index rebuild:         {size / t_rebuild / 2**20:.0f} MiB/s")
        print(f"RATIO index_rebuild_time/plain_read_time = {t_rebuild / t_read:.2f} (target <= 1.0)")
        print(f"CRC verify: {size / t_crc / 2**20:.0f} MiB/s, raw crc32c: {size / t_raw_crc / 2**20:.0f} MiB/s")
        print(f"RATIO crc_verify_throughput/raw_crc32c_throughput = {t_raw_crc / t_crc:.2f} (target >= 0.8)")

        decode_bytes = min(size, args.decode_mb << 20)
        sub = root / "decode.log"
        with log.open("rb") as src, sub.open("wb") as dst:
            end = 0
            for header in iter_batch_headers(log):
                if header.position + header.size_in_bytes > decode_bytes:
                    break
                end = header.position + header.size_in_bytes
            dst.write(src.read(end))
        data = sub.read_bytes()

        def ours() -> int:
            return sum(1 for _ in iter_records(sub))

        def theirs() -> int:
            count = 0
            records = MemoryRecords(data)
            while (batch := records.next_batch()) is not None:
                for _ in batch:
                    count += 1
            return count

        assert ours() == theirs()
        t_ours = best_of(2, ours)
        t_theirs = best_of(2, theirs)
        print(f"full decode of {len(data) / 2**20:.0f} MiB: ours {t_ours:.3f} s, kafka-python {t_theirs:.3f} s")
        print(f"RATIO decode_speedup_vs_kafka_python = {t_theirs / t_ours:.2f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
