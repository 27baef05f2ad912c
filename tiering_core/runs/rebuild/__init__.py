"""Rebuilding and checking segment indexes against what copy recorded: findings (verdicts,
comparison), examine (storage and files only, runs anywhere), repair (a repair's metadata steps
under the lease), run (the one driver: repairs under the lease, its tasks on any executor;
``tiering rebuild-indexes`` and the Spark app call it)."""

from __future__ import annotations

from tiering_core.events.rebuild import (
    IndexCheck,
    IndexChecked,
    IndexFinding,
    IndexStatus,
    LocalIndexesSkipped,
    PartitionBusy,
    RebuildPlanned,
)
from tiering_core.runs.errors import DamagedSegmentError
from tiering_core.runs.rebuild.examine import (
    DOWNLOAD_CHUNK,
    LocalIndexTask,
    RecordedObjects,
    RemoteIndexExamination,
    RemoteIndexTask,
    check_local_segment,
    examine_remote_segment,
    local_index_tasks,
    recorded_object,
)
from tiering_core.runs.rebuild.findings import CARRIED_KINDS, INDEX_KINDS, compare_index, judge_index
from tiering_core.runs.rebuild.repair import (
    abandon_index_repair,
    clean_up_interrupted_repairs,
    commit_index_repair,
    finish_index_repair,
    finished_segments,
    predecessors,
    remote_index_tasks,
    repair_task,
    start_index_repair,
)
from tiering_core.runs.rebuild.run import (
    RebuildReport,
    RebuildResult,
    RebuildRun,
    clean_up_before_repair,
    hold_for_rebuild,
    rebuild_indexes,
    rebuild_partition_indexes,
)

__all__ = [
    "CARRIED_KINDS",
    "DOWNLOAD_CHUNK",
    "INDEX_KINDS",
    "DamagedSegmentError",
    "IndexCheck",
    "IndexChecked",
    "IndexFinding",
    "IndexStatus",
    "LocalIndexTask",
    "LocalIndexesSkipped",
    "PartitionBusy",
    "RebuildPlanned",
    "RebuildReport",
    "RebuildResult",
    "RebuildRun",
    "RecordedObjects",
    "RemoteIndexExamination",
    "RemoteIndexTask",
    "abandon_index_repair",
    "check_local_segment",
    "clean_up_before_repair",
    "clean_up_interrupted_repairs",
    "commit_index_repair",
    "compare_index",
    "examine_remote_segment",
    "finish_index_repair",
    "finished_segments",
    "hold_for_rebuild",
    "judge_index",
    "local_index_tasks",
    "predecessors",
    "rebuild_indexes",
    "rebuild_partition_indexes",
    "recorded_object",
    "remote_index_tasks",
    "repair_task",
    "start_index_repair",
]
