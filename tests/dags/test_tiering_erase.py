"""The manual erase DAG: Params checked before a run exists, the confirmation, a dry run that writes
nothing, keys from a list or from a file under ``dags.erase.key_dir`` (never outside it), refusals
not retried, and real erasures of the tier (moto's S3 server, SQLite) whose audit trail names the
DAG run and no key."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from tests.airflow_support import ROOT, task_runs
from tests.engine_support import TieringEnv, tip_of
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.read.reader import open_reader
from tiering_core.runs.copy import run_copy
from tiering_core.runs.erase import key_sha256

DAG_FILE = ROOT / "dags" / "tiering_erase.py"
ERASED = b"subject-3c81d2-erase-me"
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


@pytest.fixture()
def key_dir(tiering: TieringEnv, tmp_path: Path) -> Path:
    """``dags.erase.key_dir`` in the config the DAG and its task read."""
    path = tmp_path / "erase-requests"
    path.mkdir()
    tiering.sections["dags"] = {"erase": {"key_dir": str(path)}}
    tiering.write_config()
    return path


@pytest.fixture()
def erase_dag(tiering: TieringEnv, key_dir: Path):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAG_FILE))
    assert bag.import_errors == {}
    return bag.dags["tiering_erase"]


@pytest.fixture()
def copied(tiering: TieringEnv, s3_endpoint) -> PartitionWriter:
    """orders-0: three segments copied through the aws_default connection; the first and last hold ``ERASED``."""
    from tiering_airflow.hooks.tiering import TieringHook

    w = tiering.writer("orders", 0)
    w.append([(b"a", b"1"), (ERASED, b"2"), (b"b", b"3")])
    w.roll()
    w.append([(b"c", b"4"), (b"d", b"5")])
    w.roll()
    w.append([(ERASED, b"6"), (b"e", b"7")])
    w.roll()
    w.append([(b"f", b"8")])  # the active segment: never copied
    w.set_high_watermark()
    with TieringHook().get_conn() as ctx:
        assert run_copy(ctx, w.tp).segments_copied == 3
    return w


def tier(w: PartitionWriter) -> tuple[list[tuple[int, str]], list[tuple[int, bytes | None]]]:
    """(each finished segment's start offset and id, every record the tier serves as offset and key)."""
    from tiering_airflow.hooks.tiering import TieringHook

    with TieringHook().get_conn() as ctx:
        segments = sorted(
            (s.start_offset, str(s.segment_id)) for s in ctx.metadata.list_segments(tip_of(w)) if s.state == FINISHED
        )
        served = [(r.offset, r.key) for r in open_reader(ctx, w.tp).read(0, 1000)]
    return segments, served


def assert_refused_and_nothing_changed(  # type: ignore[no-untyped-def]
    erase_dag, copied: PartitionWriter, tiering: TieringEnv, conf: dict, task_id: str, reason: str, capfd, caplog
) -> None:
    """A run of ``conf`` fails at ``task_id`` on its first try (a refusal is not retried), the
    logs name ``reason``, and neither the tier nor the audit trail changed."""
    before = tier(copied)
    run = erase_dag.test(run_conf=conf)
    assert run.state == "failed"
    (task,) = task_runs(erase_dag.dag_id, run.run_id, task_id).values()
    assert (task.state, task.try_number) == ("failed", 1)
    assert reason in "".join(capfd.readouterr()) + caplog.text
    assert tier(copied) == before
    with tiering.context() as ctx:
        assert ctx.metadata.erasures("orders") == []


def test_dry_run_is_the_default_names_the_segments_and_writes_nothing(erase_dag, copied, tiering: TieringEnv) -> None:
    before = tier(copied)
    run = erase_dag.test(run_conf={"topic": "orders", "keys": [ERASED.decode()], "confirm": "orders"})
    assert run.state == "success"
    (task,) = task_runs(erase_dag.dag_id, run.run_id, "erase").values()
    assert task.result["dry_run"] is True and task.result["records_removed"] == 2
    (partition,) = task.result["partitions"]
    assert [hit["start_offset"] for hit in partition["hits"]] == [0, 5]
    assert tier(copied) == before
    with tiering.context() as ctx:
        assert ctx.metadata.erasures("orders") == []


def test_keys_from_a_file_under_the_key_dir_are_erased_and_the_trail_names_the_run(
    erase_dag, copied, key_dir: Path, tiering: TieringEnv, capfd: pytest.CaptureFixture[str], caplog
) -> None:
    (segments, served) = tier(copied)
    request = key_dir / "2026-11" / "request-118.txt"
    request.parent.mkdir()
    request.write_text(ERASED.hex() + "\n")
    conf = {
        "topic": "orders",
        "key_file": "2026-11/request-118.txt",
        "key_encoding": "hex",
        "confirm": "orders",
        "dry_run": False,
    }
    run = erase_dag.test(run_conf=conf)
    assert run.state == "success"
    (task,) = task_runs(erase_dag.dag_id, run.run_id, "erase").values()
    assert (task.state, task.try_number, task.result["records_removed"]) == ("success", 1, 2)
    assert task.result["key_sha256"] == [key_sha256(ERASED)]
    after_segments, after_served = tier(copied)
    assert after_served == [(offset, key) for offset, key in served if key != ERASED]  # offsets kept
    assert after_segments[1] == segments[1]  # the segment without the key keeps its id
    assert [s[0] for s in after_segments] == [s[0] for s in segments] and after_segments[0] != segments[0]
    with tiering.context() as ctx:
        (record,) = ctx.metadata.erasures("orders")
    assert record.requested_by == f"DAG run tiering_erase/{run.run_id}"
    assert record.key_sha256 == (key_sha256(ERASED),)
    logged = "".join(capfd.readouterr()) + caplog.text
    assert ERASED.hex() not in logged and ERASED.decode() not in logged
    local = record.local_segments  # the broker's segments on the worker's host, named and left alone
    assert local is not None and [(s.base_offset, s.records, s.copied) for s in local.segments] == [
        (0, 1, True),
        (5, 1, True),
    ]
    assert task.result["partitions"][0]["local_segments"] == local.to_dict()
    assert "orders-0: local segment 00000000000000000005.log (base offset 5): 1 record(s)" in logged
    # run again: nothing more to remove
    run = erase_dag.test(run_conf=conf)
    (task,) = task_runs(erase_dag.dag_id, run.run_id, "erase").values()
    assert (run.state, task.result["records_removed"]) == ("success", 0)
    assert tier(copied)[0] == after_segments


def test_on_spark_the_erase_app_erases_the_keys_and_the_local_task_is_skipped(
    erase_dag, copied, key_dir: Path, tiering: TieringEnv, capfd: pytest.CaptureFixture[str], caplog
) -> None:
    (segments, served) = tier(copied)
    (key_dir / "request-7.txt").write_text(ERASED.decode() + "\n")
    conf = {"topic": "orders", "key_file": "request-7.txt", "confirm": "orders", "dry_run": False, "spark": True}
    run = erase_dag.test(run_conf=conf)
    assert run.state == "success"
    states = {t: [r.state for r in task_runs(erase_dag.dag_id, run.run_id, t).values()] for t in erase_dag.task_ids}
    assert states == {"route": ["success"], "erase": ["skipped"], "erase_on_spark": ["success"]}
    after_segments, after_served = tier(copied)
    assert after_served == [(offset, key) for offset, key in served if key != ERASED]  # offsets kept
    assert after_segments[1] == segments[1] and after_segments[0] != segments[0]
    with tiering.context() as ctx:
        (record,) = ctx.metadata.erasures("orders")
    assert (record.requested_by, record.records_removed) == (f"DAG run tiering_erase/{run.run_id}", 2)
    logged = "".join(capfd.readouterr()) + caplog.text
    assert ERASED.decode() not in logged and "1 partition(s), removed 2 record(s)" in logged  # the app's summary


def test_on_spark_the_submitted_command_names_the_key_file_under_the_key_dir_and_no_key(
    erase_dag, key_dir: Path, tiering: TieringEnv
) -> None:
    task = copy.deepcopy(erase_dag.get_task("erase_on_spark"))  # rendering replaces the templates
    params = {
        "topic": "orders",
        "key_file": "2026-11/request-9.txt",
        "key_encoding": "hex",
        "partitions": [0, 2],
        "dry_run": False,
    }
    context = {"var": {"value": {}}, "dag": erase_dag, "run_id": "manual__9"}
    task.render_template_fields({"params": params, **context})  # type: ignore[arg-type]
    with task.submission() as submission:
        command = submission.hook._build_spark_submit_command(task.application)
    args = command[command.index(task.application) + 1 :]
    assert Path(task.application).name == "erase_keys.py"
    named = {args[i]: args[i + 1] for i in range(len(args) - 1) if args[i].startswith("--")}
    assert named["--config"] == str(tiering.config_path)
    assert (named["--key-dir"], named["--key-file"]) == (str(key_dir), "2026-11/request-9.txt")
    assert (named["--topic"], named["--key-encoding"], named["--partition"]) == ("orders", "hex", "0,2")
    assert named["--requested-by"] == "DAG run tiering_erase/manual__9"
    assert args[-1] == "--yes" and "--dry-run" not in args
    dry = copy.deepcopy(erase_dag.get_task("erase_on_spark"))
    dry.render_template_fields({"params": {**params, "dry_run": True, "partitions": None}, **context})  # type: ignore[arg-type]
    assert dry.application_args[-1] == "--dry-run"
    assert dry.application_args[dry.application_args.index("--partition") + 1] == ""  # every partition


@pytest.mark.parametrize(
    ("conf", "reason"),
    [
        ({"keys": [ERASED.decode()], "confirm": "orders"}, "on Spark, give the keys as key_file"),
        ({"key_file": "r.txt", "confirm": "order"}, "confirm must repeat the topic name 'orders'"),
    ],
)
def test_on_spark_a_key_list_or_a_wrong_confirmation_fails_the_route_and_changes_nothing(
    erase_dag, copied, key_dir: Path, tiering: TieringEnv, conf: dict, reason: str, capfd, caplog
) -> None:
    (key_dir / "r.txt").write_text(ERASED.decode() + "\n")
    conf = {"topic": "orders", "dry_run": False, "spark": True, **conf}
    assert_refused_and_nothing_changed(erase_dag, copied, tiering, conf, "route", reason, capfd, caplog)


@pytest.mark.parametrize(
    ("conf", "reason"),
    [
        ({"keys": ["k"], "confirm": "order"}, "confirm must repeat the topic name 'orders'"),
        ({"confirm": "orders"}, "give the keys either as keys (a list) or as key_file"),
        ({"keys": ["k"], "key_file": "keys.txt", "confirm": "orders"}, "not both and not neither"),
        ({"keys": [], "confirm": "orders"}, "keys: expected a list of at least one key"),
        ({"keys": ["zz"], "key_encoding": "hex", "confirm": "orders"}, "--key #1: not a key in hex"),
        ({"key_file": "escape.txt", "confirm": "orders"}, "leads out of dags.erase.key_dir"),
        ({"key_file": "missing.txt", "confirm": "orders"}, "missing.txt"),
        ({"keys": ["k"], "partitions": [3], "confirm": "orders"}, "partition(s) [3] of topic orders have nothing"),
    ],
)
def test_refused_requests_fail_at_once_and_change_nothing(
    erase_dag, copied, key_dir: Path, tmp_path: Path, tiering: TieringEnv, conf: dict, reason: str, capfd, caplog
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text(ERASED.decode() + "\n")
    (key_dir / "escape.txt").symlink_to(outside)
    conf = {"topic": "orders", "dry_run": False, **conf}
    assert_refused_and_nothing_changed(erase_dag, copied, tiering, conf, "erase", reason, capfd, caplog)


def test_a_topic_with_nothing_in_the_tier_is_refused(erase_dag, tiering: TieringEnv, capfd, caplog) -> None:
    run = erase_dag.test(run_conf={"topic": "orders", "keys": ["k"], "confirm": "orders", "dry_run": False})
    assert run.state == "failed"
    (task,) = task_runs(erase_dag.dag_id, run.run_id, "erase").values()
    assert (task.state, task.try_number) == ("failed", 1)
    assert "topic orders has nothing in the remote tier to erase from" in "".join(capfd.readouterr()) + caplog.text


@pytest.mark.parametrize(
    "conf",
    [
        {"topic": "bad topic", "keys": ["k"], "confirm": "bad topic"},
        {"topic": "orders", "keys": "k", "confirm": "orders"},
        {"topic": "orders", "keys": [""], "confirm": "orders"},
        {"topic": "orders", "key_file": "/etc/passwd", "confirm": "orders"},
        {"topic": "orders", "key_file": "../keys.txt", "confirm": "orders"},
        {"topic": "orders", "key_file": "a/../../keys.txt", "confirm": "orders"},
        {"topic": "orders", "keys": ["k"], "key_encoding": "latin1", "confirm": "orders"},
        {"topic": "orders", "keys": ["k"], "partitions": [-1], "confirm": "orders"},
        {"topic": "orders", "keys": ["k"], "confirm": "orders", "dry_run": "no"},
        {"topic": "orders", "keys": ["k"]},
    ],
)
def test_invalid_params_are_rejected_before_a_run_exists(erase_dag, conf: dict) -> None:
    from airflow.exceptions import ParamValidationError
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    def runs() -> int:
        with create_session() as session:
            return session.scalar(select(func.count()).where(DagRun.dag_id == erase_dag.dag_id)) or 0

    before = runs()
    with pytest.raises(ParamValidationError):
        erase_dag.test(run_conf=conf)
    assert runs() == before
