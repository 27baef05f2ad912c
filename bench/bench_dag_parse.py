"""DagBag parse time of every DAG file for 64 topics x 32 partitions, against a one-DAG file.

Our files: the generated per-topic and catch-all DAGs, the removal DAG and the Spark DAGs. Both
sides are parsed in the same process after Airflow's own imports are warm. The first parse of
each of our files also imports what it needs (the ``tiering_airflow`` package, the Spark provider), as a
fresh DAG processor would; later parses show the steady state. Partitions are mapped at run
time, so the 64 x 32 partition directories created here are never read by parsing; the target
is under 3 s in total.

    python bench/bench_dag_parse.py [--topics 64] [--partitions 32] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
OUR_FILES = tuple(
    ROOT / "dags" / name
    for name in ("tiering_dags.py", "tiering_removal.py", "tiering_delete_records.py", "tiering_spark.py")
)
BASELINE = """
from datetime import UTC, datetime

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

with DAG(dag_id="baseline", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=UTC)):
    EmptyOperator(task_id="noop")
"""


def write_config(work: Path, topics: int, partitions: int) -> Path:
    log_dir = work / "kafka-logs"
    names = [f"topic-{i:02d}" for i in range(topics)]
    for name in names:
        for p in range(partitions):
            (log_dir / f"{name}-{p}").mkdir(parents=True)
    config = work / "tiering.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "log_dirs": [str(log_dir)],
                "metadata": {"url": f"sqlite:///{work / 'metadata.db'}"},
                "remote": {"backend": "filesystem", "root": str(work / "tier")},
                "topics": {"*": {"retention.ms": -1}, **{name: {"retention.ms": 86_400_000} for name in names}},
            }
        )
    )
    return config


def parse(paths: tuple[Path, ...]) -> tuple[float, int]:
    from airflow.dag_processing.dagbag import DagBag

    started = time.perf_counter()
    dags = 0
    for path in paths:
        bag = DagBag(dag_folder=str(path))
        if bag.import_errors:
            raise SystemExit(f"import errors: {bag.import_errors}")
        dags += len(bag.dags)
    return time.perf_counter() - started, dags


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=64)
    parser.add_argument("--partitions", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-dag-parse-") as tmp:
        work = Path(tmp)
        os.environ["AIRFLOW_HOME"] = str(work / "airflow")
        os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
        os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(ROOT / "dags")
        os.environ["AIRFLOW__CORE__PLUGINS_FOLDER"] = str(ROOT / "plugins")
        os.environ["TIERING_CONFIG"] = str(write_config(work, args.topics, args.partitions))
        baseline = work / "baseline_dag.py"
        baseline.write_text(BASELINE)

        parse((baseline,))  # Airflow's own imports, for both sides
        firsts = {path.name: parse((path,)) for path in OUR_FILES}
        first, dags = sum(t for t, _ in firsts.values()), sum(n for _, n in firsts.values())
        ours = [parse(OUR_FILES)[0] for _ in range(args.repeats)]
        spark = [parse((OUR_FILES[-1],))[0] for _ in range(args.repeats)]
        base = [parse((baseline,))[0] for _ in range(args.repeats)]
        steady, one = statistics.median(ours), statistics.median(base)
        assert not (work / "metadata.db").exists(), "parsing touched the metadata store"
    print(
        f"{args.topics} topics x {args.partitions} partitions: {dags} DAGs; first parse {first:.3f} s ("
        + ", ".join(f"{name} {t * 1000:.0f} ms for {n}" for name, (t, n) in firsts.items())
        + f"), then median {steady:.3f} s over {args.repeats}; one-DAG file {one * 1000:.1f} ms"
    )
    spark_dags = firsts[OUR_FILES[-1].name][1]
    print(f"RATIO spark_dags_parse/one_dag_parse = {statistics.median(spark) / one:.1f} ({spark_dags} DAGs)")
    print(
        f"RATIO generated_parse/one_dag_parse = {steady / one:.1f} (for {dags} DAGs: {steady / one / dags:.2f} per DAG)"
    )
    print(f"RATIO first_parse/3s_target = {first / 3.0:.3f} (target < 1.0)")


if __name__ == "__main__":
    main()
