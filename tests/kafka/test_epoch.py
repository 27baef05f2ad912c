"""Leader-epoch cache, checkpoint codec, lineage check (every clause) and lineage merge."""

from __future__ import annotations

import gc
import itertools
import random
import time
from pathlib import Path

import pytest

from tiering_core.errors import CorruptLogError
from tiering_core.kafka.checkpoints import (
    LeaderEpochCheckpointMissingError,
    encode_leader_epoch_checkpoint,
    parse_leader_epoch_checkpoint,
    read_leader_epoch_checkpoint,
    write_leader_epoch_checkpoint,
)
from tiering_core.kafka.epoch import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    LeaderEpochCache,
    current_lineage,
    is_cache_behind,
    is_segment_in_lineage,
    merge_lineage,
)

CACHE = LeaderEpochCache.of({0: 0, 1: 100, 2: 200})
EMPTY = LeaderEpochCache()
UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def entries(mapping: dict[int, int]) -> list[EpochEntry]:
    return [EpochEntry(e, o) for e, o in sorted(mapping.items())]


# --- docs/kafka-rules.md section 3 ----------------------------------------------------------------------


def test_semantics_section_3_examples() -> None:
    assert CACHE.segment_leader_epochs(0, 150) == {0: 0, 1: 100}
    assert CACHE.segment_leader_epochs(100, 200) == {1: 100}
    assert CACHE.leader_epoch_index_for_segment(150).as_dict() == {0: 0, 1: 100}
    assert CACHE.leader_epoch_index_for_segment(200).as_dict() == {0: 0, 1: 100}
    assert CACHE.leader_epoch_index_for_segment(201) == CACHE


@pytest.mark.parametrize(
    ("base", "next_base", "expected"),
    [
        pytest.param(0, 100, {0: 0}, id="first-epoch-only"),
        pytest.param(50, 250, {0: 50, 1: 100, 2: 200}, id="mid-epoch-base-spans-three"),
        pytest.param(150, 160, {1: 150}, id="inside-one-epoch"),
        pytest.param(200, 300, {2: 200}, id="base-on-latest-epoch-start"),
        pytest.param(900, 1000, {2: 900}, id="beyond-every-entry"),
    ],
)
def test_segment_leader_epochs(base: int, next_base: int, expected: dict[int, int]) -> None:
    assert CACHE.segment_leader_epochs(base, next_base) == expected


@pytest.mark.parametrize(
    ("cache", "offset", "epoch"),
    [
        pytest.param(CACHE, 0, 0, id="first-start"),
        pytest.param(CACHE, 99, 0, id="before-second-start"),
        pytest.param(CACHE, 100, 1, id="on-second-start"),
        pytest.param(CACHE, 199, 1, id="inside-second"),
        pytest.param(CACHE, 200, 2, id="on-latest-start"),
        pytest.param(CACHE, 10_000, 2, id="beyond-all"),
        pytest.param(LeaderEpochCache.of({3: 50}), 49, None, id="before-first-start"),
        pytest.param(EMPTY, 0, None, id="empty-cache"),
        pytest.param(LeaderEpochCache.of({1: 50, 2: 50, 3: 90}), 50, 2, id="empty-epoch-start-gives-last"),
    ],
)
def test_epoch_for_offset(cache: LeaderEpochCache, offset: int, epoch: int | None) -> None:
    assert cache.epoch_for_offset(offset) == epoch


GAPPY = LeaderEpochCache.of({2: 50, 5: 90, 7: 120})


@pytest.mark.parametrize(
    ("cache", "epoch", "expected"),
    [
        pytest.param(GAPPY, UNDEFINED_EPOCH, UNDEFINED, id="undefined-epoch"),
        pytest.param(EMPTY, UNDEFINED_EPOCH, UNDEFINED, id="undefined-epoch-empty-cache"),
        pytest.param(GAPPY, 7, (7, 400), id="latest-epoch-ends-at-leo"),
        pytest.param(GAPPY, 2, (2, 90), id="known-epoch-ends-at-next-start"),
        pytest.param(GAPPY, 5, (5, 120), id="middle-epoch-ends-at-next-start"),
        pytest.param(GAPPY, 3, (2, 90), id="unknown-epoch-in-gap-gives-floor-epoch"),
        pytest.param(GAPPY, 6, (5, 120), id="unknown-epoch-in-second-gap"),
        pytest.param(GAPPY, 1, (1, 50), id="below-first-epoch-gives-first-start"),
        pytest.param(GAPPY, 0, (0, 50), id="epoch-zero-below-first"),
        pytest.param(GAPPY, 8, UNDEFINED, id="above-latest-epoch"),
        pytest.param(EMPTY, 0, UNDEFINED, id="empty-cache"),
        pytest.param(LeaderEpochCache.of({4: 10}), 4, (4, 400), id="single-entry-latest"),
        pytest.param(LeaderEpochCache.of({4: 10}), 3, (3, 10), id="single-entry-below"),
        pytest.param(LeaderEpochCache.of({1: 50, 2: 50, 3: 90}), 1, (1, 50), id="empty-epoch-ends-where-it-starts"),
    ],
)
def test_end_offset_for(cache: LeaderEpochCache, epoch: int, expected: tuple[int, int]) -> None:
    assert cache.end_offset_for(epoch, 400) == expected


# --- truncation ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("offset", "expected"),
    [
        pytest.param(0, {0: 0, 1: 100, 2: 200}, id="at-first-start-unchanged"),
        pytest.param(99, {0: 99, 1: 100, 2: 200}, id="inside-first-epoch"),
        pytest.param(100, {1: 100, 2: 200}, id="exactly-on-second-start"),
        pytest.param(150, {1: 150, 2: 200}, id="inside-second-epoch"),
        pytest.param(200, {2: 200}, id="exactly-on-latest-start"),
        pytest.param(500, {2: 500}, id="beyond-every-entry"),
    ],
)
def test_truncate_from_start(offset: int, expected: dict[int, int]) -> None:
    assert CACHE.truncate_from_start(offset).as_dict() == expected


def test_truncate_from_start_before_first_entry_and_on_empty_cache() -> None:
    late = LeaderEpochCache.of({3: 100, 4: 200})
    assert late.truncate_from_start(50) == late
    assert EMPTY.truncate_from_start(10) == EMPTY
    # Empty epochs at the truncation point collapse into the last one, as in Kafka.
    assert LeaderEpochCache.of({1: 0, 2: 50, 3: 50}).truncate_from_start(50).as_dict() == {3: 50}


@pytest.mark.parametrize(
    ("offset", "expected"),
    [
        pytest.param(-1, {0: 0, 1: 100, 2: 200}, id="negative-is-a-no-op"),
        pytest.param(0, {}, id="at-first-start-drops-all"),
        pytest.param(1, {0: 0}, id="just-after-first-start"),
        pytest.param(100, {0: 0}, id="exactly-on-second-start"),
        pytest.param(101, {0: 0, 1: 100}, id="just-after-second-start"),
        pytest.param(200, {0: 0, 1: 100}, id="exactly-on-latest-start"),
        pytest.param(201, {0: 0, 1: 100, 2: 200}, id="just-after-latest-start"),
        pytest.param(10_000, {0: 0, 1: 100, 2: 200}, id="beyond-every-entry"),
    ],
)
def test_truncate_from_end(offset: int, expected: dict[int, int]) -> None:
    assert CACHE.truncate_from_end(offset).as_dict() == expected


def test_truncate_from_end_on_empty_cache() -> None:
    assert EMPTY.truncate_from_end(5) == EMPTY


def test_empty_epochs_removed() -> None:
    cache = LeaderEpochCache.of({0: 0, 1: 50, 2: 50, 3: 50, 4: 90})
    assert cache.without_empty_epochs().as_dict() == {0: 0, 3: 50, 4: 90}
    assert LeaderEpochCache.of({0: 0, 1: 0, 2: 7}).without_empty_epochs().as_dict() == {1: 0, 2: 7}
    assert LeaderEpochCache.of({0: 0, 1: 10, 2: 10}).without_empty_epochs().as_dict() == {0: 0, 2: 10}
    assert CACHE.without_empty_epochs() == CACHE
    assert EMPTY.without_empty_epochs() == EMPTY


def test_adjacent_segments_concatenate_to_the_cache_restricted_to_their_range() -> None:
    """Property: per-segment epochs of adjacent segments, concatenated, are the cache over the range.

    Empty epochs (equal starts) can only survive inside a segment, never at its base, so both
    sides are compared with empty epochs removed.
    """
    rng = random.Random(20240607)
    for _ in range(500):
        starts = sorted(rng.choices(range(0, 500), k=rng.randint(1, 7)))
        first_epoch = rng.randint(0, 3)
        epochs = sorted(rng.sample(range(first_epoch, first_epoch + 20), len(starts)))
        cache = LeaderEpochCache([EpochEntry(e, s) for e, s in zip(epochs, starts, strict=True)])
        bounds = sorted(rng.sample(range(0, 600), rng.randint(2, 6)))
        merged: dict[int, int] = {}
        for lo, hi in itertools.pairwise(bounds):
            part = cache.segment_leader_epochs(lo, hi)
            assert all(lo <= start < hi for start in part.values()), (cache, lo, hi, part)
            for epoch, start in part.items():
                merged.setdefault(epoch, start)
        restricted = cache.segment_leader_epochs(bounds[0], bounds[-1])
        assert (
            LeaderEpochCache.of(merged).without_empty_epochs() == LeaderEpochCache.of(restricted).without_empty_epochs()
        ), (cache, bounds)


# --- assign (LeaderEpochFileCache.assign) ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("epoch", "start", "expected"),
    [
        pytest.param(3, 250, {0: 0, 1: 100, 2: 200, 3: 250}, id="higher-epoch-appended"),
        pytest.param(3, 200, {0: 0, 1: 100, 3: 200}, id="new-epoch-at-latest-start-replaces-empty-latest"),
        pytest.param(3, 150, {0: 0, 1: 100, 3: 150}, id="new-epoch-below-latest-start-truncates"),
        pytest.param(2, 200, {0: 0, 1: 100, 2: 200}, id="same-latest-entry-no-op"),
        pytest.param(2, 300, {0: 0, 1: 100, 2: 200}, id="latest-epoch-later-start-keeps-first-start"),
        pytest.param(2, 150, {0: 0, 1: 100, 2: 150}, id="latest-epoch-earlier-start-moves-back"),
        pytest.param(1, 150, {0: 0, 1: 150}, id="lower-epoch-removes-higher-epochs"),
        pytest.param(1, 300, {0: 0, 1: 300}, id="lower-epoch-later-start-removes-higher-epochs"),
        pytest.param(0, 0, {0: 0}, id="first-entry-again-removes-everything-after"),
    ],
)
def test_assign(epoch: int, start: int, expected: dict[int, int]) -> None:
    assert CACHE.assign(epoch, start).as_dict() == expected
    assert CACHE.with_entry(epoch, start).as_dict() == expected


def test_assign_rejects_negative_and_starts_an_empty_cache() -> None:
    with pytest.raises(ValueError):
        CACHE.assign(-1, 10)
    with pytest.raises(ValueError):
        CACHE.assign(3, -1)
    assert EMPTY.assign(4, 10).as_dict() == {4: 10}


def _kafka_assign(cache: dict[int, int], epoch: int, start: int) -> dict[int, int]:
    """A line-by-line model of LeaderEpochFileCache.assign over a sorted dict (the TreeMap)."""
    if cache:
        latest_epoch = max(cache)
        if not (epoch != latest_epoch or start < cache[latest_epoch]):
            return cache
    result = dict(cache)
    for e in sorted(result, reverse=True):  # removeWhileMatching over descendingMap
        if e >= epoch or result[e] >= start:
            del result[e]
        else:
            break
    result[epoch] = start
    return dict(sorted(result.items()))


def test_assign_matches_a_model_of_kafkas_treemap_algorithm() -> None:
    rng = random.Random(11)
    for _ in range(300):
        cache = EMPTY
        model: dict[int, int] = {}
        for _ in range(rng.randint(1, 12)):
            epoch, start = rng.randint(0, 8), rng.randint(0, 300)
            cache = cache.assign(epoch, start)
            model = _kafka_assign(model, epoch, start)
            assert cache.as_dict() == model


# --- lookups and the value itself --------------------------------------------------------------------


def test_lookups() -> None:
    assert len(CACHE) == 3 and bool(CACHE) and not EMPTY and len(EMPTY) == 0
    assert CACHE.epochs() == [0, 1, 2]
    assert (CACHE.earliest_epoch, CACHE.latest_epoch) == (0, 2)
    assert (EMPTY.earliest_epoch, EMPTY.latest_epoch) == (None, None)
    assert CACHE.start_offset_of(1) == 100 and CACHE.start_offset_of(7) is None
    assert 1 in CACHE and 7 not in CACHE
    assert GAPPY.next_entry_after(2) == EpochEntry(5, 90)
    assert GAPPY.next_entry_after(3) == EpochEntry(5, 90)
    assert GAPPY.next_entry_after(7) is None
    assert GAPPY.floor_entry(6) == EpochEntry(5, 90) and GAPPY.floor_entry(1) is None
    assert GAPPY.previous_epoch(5) == 2 and GAPPY.previous_epoch(2) is None and GAPPY.previous_epoch(9) == 7
    assert GAPPY.next_epoch(5) == 7 and GAPPY.next_epoch(7) is None
    assert list(CACHE) == list(CACHE.entries) == entries({0: 0, 1: 100, 2: 200})
    assert CACHE == LeaderEpochCache(entries({0: 0, 1: 100, 2: 200})) and hash(CACHE) == hash(
        LeaderEpochCache(entries({0: 0, 1: 100, 2: 200}))
    )


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param([EpochEntry(1, 0), EpochEntry(1, 5)], id="repeated-epoch"),
        pytest.param([EpochEntry(2, 0), EpochEntry(1, 5)], id="decreasing-epoch"),
        pytest.param([EpochEntry(1, 10), EpochEntry(2, 5)], id="decreasing-start"),
        pytest.param([EpochEntry(-1, 0)], id="negative-epoch"),
        pytest.param([EpochEntry(0, -5)], id="negative-start"),
    ],
)
def test_cache_rejects_unordered_entries(bad: list[EpochEntry]) -> None:
    with pytest.raises(ValueError):
        LeaderEpochCache(bad)


# --- checkpoint codec -------------------------------------------------------------------------------------


def test_checkpoint_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    write_leader_epoch_checkpoint(path, list(CACHE.entries))
    assert path.read_bytes() == b"0\n3\n0 0\n1 100\n2 200\n"
    assert path.read_bytes() == encode_leader_epoch_checkpoint(list(CACHE.entries))
    assert read_leader_epoch_checkpoint(path) == list(CACHE.entries)
    write_leader_epoch_checkpoint(path, [])  # replaces the file atomically
    assert path.read_bytes() == b"0\n0\n"
    assert read_leader_epoch_checkpoint(path) == []
    assert [p.name for p in tmp_path.iterdir()] == ["leader-epoch-checkpoint"]  # no temp file left


def test_checkpoint_round_trip_of_large_values(tmp_path: Path) -> None:
    big = [EpochEntry(0, 0), EpochEntry(2**31 - 2, 2**40), EpochEntry(2**31 - 1, 2**63 - 1)]
    path = tmp_path / "leader-epoch-checkpoint"
    write_leader_epoch_checkpoint(path, big)
    assert read_leader_epoch_checkpoint(path) == big


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty-file-as-the-broker-creates-it"),
        pytest.param("0\n", id="version-line-only"),
        pytest.param("0\n0\n", id="zero-entries"),
    ],
)
def test_checkpoint_without_entries(tmp_path: Path, text: str) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text(text)
    assert read_leader_epoch_checkpoint(path) == []


def test_checkpoint_with_crlf_line_ends() -> None:
    parsed = parse_leader_epoch_checkpoint("0\r\n2\r\n0 0\r\n3 70\r\n", Path("leader-epoch-checkpoint"))
    assert parsed == entries({0: 0, 3: 70})


def test_checkpoint_entries_split_on_whitespace_as_kafka_does() -> None:
    """``WHITE_SPACES_PATTERN.split(line)`` has two fields with trailing whitespace, three with leading."""
    path = Path("leader-epoch-checkpoint")
    parsed = parse_leader_epoch_checkpoint("0\n3\n0 0 \n3\t70\t\n5  90 \x0b\f\n", path)
    assert parsed == entries({0: 0, 3: 70, 5: 90})
    with pytest.raises(CorruptLogError, match="line 3: malformed entry ' 0 0'") as err:
        parse_leader_epoch_checkpoint("0\n1\n 0 0\n", path)
    assert err.value.position == 4


@pytest.mark.parametrize(
    ("text", "position", "problem"),
    [
        pytest.param("1\n0\n", 0, "line 1: unsupported .* version '1'", id="wrong-version"),
        pytest.param("v0\n0\n", 0, "line 1: unsupported", id="non-integer-version"),
        pytest.param("0\n2\n0 0\n", 2, "line 2: entry count 2 does not match 1", id="count-above-lines"),
        pytest.param("0\n1\n0 0\n1 5\n", 2, "line 2: entry count 1 does not match 2", id="count-below-lines"),
        pytest.param("0\nx\n", 2, "line 2: entry count 'x'", id="non-integer-count"),
        pytest.param("0\n-1\n", 2, "line 2: entry count '-1'", id="negative-count"),
        pytest.param("0\n2\n0 0\nzero 5\n", 8, "line 4: malformed entry 'zero 5'", id="garbage-line"),
        pytest.param("0\n1\n0\n", 4, "line 3: malformed entry", id="one-field"),
        pytest.param("0\n1\n0 0 0\n", 4, "line 3: malformed entry", id="three-fields"),
        pytest.param("0\n2\n0 0\n\n", 8, "line 4: malformed entry ''", id="blank-line"),
        pytest.param("0\n1\n-1 0\n", 4, "line 3: epoch or start offset out of range", id="negative-epoch"),
        pytest.param("0\n1\n0 9223372036854775808\n", 4, "line 3: .* out of range", id="offset-over-i64"),
        pytest.param("0\n2\n1 0\n1 5\n", 8, "line 4: entry '1 5' does not follow '1 0'", id="repeated-epoch"),
        pytest.param("0\n2\n2 0\n1 5\n", 8, "line 4: .* does not follow", id="decreasing-epoch"),
        pytest.param("0\n2\n1 10\n2 5\n", 9, "line 4: entry '2 5' does not follow '1 10'", id="decreasing-start"),
    ],
)
def test_malformed_checkpoint(tmp_path: Path, text: str, position: int, problem: str) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text(text)
    with pytest.raises(CorruptLogError, match=problem) as err:
        read_leader_epoch_checkpoint(path)
    assert err.value.path == path
    assert err.value.position == position
    assert str(path) in str(err.value)


def test_checkpoint_that_is_not_text(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_bytes(b"0\n1\n\xff\xfe 0\n")
    with pytest.raises(CorruptLogError, match="not UTF-8") as err:
        read_leader_epoch_checkpoint(path)
    assert err.value.position == 4


def test_missing_checkpoint_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "orders-0" / "leader-epoch-checkpoint"
    with pytest.raises(LeaderEpochCheckpointMissingError, match="leader-epoch-checkpoint is missing") as err:
        read_leader_epoch_checkpoint(path)
    assert isinstance(err.value, CorruptLogError) and err.value.path == path


# --- lineage check (docs/kafka-rules.md section 6) -----------------------------------------------------------

LINEAGE = LeaderEpochCache.of({1: 100, 2: 200, 4: 400})  # epoch 3 never led


@pytest.mark.parametrize(
    ("segment", "end", "leo", "expected"),
    [
        # Clause 1: S's last epoch outside [first(L), last(L)].
        pytest.param({0: 0}, 99, 500, False, id="c1-last-epoch-below-first-of-lineage"),
        pytest.param({4: 400, 5: 450}, 470, 500, False, id="c1-last-epoch-above-last-of-lineage"),
        pytest.param({1: 100}, 150, 500, True, id="c1-last-epoch-is-first-of-lineage"),
        pytest.param({4: 400}, 450, 500, True, id="c1-last-epoch-is-last-of-lineage"),
        # Clause 2: first = smallest epoch of S >= first(L); older epochs of S are skipped.
        pytest.param({0: 40, 1: 60}, 150, 500, True, id="c2-epoch-below-lineage-skipped"),
        pytest.param({0: 0, 2: 150}, 250, 500, False, id="c2-first-is-epoch-2-and-checked-against-lineage"),
        # Clause 3: every epoch from `first` on must be in L.
        pytest.param({1: 100, 3: 300}, 350, 500, False, id="c3-middle-epoch-not-in-lineage"),
        pytest.param({3: 300}, 350, 500, False, id="c3-only-epoch-not-in-lineage"),
        pytest.param({2: 200, 4: 400}, 450, 500, True, id="c3-all-epochs-in-lineage-across-gap"),
        # Clause 4: first epoch's offset not below L's start when L has an epoch below it.
        pytest.param({2: 150}, 190, 500, False, id="c4-first-offset-below-lineage-start"),
        pytest.param({2: 250}, 300, 500, True, id="c4-first-offset-mid-epoch"),
        pytest.param({2: 200}, 300, 500, True, id="c4-first-offset-equals-lineage-start"),
        pytest.param({1: 50}, 90, 500, True, id="c4-not-applied-to-lineage-first-epoch"),
        # Clause 5: the last epoch ends by L's next epoch start - 1.
        pytest.param({1: 100}, 200, 500, False, id="c5-last-epoch-runs-into-next-epoch"),
        pytest.param({1: 100}, 199, 500, True, id="c5-last-epoch-ends-at-next-start-minus-one"),
        pytest.param({1: 150, 2: 200}, 400, 500, False, id="c5-two-epochs-last-runs-past-epoch-4"),
        pytest.param({4: 400}, 499, 500, True, id="c5-latest-epoch-has-no-next"),
        # Clause 6: between epochs, S's next (epoch, start) equals L's next (epoch, start).
        pytest.param({1: 100, 2: 250}, 300, 500, False, id="c6-next-start-mismatch"),
        pytest.param({2: 200, 4: 420}, 450, 500, False, id="c6-next-start-mismatch-across-gap"),
        pytest.param({1: 100, 2: 200}, 399, 500, True, id="c6-next-entry-matches"),
        # Clause 7: endOffset < LEO.
        pytest.param({4: 400}, 450, 450, False, id="c7-end-offset-equals-leo"),
        pytest.param({4: 400}, 460, 450, False, id="c7-end-offset-beyond-leo"),
        pytest.param({4: 400}, 450, 451, True, id="c7-end-offset-below-leo"),
        # Empty epochs of the segment are ignored, as Kafka's buildFilteredLeaderEpochMap does.
        pytest.param({2: 200, 3: 400, 4: 400}, 450, 500, True, id="segment-empty-epoch-filtered"),
        pytest.param({}, 10, 500, False, id="empty-segment-epochs"),
    ],
)
def test_lineage_check_clauses(segment: dict[int, int], end: int, leo: int, expected: bool) -> None:
    assert is_segment_in_lineage(segment, end, LINEAGE, leo) is expected


def test_clause_6_epoch_mismatch_when_lineage_has_the_skipped_epoch() -> None:
    lineage = LeaderEpochCache.of({1: 100, 2: 200, 3: 300})
    assert is_segment_in_lineage({1: 100, 3: 300}, 350, lineage, 500) is False
    assert is_segment_in_lineage({1: 100, 2: 200, 3: 300}, 350, lineage, 500) is True


def test_lineage_with_empty_epochs_is_filtered_before_the_check() -> None:
    raw = LeaderEpochCache.of({1: 100, 2: 200, 3: 400, 4: 400})  # epoch 3 wrote nothing
    assert is_segment_in_lineage({2: 200, 4: 400}, 450, raw, 500) is True
    # L's first epoch 0 is empty: epoch 1 is effectively first, so it may start before 100.
    assert is_segment_in_lineage({1: 50}, 90, LeaderEpochCache.of({0: 100, 1: 100, 2: 200}), 500) is True


def test_empty_lineage_contains_nothing() -> None:
    assert is_segment_in_lineage({0: 0}, 10, EMPTY, 500) is False


def test_overlapping_reupload_after_log_start_moved() -> None:
    # Kafka's own example: cache {5:10, 7:15, 9:100} became {7:51, 9:100} once segment1 was deleted;
    # segment2 (re-uploaded after an election) still carries epoch 5 below the lineage.
    lineage = LeaderEpochCache.of({7: 51, 9: 100})
    assert is_segment_in_lineage({5: 14, 7: 15, 9: 100}, 150, lineage, 200) is True
    assert is_segment_in_lineage({5: 14, 7: 15, 9: 100}, 150, lineage, 150) is False


def test_unclean_election_segment_beyond_new_leaders_epoch_start() -> None:
    # The old leader wrote epoch 1 up to 249 and tiered [100..249]. It died; an out-of-sync replica
    # holding only up to 199 became leader in epoch 2 from 200, and wrote 200..299 itself.
    old_leader_segment = {1: 100}
    new_lineage = LeaderEpochCache.of({0: 0, 1: 100, 2: 200})
    assert is_segment_in_lineage(old_leader_segment, 249, new_lineage, 300) is False
    # The new leader's own upload of the same range is within the lineage.
    assert is_segment_in_lineage(new_lineage.segment_leader_epochs(100, 250), 249, new_lineage, 300) is True
    # And a remote segment of epoch 1 that stops before 200 is shared history.
    assert is_segment_in_lineage({1: 100}, 199, new_lineage, 300) is True
    # The copy restarts inside epoch 1's lineage end: endOffsetFor(1) is epoch 2's start.
    assert new_lineage.end_offset_for(1, 300) == (1, 200)


# --- lineage merge (docs/kafka-rules.md section 10 item 2) -------------------------------------------------


@pytest.mark.parametrize(
    ("recorded", "current", "expected"),
    [
        pytest.param({0: 0, 1: 100}, {1: 150, 2: 200}, {0: 0, 1: 100, 2: 200}, id="broker-truncated-epoch-0-gone"),
        pytest.param(
            {0: 0, 1: 100, 2: 200}, {2: 200, 3: 300}, {0: 0, 1: 100, 2: 200, 3: 300}, id="truncated-on-epoch-boundary"
        ),
        pytest.param({0: 0, 1: 100}, {1: 100}, {0: 0, 1: 100}, id="same-history"),
        pytest.param(
            {0: 0, 1: 100, 2: 300}, {0: 0, 1: 100, 3: 250}, {0: 0, 1: 100, 3: 250}, id="diverged-after-unclean-election"
        ),
        pytest.param(
            {0: 0, 1: 100, 2: 300}, {1: 180, 3: 250}, {0: 0, 1: 100, 3: 250}, id="diverged-and-truncated-from-start"
        ),
        pytest.param({0: 0, 1: 120}, {1: 100, 2: 200}, {0: 0, 1: 100, 2: 200}, id="broker-start-earlier-wins"),
        pytest.param({0: 0, 1: 10}, {5: 500}, {0: 0, 1: 10, 5: 500}, id="current-first-epoch-not-recorded"),
        pytest.param({0: 0, 5: 100}, {3: 150}, {0: 0, 3: 150}, id="recorded-higher-epoch-before-current-dropped"),
        pytest.param({3: 300, 4: 400}, {0: 0, 1: 100}, {0: 0, 1: 100}, id="current-entirely-older-wins"),
        pytest.param({0: 0, 1: 50, 2: 50}, {2: 80}, {0: 0, 1: 50, 2: 50}, id="recorded-empty-epoch-kept"),
        pytest.param({}, {0: 0, 1: 10}, {0: 0, 1: 10}, id="nothing-recorded-yet"),
        pytest.param({0: 0, 1: 10}, {}, {0: 0, 1: 10}, id="broker-cache-empty"),
        pytest.param({}, {}, {}, id="both-empty"),
    ],
)
def test_merge_lineage(recorded: dict[int, int], current: dict[int, int], expected: dict[int, int]) -> None:
    merged = merge_lineage(entries(recorded), entries(current))
    assert merged.as_dict() == expected
    # Merging the same broker cache again changes nothing (the store re-merges every run).
    assert merge_lineage(list(merged.entries), entries(current)) == merged


@pytest.mark.parametrize(
    ("recorded", "current", "expected", "behind"),
    [
        pytest.param({0: 0, 1: 1000}, {0: 0}, {0: 0, 1: 1000}, True, id="killed-old-leader-still-runs-epoch-0"),
        pytest.param({0: 0, 1: 1500}, {0: 0}, {0: 0, 1: 1500}, True, id="follower-not-yet-fetched-the-new-epoch"),
        pytest.param({0: 0, 1: 1000}, {0: 0, 1: 1000}, {0: 0, 1: 1000}, False, id="caught-up"),
        pytest.param({0: 0, 2: 300}, {0: 0, 1: 100, 3: 250}, {0: 0, 1: 100, 3: 250}, False, id="newer-epoch-truncated"),
        pytest.param({}, {0: 0}, {0: 0}, False, id="nothing-recorded"),
        pytest.param({0: 0, 1: 10}, {}, {0: 0, 1: 10}, False, id="no-cache"),
    ],
)
def test_a_cache_behind_the_recorded_lineage_leaves_it_as_recorded(
    recorded: dict[int, int], current: dict[int, int], expected: dict[int, int], behind: bool
) -> None:
    assert is_cache_behind(entries(recorded), entries(current)) is behind
    assert current_lineage(entries(recorded), entries(current)).as_dict() == expected
    if not behind:
        assert current_lineage(entries(recorded), entries(current)) == merge_lineage(
            entries(recorded), entries(current)
        )


def test_merged_lineage_then_truncated_at_global_log_start() -> None:
    recorded = entries({0: 0, 1: 100, 2: 200})
    current = entries({2: 350, 3: 400})  # the broker deleted its segments below 350
    lineage = merge_lineage(recorded, current)
    assert lineage.as_dict() == {0: 0, 1: 100, 2: 200, 3: 400}
    # Remote retention moved the global log start to 150: epoch 0 is out of the lineage.
    assert lineage.truncate_from_start(150).as_dict() == {1: 150, 2: 200, 3: 400}
    assert is_segment_in_lineage({1: 100, 2: 200}, 299, lineage.truncate_from_start(150), 500) is True
    assert is_segment_in_lineage({0: 0}, 99, lineage.truncate_from_start(150), 500) is False


def test_merge_invariants_on_random_histories() -> None:
    """From the broker cache's first start on the merge is the broker cache (bar its head start)."""
    rng = random.Random(5)
    for _ in range(300):

        def random_cache() -> list[EpochEntry]:
            n = rng.randint(0, 5)
            epochs = sorted(rng.sample(range(0, 12), n))
            starts = sorted(rng.choices(range(0, 400), k=n))
            return [EpochEntry(e, s) for e, s in zip(epochs, starts, strict=True)]

        recorded, current = random_cache(), random_cache()
        merged = merge_lineage(recorded, current)
        if not current:
            assert list(merged) == recorded
            continue
        head = current[0]
        assert list(merged)[-len(current) + 1 or len(merged) :] == current[1:]
        merged_head = [e for e in merged if e.epoch == head.epoch]
        assert len(merged_head) == 1 and merged_head[0].start_offset <= head.start_offset
        assert all(e in recorded for e in merged if e.epoch < head.epoch)


# --- scale: a leader-epoch-checkpoint of a million entries -------------------------------------


def _checkpoint_text(count: int) -> str:
    return encode_leader_epoch_checkpoint([EpochEntry(e, 10 * e) for e in range(count)]).decode()


def test_a_checkpoint_of_a_million_entries_parses_into_a_cache_in_linear_time(tmp_path: Path) -> None:
    """10x the entries cost about 10x the time (< 20x allowed), measured in one run.

    The time is this process's CPU time with the cyclic garbage collector paused: other processes
    on a busy machine, and collections whose cost grows with every object alive in the test
    process, are not the parser's work."""

    def best_time(count: int) -> float:
        path = tmp_path / f"leader-epoch-checkpoint-{count}"
        path.write_text(_checkpoint_text(count))
        best = float("inf")
        for _ in range(3):
            gc.collect()
            gc.disable()
            try:
                started = time.process_time()
                cache = LeaderEpochCache(read_leader_epoch_checkpoint(path))
                best = min(best, time.process_time() - started)
            finally:
                gc.enable()
            assert len(cache) == count
            del cache
        return best

    small, large = best_time(100_000), best_time(1_000_000)
    assert large < 20 * small, f"100k entries: {small:.3f} s, 1M: {large:.3f} s"


def test_lineage_checks_do_not_walk_the_whole_lineage_each_time() -> None:
    """Status and retention check every remote segment against the lineage: after the first
    check (which filters the empty epochs once), each costs a few lookups, not a walk of a
    million entries."""
    lineage = LeaderEpochCache(EpochEntry(e, 10 * e) for e in range(1_000_000))
    segments = [({e: 10 * e}, 10 * e + 9) for e in range(0, 1_000_000, 5_000)]  # 200 segments
    started = time.perf_counter()
    assert is_segment_in_lineage(*segments[0], lineage, 10_000_000)
    first = time.perf_counter() - started
    started = time.perf_counter()
    assert all(is_segment_in_lineage(epochs, end, lineage, 10_000_000) for epochs, end in segments[1:])
    rest = time.perf_counter() - started
    assert rest < 2 * first, f"first check {first:.3f} s, the next {len(segments) - 1}: {rest:.3f} s"
    assert lineage.without_empty_epochs() is lineage.without_empty_epochs()
