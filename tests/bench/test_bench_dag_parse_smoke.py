"""The DAG parse benchmark runs at a tiny size and prints its ratio lines."""

from __future__ import annotations

from tests.bench.support import run_bench


def test_bench_dag_parse_small_prints_ratios() -> None:
    out = run_bench("bench_dag_parse.py", "--topics", "3", "--partitions", "2", "--repeats", "2")
    # 3 topics x (copy, retention) + 2 catch-all + the removal and DeleteRecords DAGs + 4 Spark DAGs (upload,
    # rebuild, verify, export)
    assert "3 topics x 2 partitions: 14 DAGs" in out, out
    assert "RATIO spark_dags_parse/one_dag_parse = " in out, out
    assert "RATIO generated_parse/one_dag_parse = " in out, out
    assert "RATIO first_parse/3s_target = " in out, out
