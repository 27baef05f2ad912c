"""Sizes and ages read the same in the command's output and on the Tiering page."""

from __future__ import annotations

from tiering_core.humanize import fmt_age, fmt_bytes, fmt_duration, fmt_rate, fmt_utc
from tiering_core.report.lines import fmt_bytes as report_fmt_bytes


def test_sizes_are_binary_units() -> None:
    assert [fmt_bytes(n) for n in (0, 1023, 1024, 5 * 1024**2, 3 * 1024**4)] == [
        "0 B",
        "1023 B",
        "1.0 KiB",
        "5.0 MiB",
        "3072.0 GiB",
    ]
    assert report_fmt_bytes is fmt_bytes


def test_ages_round_down_to_the_largest_readable_unit() -> None:
    assert [fmt_age(ms) for ms in (0, 119_999, 120_000, 7_199_999, 7_200_000, 172_800_000)] == [
        "0s",
        "119s",
        "2m",
        "119m",
        "2h",
        "2d",
    ]


def test_durations_read_in_their_two_largest_units() -> None:
    assert [fmt_duration(ms) for ms in (0, 999, 1000, 60_000, 3_780_950, 3_600_000, 104_400_000, -5000)] == [
        "0ms",
        "999ms",
        "1s",
        "1m",
        "1h 3m",
        "1h",
        "1d 5h",
        "-5s",
    ]


def test_rates_keep_a_trickle_visible_and_use_the_size_units_above() -> None:
    assert fmt_rate(0) == "0.0 B/s" and fmt_rate(0.35) == "0.3 B/s" and fmt_rate(9.96) == "10.0 B/s"
    assert fmt_rate(512) == "512 B/s" and fmt_rate(1536) == "1.5 KiB/s" and fmt_rate(3 * 1024**2) == "3.0 MiB/s"


def test_a_time_reads_in_utc_to_the_second() -> None:
    assert fmt_utc(0) == "1970-01-01 00:00:00 UTC"
    assert fmt_utc(1_700_000_000_999) == "2023-11-14 22:13:20 UTC"  # the milliseconds dropped, not rounded
