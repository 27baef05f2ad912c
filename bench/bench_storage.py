"""Storage benchmark, side by side over the same files in one run:

- our S3 segment upload to a moto endpoint / boto3's ``upload_file`` to the same endpoint (target >= 0.9)
- our S3 streaming read (open_stream) / boto3 ``get_object`` body read (informational)
- our filesystem backend / ``shutil.copyfile`` + fsync (target >= 0.9)
- peak RSS growth of a child process that only uploads one large segment (target < 64 MiB)

Run: ``python bench/bench_storage.py [--segments 4] [--segment-mb 256] [--rss-mb 1024] [--quick]``.
moto keeps objects in memory, so every object is deleted right after it is measured.

What each side does per byte: ours takes each part's CRC-32C (the manifest's checksum) and
sends it for S3 to check, with no SHA-256 of the payload; boto3's ``upload_file`` with its
defaults takes a CRC32 of each part and, over plain http as here, a SHA-256 to sign it. On
the filesystem, ours also checksums every byte, renames a temp file into place and writes
and syncs the manifest; ``copyfile`` + fsync does none of that.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
from boto3.s3.transfer import TransferConfig

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tiering_core.kafka.topic import TopicIdPartition, TopicPartition  # noqa: E402
from tiering_core.storage.filesystem import FilesystemRemoteStorage  # noqa: E402
from tiering_core.storage.layout import ObjectKind, RemoteSegmentRef  # noqa: E402
from tiering_core.storage.s3 import S3RemoteStorage  # noqa: E402

MiB = 1 << 20
TIP = TopicIdPartition("BENCHBENCHBENCHBENCH00", TopicPartition("bench", 0))

RSS_CHILD = """
import sys, threading, time, uuid
import psutil
from pathlib import Path
from tiering_core.storage.s3 import S3RemoteStorage
from tiering_core.storage.layout import ObjectKind, RemoteSegmentRef
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
tip = TopicIdPartition("BENCHBENCHBENCHBENCH00", TopicPartition("bench", 0))
part, concurrency = int(sys.argv[4]), int(sys.argv[5])
storage = S3RemoteStorage(sys.argv[2], endpoint_url=sys.argv[1], region="us-east-1", max_concurrency=concurrency,
                          multipart_threshold_bytes=part, multipart_part_size_bytes=part)
proc = psutil.Process()
before = proc.memory_info().rss
peak = [before]
done = threading.Event()
def sample():
    while not done.is_set():
        peak[0] = max(peak[0], proc.memory_info().rss)
        time.sleep(0.005)
sampler = threading.Thread(target=sample)
sampler.start()
ref = RemoteSegmentRef(tip, 0, uuid.uuid4())
storage.copy_segment(ref, {ObjectKind.LOG: Path(sys.argv[3])})
done.set()
sampler.join()
storage.delete_segment(ref)
print(peak[0] - before)
"""


def make_files(root: Path, count: int, size_mb: int) -> list[Path]:
    files = []
    block = os.urandom(MiB)
    for i in range(count):
        path = root / f"{i:020d}.log"
        with path.open("wb") as out:
            for _ in range(size_mb):
                out.write(block)
        files.append(path)
    return files


def side_by_side(
    files: list[Path], ours: Callable[[Path], float], theirs: Callable[[Path], float]
) -> tuple[float, float]:
    """Total seconds of each side over the same files, alternating which goes first so that
    neither always meets a warmer cache or a fuller server. Each side returns the seconds
    of the part it measures."""
    totals = [0.0, 0.0]
    for i, f in enumerate(files):
        for side in (0, 1) if i % 2 == 0 else (1, 0):
            totals[side] += (ours if side == 0 else theirs)(f)
    return totals[0], totals[1]


def timed(action: Callable[[], object]) -> float:
    """Seconds ``action`` takes, started with no dirty pages pending (moto spools objects to
    temp files, and both sides write): neither side pays for the other's writeback."""
    os.sync()
    t0 = time.perf_counter()
    action()
    return time.perf_counter() - t0


def bench_s3(url: str, files: list[Path], part: int, concurrency: int) -> None:
    total = sum(f.stat().st_size for f in files)
    client: Any = boto3.client("s3", endpoint_url=url, region_name="us-east-1")
    client.create_bucket(Bucket="bench-ours")
    client.create_bucket(Bucket="bench-boto3")
    ours = S3RemoteStorage(
        "bench-ours",
        endpoint_url=url,
        region="us-east-1",
        multipart_threshold_bytes=part,
        multipart_part_size_bytes=part,
        max_concurrency=concurrency,
    )
    config = TransferConfig(multipart_threshold=part, multipart_chunksize=part, max_concurrency=concurrency)
    reads = {"ours": 0.0, "boto3": 0.0}

    def upload_ours(f: Path) -> float:
        ref = RemoteSegmentRef(TIP, 0, uuid.uuid4())
        seconds = timed(lambda: ours.copy_segment(ref, {ObjectKind.LOG: f}))

        def read() -> None:
            with ours.open_stream(ref, ObjectKind.LOG) as stream:
                while stream.read(MiB):
                    pass

        def read_boto3() -> None:
            body = client.get_object(Bucket="bench-ours", Key=ref.key(ObjectKind.LOG))["Body"]
            while body.read(MiB):
                pass

        reads["ours"] += timed(read)
        reads["boto3"] += timed(read_boto3)
        ours.delete_segment(ref)  # keep the server's memory flat between uploads
        return seconds

    def upload_boto3(f: Path) -> float:
        seconds = timed(lambda: client.upload_file(str(f), "bench-boto3", f.name, Config=config))
        client.delete_object(Bucket="bench-boto3", Key=f.name)
        return seconds

    upload_ours(files[0])  # warm both paths (connections, imports) before timing
    upload_boto3(files[0])
    reads["ours"] = reads["boto3"] = 0.0
    t_ours, t_boto = side_by_side(files, upload_ours, upload_boto3)
    print(
        f"S3 upload of {total / MiB:.0f} MiB ({part // MiB} MiB parts, {concurrency} threads): "
        f"ours {total / t_ours / MiB:.0f} MiB/s (segment copy incl. manifest), "
        f"boto3 upload_file {total / t_boto / MiB:.0f} MiB/s"
    )
    print(f"RATIO s3_upload_throughput/boto3_upload_file = {t_boto / t_ours:.2f} (target >= 0.9)")
    print(
        f"S3 streaming read: ours {total / reads['ours'] / MiB:.0f} MiB/s, "
        f"boto3 get_object {total / reads['boto3'] / MiB:.0f} MiB/s"
    )
    print(f"RATIO s3_stream_read_throughput/boto3_get_object = {reads['boto3'] / reads['ours']:.2f} (informational)")
    ours.close()


def bench_filesystem(root: Path, files: list[Path]) -> None:
    """Both sides keep what they wrote until the end: deleting in between would have the
    other side's next fsync pay for freeing (and discarding) those blocks, and would empty
    our partition directory each time, which a live partition never is."""
    total = sum(f.stat().st_size for f in files)
    fs = FilesystemRemoteStorage(root / "tier")
    (root / "copies").mkdir()

    def copy_ours(f: Path) -> float:
        ref = RemoteSegmentRef(TIP, int(f.stem), uuid.uuid4())
        return timed(lambda: fs.copy_segment(ref, {ObjectKind.LOG: f}))

    def copy_shutil(f: Path) -> float:
        target = root / "copies" / f.name

        def copy() -> None:
            shutil.copyfile(f, target)
            with open(target, "rb+") as copied:
                os.fsync(copied.fileno())  # our backend fsyncs too: compare like with like

        return timed(copy)

    os.sync()
    t_fs, t_copy = side_by_side(files, copy_ours, copy_shutil)
    print(
        f"filesystem: ours {total / t_fs / MiB:.0f} MiB/s (segment copy incl. CRC-32C, manifest, fsyncs), "
        f"shutil.copyfile+fsync {total / t_copy / MiB:.0f} MiB/s"
    )
    print(f"RATIO filesystem_throughput/copyfile = {t_copy / t_fs:.2f} (target >= 0.9)")
    shutil.rmtree(root / "tier")
    shutil.rmtree(root / "copies")


def bench_rss(url: str, root: Path, size_mb: int, part: int, concurrency: int) -> None:
    (root / "big").mkdir()
    big = make_files(root / "big", 1, size_mb)[0]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    out = subprocess.run(
        [sys.executable, "-c", RSS_CHILD, url, "bench-ours", str(big), str(part), str(concurrency)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout
    big.unlink()
    growth = int(out.strip().splitlines()[-1])
    print(
        f"peak RSS growth uploading a {size_mb} MiB segment ({part // MiB} MiB parts, {concurrency} threads): "
        f"{growth / MiB:.1f} MiB"
    )
    print(f"RATIO rss_growth/64MiB_target = {growth / (64 * MiB):.2f} (target < 1.0)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--segments", type=int, default=4)
    parser.add_argument("--segment-mb", type=int, default=256)
    parser.add_argument("--rss-mb", type=int, default=1024, help="size of the segment uploaded for the RSS figure")
    parser.add_argument("--part-mb", type=int, default=64, help="multipart threshold and part size, both sides")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="2 segments of 12 MiB, 24 MiB for RSS, 5 MiB parts")
    parser.add_argument(
        "--only", choices=["s3", "filesystem", "rss"], action="append", help="run only these comparisons (repeatable)"
    )
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    if args.quick:
        args.segments, args.segment_mb, args.rss_mb, args.part_mb = 2, 12, 24, 5
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    root = Path(tempfile.mkdtemp(prefix="bench-storage-"))
    part = args.part_mb * MiB
    try:
        files = make_files(root, args.segments, args.segment_mb)
        os.sync()  # neither side should pay for writing back the freshly made inputs
        only = set(args.only or ["s3", "filesystem", "rss"])
        if "s3" in only:
            bench_s3(url, files, part, args.concurrency)
        if "filesystem" in only:
            bench_filesystem(root, files)
        for f in files:
            f.unlink()
        if "rss" in only:
            bench_rss(url, root, args.rss_mb, part, args.concurrency)
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
