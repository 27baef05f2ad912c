"""The tier view (``tiering_core/tier/view.py``): a broker's partition directory joined with the
metadata store, read only. Over a real log dir written as a broker lays it out, a real SQLite store
and the filesystem tier that real copy runs land in: the highest copied offset, the copy candidates
below the LSO, copy lag, the local and global log starts, tiering gaps, the lineage a segment is
judged by and the local-retention risk (docs/kafka-rules.md sections 5, 6 and 10)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from tests.engine_support import TieringEnv, tip_of, write_segments
from tiering_core.config import TopicConfig
from tiering_core.errors import TieringError
from tiering_core.kafka.epoch import EpochEntry
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.runs.copy import run_copy
from tiering_core.runs.delete_records import apply_delete_records
from tiering_core.tier.offsets import OffsetRange
from tiering_core.tier.view import (
    CopyDelay,
    TierView,
    finished_in_lineage,
    load_remote_tier_view,
    load_tier_view,
    tier_views,
)


def view_of(env: TieringEnv, w: PartitionWriter) -> TierView:
    """The partition's view, read alone; every test also checks that the view read with many
    others' (``tier_views``: the store read for all of them at once) is the same."""
    with env.context() as ctx:
        view = load_tier_view(ctx.partition_log(w.tp), ctx.metadata)
        (batched,) = tier_views(ctx, [ctx.partition_log(w.tp)])
    assert same_view(batched, view)
    return view


def same_view(a: TierView, b: TierView) -> bool:
    """Equal in everything but the ``PartitionLog`` object each was read from."""
    return dataclasses.replace(a, local_log=None) == dataclasses.replace(b, local_log=None)


def copy(env: TieringEnv, w: PartitionWriter) -> int:
    with env.context() as ctx:
        return run_copy(ctx, w.tp).segments_copied


def candidates(view: TierView) -> list[tuple[int, int]]:
    return [(c.base_offset, c.end_offset) for c in view.copy_candidates()]


def log_bytes(w: PartitionWriter) -> dict[int, int]:
    """Each local segment's ``.log`` size, by base offset, as the files on disk say."""
    return {int(p.stem): p.stat().st_size for p in Path(w.path).glob("*.log")}


def test_a_partition_never_tiered_offers_its_closed_segments_below_the_lso(fs_env: TieringEnv) -> None:
    w = fs_env.writer()
    write_segments(w, 3)  # [0..4], [5..9], [10..14]
    w.append_records(2)  # the active segment [15..16]
    w.set_high_watermark(12)
    view = view_of(fs_env, w)
    assert (view.log_end_offset, view.high_watermark, view.last_stable_offset) == (17, 12, 12)
    assert (view.highest_copied_offset, view.remote_log_start_offset, view.global_log_start_offset) == (-1, None, None)
    assert view.offsets_source == "files" and view.offsets_error is None
    assert view.copy_from_offset() == 0
    assert candidates(view) == [(0, 4), (5, 9)]  # [10..14] straddles the LSO: it waits
    sizes = log_bytes(w)
    assert view.copy_lag() == (3, sizes[0] + sizes[5] + sizes[10])  # closed segments only
    assert view.tiering_gap() is None


def test_after_a_copy_the_view_resumes_past_the_highest_copied_offset(fs_env: TieringEnv) -> None:
    w = fs_env.writer()
    write_segments(w, 3)
    w.set_high_watermark()
    assert copy(fs_env, w) == 3
    write_segments(w, 1)  # [15..19]
    w.set_high_watermark()
    view = view_of(fs_env, w)
    assert (view.highest_copied_offset, view.remote_log_start_offset, view.global_log_start_offset) == (14, 0, 0)
    assert view.copy_from_offset() == 15
    assert candidates(view) == [(15, 19)]
    assert view.copy_lag() == (1, log_bytes(w)[15])
    with fs_env.context() as ctx:
        served = finished_in_lineage(view, ctx.metadata)
    assert [(s.start_offset, s.end_offset) for s in served] == [(0, 4), (5, 9), (10, 14)]
    assert view.lineage.entries == (EpochEntry(0, 0),)


def test_the_broker_dropping_untiered_data_is_a_gap_only_once_the_partition_was_tiered(fs_env: TieringEnv) -> None:
    w = fs_env.writer()
    write_segments(w, 3)  # [0..4], [5..9], [10..14]
    w.set_high_watermark(5)
    w.delete_oldest_segments(1)  # before anything was tiered: history, not a gap
    view = view_of(fs_env, w)
    assert (view.local_log_start_offset, view.tiering_gap(), view.copy_from_offset()) == (5, None, 5)
    w.set_high_watermark(10)
    assert copy(fs_env, w) == 1  # [5..9]
    write_segments(w, 2)  # [15..19], [20..24]
    w.set_high_watermark()
    w.delete_oldest_segments(2)  # [5..9] (tiered) and [10..14] (not)
    view = view_of(fs_env, w)
    assert view.local_log_start_offset == 15 and view.global_log_start_offset == 5
    assert view.tiering_gap() == OffsetRange(10, 14)
    assert view.copy_from_offset() == 15 and candidates(view) == [(15, 19), (20, 24)]


def test_a_log_start_in_the_broker_s_files_moves_the_local_log_start_only(fs_env: TieringEnv) -> None:
    """A ``log-start-offset-checkpoint`` entry (a follower inherits its leader's log start, or a
    DeleteRecords made on the cluster directly) is no DeleteRecords: the global log start stays,
    and what it dropped untiered is a gap (section 10 item 1)."""
    w = fs_env.writer()
    write_segments(w, 1)
    w.set_high_watermark()
    assert copy(fs_env, w) == 1  # [0..4]
    write_segments(w, 2)  # [5..9], [10..14]
    w.set_high_watermark()
    w.delete_records(7)  # the checkpoint entry 7 inside [5..9]
    view = view_of(fs_env, w)
    assert (view.local_log_start_offset, view.delete_records_offset, view.global_log_start_offset) == (7, None, 0)
    assert view.tiering_gap() == OffsetRange(5, 6)
    assert view.copy_from_offset() == 7
    assert candidates(view) == [(5, 9), (10, 14)]  # the segment holding 7 goes whole


def test_a_delete_records_applied_through_the_platform_moves_the_global_log_start(fs_env: TieringEnv) -> None:
    w = fs_env.writer()
    write_segments(w, 1)
    w.set_high_watermark()
    assert copy(fs_env, w) == 1  # [0..4]
    write_segments(w, 2)  # [5..9], [10..14]
    w.become_leader(1)
    write_segments(w, 1)  # [15..19] under epoch 1
    w.set_high_watermark()
    with fs_env.context() as ctx:
        apply_delete_records(ctx, w.tp, 12)
    view = view_of(fs_env, w)
    assert (view.remote_log_start_offset, view.delete_records_offset, view.global_log_start_offset) == (0, 12, 12)
    assert view.local_log_start_offset == 0  # no kafka: section: the broker's files still hold them
    assert view.lineage.entries == (EpochEntry(0, 12), EpochEntry(1, 15))  # cut at the global log start
    assert view.full_lineage.entries == (EpochEntry(0, 0), EpochEntry(1, 15))
    assert view.copy_from_offset() == 12 and view.tiering_gap() is None
    assert candidates(view) == [(10, 14), (15, 19)]


def test_an_unclean_election_leaves_the_divergent_segment_outside_the_lineage(fs_env: TieringEnv) -> None:
    w = fs_env.writer()
    w.append_records(10)
    w.become_leader(1)
    w.append_records(5)
    w.append_records(5)  # batches [10..14] and [15..19]
    w.roll()  # [0..19], epochs {0:0, 1:10}
    w.set_high_watermark()
    assert copy(fs_env, w) == 1
    w.truncate_to(15)  # the new leader had epoch 1 up to 14 only
    w.become_leader(2)
    w.append_records(10)
    w.roll()  # [15..24] under epoch 2
    w.set_high_watermark()
    view = view_of(fs_env, w)
    assert view.lineage.entries == (EpochEntry(0, 0), EpochEntry(1, 10), EpochEntry(2, 15))
    assert view.highest_copied_offset == 14  # epoch 1 ends at 14 here, not at the 19 the tier holds
    with fs_env.context() as ctx:
        assert finished_in_lineage(view, ctx.metadata) == []  # [0..19] runs past epoch 1's end
    assert view.copy_from_offset() == 15


def test_a_broker_behind_the_recorded_lineage_offers_nothing_and_reports_no_gap(fs_env: TieringEnv) -> None:
    """A replica that has not seen the later leaders: its log start and segments say nothing of the
    leader's log, so it neither copies nor shows a gap."""
    w = fs_env.writer()
    write_segments(w, 3)  # [0..4], [5..9], [10..14]
    w.set_high_watermark(5)
    assert copy(fs_env, w) == 1  # [0..4]
    w.set_high_watermark()
    w.delete_oldest_segments(2)
    assert view_of(fs_env, w).tiering_gap() == OffsetRange(5, 9)  # this broker's own log: a gap
    with fs_env.context() as ctx:  # another broker led on in epoch 3 and its copies were recorded
        lease = ctx.metadata.acquire_lease(tip_of(w), "another broker's copy")
        ctx.metadata.record_lineage(tip_of(w), [EpochEntry(0, 0), EpochEntry(3, 12)], lease)
        ctx.metadata.release_lease(lease)
    view = view_of(fs_env, w)
    assert view.behind_lineage == (
        "the broker's leader epoch cache ends at epoch 0, behind the recorded lineage's epoch 3: not the leader's log"
    )
    assert view.full_lineage.entries == (EpochEntry(0, 0), EpochEntry(3, 12))  # as recorded
    assert (candidates(view), view.tiering_gap()) == ([], None)


def test_local_retention_risk_measures_the_oldest_uncopied_segment(fs_env: TieringEnv) -> None:
    written_ms = 1_750_000_000_000
    w = fs_env.writer(clock=lambda: written_ms)
    write_segments(w, 2)  # [0..4], [5..9]
    w.append_records(1)
    w.set_high_watermark()
    view = view_of(fs_env, w)
    sizes = log_bytes(w)
    local, uncopied = sum(sizes.values()), sizes[0] + sizes[5]
    by_time = TopicConfig(local_retention_ms=60_000)
    calm = view.local_retention_risk(by_time, now_ms=written_ms + 47_999)  # under 80 % of a minute
    assert (calm.oldest_uncopied_base_offset, calm.oldest_uncopied_age_ms, calm.at_risk) == (0, 47_999, False)
    risk = view.local_retention_risk(by_time, now_ms=written_ms + 48_000)
    assert risk.at_risk and risk.reason == "oldest uncopied segment 0 is 48000 ms old, local retention is 60000 ms"
    assert (risk.local_bytes, risk.uncopied_bytes) == (local, uncopied)
    by_size = view.local_retention_risk(TopicConfig(local_retention_bytes=local), now_ms=written_ms)
    assert by_size.reason == f"local log is {local} bytes with {uncopied} uncopied, local retention is {local} bytes"
    assert not view.local_retention_risk(TopicConfig(local_retention_bytes=2 * local), now_ms=written_ms).at_risk
    unknown = view.local_retention_risk(TopicConfig(), now_ms=written_ms + 10**9)  # no local retention known
    assert (unknown.at_risk, unknown.local_retention_ms, unknown.local_retention_bytes) == (False, None, None)
    assert copy(fs_env, w) == 2
    tiered = view_of(fs_env, w).local_retention_risk(by_time, now_ms=written_ms + 10**9)
    assert (tiered.oldest_uncopied_base_offset, tiered.uncopied_bytes, tiered.at_risk) == (None, 0, False)


def two_closed_segments(env: TieringEnv, first_ms: int, second_ms: int) -> tuple[TierView, dict[int, int]]:
    """[0..4] written at ``first_ms``, [5..9] at ``second_ms``, the active segment [10]; all below the LSO."""
    clock = [first_ms]
    w = env.writer(clock=lambda: clock[0])
    write_segments(w, 1)
    clock[0] = second_ms
    write_segments(w, 1)
    w.append_records(1)
    w.set_high_watermark()
    return view_of(env, w), log_bytes(w)


def eligible(view: TierView, topic: TopicConfig, now_ms: int) -> list[int]:
    return [c.base_offset for c in view.upload_eligibility(topic, now_ms).candidates]


def test_a_delayed_upload_by_time_waits_until_the_segment_s_largest_timestamp_is_old_enough(
    fs_env: TieringEnv,
) -> None:
    """KIP-1241's time check: a segment goes once ``now - largest timestamp >= remote.copy.lag.ms``;
    one millisecond short it waits, and every segment after it with it."""
    t0 = 1_750_000_000_000
    view, sizes = two_closed_segments(fs_env, t0, t0 + 100_000)
    lag = TopicConfig(remote_copy_lag_ms=600_000)
    assert eligible(view, TopicConfig(), t0) == [0, 5]  # Kafka's default: no delay
    short = view.upload_eligibility(lag, now_ms=t0 + 599_999)
    assert short.candidates == ()
    assert short.delay == CopyDelay(
        base_offset=0,
        waiting_segments=2,
        waiting_bytes=sizes[0] + sizes[5],
        copy_lag_ms=600_000,
        copy_lag_bytes=-1,  # Kafka's default -1: the local retention, unknown here: not applied
        segment_age_ms=599_999,
        newer_bytes=sizes[5] + sizes[10],
    )
    met = view.upload_eligibility(lag, now_ms=t0 + 600_000)
    assert [c.base_offset for c in met.candidates] == [0] and met.delay is not None
    assert (met.delay.base_offset, met.delay.waiting_segments, met.delay.segment_age_ms) == (5, 1, 500_000)
    assert eligible(view, lag, t0 + 699_999) == [0]
    assert eligible(view, lag, t0 + 700_000) == [0, 5]
    assert view.upload_eligibility(lag, now_ms=t0 + 700_000).delay is None
    # A largest timestamp in the future (a producer's clock ahead) counts as old enough, as in Kafka.
    assert eligible(view, lag, t0 - 1) == [0, 5]


def test_a_delayed_upload_by_size_waits_until_enough_of_the_local_log_follows_the_segment(
    fs_env: TieringEnv,
) -> None:
    """KIP-1241's size check: a segment goes once the local log after it (later segments and the
    active one) reaches ``remote.copy.lag.bytes``; one byte short it waits."""
    t0 = 1_750_000_000_000
    view, sizes = two_closed_segments(fs_env, t0, t0)
    after_first, after_second = sizes[5] + sizes[10], sizes[10]

    def by_size(lag_bytes: int) -> TopicConfig:  # the time check not applied: -1, no local retention known
        return TopicConfig(remote_copy_lag_ms=-1, remote_copy_lag_bytes=lag_bytes)

    assert eligible(view, by_size(after_second), t0) == [0, 5]
    assert eligible(view, by_size(after_second + 1), t0) == [0]
    assert eligible(view, by_size(after_first), t0) == [0]
    short = view.upload_eligibility(by_size(after_first + 1), t0)
    assert short.candidates == () and short.delay is not None
    assert (short.delay.copy_lag_ms, short.delay.copy_lag_bytes) == (-1, after_first + 1)
    assert (short.delay.newer_bytes, short.delay.waiting_segments) == (after_first, 2)
    # The time lag's default 0 means no delay at all, whatever the size lag says.
    assert eligible(view, TopicConfig(remote_copy_lag_bytes=10**9), t0) == [0, 5]


def test_a_delayed_upload_goes_when_either_lag_passes(fs_env: TieringEnv) -> None:
    """Both lags set: a segment is eligible when its time check or its size check passes (Kafka's
    ``isEligibleForUpload``); each one short, it waits, and a lag of 0 lets everything go."""
    t0 = 1_750_000_000_000
    view, sizes = two_closed_segments(fs_env, t0, t0)
    after_first = sizes[5] + sizes[10]

    def both(lag_ms: int, lag_bytes: int) -> TopicConfig:
        return TopicConfig(remote_copy_lag_ms=lag_ms, remote_copy_lag_bytes=lag_bytes)

    assert eligible(view, both(60_000, after_first + 1), t0 + 59_999) == []  # both one short
    assert eligible(view, both(60_000, after_first), t0 + 59_999) == [0]  # size met
    assert eligible(view, both(60_000, after_first + 1), t0 + 60_000) == [0, 5]  # time met: both old enough
    assert eligible(view, both(0, 10**12), t0) == [0, 5]
    assert eligible(view, both(10**12, 0), t0) == [0, 5]


def test_a_copy_lag_of_minus_one_is_the_effective_local_retention(fs_env: TieringEnv) -> None:
    """-1 (Kafka's default for the size lag) is the effective local retention; when that is
    unlimited (or unknown here) the check is not applied, and with neither check applied nothing
    goes, as in Kafka."""
    t0 = 1_750_000_000_000
    view, sizes = two_closed_segments(fs_env, t0, t0)
    by_local_time = TopicConfig(remote_copy_lag_ms=-1, local_retention_ms=60_000)
    assert by_local_time.effective_remote_copy_lag_ms() == 60_000
    assert eligible(view, by_local_time, t0 + 59_999) == [] and eligible(view, by_local_time, t0 + 60_000) == [0, 5]
    same_as_total = TopicConfig(remote_copy_lag_ms=-1, local_retention_ms=-2, retention_ms=30_000)
    assert same_as_total.effective_remote_copy_lag_ms() == 30_000
    by_local_size = TopicConfig(remote_copy_lag_ms=-1, local_retention_bytes=sizes[10])
    assert eligible(view, by_local_size, t0) == [0, 5]
    never = view.upload_eligibility(TopicConfig(remote_copy_lag_ms=-1, retention_ms=-1, local_retention_ms=-2), t0)
    assert never.candidates == () and never.delay is not None
    assert (never.delay.copy_lag_ms, never.delay.copy_lag_bytes) == (-1, -1)


def test_the_delay_never_lets_a_segment_at_or_above_the_lso_go(fs_env: TieringEnv) -> None:
    """The delay only holds back the candidates of section 5 step 3: a segment straddling the LSO
    waits whatever the lags say."""
    t0 = 1_750_000_000_000
    w = fs_env.writer(clock=lambda: t0)
    write_segments(w, 2)  # [0..4], [5..9]
    w.append_records(1)
    w.set_high_watermark(7)
    view = view_of(fs_env, w)
    assert eligible(view, TopicConfig(remote_copy_lag_ms=1), t0 + 10**9) == [0]
    assert view.upload_eligibility(TopicConfig(remote_copy_lag_ms=1), t0 + 10**9).delay is None


def test_the_remote_tier_alone_is_viewed_from_the_store(fs_env: TieringEnv) -> None:
    """A lost disk being restored: no directory of the partition, the recorded lineage, the log end
    one past the highest finished offset."""
    w = fs_env.writer()
    write_segments(w, 2)
    w.become_leader(1)
    write_segments(w, 1)  # [10..14] under epoch 1
    w.set_high_watermark()
    assert copy(fs_env, w) == 3
    with fs_env.context() as ctx:
        view = load_remote_tier_view(ctx.metadata, tip_of(w))
    assert view.local_log is None
    with pytest.raises(TieringError, match=re.escape(f"{tip_of(w)}: the broker's log dirs hold no directory of")):
        view.log  # noqa: B018
    assert (view.log_end_offset, view.highest_copied_offset, view.global_log_start_offset) == (15, 14, 0)
    assert view.lineage.entries == (EpochEntry(0, 0), EpochEntry(1, 10))
    assert (view.high_watermark, view.last_stable_offset) == (None, None)


def test_many_partitions_views_read_at_once_equal_each_read_alone(fs_env: TieringEnv) -> None:
    """A run planning thousands of partitions reads the store for all of them at once: each view
    is the one read alone, whether the partition was copied, had an unclean election, a
    DeleteRecords, or was never seen by the store."""
    copied, unclean, deleted, unseen = (fs_env.writer(partition=p) for p in range(4))
    for w in (copied, deleted, unseen):
        write_segments(w, 2)
        w.set_high_watermark()
    unclean.append_records(10)
    unclean.become_leader(1)
    unclean.append_records(5)
    unclean.append_records(5)
    unclean.roll()
    unclean.set_high_watermark()
    for w in (copied, unclean, deleted):
        assert copy(fs_env, w) >= 1
    unclean.truncate_to(15)
    unclean.become_leader(2)
    unclean.append_records(5)
    unclean.roll()
    unclean.set_high_watermark()
    with fs_env.context() as ctx:
        apply_delete_records(ctx, deleted.tp, 7)
    writers = [copied, unclean, deleted, unseen]
    with fs_env.context() as ctx:
        logs = [ctx.partition_log(w.tp) for w in writers]
        alone = [load_tier_view(log, ctx.metadata) for log in logs]
        at_once = tier_views(ctx, logs)
    assert all(same_view(a, b) for a, b in zip(at_once, alone, strict=True))
    assert [v.highest_copied_offset for v in at_once] == [9, 14, 9, -1]
    assert [v.global_log_start_offset for v in at_once] == [0, 0, 7, None]
