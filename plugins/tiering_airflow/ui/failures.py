"""The failing runs the Tiering page puts first: from Airflow's own database, the failed task
instances of each platform DAG's latest finished run (``latest_finished_runs``, the one rule the
page and ``/tiering/metrics`` read runs by), when that run failed (a later run that succeeded means
the DAG is healthy again; one still going has not said so yet), each with its error text and its
log.

Airflow keeps no exception text in its database; a lane that fails pushes its partitions' results to
XCom first (``operators.tiering``), so the error shown is the failed partitions' reasons from there,
else a pointer to the task log. Every text shown is ``shown_error``'s: one line, bounded, with
anything that looks like a credential masked, so a message that carried one by mistake still shows
none.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tiering_core.errors import one_line
from tiering_core.metadata.values import TaskAttempt

if TYPE_CHECKING:
    from sqlalchemy import Select

#: The tag every DAG of the platform carries (``dags/``).
PLATFORM_DAG_TAG = "tiering"
#: Failed task instances listed at most.
LISTED = 20
#: Characters of an error text shown at most.
ERROR_CHARS = 300
#: Failed partitions a lane's error names before it says how many more.
NAMED_PARTITIONS = 3

_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/\s@]*@")
_SECRET_VALUE = re.compile(
    r"(?P<name>[A-Za-z0-9_.-]*(?:pass(?:word)?|pwd|secret|token|api[_-]?key|access[_-]?key)[A-Za-z0-9_.-]*)"
    r"(?P<sep>\s*[=:]\s*)(?P<value>\"[^\"]*\"|'[^']*'|[^\s,;&]+)",
    re.IGNORECASE,
)
_BEARER = re.compile(r"\b(?P<scheme>Bearer|Basic)\s+[A-Za-z0-9._~+/=-]+", re.IGNORECASE)


def shown_error(text: object, limit: int = ERROR_CHARS) -> str:
    """``text`` as the page may show it: one line, credentials in URLs, ``name=value`` pairs of
    secret-like names and authorization headers masked, cut to ``limit`` characters."""
    line = one_line(text)
    line = _USERINFO.sub(lambda m: f"{m['scheme']}***@", line)
    line = _SECRET_VALUE.sub(lambda m: f"{m['name']}{m['sep']}***", line)
    line = _BEARER.sub(lambda m: f"{m['scheme']} ***", line)
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


@dataclass(frozen=True, slots=True)
class FailedTask:
    """A failed task instance of a tiering DAG's latest run: its try (for the log link), the label
    Airflow shows for a mapped lane, when it ended (ms, None: unknown), the partitions it named and
    its error text (``shown_error``'s)."""

    attempt: TaskAttempt
    label: str | None
    ended_ms: int | None
    partitions: tuple[str, ...]
    error: str


def of_topic(name: str, topic: str) -> bool:
    """Whether a partition's name (``<topic>-<partition>``) is one of ``topic``'s."""
    prefix = f"{topic}-"
    return name.startswith(prefix) and name[len(prefix) :].isdigit()


def concerns(failure: FailedTask, topic: str, dag_ids: Iterable[str]) -> bool:
    """Whether a failure is ``topic``'s: it names one of its partitions, or, naming none, it is a
    task of one of the topic's own DAGs (``dag_ids``)."""
    if failure.partitions:
        return any(of_topic(name, topic) for name in failure.partitions)
    return failure.attempt.dag_id in set(dag_ids)


def lane_error(results: object) -> tuple[tuple[str, ...], str] | None:
    """The failed partitions of a lane's XCom results and their reasons; None when the value is
    not a lane's results or names no failure."""
    if not isinstance(results, list):
        return None
    failed = [
        r
        for r in results
        if isinstance(r, dict) and r.get("outcome") in ("gap", "failed") and "topic" in r and "partition" in r
    ]
    if not failed:
        return None
    names = tuple(f"{r['topic']}-{r['partition']}" for r in failed)
    reasons = [_reason(name, r) for name, r in zip(names, failed, strict=True)]
    more = len(failed) - NAMED_PARTITIONS
    text = "; ".join(reasons[:NAMED_PARTITIONS]) + (f" (and {more} more)" if more > 0 else "")
    return names, text


def _reason(name: str, result: dict[str, Any]) -> str:
    """``<partition>: <why>``, the partition named once (a run's detail may already name it)."""
    detail = str(result.get("detail") or result["outcome"])
    return detail if detail.startswith(f"{name}:") else f"{name}: {detail}"


def latest_finished_runs() -> Select[Any]:
    """(DAG id, run id, state) of each platform DAG's latest finished run, by end date (two runs
    that ended at the same instant: both)."""
    from airflow.models.dag import DagTag
    from airflow.models.dagrun import DagRun
    from airflow.utils.state import DagRunState
    from sqlalchemy import and_, func, select

    finished = (DagRunState.SUCCESS, DagRunState.FAILED)
    ended = (
        select(DagRun.dag_id, func.max(DagRun.end_date).label("end_date"))
        .join(DagTag, and_(DagTag.dag_id == DagRun.dag_id, DagTag.name == PLATFORM_DAG_TAG))
        .where(DagRun.state.in_(finished), DagRun.end_date.is_not(None))
        .group_by(DagRun.dag_id)
        .subquery()
    )
    return (
        select(DagRun.dag_id, DagRun.run_id, DagRun.state)
        .join(ended, and_(DagRun.dag_id == ended.c.dag_id, DagRun.end_date == ended.c.end_date))
        .where(DagRun.state.in_(finished))
    )


def failed_tasks(limit: int = LISTED) -> list[FailedTask]:
    """The failed task instances of every platform DAG whose latest finished run failed, newest
    first."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState
    from sqlalchemy import select, tuple_

    with create_session() as session:
        runs = session.execute(latest_finished_runs()).all()
        keys = sorted((dag_id, run_id) for dag_id, run_id, state in runs if state == DagRunState.FAILED)
        if not keys:
            return []
        tis = list(
            session.scalars(
                select(TaskInstance)
                .where(TaskInstance.state == "failed", tuple_(TaskInstance.dag_id, TaskInstance.run_id).in_(keys))
                .order_by(TaskInstance.end_date.desc(), TaskInstance.dag_id, TaskInstance.map_index)
                .limit(limit)
            )
        )
        xcoms = _results(session, XComModel, tis)
        return [_failed(ti, xcoms.get((ti.dag_id, ti.run_id, ti.task_id, ti.map_index))) for ti in tis]


def _results(session: Any, model: Any, tis: Iterable[Any]) -> dict[tuple[str, str, str, int], Any]:
    """The ``return_value`` XCom of each task instance that pushed one."""
    from sqlalchemy import select, tuple_

    wanted = {(ti.dag_id, ti.run_id, ti.task_id, ti.map_index) for ti in tis}
    if not wanted:
        return {}
    rows = session.scalars(
        select(model).where(
            model.key == "return_value",
            tuple_(model.dag_id, model.run_id, model.task_id, model.map_index).in_(sorted(wanted)),
        )
    )
    return {(row.dag_id, row.run_id, row.task_id, row.map_index): model.deserialize_value(row) for row in rows}


def _failed(ti: Any, results: object) -> FailedTask:
    attempt = TaskAttempt(ti.dag_id, ti.run_id, ti.task_id, ti.map_index, max(1, ti.try_number))
    found = lane_error(results)
    partitions, error = found if found is not None else ((), "failed: the reason is in the task's log")
    ended = None if ti.end_date is None else int(ti.end_date.timestamp() * 1000)
    return FailedTask(attempt, ti.rendered_map_index, ended, partitions, shown_error(error))
