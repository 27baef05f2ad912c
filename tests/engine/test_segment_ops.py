"""A remote segment's references and deletion (``engine/segment_ops.py``): what a killed run left
half done (a copy STARTED, a deletion STARTED) is finished by the next holder of the partition,
and nothing finished is touched."""

from __future__ import annotations

from tests.engine_support import TieringEnv, segment_objects, tip_of, write_segments
from tiering_core.engine.segment_ops import recover_failed_copies, segment_ref
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.runs.copy import run_copy
from tiering_core.runs.rebuild import start_index_repair
from tiering_core.storage.layout import ObjectKind

FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


def test_a_segment_ref_names_the_objects_its_copy_wrote(fs_env: TieringEnv) -> None:
    w = fs_env.writer()
    write_segments(w, 2)
    w.set_high_watermark()
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
        segment = ctx.metadata.finished_segments(tip_of(w))[0]
        keys = {o.key for o in segment_objects(ctx, tip_of(w))}
        ref = segment_ref(segment)
        assert ref.manifest_sha256 is not None
        assert {ref.key(kind, ctx.storage.prefix) for kind in (ObjectKind.LOG, ObjectKind.MANIFEST)} <= keys


def test_what_killed_runs_left_started_is_deleted_and_nothing_finished_is_touched(fs_env: TieringEnv) -> None:
    w = fs_env.writer()
    write_segments(w, 3)
    w.set_high_watermark()
    tip = tip_of(w)
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
        first, second, third = ctx.metadata.finished_segments(tip)
        lease = ctx.metadata.acquire_lease(tip, holder="killed")
        start_index_repair(ctx.metadata, first, lease)  # a copy killed before its upload
        ctx.metadata.update_segment_state(second.segment_id, RemoteLogSegmentState.DELETE_SEGMENT_STARTED, lease)
        assert recover_failed_copies(ctx.metadata, ctx.storage, tip, lease) == 2
        states = {s.segment_id: s.state for s in ctx.metadata.list_segments(tip, custom_metadata=False)}
        assert states == {first.segment_id: FINISHED, third.segment_id: FINISHED}  # the deleted are not listed
        keys = {o.key for o in segment_objects(ctx, tip)}
        assert segment_ref(second).key(ObjectKind.LOG, ctx.storage.prefix) not in keys
        assert segment_ref(third).key(ObjectKind.LOG, ctx.storage.prefix) in keys
        assert recover_failed_copies(ctx.metadata, ctx.storage, tip, lease) == 0
        ctx.metadata.release_lease(lease)
