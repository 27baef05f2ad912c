"""Counters of what runs did to each partition: copies, deletions, reads, index repairs, scrubs.

One row per (topic id, partition, broker) (``NO_BROKER``, -1, for acts on no broker: reads,
verify), its counts only ever raised. A run counts its acts in memory and adds them here once per
partition when it ends, in one statement: an insert that, when the row exists, adds to it in the
database (``count = count + added``), so runs adding to one row at once (on one host or many)
never lose a count. Counters live in the store, not in a process, so they survive every restart
of whatever serves them (the Prometheus exposition, the Tiering page).

The row also keeps the database clock of the last finished copy (``last_copy_ms``, for the age
of the last copy) and the Airflow task instance of the last run that acted, for the page's link
to its log.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from functools import cached_property
from typing import Any

from sqlalchemy import Dialect, Table, bindparam, case, func, select
from sqlalchemy.dialects import postgresql, sqlite

from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.metadata.models import PartitionCountersRow
from tiering_core.metadata.queries import DriverQuery
from tiering_core.metadata.transactions import StoreCore
from tiering_core.metadata.values import NO_BROKER, PartitionCounters, TaskAttempt

_counters = PartitionCountersRow.__table__
assert isinstance(_counters, Table)
COUNTERS: Table = _counters

#: The count columns, in ``PartitionCounters``' field order.
COUNT_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(PartitionCounters))
TASK_COLUMNS = ("last_dag_id", "last_run_id", "last_task_id", "last_map_index", "last_try_number")
#: A counters row as read: the replica, its counts, the last copy, the last task.
READ_COLUMNS = (
    "topic_id",
    "topic",
    "partition",
    "broker_id",
    *COUNT_COLUMNS,
    "last_copy_ms",
    "last_task_ms",
    *TASK_COLUMNS,
)


@dataclass(frozen=True, slots=True)
class ReplicaCounters:
    """One counters row: what runs did to ``topic_id_partition`` on ``broker_id``."""

    topic_id_partition: TopicIdPartition
    broker_id: int
    counters: PartitionCounters
    last_copy_ms: int | None
    last_task: TaskAttempt | None
    last_task_ms: int | None = None


def task_of_row(
    dag_id: str | None, run_id: str | None, task_id: str | None, map_index: Any, try_number: Any
) -> TaskAttempt | None:
    """The task instance of a row's ``last_*`` columns (None when no task acted)."""
    if dag_id is None or run_id is None or task_id is None:
        return None
    return TaskAttempt(dag_id, run_id, task_id, int(map_index), int(try_number))


def counters_from_row(row: Sequence[Any]) -> ReplicaCounters:
    """A value from a row of ``READ_COLUMNS``."""
    n = len(COUNT_COLUMNS)
    topic_id, topic, partition, broker = row[:4]
    counts = PartitionCounters(*(int(v) for v in row[4 : 4 + n]))
    last_copy, last_task_ms = row[4 + n], row[5 + n]
    return ReplicaCounters(
        TopicIdPartition(topic_id, TopicPartition(topic, partition)),
        broker,
        counts,
        None if last_copy is None else int(last_copy),
        task_of_row(*row[6 + n :]),
        None if last_task_ms is None else int(last_task_ms),
    )


def check_counter_broker(broker_id: object) -> int:
    """A broker id counters are kept under: a Kafka broker id, or ``NO_BROKER``."""
    if isinstance(broker_id, bool) or not isinstance(broker_id, int) or broker_id < NO_BROKER:
        raise ValueError(f"counters are kept per Kafka broker id or NO_BROKER ({NO_BROKER}), not {broker_id!r}")
    return broker_id


class CounterStatements:
    """The counter statements for one dialect, built once per store."""

    def __init__(self, dialect: Dialect) -> None:
        dialect_insert = postgresql.insert if dialect.name == "postgresql" else sqlite.insert
        upsert: Any = dialect_insert(COUNTERS)
        added = upsert.excluded
        acted = added.last_dag_id.is_not(None)
        set_: dict[str, Any] = {name: COUNTERS.c[name] + added[name] for name in COUNT_COLUMNS}
        set_["last_copy_ms"] = func.coalesce(added.last_copy_ms, COUNTERS.c.last_copy_ms)
        set_.update(
            {name: case((acted, added[name]), else_=COUNTERS.c[name]) for name in (*TASK_COLUMNS, "last_task_ms")}
        )
        set_["updated_ms"] = added.updated_ms
        self.add = upsert.on_conflict_do_update(index_elements=["topic_id", "partition", "broker_id"], set_=set_)
        columns = [COUNTERS.c[name] for name in READ_COLUMNS]
        self.all = DriverQuery(select(*columns), dialect)
        self.of_topic = DriverQuery(select(*columns).where(COUNTERS.c.topic == bindparam("topic")), dialect)


class CounterStore(StoreCore):
    """Adding to a partition's counters and reading them back (module docstring)."""

    @cached_property
    def _cq(self) -> CounterStatements:
        return CounterStatements(self.engine.dialect)

    def add_counts(
        self,
        tip: TopicIdPartition,
        counts: PartitionCounters,
        *,
        broker_id: int = NO_BROKER,
        copied: bool = False,
        attempt: TaskAttempt | None = None,
    ) -> int:
        """Add ``counts`` to the counters of ``tip`` on ``broker_id`` in one transaction (the row is
        created at the first add). ``copied``: a segment copy finished, ``last_copy_ms`` becomes the
        database clock; ``attempt``: the task instance that acted becomes the last task. Returns
        the database clock of the write."""
        check_counter_broker(broker_id)
        with self._write() as conn:
            db_now = self._db_now(conn)
            conn.execute(
                self._cq.add,
                {
                    "topic_id": tip.topic_id,
                    "partition": tip.partition,
                    "broker_id": broker_id,
                    "topic": tip.topic,
                    **{name: int(getattr(counts, name)) for name in COUNT_COLUMNS},
                    "last_copy_ms": db_now if copied else None,
                    "last_dag_id": None if attempt is None else attempt.dag_id,
                    "last_run_id": None if attempt is None else attempt.run_id,
                    "last_task_id": None if attempt is None else attempt.task_id,
                    "last_map_index": None if attempt is None else attempt.map_index,
                    "last_try_number": None if attempt is None else attempt.try_number,
                    "last_task_ms": None if attempt is None else db_now,
                    "updated_ms": db_now,
                },
            )
        return db_now

    def counter_rows(self, *, topic: str | None = None) -> list[tuple[Any, ...]]:
        """Every counters row (or one topic's) as plain tuples of ``READ_COLUMNS``: the fast read
        a snapshot of thousands of partitions is built from."""
        with self._read() as conn:
            if topic is None:
                return self._cq.all.rows(conn, {})
            return self._cq.of_topic.rows(conn, {"topic": topic})

    def partition_counters(self, *, topic: str | None = None) -> list[ReplicaCounters]:
        """Every counters row (or one topic's) as values."""
        return [counters_from_row(row) for row in self.counter_rows(topic=topic)]
