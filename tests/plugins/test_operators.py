"""The thin operators: keyword-only arguments, templated fields, plan-only runs that change nothing."""

from __future__ import annotations

import pytest

from plugins.operators.tiering import (
    TieringCopyOperator,
    TieringDeletePartitionOperator,
    TieringRetentionOperator,
    as_bool,
)
from tests.engine_support import TieringEnv, tip_of, write_segments
from tiering_core.metadata.states import RemoteLogSegmentState

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
