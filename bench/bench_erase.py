"""Erasure by record key at the cost of the hits: what an erasure reads, and a full pass beside a rewrite.

A topic of ``--partitions`` x ``--segments`` closed segments (``--records`` records each, distinct
keys) is copied to moto's S3 server through a byte-counting proxy, every segment with its key
filter. Then, side by side in one run:

1. **One key in 1% of the segments.** ``tiering erase`` of a key present in every hundredth
   segment: the bytes the S3 endpoint sends during the erasure, over the tier's bytes (target
   <= 3%: the key filters rule the other segments out unread).
2. **A full pass beside a rewrite.** ``tiering rewrite`` of every segment into a new format
   (``remote.compression: zstd``), then an erasure whose key file (one key of every segment, up
   to 10,000 keys, read in one pass) copies every segment again in that format: the erasure's
   segments per second over the rewrite's (target >= 0.5).

Prints ``RATIO`` lines; ``--quick`` is a small run for the smoke test.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.engine_support import TieringEnv  # noqa: E402
from tests.services import moto_s3  # noqa: E402
from tests.storage.countproxy import CountingProxy  # noqa: E402
from tiering_core.kafka.log_writer import PartitionWriter  # noqa: E402
from tiering_core.runs.copy import run_copy  # noqa: E402
from tiering_core.runs.erase import ErasureRequest, run_erase  # noqa: E402
from tiering_core.runs.erase_keys import KeyEncoding, read_key_file  # noqa: E402
from tiering_core.runs.rewrite import run_rewrite  # noqa: E402

TOPIC = "bench-erase"
#: The key of the one-key erasure, planted in every ``HIT_EVERY``-th segment.
SUBJECT = b"subject-0001"
HIT_EVERY = 100


def say(line: str) -> None:
    print(line, flush=True)


def write_topic(env: TieringEnv, partitions: int, segments: int, records: int) -> tuple[list[PartitionWriter], int]:
    """Each partition's closed segments of distinct keys (and an active one), ``SUBJECT`` in every
    ``HIT_EVERY``-th segment of the topic; the writers and the segments holding ``SUBJECT``."""
    value = os.urandom(200)
    writers, hits, n = [], 0, 0
    for p in range(partitions):
        w = env.writer(TOPIC, p)
        for s in range(segments):
            batch = [(f"key-{p}-{s}-{i}".encode(), value) for i in range(records)]
            if n % HIT_EVERY == HIT_EVERY // 2:
                batch[records // 2] = (SUBJECT, value)
                hits += 1
            for at in range(0, records, 100):
                w.append(batch[at : at + 100])
            w.roll()
            n += 1
        w.append([(b"active", value)])
        w.set_high_watermark()
        writers.append(w)
    return writers, hits


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--segments", type=int, default=100, help="closed segments per partition (default 100)")
    parser.add_argument("--records", type=int, default=4000, help="records per segment (default 4000: 880 KiB)")
    parser.add_argument("--quick", action="store_true", help="2 partitions x 50 segments of 200 records")
    args = parser.parse_args(argv)
    if args.quick:
        args.partitions, args.segments, args.records = 2, 50, 200
    total = args.partitions * args.segments
    scratch = tempfile.TemporaryDirectory(prefix="bench-erase-")
    with moto_s3() as s3, CountingProxy.before(s3.url) as proxy, scratch as tmp:
        root = Path(tmp)
        remote = {"backend": "s3", "bucket": s3.new_bucket(), "prefix": "t/", "region": "us-east-1"}
        remote["endpoint_url"] = proxy.url
        env = TieringEnv(root, root / "kafka-logs", root / "tiering.yaml", remote, f"sqlite:///{root / 'm.db'}")
        env.log_dir.mkdir()
        env.write_config()
        say(f"writing {args.partitions} partitions x {args.segments} segments x {args.records} records")
        writers, hits = write_topic(env, args.partitions, args.segments, args.records)
        with env.context() as ctx:
            for w in writers:
                run_copy(ctx, w.tp)
        tier_bytes = proxy.uploaded.total  # every object of the tier, as the endpoint received it
        say(f"copied {total} segments, {tier_bytes / 2**20:.1f} MiB in the tier; {SUBJECT.decode()} in {hits}")

        read_before, requests_before = proxy.downloaded.total, len(proxy.downloaded_by_key)
        with env.context() as ctx:
            one = run_erase(ctx, ErasureRequest(TOPIC, frozenset({SUBJECT}), requested_by="bench"))
        read = proxy.downloaded.total - read_before
        by_kind: dict[str, int] = {}
        for path, size in proxy.downloaded_by_key[requests_before:]:
            kind = path.rsplit(".", 1)[-1] if "." in path.rsplit("/", 1)[-1] else "other"
            by_kind[kind] = by_kind.get(kind, 0) + size
        filtered = sum(p.segments_filtered_out for p in one.partitions)
        opened = sum(p.segments_read for p in one.partitions)
        assert one.to_dict()["records_removed"] == hits and not one.failures, one.to_dict()
        say(f"one key: {opened} segment(s) read, {filtered} ruled out by their key filter, {read:,} bytes read")
        say(f"  bytes read by object kind: {dict(sorted(by_kind.items()))}")
        say(f"RATIO one_key_bytes_read/tier_bytes = {read / tier_bytes:.4f} (target <= 0.03)")

        env.remote["compression"] = "zstd"
        env.write_config()
        started = time.monotonic()
        with env.context() as ctx:
            rewritten = sum(run_rewrite(ctx, w.tp).segments_rewritten for w in writers)
        rewrite_seconds = time.monotonic() - started
        assert rewritten == total, (rewritten, total)
        keys = frozenset(f"key-{p}-{s}-0".encode() for p in range(args.partitions) for s in range(args.segments))
        key_file = root / "keys.txt"
        key_file.write_text("".join(k.decode() + "\n" for k in keys))
        started = time.monotonic()
        with env.context() as ctx:
            request = ErasureRequest(TOPIC, read_key_file(key_file, KeyEncoding.UTF8), requested_by="bench")
            full = run_erase(ctx, request)
        erase_seconds = time.monotonic() - started
        copied_again = sum(len(p.hits) for p in full.partitions)
        assert copied_again == total and not full.failures, full.to_dict()["failures"]
        say(f"rewrite: {rewritten} segments in {rewrite_seconds:.1f} s; full erase of {len(keys)} keys: "
            f"{copied_again} segments in {erase_seconds:.1f} s")  # fmt: skip
        ratio = (copied_again / erase_seconds) / (rewritten / rewrite_seconds)
        say(f"RATIO full_erase/rewrite_segments_per_second = {ratio:.2f} (target >= 0.5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
