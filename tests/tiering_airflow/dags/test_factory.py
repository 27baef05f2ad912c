"""``tiering_dags()``: a dags folder's one short file builds every DAG the repository's dags/ folder
builds, with the schedules and queues of the config's ``dags:`` section; config errors name the
key, and the manual DAGs' files load even when the config is broken."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from tests.airflow_support import ROOT
from tests.engine_support import TieringEnv
from tiering_core.errors import ConfigError

THREE_LINES = "from tiering_airflow.dags import tiering_dags\n\nglobals().update(tiering_dags())\n"


def dagbag(path: Path):
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(path))


def one_file(tmp_path: Path, text: str = THREE_LINES) -> Path:
    folder = tmp_path / "user-dags"
    folder.mkdir(exist_ok=True)
    (folder / "tiering.py").write_text(text)
    return folder


def test_the_three_line_file_builds_every_dag_of_the_repository_s_dags_folder(tiering: TieringEnv, tmp_path) -> None:
    tiering.write_config(orders={}, payments={})
    ours, repo = dagbag(one_file(tmp_path)), dagbag(ROOT / "dags")
    assert ours.import_errors == {} and repo.import_errors == {}
    assert set(ours.dag_ids) == set(repo.dag_ids)
    assert {"tiering_copy__orders", "tiering_retention_default_topics", "tiering_replay", "tiering_export"} <= set(
        ours.dag_ids
    )
    assert len(ours.dag_ids) == 2 + 2 * 2 + 5 + 4  # catch-alls, two topics, manual, Spark
    schedules = {d: getattr(ours.dags[d].timetable, "expression", None) for d in ours.dag_ids}
    assert schedules["tiering_copy__orders"] == "*/10 * * * *"
    assert schedules["tiering_retention_default_topics"] == "0 * * * *"  # @hourly
    assert schedules["tiering_spark_verify"] == "0 0 * * 0" and schedules["tiering_export"] == "0 0 * * *"
    assert schedules["tiering_spark_bulk_upload"] is None and schedules["tiering_replay"] is None
    assert {t.queue for d in ours.dags.values() for t in d.tasks} == {"default"}


def test_schedules_and_queues_come_from_the_dags_section(tiering: TieringEnv, tmp_path) -> None:
    tiering.sections["dags"] = {
        "copy": {"schedule": "*/5 * * * *", "queue": "tiering-copy"},
        "retention": {"schedule": "@daily"},
        "spark_verify": {"schedule": None, "queue": "spark"},
        "spark_bulk_upload": {"schedule": "0 2 * * *"},
        "delete_partition": {"queue": "tiering-admin"},
    }
    tiering.sections["copy"] = {"budget_seconds": 240, "retention_budget_seconds": 80000}
    tiering.write_config(orders={})
    bag = dagbag(one_file(tmp_path))
    assert bag.import_errors == {}
    copy, retention = bag.dags["tiering_copy__orders"], bag.dags["tiering_retention__orders"]
    assert copy.timetable.expression == "*/5 * * * *" and retention.timetable.expression == "0 0 * * *"
    assert {t.queue for t in copy.tasks} == {"tiering-copy"} and {t.queue for t in retention.tasks} == {"default"}
    assert {t.queue for t in bag.dags["tiering_copy_default_topics"].tasks} == {"tiering-copy"}
    verify = bag.dags["tiering_spark_verify"]
    assert type(verify.timetable).__name__ == "NullTimetable" and {t.queue for t in verify.tasks} == {"spark"}
    assert bag.dags["tiering_spark_bulk_upload"].timetable.expression == "0 2 * * *"
    assert {t.queue for t in bag.dags["tiering_delete_partition"].tasks} == {"tiering-admin"}
    assert {t.queue for t in bag.dags["tiering_rewrite"].tasks} == {"default"}


@pytest.mark.parametrize(
    ("dags", "copy", "message"),
    [
        ({"copy": {"schedule": "*/5 * * * *"}}, {}, "copy.budget_seconds: 480 s is not shorter than the DAG's period"),
        ({"retention": {"schedule": "0,30 * * * *"}}, {}, "copy.retention_budget_seconds: 3000 s is not shorter"),
        ({"copy": {"schedule": "61 * * * *"}}, {}, "dags.copy.schedule: '61 * * * *' is not a cron expression"),
        ({"export": {"schedule": "0 0 30 2 *"}}, {}, "dags.export.schedule: '0 0 30 2 *' is not a cron expression"),
        ({"copy": {"schedule": "@once"}}, {}, "dags.copy.schedule: expected a cron expression of five fields"),
    ],
)
def test_a_bad_dags_section_is_the_file_s_import_error_naming_the_key(
    tiering: TieringEnv, tmp_path: Path, dags: dict, copy: dict, message: str
) -> None:
    tiering.sections.update(dags=dags, copy=copy)
    with contextlib.suppress(ConfigError):  # written, then refused by the core's parser
        tiering.write_config()
    bag = dagbag(one_file(tmp_path))
    (error,) = bag.import_errors.values()
    assert message in error and bag.dag_ids == []


def test_the_manual_dags_load_with_their_defaults_when_the_config_is_broken(
    tiering: TieringEnv, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tiering.config_path.write_text("log_dirs: [")  # not YAML
    manual = 'from tiering_airflow.dags import tiering_dags\n\nglobals().update(tiering_dags("replay", "spark"))\n'
    bag = dagbag(one_file(tmp_path, manual))
    assert bag.import_errors == {}
    assert set(bag.dag_ids) == {
        "tiering_replay",
        "tiering_spark_bulk_upload",
        "tiering_spark_rebuild_indexes",
        "tiering_spark_verify",
        "tiering_export",
    }
    assert bag.dags["tiering_export"].timetable.expression == "0 0 * * *"
    assert "The config cannot be read" in caplog.text and "not valid YAML" in caplog.text
    (error,) = dagbag(one_file(tmp_path)).import_errors.values()  # with the topics: the file's error
    assert "not valid YAML" in error


def test_an_unknown_group_is_named(tiering: TieringEnv) -> None:
    from tiering_airflow.dags import GROUPS, tiering_dags

    with pytest.raises(ValueError, match=r"unknown group\(s\) copies \(groups: topics, delete_partition, "):
        tiering_dags("copies")
    assert set(tiering_dags("rewrite", config_path=str(tiering.config_path))) == {"tiering_rewrite"}
    assert GROUPS[0] == "topics"
