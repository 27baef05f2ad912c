"""docs/airflow.md names every DAG id of ``tiering_airflow.dag_ids``: the fixed ones as they
are, a named topic's copy and retention DAGs by their pattern."""

from __future__ import annotations

from pathlib import Path

from tiering_airflow import dag_ids

PAGE = Path(__file__).resolve().parents[1] / "docs/airflow.md"


def test_every_dag_id_is_documented() -> None:
    text = PAGE.read_text()
    ids = [*dag_ids.FIXED_DAG_IDS, dag_ids.copy_dag_id("<topic>"), dag_ids.retention_dag_id("<topic>")]
    assert "tiering_copy__<topic>" in ids and "tiering_replay" in ids
    assert [dag_id for dag_id in ids if f"`{dag_id}`" not in text] == []
