"""What every Spark app shares: one-line failures, and jobs that an abort really stops."""

from __future__ import annotations

import contextlib
import errno
import importlib
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engine_support import wait_until
from tests.runs.copy_many_support import make_config, make_log_dir

#: The apps that resolve their selection in the log dirs; the erasure selects in the metadata store.
LOG_DIR_APPS = ["parallel_upload", "rebuild_indexes", "verify_segments"]
APPS = ["erase_keys", *LOG_DIR_APPS]


@pytest.mark.parametrize("app", LOG_DIR_APPS)
def test_an_os_error_ends_an_app_with_one_line_and_the_traceback_in_the_debug_log(
    app: str, tmp_path: Path, spark, monkeypatch, capsys, caplog
) -> None:
    from spark_apps import runtime

    config = make_config(tmp_path, make_log_dir(tmp_path, partitions=1), "os")
    vanished = tmp_path / "kafka-logs" / "orders-0" / f"{0:020d}.log"

    def broker_deleted_it(self, ctx):  # the broker's retention removes a segment while it is listed
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(vanished))

    monkeypatch.setattr(runtime.Selection, "resolve", broker_deleted_it)
    caplog.set_level(logging.DEBUG, logger="spark_apps.runtime")
    main = importlib.import_module(f"spark_apps.{app}").main
    assert main(["--config", str(config)], spark=spark) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"{app}: failed: FileNotFoundError: [Errno 2] No such file or directory: '{vanished}'"]
    assert any(r.exc_info and r.exc_info[0] is FileNotFoundError for r in caplog.records)


def test_an_unexpected_error_is_one_line_too(tmp_path: Path, spark, monkeypatch, capsys) -> None:
    from spark_apps import runtime
    from spark_apps.parallel_upload import main

    config = make_config(tmp_path, make_log_dir(tmp_path, partitions=1), "bug")

    def bug(self, ctx):
        raise KeyError("a bug\nwith a second line")

    monkeypatch.setattr(runtime.Selection, "resolve", bug)
    assert main(["--config", str(config)], spark=spark) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("parallel_upload: failed: unexpected KeyError: ")
    assert err[0].endswith("(rerun with -v for the traceback)")


@pytest.mark.parametrize("app", APPS)
def test_an_app_refuses_a_store_behind_the_code_in_one_line_and_migrates_nothing(
    app: str, tmp_path: Path, capsys
) -> None:
    """Refused as it opens its context, before Spark starts: the line names the revision, the head
    and the upgrade to run; the store stays at its revision."""
    from tiering_core.metadata.migrations import current_revision, head_revision, upgrade

    config = make_config(tmp_path, make_log_dir(tmp_path, partitions=1), "behind")
    url = f"sqlite:///{tmp_path / 'behind.db'}"
    upgrade(url, "0009_retention_percent")
    main = importlib.import_module(f"spark_apps.{app}").main
    assert main(["--config", str(config)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"{app}: failed: metadata store "), err
    assert (
        f"schema revision 0009_retention_percent, behind this version of the platform (head {head_revision()})"
        in err[0]
    )
    assert "run `tiering db upgrade`" in err[0]
    assert current_revision(url) == "0009_retention_percent"


def test_jobs_are_cancelled_when_their_consumer_stops_early(tmp_path: Path, spark) -> None:
    """An exception while outcomes are consumed drops the queued jobs and cancels the running
    ones instead of running every queued job first. The first job ends at once; the others run
    until they are cancelled, so the consumer fails while the second and the third (which took
    the first's slot) run, and no slot frees up before the cancellation."""
    from spark_apps import runtime

    markers, outlived = tmp_path / "markers", tmp_path / "outlived"
    markers.mkdir()
    outlived.mkdir()

    def until_cancelled(item: int) -> int:
        (markers / str(item)).touch()
        deadline = time.monotonic() + 60
        while item != 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        if item != 0:
            (outlived / str(item)).touch()  # never cancelled
        return item

    with pytest.raises(RuntimeError, match="consumer failed"):
        with contextlib.closing(
            runtime.run_jobs(
                spark.sparkContext, list(range(8)), until_cancelled, slots=2, describe=lambda i: f"job {i}"
            )
        ) as outcomes:
            for _outcome in outcomes:
                wait_until(lambda: len(list(markers.iterdir())) == 3, what="the third job to take the first's slot")
                raise RuntimeError("consumer failed")
    assert sorted(p.name for p in markers.iterdir()) == ["0", "1", "2"]  # nothing queued started
    assert list(outlived.iterdir()) == []  # the running ones were cancelled, not run to their end
    assert spark.sparkContext.parallelize([1, 2], 2).sum() == 3  # the context is still usable
    assert sorted(p.name for p in markers.iterdir()) == ["0", "1", "2"]  # nor afterwards


def test_the_spark_executor_runs_each_item_against_the_workers_storage_and_names_a_failed_task(
    tmp_path: Path, spark
) -> None:
    """Each item a one-task job against the storage the executor builds on its Python worker (a
    filesystem tier here): every outcome carries the item's index and result; a task that raises
    is an outcome with the reason, and the others still run."""
    from spark_apps import runtime
    from tiering_core.config import RemoteConfig
    from tiering_core.storage.factory import create_remote_storage

    remote = RemoteConfig(backend="filesystem", root=tmp_path / "tier")
    (tmp_path / "tier").mkdir()

    def store_square(storage, item: int) -> int:  # type: ignore[no-untyped-def]
        if item == 3:
            raise ValueError(f"item {item} is bad")
        storage.put_object(f"squares/{item}", str(item * item).encode())
        return item * item

    items = [5, 1, 4, 3, 2]
    executor = runtime.SparkExecutor(spark.sparkContext, remote, slots=2)
    outcomes = list(executor.run(items, store_square, describe=lambda i: f"square {i}"))
    assert sorted(o.index for o in outcomes) == list(range(len(items)))
    by_item = {items[o.index]: o for o in outcomes}
    assert {i: o.result for i, o in by_item.items() if o.error is None} == {5: 25, 1: 1, 4: 16, 2: 4}
    failed = by_item[3]
    assert failed.result is None and failed.error is not None
    assert failed.error.startswith("Spark task failed: ") and "item 3 is bad" in failed.error
    storage = create_remote_storage(remote)
    assert {o.key.rsplit("/", 1)[-1] for o in storage.list_prefix("squares/")} == {"5", "1", "4", "2"}


def test_closing_the_spark_executors_outcomes_early_cancels_its_tasks(tmp_path: Path, spark) -> None:
    """A driver that stops consuming (its lease lost, an interrupt) closes the outcomes: the
    queued tasks never start and the running ones are cancelled, not run to their end."""
    from spark_apps import runtime
    from tiering_core.config import RemoteConfig

    markers, outlived = tmp_path / "markers", tmp_path / "outlived"
    markers.mkdir()
    outlived.mkdir()

    def until_cancelled(storage, item: int) -> int:  # type: ignore[no-untyped-def]
        (markers / str(item)).touch()
        deadline = time.monotonic() + 60
        while item != 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        if item != 0:
            (outlived / str(item)).touch()  # never cancelled
        return item

    remote = RemoteConfig(backend="filesystem", root=tmp_path)
    outcomes = runtime.SparkExecutor(spark.sparkContext, remote, slots=2).run(
        list(range(8)), until_cancelled, describe=lambda i: f"task {i}"
    )
    first = next(outcomes)
    assert (first.index, first.result, first.error) == (0, 0, None)
    wait_until(lambda: len(list(markers.iterdir())) == 3, what="the third task to take the first's slot")
    outcomes.close()
    assert sorted(p.name for p in markers.iterdir()) == ["0", "1", "2"]  # nothing queued started
    assert list(outlived.iterdir()) == []  # the running ones were cancelled
    assert spark.sparkContext.parallelize([1, 2], 2).sum() == 3  # the context is still usable


def test_the_spark_executor_pulls_items_only_as_slots_free_up(tmp_path: Path, spark) -> None:
    """Items are made on the driver when a slot is free, never all at once: at most ``slots`` jobs
    are out before the driver hears of the first outcome."""
    from spark_apps import runtime
    from tiering_core.config import RemoteConfig

    seen = 0
    pulled_after: list[int] = []  # per item: how many outcomes the driver had seen when it was made

    def items() -> Iterator[int]:
        for item in range(6):
            pulled_after.append(seen)
            yield item

    def double(storage, item: int) -> int:  # type: ignore[no-untyped-def]
        return 2 * item

    executor = runtime.SparkExecutor(spark.sparkContext, RemoteConfig(backend="filesystem", root=tmp_path), slots=2)
    results = []
    for outcome in executor.run(items(), double, describe=lambda i: f"double {i}"):
        seen += 1
        results.append((outcome.index, outcome.result))
    assert sorted(results) == [(i, 2 * i) for i in range(6)]
    assert pulled_after[:2] == [0, 0]
    assert all(after >= k - 2 for k, after in enumerate(pulled_after))
