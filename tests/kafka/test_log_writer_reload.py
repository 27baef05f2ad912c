"""The partition directory's files by the broker's rules, read and changed without the writer: a
segment's files deleted or renamed ``*.deleted``, producer snapshots found by their names and
dropped above or below an offset, a truncation's cut at a batch boundary (one inside a batch
refused naming it), and the writer's state read back from snapshot and ``.log`` files equal to
what the writer kept in memory while appending."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.kafka.log_writer_reload import (
    SEGMENT_FILE_SUFFIXES,
    delete_segment_files,
    delete_snapshots_above,
    delete_snapshots_below,
    producer_snapshots,
    reload_log,
    truncate_segment_files,
    truncation_cut,
)
from tiering_core.kafka.producer_snapshot import snapshot_file_name

MakeWriter = Callable[..., PartitionWriter]


def names(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir()}


def test_a_segments_files_are_deleted_or_renamed_deleted_those_missing_ignored(tmp_path: Path) -> None:
    for base in (0, 50):
        for suffix in SEGMENT_FILE_SUFFIXES[:3]:  # no .txnindex: a segment without aborts
            (tmp_path / f"{base:020d}{suffix}").write_bytes(b"x")
    delete_segment_files(tmp_path / f"{0:020d}")
    assert names(tmp_path) == {f"{50:020d}{s}" for s in (".log", ".index", ".timeindex")}
    delete_segment_files(tmp_path / f"{50:020d}", async_delete=True)
    assert names(tmp_path) == {f"{50:020d}{s}.deleted" for s in (".log", ".index", ".timeindex")}


def test_producer_snapshots_are_found_by_their_names_and_dropped_above_or_below(tmp_path: Path) -> None:
    for offset in (0, 10, 20, 30):
        (tmp_path / snapshot_file_name(offset)).write_bytes(b"")
    (tmp_path / "12.snapshot").write_bytes(b"")  # not a broker's name: never taken for one
    (tmp_path / f"{40:020d}.snapshot.deleted").write_bytes(b"")
    assert sorted(o for o, _ in producer_snapshots(tmp_path)) == [0, 10, 20, 30]
    assert all(path.name == snapshot_file_name(o) for o, path in producer_snapshots(tmp_path))
    delete_snapshots_above(tmp_path, 20)  # at the offset itself stays
    assert sorted(o for o, _ in producer_snapshots(tmp_path)) == [0, 10, 20]
    delete_snapshots_below(tmp_path, 10)
    assert sorted(o for o, _ in producer_snapshots(tmp_path)) == [10, 20]
    delete_snapshots_above(tmp_path, 10, async_delete=True)
    assert sorted(o for o, _ in producer_snapshots(tmp_path)) == [10]
    assert snapshot_file_name(20) + ".deleted" in names(tmp_path)
    assert "12.snapshot" in names(tmp_path)


def test_the_cut_is_the_position_of_the_first_batch_at_or_above_the_offset(make_writer: MakeWriter) -> None:
    w = make_writer()
    ends = [(w.append_records(3, per_batch=3)[1], w.active_log_path.stat().st_size) for _ in range(4)]
    # batch i holds offsets [3i, 3i + 2] and starts where batch i - 1 ended in the file
    for i, (last, _) in enumerate(ends):
        start = ends[i - 1][1] if i else 0
        assert truncation_cut(w.active_log_path, last - 2) == start
    assert truncation_cut(w.active_log_path, w.next_offset) is None  # nothing at or above it
    with pytest.raises(ValueError, match="cannot truncate to 4: it falls inside the batch at 3"):
        truncation_cut(w.active_log_path, 4)


def test_a_truncation_keeps_the_segment_holding_the_offset_cut_there(make_writer: MakeWriter) -> None:
    w = make_writer()
    w.append_records(10, per_batch=5)
    second = w.roll()
    w.append_records(5, per_batch=5)
    size_at_cut = w.active_log_path.stat().st_size
    w.append_records(5, per_batch=5)
    third = w.roll()
    w.append_records(5, per_batch=5)
    assert (second, third) == (10, 20)
    kept = truncate_segment_files(w.path, w.segment_bases(), 15)
    assert kept == second
    assert (w.path / f"{second:020d}.log").stat().st_size == size_at_cut
    assert not list(w.path.glob(f"{third:020d}.*"))
    assert sorted(o for o, _ in producer_snapshots(w.path)) == [second]  # the one at 20 is stale


def test_a_truncation_below_the_first_base_keeps_the_first_segment(make_writer: MakeWriter) -> None:
    """A log whose start moved up: the first remaining segment stays, cut to nothing."""
    w = make_writer()
    w.append_records(10, per_batch=5)
    second = w.roll()
    w.append_records(5, per_batch=5)
    w.delete_oldest_segments(1)
    assert truncate_segment_files(w.path, w.segment_bases(), second) == second
    assert (w.path / f"{second:020d}.log").stat().st_size == 0


def test_a_reload_reads_back_what_the_writer_kept_while_appending(make_writer: MakeWriter) -> None:
    """Producer state from the newest snapshot and the ``.log`` after it; the active segment's
    index entries, aborted transactions and size; the next offset: each as the writer has them."""
    w = make_writer(index_interval_bytes=150)
    w.append_records(12, per_batch=3)
    w.append([(b"k", b"idempotent")], producer_id=7, producer_epoch=0)
    w.begin_transaction(8, 0)
    w.append([(b"t", b"aborted in a closed segment")], producer_id=8)
    w.abort(8)
    w.roll()
    w.append([(b"k", b"again")], producer_id=7)
    w.begin_transaction(9, 2)
    w.append([(b"t", b"aborted in the active segment")], producer_id=9)
    w.append_records(9, per_batch=3)
    w.abort(9)
    w.begin_transaction(8, 0)
    w.append([(b"t", b"still open")], producer_id=8)
    w.append_records(6, per_batch=2)
    reloaded = reload_log(w.path, w.segment_bases(), w.active_base, w.index_interval_bytes)
    assert reloaded.state.snapshot_entries() == w.snapshot_entries()
    assert reloaded.state.ongoing == w.state.ongoing and 8 in w.state.ongoing
    assert reloaded.builder.offset_entries == w.builder.offset_entries and w.builder.offset_entries
    assert reloaded.builder.time_entries == w.builder.time_entries
    assert reloaded.builder.aborted == w.builder.aborted and [a.producer_id for a in w.builder.aborted] == [9]
    assert reloaded.active_size == w.active_log_path.stat().st_size == w.active_size
    assert reloaded.next_offset == w.next_offset


def test_a_reload_without_a_snapshot_replays_from_the_first_segment(make_writer: MakeWriter) -> None:
    w = make_writer()
    w.append([(b"k", b"v")], producer_id=3, producer_epoch=0)
    w.roll()
    w.append([(b"k", b"v")], producer_id=3)
    for path in w.path.glob("*.snapshot"):
        path.unlink()
    reloaded = reload_log(w.path, w.segment_bases(), w.active_base, w.index_interval_bytes)
    assert reloaded.state.snapshot_entries() == w.snapshot_entries()


def test_a_reload_to_an_empty_active_segment_starts_at_its_base(make_writer: MakeWriter) -> None:
    w = make_writer()
    w.append_records(5)
    base = w.roll()
    reloaded = reload_log(w.path, w.segment_bases(), base, w.index_interval_bytes)
    assert (reloaded.active_size, reloaded.next_offset) == (0, base)
    assert reloaded.builder.base_offset == base and not reloaded.builder.offset_entries
