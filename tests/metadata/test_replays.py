"""The replays' record, on SQLite and PostgreSQL: a replay is read back field for field, gaps
included; the newest come first by when they finished (the order recorded breaking a tie), as many
as asked; only the newest ``KEPT_REPLAYS`` stay."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.metadata.support import tip
from tiering_core.metadata.store import RemoteLogMetadataStore
from tiering_core.metadata.values import ReplayRecord

TIP = tip("MMMMMMMMMMMMMMMMMMMMMM", "orders", 0)


def replay(partition: int, finished_ms: int, **changes: object) -> ReplayRecord:
    """A replay of ``orders``' partition that ended at ``finished_ms``."""
    record = ReplayRecord(
        "orders",
        TIP.topic_id,
        partition,
        "orders-again",
        None,
        None,
        None,
        0,
        0,
        "up to date",
        None,
        (),
        finished_ms - 1,
        finished_ms,
    )
    return replace(record, **changes)  # type: ignore[arg-type]


def test_only_the_newest_replays_are_kept(metadata_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import tiering_core.metadata.replays as replays

    monkeypatch.setattr(replays, "KEPT_REPLAYS", 3)
    with RemoteLogMetadataStore(metadata_url) as store:
        for n in range(5):
            store.record_replay(
                ReplayRecord("orders", TIP.topic_id, n, "t", None, None, None, n, 0, "up to date", None, (), n, n)
            )
        assert store.replay_count() == 3
        assert [r.partition for r in store.recent_replays(10)] == [4, 3, 2]


def test_a_replay_is_read_back_as_recorded_with_its_gaps_and_run(metadata_url: str) -> None:
    record = replay(
        3,
        2_000,
        first_offset=10,
        last_offset=99,
        resumed_after=49,
        records=50,
        bytes=5_000,
        outcome="replayed",
        detail="a line of detail",
        gaps=((10, 12, "gap"), (40, 41, "aborted")),
        run="manual__2026",
    )
    with RemoteLogMetadataStore(metadata_url) as store:
        assert store.replay_count() == 0
        assert store.recent_replays() == []
        store.record_replay(record)
        assert store.replay_count() == 1
        assert store.recent_replays() == [record]


def test_the_newest_come_first_by_their_end_then_as_recorded_and_as_many_as_asked(metadata_url: str) -> None:
    """Recorded out of the order they ended in: the list follows their ends, and two replays that
    ended at once come newest recorded first."""
    ends = {0: 300, 1: 100, 2: 500, 3: 300, 4: 200}
    with RemoteLogMetadataStore(metadata_url) as store:
        for partition, end in ends.items():
            store.record_replay(replay(partition, end))
        newest_first = sorted(ends, key=lambda p: (-ends[p], -p))  # recorded in partition order
        assert [r.partition for r in store.recent_replays()] == newest_first
        assert [r.partition for r in store.recent_replays(2)] == newest_first[:2]
        assert store.replay_count() == len(ends)


def test_the_trim_keeps_the_newest_recorded_whatever_their_end(
    metadata_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows go in the order they were recorded, not by when their replay ended: a late record of an
    early end stays, an early record of a late end goes."""
    import tiering_core.metadata.replays as replays

    monkeypatch.setattr(replays, "KEPT_REPLAYS", 2)
    with RemoteLogMetadataStore(metadata_url) as store:
        store.record_replay(replay(0, 900))
        store.record_replay(replay(1, 100))
        store.record_replay(replay(2, 50))
        assert store.replay_count() == 2
        assert [r.partition for r in store.recent_replays()] == [1, 2]
