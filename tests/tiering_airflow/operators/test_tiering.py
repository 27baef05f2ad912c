"""The thin partition operators: keyword-only arguments, templated fields, plan-only runs that change nothing."""

from __future__ import annotations

import pytest

from tests.engine_support import TieringEnv, kafka_deletes_topic, tip_of, write_segments
from tiering_airflow.operators.tiering import (
    TieringCopyOperator,
    TieringDeletePartitionOperator,
    TieringRetentionOperator,
    as_bool,
)
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.runs.errors import DeletionUnprovenError

OPERATORS = (TieringCopyOperator, TieringRetentionOperator, TieringDeletePartitionOperator)


@pytest.mark.parametrize("operator", OPERATORS)
def test_arguments_are_keyword_only_and_templated(operator) -> None:
    with pytest.raises(TypeError):
        operator("orders", 0, task_id="positional")
    op = operator(task_id="op", topic="{{ params.topic }}", partition=3)
    assert {"topic", "partition", "config_path", "aws_conn_id", "plan_only"} <= set(op.template_fields)
    assert (op.topic, op.partition, op.aws_conn_id, op.plan_only) == ("{{ params.topic }}", 3, "aws_default", False)


def test_flags_rendered_as_text_are_read_strictly() -> None:
    assert [as_bool(v, "f") for v in (True, False, "True", "false", " 1 ", "no")] == [1, 0, 1, 0, 1, 0]
    with pytest.raises(ValueError, match="plan_only: expected true or false, got 'maybe'"):
        as_bool("maybe", "plan_only")


def test_copy_operator_plans_without_copying_then_copies(tiering: TieringEnv) -> None:
    w = tiering.writer("orders", 0)
    write_segments(w, 2)
    w.set_high_watermark()
    planned = TieringCopyOperator(task_id="c", topic="orders", partition="0", plan_only="True")
    result = planned.execute({"run_id": "plan"})
    assert result["dry_run"] is True and [p["base_offset"] for p in result["planned"]] == [0, 5]
    with tiering.context() as ctx:
        assert ctx.metadata.list_segments(tip_of(w)) == []
    result = TieringCopyOperator(task_id="c", topic="orders", partition=0).execute({"run_id": "real"})
    assert (result["topic"], result["partition"], result["segments_copied"]) == ("orders", 0, 2)
    with tiering.context() as ctx:
        states = {s.state for s in ctx.metadata.list_segments(tip_of(w))}
    assert states == {RemoteLogSegmentState.COPY_SEGMENT_FINISHED}


def test_delete_operator_removes_the_named_topic_ids_in_one_core_call(
    tiering: TieringEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A topic deleted and recreated (two topic ids), both named: one removal, one result."""

    import tiering_core.runs.removal as removal
    from tiering_core.runs.copy import run_copy

    writers = []
    for _ in range(2):
        w = tiering.writer("orders", 0)
        write_segments(w, 2)
        w.set_high_watermark()
        with tiering.context() as ctx:
            assert run_copy(ctx, w.tp).segments_copied == 2
        writers.append(w)
        if len(writers) == 1:
            kafka_deletes_topic(w)  # the topic is deleted; the next writer recreates it
    old, new = writers
    real, calls = removal.delete_partition, []

    def counting(*args, **kwargs):
        calls.append(kwargs.get("topic_ids"))
        return real(*args, **kwargs)

    monkeypatch.setattr(removal, "delete_partition", counting)
    names = [old.topic_id, new.topic_id]
    listed = TieringDeletePartitionOperator(
        task_id="d", topic="orders", partition=0, topic_ids=[], plan_only=True
    ).execute({"run_id": "none"})
    assert (listed["topic_ids"], listed["planned"], listed["state"]) == ([], [], None)
    named = TieringDeletePartitionOperator(task_id="d", topic="orders", partition=0, topic_ids=names)
    with pytest.raises(DeletionUnprovenError, match=f"topic id {new.topic_id} was deleted"):
        named.execute({"run_id": "unproven"})  # the live one: not without force
    result = TieringDeletePartitionOperator(
        task_id="d", topic="orders", partition=0, topic_ids=names, force=True
    ).execute({"run_id": "both"})
    assert calls == [[], names, names]
    assert result["topic_ids"] == names and result["segments_deleted"] == 4 and result["kept_topic_ids"] == []
    assert result["state"] == "DELETE_PARTITION_FINISHED" and result["fenced"] is False
    with tiering.context() as ctx:
        assert ctx.metadata.list_segments(tip_of(old)) == ctx.metadata.list_segments(tip_of(new)) == []
