"""Kafka format benchmark: index rebuild and CRC checks against plain reads, decode vs kafka-python.

For each batch-size profile, on one segment written by the broker-faithful writer, prints
ratios measured side by side in one run (the timed passes are interleaved, best of ``--runs``):
- index rebuild time / plain sequential read time of the same file, read the way a user would
  (``readinto`` a 1 MiB buffer) (target <= 1.0: only batch headers are touched)
- CRC verification throughput / the crc32c package's raw throughput on the same file: the
  faster of one call over an mmap of the whole file and calls over 1 MiB ``readinto`` chunks
  (target >= 0.8). The package's speed on bytes already in memory is printed for reference.
- full record decode of the whole segment: ours (from the file) vs kafka-python's (from the
  file's bytes) (speed-up)

The page cache is warm for every pass, so these are CPU costs: per-batch Python work against
the memory copy of a read and the CRC instructions. Smaller batches mean more batches per
byte, so the per-batch cost weighs more; the profiles show where each target holds.
"""

from __future__ import annotations

import argparse
import functools
import mmap
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import crc32c as raw_crc
from kafka.record import MemoryRecords

from tiering_core.kafka.batch import CODEC_NONE, iter_batch_headers, verify_log_crc
from tiering_core.kafka.index_rebuild import rebuild_indexes
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.kafka.records import RecordSpec, encode_batch, iter_records
from tiering_core.kafka.topic import TopicPartition

CHUNK = 1 << 20
TIMESTAMP = 1_700_000_000_000
KAFKA_BATCH_SIZE = 16384  # the Java producer's default batch.size
DECODE_ROUNDS = 2  # full decodes are slow (kafka-python most): fewer rounds than the cheap passes


@dataclass(frozen=True)
class Profile:
    name: str
    max_batch_bytes: int | None  # records per batch chosen to stay within this size
    records: int = 64  # records per batch without a size bound

    def records_per_batch(self, value_bytes: int) -> int:
        if self.max_batch_bytes is None:
            return self.records
        n = 1
        while _batch_size(n + 1, value_bytes) <= self.max_batch_bytes:
            n += 1
        return n


PROFILES = {
    "default": Profile("default", None),
    "16k": Profile("16k", KAFKA_BATCH_SIZE),
    "8k": Profile("8k", 8192),
}


def _specs(first: int, count: int, value: bytes) -> list[RecordSpec]:
    return [RecordSpec(f"k{first + i}".encode(), value, TIMESTAMP + first + i) for i in range(count)]


def _batch_size(records: int, value_bytes: int) -> int:
    return len(encode_batch(_specs(10**6, records, bytes(value_bytes)), base_offset=0, partition_leader_epoch=0))


def build_segment(root: Path, size_mb: int, batch_records: int, value_bytes: int, codec: int = CODEC_NONE) -> Path:
    """One segment of ``size_mb`` written by the broker-faithful writer (10 MiB indexes, as the
    broker), its batches compressed with ``codec``."""
    writer = PartitionWriter(
        root,
        TopicPartition("bench", 0),
        segment_bytes=1 << 40,
        preallocate_index_bytes=10 << 20,
        clock=lambda: TIMESTAMP,
        codec=codec,
    )
    value = os.urandom(value_bytes)
    target = size_mb << 20
    n = 0
    while writer.active_size < target:
        writer.append(_specs(n, batch_records, value))
        n += batch_records
    return writer.active_log_path


def plain_read(path: Path) -> None:
    """What a user's sequential read of the file costs: ``readinto`` one 1 MiB buffer."""
    buf = bytearray(CHUNK)
    with path.open("rb", buffering=0) as f:
        while f.readinto(buf):
            pass


def raw_crc_mmap(path: Path) -> None:
    """The package's raw speed over the file: one call over the whole mapped file."""
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        raw_crc.crc32c(mm)


def raw_crc_chunks(path: Path) -> None:
    """The package's raw speed over the file read as a user would: 1 MiB chunks, one call each."""
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    value = 0
    with path.open("rb", buffering=0) as f:
        while n := f.readinto(buf):
            value = raw_crc.crc32c(view[:n], value)


def interleaved_best(runs: int, passes: dict[str, Callable[[], object]]) -> tuple[dict[str, float], dict[str, float]]:
    """Each pass once per round, ``runs`` rounds; the best wall-clock and the best CPU time
    (this process, user + system) of each. A shared CPU adds noise, never speed; CPU time leaves
    out the waits while other processes run, so it is the steadier of the two there."""
    wall = dict.fromkeys(passes, float("inf"))
    cpu = dict.fromkeys(passes, float("inf"))
    for _ in range(runs):
        for name, run in passes.items():
            t0, c0 = time.perf_counter(), time.process_time()
            run()
            wall[name] = min(wall[name], time.perf_counter() - t0)
            cpu[name] = min(cpu[name], time.process_time() - c0)
    return wall, cpu


def decode_ours(path: Path) -> int:
    return sum(1 for _ in iter_records(path))


def decode_kafka_python(path: Path) -> int:
    count = 0
    records = MemoryRecords(path.read_bytes())
    while (batch := records.next_batch()) is not None:
        for _ in batch:
            count += 1
    return count


def mib_s(size: int, seconds: float) -> str:
    return f"{size / seconds / 2**20:,.0f} MiB/s"


@dataclass(frozen=True)
class Result:
    profile: str
    batch_bytes: float
    rebuild_ratio: float
    crc_ratio: float
    decode_speedup: float
    rebuild_cpu: float
    crc_cpu: float


def run_profile(profile: Profile, args: argparse.Namespace) -> Result:
    per_batch = profile.records_per_batch(args.value_bytes)
    root = Path(tempfile.mkdtemp(prefix=f"bench-kafka-{profile.name}-"))
    try:
        t0 = time.perf_counter()
        log = build_segment(root, args.size_mb, per_batch, args.value_bytes)
        size = log.stat().st_size
        batches = sum(1 for _ in iter_batch_headers(log))
        batch_bytes = size / batches
        print(
            f"\n[{profile.name}] segment: {size / 2**20:.0f} MiB, {batches} batches of {per_batch} x "
            f"{args.value_bytes} B records ({batch_bytes / 1024:.1f} KiB each), written in "
            f"{time.perf_counter() - t0:.1f} s"
        )
        plain_read(log)  # warm the page cache so every pass reads from memory
        in_memory = log.read_bytes()
        t, c = interleaved_best(
            args.runs,
            {
                "read": lambda: plain_read(log),
                "rebuild": lambda: rebuild_indexes(log, 0),
                "crc_mmap": lambda: raw_crc_mmap(log),
                "crc_chunks": lambda: raw_crc_chunks(log),
                "crc_memory": functools.partial(raw_crc.crc32c, in_memory),
                "verify": lambda: verify_log_crc(log),
            },
        )
        del in_memory
        raw = min(t["crc_mmap"], t["crc_chunks"])
        rebuild_ratio = t["rebuild"] / t["read"]
        crc_ratio = raw / t["verify"]
        rebuild_cpu = c["rebuild"] / c["read"]
        crc_cpu = min(c["crc_mmap"], c["crc_chunks"]) / c["verify"]
        print(f"plain sequential read (readinto 1 MiB): {mib_s(size, t['read'])}")
        print(f"index rebuild:                          {mib_s(size, t['rebuild'])}")
        print(
            f"RATIO index_rebuild_time/plain_read_time = {rebuild_ratio:.2f} (target <= 1.0; "
            f"by CPU time {rebuild_cpu:.2f}) [{profile.name}]"
        )
        print(
            f"raw crc32c over the file: one call over an mmap {mib_s(size, t['crc_mmap'])}, 1 MiB chunks "
            f"{mib_s(size, t['crc_chunks'])}; over bytes already in memory {mib_s(size, t['crc_memory'])} "
            "(no file access, for reference)"
        )
        print(f"CRC verify (every batch):               {mib_s(size, t['verify'])}")
        print(
            f"RATIO crc_verify_throughput/raw_crc32c_throughput = {crc_ratio:.2f} (target >= 0.8; "
            f"by CPU time {crc_cpu:.2f}) [{profile.name}]"
        )
        counts: set[int] = set()  # each decoder's record count, which must agree
        d, dc = interleaved_best(
            DECODE_ROUNDS,
            {
                "ours": lambda: counts.add(decode_ours(log)),
                "theirs": lambda: counts.add(decode_kafka_python(log)),
            },
        )
        assert len(counts) == 1, f"the decoders disagree on the record count: {counts}"
        ours_count = counts.pop()
        speedup = d["theirs"] / d["ours"]
        print(
            f"full decode of the whole segment ({ours_count} records, {size / 2**20:.0f} MiB, both from the file; "
            f"ours also checks every CRC): ours {d['ours']:.2f} s, kafka-python {d['theirs']:.2f} s"
        )
        print(
            f"RATIO decode_speedup_vs_kafka_python = {speedup:.2f} (by CPU time {dc['theirs'] / dc['ours']:.2f}) "
            f"[{profile.name}]"
        )
        return Result(profile.name, batch_bytes, rebuild_ratio, crc_ratio, speedup, rebuild_cpu, crc_cpu)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=512)
    parser.add_argument("--profiles", default="default,16k,8k", help=f"comma-separated, of {', '.join(PROFILES)}")
    parser.add_argument("--value-bytes", type=int, default=512, help="bytes per record value")
    parser.add_argument("--runs", type=int, default=5, help="rounds of the interleaved passes (best is kept)")
    parser.add_argument("--quick", action="store_true", help="8 MiB segments, 2 rounds")
    args = parser.parse_args()
    if args.quick:
        args.size_mb, args.runs = 8, 2
    try:
        profiles = [PROFILES[name] for name in args.profiles.split(",")]
    except KeyError as exc:
        parser.error(f"unknown profile {exc} (known: {', '.join(PROFILES)})")
    results = [run_profile(profile, args) for profile in profiles]
    print("\nsummary (targets: rebuild/read <= 1.0, CRC verify/raw >= 0.8)")
    print("(wall-clock, best of the rounds; CPU-time ratios in brackets)")
    print(f"{'profile':>8} {'batch':>10} {'rebuild/read':>19} {'crc/raw':>14} {'decode x':>9}  targets met")
    for r in results:
        met = [name for name, ok in (("rebuild", r.rebuild_ratio <= 1.0), ("crc", r.crc_ratio >= 0.8)) if ok]
        print(
            f"{r.profile:>8} {r.batch_bytes / 1024:>7.1f} KiB {r.rebuild_ratio:>11.2f} [{r.rebuild_cpu:.2f}] "
            f"{r.crc_ratio:>6.2f} [{r.crc_cpu:.2f}] {r.decode_speedup:>9.2f}  {', '.join(met) or 'none'}"
        )


if __name__ == "__main__":
    main()
