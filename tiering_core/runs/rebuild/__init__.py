"""Rebuilding and checking segment indexes against what copy recorded: findings (verdicts,
comparison), examine (storage and files only, runs anywhere), run (repairs under the lease, and
the single-process ``tiering rebuild-indexes``)."""

from __future__ import annotations

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
from tiering_core.runs.rebuild.findings import (
    CARRIED_KINDS,
    INDEX_KINDS,
    IndexCheck,
    IndexFinding,
    IndexStatus,
    compare_index,
    judge_index,
)
from tiering_core.runs.rebuild.run import (
    RebuildResult,
    abandon_index_repair,
    clean_up_before_repair,
    clean_up_interrupted_repairs,
    commit_index_repair,
    finish_index_repair,
    finished_segments,
    hold_for_rebuild,
    predecessors,
    rebuild_partition_indexes,
    rebuild_segment_indexes,
    remote_index_tasks,
    repair_remote_segment,
    repair_task,
    start_index_repair,
)

__all__ = [
    "CARRIED_KINDS",
    "DOWNLOAD_CHUNK",
    "INDEX_KINDS",
    "DamagedSegmentError",
    "IndexCheck",
    "IndexFinding",
    "IndexStatus",
    "LocalIndexTask",
    "RebuildResult",
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
    "rebuild_partition_indexes",
    "rebuild_segment_indexes",
    "recorded_object",
    "remote_index_tasks",
    "repair_remote_segment",
    "repair_task",
    "start_index_repair",
]
