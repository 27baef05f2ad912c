"""Erasure by record key on Spark beside one process: the same keys erased from two identical tiers.

A topic of ``--partitions`` x ``--segments`` closed segments (``--records`` records of distinct keys
each) is written once; each round copies it into two identical tiers (a bucket or a directory, and
a metadata store, each), then erases a key file holding one key of every segment (every segment
copied again without it) from one tier with ``tiering erase``'s driver in this process
(``export.erase.erase_topic``) and from the other with ``spark_apps/erase_keys.py`` on local[2];
the sides take turns going first, so neither always gets the warmer machine. Each side's time
counts reading the key file and opening the context; the Spark session's start, its Python
workers' start and their first import of the project (a dry run of two partitions before the
rounds: about 2 CPU-seconds per worker, paid once per executor by a real run) do not. Spark's
JVM runs C1-only with the serial collector, as the tests run it (``tests/services.py``): for a JVM
living a minute on 2 cores, C2's compiler threads cost more CPU than they save.

``--backend s3`` puts both tiers on one moto S3 server (a process of its own, as in
``bench_spark.py``): a single Python process serving every request, which both sides share;
``--backend filesystem`` (the default) leaves only the erasure's own work to measure.

    python bench/bench_spark_erase.py [--backend filesystem|s3] [--partitions 8] [--segments 160]
        [--records 1000] [--rounds 2] [--dir /dev/shm] [--quick]

Prints each round's times, the cores each side's processes kept busy and the cores every other
process of the machine did meanwhile (on a shared 2-core machine the speed-up is capped by what
the others leave), and ``RATIO spark_erase_speedup/one_process`` (target >= 1.6).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench_spark import start_moto  # noqa: E402

from spark_apps import runtime  # noqa: E402
from spark_apps.erase_keys import main as erase_app  # noqa: E402
from tests.engine_support import TieringEnv  # noqa: E402
from tests.services import use_test_jvm_options  # noqa: E402
from tiering_core.export.erase import erase_topic  # noqa: E402
from tiering_core.kafka.topic import TopicPartition  # noqa: E402
from tiering_core.runs.copy import run_copy  # noqa: E402
from tiering_core.runs.erase import ErasureRequest, ErasureResult  # noqa: E402
from tiering_core.runs.erase_keys import KeyEncoding, read_key_file  # noqa: E402

TOPIC = "bench-spark-erase"
TARGET = 1.6
#: The warm-up's dry run: a partition for each of local[2]'s Python workers.
WARM_UP_PARTITIONS = 2


def say(line: str) -> None:
    print(line, flush=True)


def write_topic(env: TieringEnv, partitions: int, segments: int, records: int) -> tuple[list[TopicPartition], int]:
    """Each partition's closed segments of distinct keys (and an active one); the partitions and
    the bytes of the closed segments."""
    value = os.urandom(200)
    tps = []
    for p in range(partitions):
        w = env.writer(TOPIC, p)
        for s in range(segments):
            batch = [(f"key-{p}-{s}-{i}".encode(), value) for i in range(records)]
            for at in range(0, records, 100):
                w.append(batch[at : at + 100])
            w.roll()
        w.append([(b"active", value)])
        w.set_high_watermark()
        tps.append(w.tp)
    size = sum(f.stat().st_size for f in env.log_dir.rglob("*.log"))
    return tps, size


class Tiers:
    """Fresh identical tiers of the one log dir: each a config of its own (bucket or directory,
    SQLite store), the topic copied into it."""

    def __init__(self, root: Path, log_dir: Path, backend: str, endpoint: str | None) -> None:
        self.root, self.log_dir, self.backend, self.endpoint = root, log_dir, backend, endpoint

    def fresh(self, name: str, tps: list[TopicPartition]) -> TieringEnv:
        if self.backend == "s3":
            import boto3

            boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1").create_bucket(Bucket=name)
            remote: dict[str, Any] = {"backend": "s3", "bucket": name, "prefix": "t/", "endpoint_url": self.endpoint}
        else:
            remote = {"backend": "filesystem", "root": str(self.root / name)}
        url = f"sqlite:///{self.root / f'{name}.db'}"
        env = TieringEnv(self.root, self.log_dir, self.root / f"{name}.yaml", remote, url)
        env.write_config()
        with env.context() as ctx:
            for tp in tps:
                run_copy(ctx, tp)
        return env


def one_process(env: TieringEnv, key_file: Path) -> dict[str, Any]:
    """``tiering erase``'s driver in this process: the key file read, every partition in turn."""
    with env.context() as ctx:
        request = ErasureRequest(TOPIC, read_key_file(key_file, KeyEncoding.UTF8), requested_by="bench")
        result: ErasureResult = erase_topic(ctx, request)
    return result.to_dict()


def on_spark(spark: Any, env: TieringEnv, key_file: Path, *extra: str) -> dict[str, Any]:
    """The Spark app on this session (``--yes`` unless ``extra`` says ``--dry-run``), its JSON read back."""
    argv = ["--config", str(env.config_path), "--topic", TOPIC, "--key-file", str(key_file), "--json"]
    argv.extend(extra or ["--yes"])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = erase_app(argv, spark=spark)
    if code != 0:
        raise RuntimeError(f"erase_keys exited {code}")
    document: dict[str, Any] = json.loads(out.getvalue())
    return document


def tree_cpu() -> float:
    """CPU seconds of this process and every process under it (Spark's JVM, its Python workers,
    the S3 server), the children they reaped included."""
    total = 0.0
    me = psutil.Process()
    for proc in [me, *me.children(recursive=True)]:
        try:
            t = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def busy_cpu() -> float:
    """CPU seconds the whole machine spent busy (every core, every process)."""
    t = psutil.cpu_times()
    return float(sum(t) - t.idle - getattr(t, "iowait", 0.0))


@dataclass(frozen=True)
class Side:
    """One side's run: wall seconds, the cores its processes kept busy, the cores others did."""

    seconds: float
    cores: float
    others: float


def timed(fn: Callable[[], dict[str, Any]]) -> tuple[Side, dict[str, Any]]:
    own, busy, t0 = tree_cpu(), busy_cpu(), time.perf_counter()
    value = fn()
    seconds = time.perf_counter() - t0
    own, busy = tree_cpu() - own, busy_cpu() - busy
    return Side(seconds, own / seconds, max(0.0, busy - own) / seconds), value


@contextlib.contextmanager
def endpoint(backend: str) -> Iterator[str | None]:
    """moto's S3 server in a process of its own for ``s3``; nothing for ``filesystem``."""
    if backend != "s3":
        yield None
        return
    server, url = start_moto()
    try:
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("filesystem", "s3"), default="filesystem")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--segments", type=int, default=160, help="closed segments per partition (default 160)")
    parser.add_argument("--records", type=int, default=1000, help="records per segment (default 1000)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds; the sides alternate going first")
    parser.add_argument("--quick", action="store_true", help="4 partitions x 5 segments of 200 records, one round")
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="where the log dir, tiers, stores and scratch files go (/dev/shm: no disk)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.partitions, args.segments, args.records, args.rounds = 4, 5, 200, 1
    for name, value in (("AWS_ACCESS_KEY_ID", "bench"), ("AWS_SECRET_ACCESS_KEY", "bench")):
        os.environ.setdefault(name, value)
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if args.dir is not None:  # the erasures' scratch files too, in this process and in Spark's workers
        os.environ["TMPDIR"] = tempfile.tempdir = str(args.dir)
    use_test_jvm_options(os.environ)  # a JVM living a minute on 2 cores: C1 only, serial collector
    total = args.partitions * args.segments
    root = Path(tempfile.mkdtemp(prefix="bench-spark-erase-"))
    t_start, spark = timed_session()
    say(f"Spark session (local[2], JVM options {os.environ['SPARK_SUBMIT_OPTS']}) started in {t_start:.1f} s")
    try:
        with endpoint(args.backend) as url:
            log_dir = root / "kafka-logs"
            log_dir.mkdir()
            writer_env = TieringEnv(root, log_dir, root / "writer.yaml", {}, "")
            tps, size = write_topic(writer_env, args.partitions, args.segments, args.records)
            keys = [f"key-{p}-{s}-0" for p in range(args.partitions) for s in range(args.segments)]
            key_file = root / "keys.txt"
            key_file.write_text("".join(k + "\n" for k in keys))
            say(
                f"{args.partitions} partitions x {args.segments} segments x {args.records} records = "
                f"{size / 2**20:.1f} MiB, {args.backend} tier, {len(keys)} keys (one per segment), "
                f"{args.rounds} round(s), sides alternating first"
            )
            tiers = Tiers(root, log_dir, args.backend, url)
            warm = tiers.fresh("warm-up", tps)
            t_warm, _ = timed(
                functools.partial(on_spark, spark, warm, key_file, "--dry-run", *warm_up(args.partitions))
            )
            say(
                f"Spark's Python workers' first import of the project and a dry run of two partitions: "
                f"{t_warm.seconds:.1f} s ({t_warm.cores:.2f} cores); these and the session's start not counted"
            )
            times: dict[str, float] = {"one": 0.0, "spark": 0.0}
            for r in range(args.rounds):
                envs = {side: tiers.fresh(f"{side}-{r}", tps) for side in ("one", "spark")}
                order = ("one", "spark") if r % 2 == 0 else ("spark", "one")
                sides: dict[str, Side] = {}
                for side in order:
                    env = envs[side]
                    run = functools.partial(one_process, env, key_file)
                    if side == "spark":
                        run = functools.partial(on_spark, spark, env, key_file)
                    sides[side], done = timed(run)
                    copied = sum(len(p["hits"]) for p in done["partitions"])
                    assert copied == total and done["records_removed"] == total and not done["failures"], side
                    times[side] += sides[side].seconds
                say(round_line(r, order[0], sides, total))
            say(f"RATIO spark_erase_speedup/one_process = {times['one'] / times['spark']:.2f} (target >= {TARGET})")
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


def round_line(r: int, first: str, sides: dict[str, Side], segments: int) -> str:
    """A round's times, segments per second and cores (the side's processes; every other process
    of the machine meanwhile), and its speed-up."""

    def shown(name: str, side: Side) -> str:
        return (
            f"{name} {side.seconds:7.2f} s {segments / side.seconds:6.1f} segments/s "
            f"({side.cores:.2f} cores; others {side.others:.2f})"
        )

    one, spark = sides["one"], sides["spark"]
    return (
        f"  round {r + 1} ({'one process' if first == 'one' else 'local[2]'} first): {shown('one process', one)} | "
        f"{shown('erase_keys, local[2]', spark)} | speed-up {one.seconds / spark.seconds:.2f}"
    )


def warm_up(partitions: int) -> list[str]:
    """The warm-up's ``--partition`` options: as many as local[2] has Python workers, at most."""
    return [arg for p in range(min(WARM_UP_PARTITIONS, partitions)) for arg in ("--partition", str(p))]


def timed_session() -> tuple[float, Any]:
    """A local[2] session, its two Python workers started (not counted: a submit pays them once)."""
    t0 = time.perf_counter()
    spark = runtime.spark_session("tiering-bench-erase", "local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    spark.sparkContext.parallelize(range(2), 2).map(lambda x: x).collect()
    return time.perf_counter() - t0, spark


if __name__ == "__main__":
    sys.exit(main())
