"""A copy lane's progress (``operators.progress``) over the real lane driver (filesystem tier,
SQLite store): each partition is told as it ends and its result is in the report at once; a kill
moves the lane's clock past its deadline, so nothing new starts and the rest is deferred."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.runs.copy_many_support import make_config, make_log_dir
from tiering_airflow.operators.progress import LaneProgress
from tiering_airflow.operators.tiering import results_of
from tiering_core.config import load_config
from tiering_core.context import TieringContext
from tiering_core.events import RunEvent
from tiering_core.events.copy import PartitionCopyOutcome
from tiering_core.kafka.topic import TopicPartition
from tiering_core.runs.lanes import LaneRun, copy_lane

PARTITIONS = 3


def test_a_lane_killed_after_its_first_partition_starts_nothing_new_and_reports_what_ended(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path, partitions=PARTITIONS)
    told: list[RunEvent] = []
    ended_when_told: list[int] = []

    def tell(event: RunEvent) -> None:
        told.append(event)
        if isinstance(event, PartitionCopyOutcome):
            ended_when_told.append(len(progress.report.results))
            progress.killed = True  # Airflow's SIGTERM as the first partition ends

    progress = LaneProgress({}, tell, results_of, every=10.0)
    tps = [TopicPartition("orders", p) for p in range(PARTITIONS)]
    config = make_config(tmp_path, log_dir, "killed")
    doc = yaml.safe_load(config.read_text())
    doc["copy"] = {"concurrency": 1}  # one upload at a time: the kill finds partition 1 barely begun
    config.write_text(yaml.safe_dump(doc))
    with TieringContext.open(load_config(config)) as ctx:
        copy_lane(ctx, tps, LaneRun("killed", 3600, clock=progress.clock), report=progress.report)
    results = {r["partition"]: r for r in results_of(progress.report)}
    assert (results[0]["outcome"], results[0]["segments_copied"]) == ("copied", 2)
    assert all(results[p]["outcome"] == "deferred" for p in range(1, PARTITIONS))
    assert ended_when_told == list(range(1, PARTITIONS + 1))  # each in the report as it was told
    assert progress.report.failures == []
