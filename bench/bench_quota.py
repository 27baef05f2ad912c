"""Upload quota benchmark: does ``remote.log.manager.copy.max.bytes.per.second`` hold where the bytes
arrive?

For 1, 4 and 16 threads in one process, each thread uploads segments of its own partitions (a log
object of ``--segment-mb`` in 5 MiB multipart parts, its indexes and its manifest: the storage's
``copy_segment``, as a copy does) through the process's one copy bucket, without pause, for
``--seconds``. The bytes are counted at the S3 endpoint itself: a counting proxy in front of moto's
S3 server timestamps every request body byte as it arrives. Printed per thread count: the cap, the
bytes the endpoint received within the window and their ratio to cap x window (target <= 1.05; a
ratio well below 1 means the machine could not keep up with the cap, not that the quota failed),
and the tokens the bucket granted against the bytes the endpoint received over the whole run
(every byte takes one token: 1.00).

Run: ``python bench/bench_quota.py [--seconds 60] [--cap-mb 8] [--segment-mb 8] [--quick]``.
Each segment is deleted once uploaded (moto keeps objects in memory).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.services import moto_s3  # noqa: E402
from tests.storage.countproxy import CountingProxy  # noqa: E402
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition  # noqa: E402
from tiering_core.storage.layout import ObjectKind, RemoteSegmentRef  # noqa: E402
from tiering_core.storage.quota import StorageQuotas, TokenBucket  # noqa: E402
from tiering_core.storage.s3 import S3RemoteStorage  # noqa: E402

MiB = 1 << 20
THREADS = (1, 4, 16)
PARTITIONS_PER_THREAD = 2
TARGET = 1.05


def segment_files(root: Path, partition: int, segment_mb: int) -> dict[ObjectKind, Path]:
    """One segment's files: a log of ``segment_mb`` MiB of random bytes and small indexes."""
    directory = root / f"bench-{partition}"
    directory.mkdir()
    files = {ObjectKind.LOG: directory / "segment.log", ObjectKind.OFFSET_INDEX: directory / "segment.index"}
    files[ObjectKind.LOG].write_bytes(os.urandom(segment_mb * MiB))
    files[ObjectKind.OFFSET_INDEX].write_bytes(os.urandom(64 * 1024))
    return files


def measure(
    endpoint: str, bucket_name: str, root: Path, threads: int, cap: int, seconds: float, segment_mb: int
) -> None:
    partitions = [
        TopicIdPartition("BENCHQUOTABENCHQUOTA00", TopicPartition(f"quota-{threads}", p))
        for p in range(threads * PARTITIONS_PER_THREAD)
    ]
    files = [segment_files(root, threads * 1000 + i, segment_mb) for i in range(len(partitions))]
    with CountingProxy.before(endpoint) as proxy:
        storage = S3RemoteStorage(
            bucket_name,
            prefix=f"t{threads}/",
            endpoint_url=proxy.url,
            region="us-east-1",
            multipart_threshold_bytes=5 * MiB,
            multipart_part_size_bytes=5 * MiB,
            max_concurrency=2,
        )
        bucket = TokenBucket(cap)
        storage.quotas = StorageQuotas(copy=bucket)
        stop = threading.Event()
        errors: list[BaseException] = []

        def upload(worker: int) -> None:
            mine = range(worker, len(partitions), threads)
            base = 0
            try:
                while not stop.is_set():
                    for i in mine:
                        ref = RemoteSegmentRef(partitions[i], base, uuid.uuid4())
                        storage.copy_segment(ref, files[i])
                        storage.delete_segment(ref)
                        if stop.is_set():
                            return
                    base += 1000
            except BaseException as exc:  # reported after the run
                errors.append(exc)

        workers = [threading.Thread(target=upload, args=(w,), name=f"quota-{w}") for w in range(threads)]
        start = time.monotonic()
        for w in workers:
            w.start()
        stop.wait(seconds)
        stop.set()
        end = start + seconds
        bucket.set_cap(1 << 40)  # past the window: uploads in flight finish unthrottled
        for w in workers:
            w.join()
        storage.close()
        if errors:
            raise errors[0]
        received = proxy.uploaded.between(start, end)
        ratio = received / (cap * seconds)
        accounting = bucket.granted_bytes / proxy.uploaded.total
    print(
        f"threads={threads:<2} cap {cap / MiB:.1f} MiB/s over {seconds:.0f} s: endpoint received "
        f"{received / MiB:.1f} MiB ({received / seconds / MiB:.2f} MiB/s); tokens granted / bytes received "
        f"{accounting:.3f}"
    )
    print(f"RATIO quota_held/threads_{threads} = {ratio:.2f} (target <= {TARGET})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0, help="the window each thread count uploads for")
    parser.add_argument("--cap-mb", type=float, default=8.0, help="the upload quota, MiB per second")
    parser.add_argument("--segment-mb", type=int, default=8, help="each segment's log object (5 MiB parts)")
    parser.add_argument("--quick", action="store_true", help="3 s windows at 4 MiB/s, 6 MiB segments")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.cap_mb, args.segment_mb = 3.0, 4.0, 6
    cap = int(args.cap_mb * MiB)
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    with moto_s3() as s3, tempfile.TemporaryDirectory() as tmp:
        name = s3.new_bucket()
        for threads in THREADS:
            measure(s3.url, name, Path(tmp), threads, cap, args.seconds, args.segment_mb)


if __name__ == "__main__":
    main()
