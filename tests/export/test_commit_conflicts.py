"""A commit that conflicts with another commit of the table fails whole and is computed again from
the newer snapshot: never landed by pyiceberg's own retry with the summary computed before (which
lost the other commit's ranges, or committed the same segment twice). The other commit here is an
export that lost the table's lease while its commit was on the way: it lands just before ours."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyiceberg.table import Transaction

from tests.engine_support import TieringEnv
from tests.export.support import build_partition, offsets_by_partition, sqlite_catalog, table_of, with_export
from tiering_core.export import (
    ExportAttempt,
    commit_segments,
    exported_ranges,
    exported_so_far,
    load_catalog,
    open_table,
    plan_export,
    run_export,
    table_name,
    write_segment_files,
)
from tiering_core.kafka.isolation import IsolationLevel
from tiering_core.read.reader import open_reader
from tiering_core.runs.copy import run_copy

TOPIC = "orders"


@pytest.mark.parametrize("other", ["another partition", "the same segments"])
def test_a_conflicting_commit_is_computed_again_on_the_newer_snapshot(
    tiering_env: TieringEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, other: str
) -> None:
    writers = [build_partition(tiering_env, TOPIC, p) for p in (0, 1)]
    with_export(tiering_env, sqlite_catalog(tmp_path))
    with tiering_env.context() as ctx:
        for w in writers:
            run_copy(ctx, w.tp)
        want = {
            w.tp.partition: [r.offset for r in open_reader(ctx, w.tp).read(0, 100_000, IsolationLevel.READ_COMMITTED)]
            for w in writers
        }
        catalog = load_catalog(ctx.config)
        name = table_name(ctx.config.export, TOPIC)
        table = open_table(catalog, name)
        assert table is not None
        mine = plan_export(ctx, TOPIC, 1, done=exported_so_far(ctx, table))
        theirs = plan_export(ctx, TOPIC, 0 if other == "another partition" else 1, done=exported_so_far(ctx, table))
        location = f"{table.location()}/data/tiering-attempts/lost-its-lease"
        attempt = ExportAttempt("lost-its-lease", str(table.metadata.table_uuid), location, dict(table.io.properties))
        their_files = [(s, write_segment_files(ctx.storage, s, attempt)) for s in theirs]

        real_add_files = Transaction.add_files
        armed = [True]
        landed = []

        def add_files(self: Transaction, *args: object, **kwargs: object) -> None:
            real_add_files(self, *args, **kwargs)  # type: ignore[arg-type]
            if armed.pop() if armed else False:  # our commit is staged: theirs lands first
                landed.append(
                    commit_segments(
                        catalog.load_table(name.identifier),
                        their_files,
                        progress=lambda t: exported_so_far(ctx, t),
                    )
                )

        monkeypatch.setattr(Transaction, "add_files", add_files)
        ours = run_export(ctx, TOPIC, 1)
        monkeypatch.undo()

        assert landed and landed[0].snapshot_id is not None and not ours.failed
        table = table_of(ctx, TOPIC)
        got = offsets_by_partition(table)
        if other == "another partition":
            assert got == want  # both partitions, each offset once
            assert plan_export(ctx, TOPIC, done=exported_so_far(ctx, table)) == []  # partition 0's ranges were kept
            assert len(ours.snapshots) == 1
            assert [s.segment_id for s in ours.exported] == [s.segment_id for s in mine]
        else:
            assert got == {1: want[1]}  # not twice
            assert ours.exported == [] and ours.snapshots == []  # all of it was theirs by then
        done = exported_ranges(table)
        for w in writers:
            if w.tp.partition in got:
                assert done.up_to(w.topic_id, w.tp.partition) == max(want[w.tp.partition])
