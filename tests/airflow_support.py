"""An isolated Airflow for the tests: a temporary AIRFLOW_HOME per session with a SQLite metadata
DB migrated once, the project's dags/ and plugins/ folders, no examples.

``configure_airflow()`` must run before anything imports airflow (Airflow reads its config at
import); the conftests of tests/dags and tests/tiering_airflow call it at import and use
``airflow_db()`` as a session fixture.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
AIRFLOW_BIN = str(Path(sys.executable).parent / "airflow")
UPLOAD_POOL = "tiering_uploads"

_home: Path | None = None
_migrated = False
_JWT_SECRET = secrets.token_urlsafe(48)  # 64 characters, one per test session


def airflow_env() -> dict[str, str]:
    """The environment of the session's Airflow (also for ``airflow ...`` subprocesses)."""
    home = configure_airflow()
    return {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        # Airflow's own default is 16 random bytes, below what PyJWT recommends for HS512.
        "AIRFLOW__API_AUTH__JWT_SECRET": _JWT_SECRET,
    }


def configure_airflow() -> Path:
    """Create the session's AIRFLOW_HOME and export its settings; idempotent."""
    global _home
    if _home is not None:
        return _home
    if "airflow" in sys.modules:
        raise RuntimeError(
            "airflow was imported before tests/airflow_support.py configured it; "
            "import airflow only inside tests or fixtures"
        )
    _home = Path(tempfile.mkdtemp(prefix="tiering-airflow-home-"))
    os.environ.update(airflow_env())
    return _home


def airflow_db() -> Path:
    """Migrate the session's metadata DB once and create the upload pool."""
    global _migrated
    home = configure_airflow()
    if not _migrated:
        proc = subprocess.run(
            [AIRFLOW_BIN, "db", "migrate"],
            env={**os.environ, **airflow_env()},
            capture_output=True,
            text=True,
            timeout=300,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"airflow db migrate failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
        from airflow.models.pool import Pool

        Pool.create_or_update_pool(UPLOAD_POOL, slots=4, description="concurrent uploads", include_deferred=False)
        _migrated = True
    return home


def remove_airflow_home() -> None:
    """At the end of the session: the temporary home goes."""
    if _home is not None:
        shutil.rmtree(_home, ignore_errors=True)


@dataclass(frozen=True)
class TaskRun:
    """One task instance of a finished run, as the metadata DB recorded it."""

    map_index: int
    label: str | None
    state: str | None
    try_number: int
    result: Any


def task_runs(dag_id: str, run_id: str, task_id: str) -> dict[str, TaskRun]:
    """The task's instances in one run, keyed by their label (rendered map index, else the index)."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        tis = session.scalars(
            select(TaskInstance).where(
                TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id, TaskInstance.task_id == task_id
            )
        ).all()
        xcoms = {
            row.map_index: XComModel.deserialize_value(row)
            for row in session.scalars(
                select(XComModel).where(
                    XComModel.dag_id == dag_id,
                    XComModel.run_id == run_id,
                    XComModel.task_id == task_id,
                    XComModel.key == "return_value",
                )
            )
        }
        return {
            (ti.rendered_map_index or str(ti.map_index)): TaskRun(
                ti.map_index, ti.rendered_map_index, ti.state, ti.try_number, xcoms.get(ti.map_index)
            )
            for ti in tis
        }


def reschedules(dag_id: str, run_id: str, task_id: str) -> int:
    """How often the task's (unmapped) instance was rescheduled in one run (a sensor in reschedule mode)."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.taskreschedule import TaskReschedule
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    with create_session() as session:
        return int(
            session.scalar(
                select(func.count())
                .select_from(TaskReschedule)
                .join(TaskInstance, TaskReschedule.ti_id == TaskInstance.id)
                .where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id, TaskInstance.task_id == task_id)
            )
            or 0
        )


def latest_run_id(dag_id: str) -> str:
    """The run id of the DAG's most recently created run (e.g. one ``airflow dags test`` made)."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        run_id = session.scalar(select(DagRun.run_id).where(DagRun.dag_id == dag_id).order_by(DagRun.id.desc()))
    if run_id is None:
        raise LookupError(f"{dag_id} has no run")
    return str(run_id)


def load_e2e_script() -> ModuleType:
    """``scripts/airflow_e2e.py`` as a module: its REST client and waits serve the tests too."""
    spec = importlib.util.spec_from_file_location("airflow_e2e", ROOT / "scripts" / "airflow_e2e.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["airflow_e2e"] = module
    spec.loader.exec_module(module)
    return module
