"""Arrow decode benchmark: a whole segment decoded three ways, side by side in one run.

On one segment per batch-size profile (written by the broker-faithful writer, with the data of
``bench_kafka_format``), records/s of
- kafka-python's ``kafka.record`` reader (from the file's bytes; every record built),
- our pure-Python record decoder (``iter_records``, from the file, CRC checked),
- the Arrow decoder (``tiering_core.kafka.arrow.read_segment``, from the file, CRC checked,
  every column built),
and the ratios. The timed passes are interleaved, best of ``--runs``; before them one Arrow
decode of a small segment warms numba up (its compile, or the load of its cached machine
code, is printed and kept out of the timings). The page cache is warm: these are CPU costs.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench_kafka_format import (  # noqa: E402
    PROFILES,
    Profile,
    build_segment,
    decode_kafka_python,
    decode_ours,
    interleaved_best,
    plain_read,
)

from tiering_core.kafka.arrow import read_segment  # noqa: E402
from tiering_core.kafka.batch import iter_batch_headers  # noqa: E402
from tiering_core.kafka.compression import codec_by_name  # noqa: E402
from tiering_core.kafka.isolation import IsolationLevel  # noqa: E402
from tiering_core.kafka.topic import TopicPartition  # noqa: E402

TP = TopicPartition("bench", 0)


def decode_arrow(path: Path) -> int:
    return sum(batch.num_rows for batch in read_segment(path, TP, isolation=IsolationLevel.READ_UNCOMMITTED))


def warm_up(root: Path, codec: int) -> float:
    """Seconds of the first Arrow decode in this process (numba compiles, or loads its cache)."""
    log = build_segment(root / "warm-up", 1, 16, 100, codec)
    t0 = time.perf_counter()
    decode_arrow(log)
    return time.perf_counter() - t0


def run_profile(profile: Profile, args: argparse.Namespace, codec: int) -> dict[str, float]:
    per_batch = profile.records_per_batch(args.value_bytes)
    root = Path(tempfile.mkdtemp(prefix=f"bench-arrow-{profile.name}-"))
    try:
        log = build_segment(root, args.size_mb, per_batch, args.value_bytes, codec)
        size = log.stat().st_size
        batches = sum(1 for _ in iter_batch_headers(log))
        print(
            f"\n[{profile.name}] segment: {size / 2**20:.0f} MiB ({args.codec}), {batches} batches of {per_batch} x "
            f"{args.value_bytes} B records ({size / batches / 1024:.1f} KiB each)"
        )
        plain_read(log)
        counts: dict[str, int] = {}
        passes: dict[str, Callable[[], object]] = {
            "kafka-python": lambda: counts.__setitem__("kafka-python", decode_kafka_python(log)),
            "python": lambda: counts.__setitem__("python", decode_ours(log)),
            "arrow": lambda: counts.__setitem__("arrow", decode_arrow(log)),
        }
        wall, cpu = interleaved_best(args.runs, passes)
        assert len(set(counts.values())) == 1, f"the decoders disagree on the record count: {counts}"
        records = counts["arrow"]
        for name in passes:
            print(
                f"{name:>13}: {records / wall[name]:>12,.0f} records/s  ({wall[name]:.3f} s wall, "
                f"{cpu[name]:.3f} s CPU, {size / wall[name] / 2**20:,.0f} MiB/s)"
            )
        ratios = {
            "arrow_vs_kafka_python": wall["kafka-python"] / wall["arrow"],
            "arrow_vs_python_decoder": wall["python"] / wall["arrow"],
            "python_decoder_vs_kafka_python": wall["kafka-python"] / wall["python"],
        }
        for name, value in ratios.items():
            by_cpu = {
                "arrow_vs_kafka_python": cpu["kafka-python"] / cpu["arrow"],
                "arrow_vs_python_decoder": cpu["python"] / cpu["arrow"],
                "python_decoder_vs_kafka_python": cpu["kafka-python"] / cpu["python"],
            }[name]
            print(f"RATIO {name} = {value:.2f} (by CPU time {by_cpu:.2f}) [{profile.name}]")
        return ratios
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=512)
    parser.add_argument("--profiles", default="default,16k,8k", help=f"comma-separated, of {', '.join(PROFILES)}")
    parser.add_argument("--value-bytes", type=int, default=512, help="bytes per record value")
    parser.add_argument("--codec", default="none", help="none, gzip, snappy, lz4 or zstd")
    parser.add_argument("--runs", type=int, default=3, help="rounds of the interleaved passes (best is kept)")
    parser.add_argument("--quick", action="store_true", help="8 MiB segments, 2 rounds")
    args = parser.parse_args()
    if args.quick:
        args.size_mb, args.runs = 8, 2
    try:
        profiles = [PROFILES[name] for name in args.profiles.split(",")]
    except KeyError as exc:
        parser.error(f"unknown profile {exc} (known: {', '.join(PROFILES)})")
    codec = codec_by_name(args.codec)
    root = Path(tempfile.mkdtemp(prefix="bench-arrow-warm-up-"))
    try:
        print(f"warm-up: first Arrow decode in this process {warm_up(root, codec):.2f} s (numba compile or cache load)")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    results = {profile.name: run_profile(profile, args, codec) for profile in profiles}
    print("\nsummary: records/s ratios (wall-clock, best of the rounds)")
    print(f"{'profile':>8} {'arrow/kafka-python':>19} {'arrow/python':>13} {'python/kafka-python':>20}")
    for name, r in results.items():
        print(
            f"{name:>8} {r['arrow_vs_kafka_python']:>19.2f} {r['arrow_vs_python_decoder']:>13.2f} "
            f"{r['python_decoder_vs_kafka_python']:>20.2f}"
        )


if __name__ == "__main__":
    main()
