"""The DAG ids the page links to are the ids the DAG file gives its DAGs (one rule)."""

from __future__ import annotations

from tiering_airflow.dag_ids import (
    DEFAULT_COPY_DAG_ID,
    DEFAULT_RETENTION_DAG_ID,
    MAX_DAG_ID,
    copy_dag_id,
    dag_ids_of,
    retention_dag_id,
)


def test_named_topics_have_dags_of_their_own_and_others_the_default_ones() -> None:
    assert dag_ids_of("orders", {"orders"}) == ("tiering_copy__orders", "tiering_retention__orders")
    assert dag_ids_of("clicks", {"orders"}) == (DEFAULT_COPY_DAG_ID, DEFAULT_RETENTION_DAG_ID)


def test_long_topics_are_cut_to_airflows_limit_and_stay_distinct() -> None:
    a, b = "t" * 300 + "a", "t" * 300 + "b"
    assert len(copy_dag_id(a)) == len(retention_dag_id(a)) == MAX_DAG_ID
    assert copy_dag_id(a) != copy_dag_id(b)
