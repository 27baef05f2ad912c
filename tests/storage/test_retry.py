"""RetryPolicy and the retry loop: jittered capped backoff, attempts, deadline, what is retryable."""

from __future__ import annotations

import time

import pytest
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    EndpointConnectionError,
    IncompleteReadError,
    NoCredentialsError,
    ParamValidationError,
    ReadTimeoutError,
)

from tiering_core.storage.retry import RetryPolicy, attempt_time_left, call_with_retries, is_retryable


def client_error(status: int, code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}, "Op")


def test_backoff_is_full_jitter_capped() -> None:
    policy = RetryPolicy(max_attempts=5, base_delay=0.1, max_delay=0.5, deadline_seconds=10)
    for attempt in range(1, 40):
        delays = [policy.backoff(attempt) for _ in range(200)]
        cap = min(0.5, 0.1 * 2**attempt)
        assert all(0 <= d <= cap for d in delays)
        assert max(delays) > cap / 2  # spread over the range, not a constant
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (client_error(503, "SlowDown"), True),
        (client_error(500, "InternalError"), True),
        (client_error(502, "BadGateway"), True),
        (client_error(400, "Throttling"), True),
        (client_error(400, "RequestLimitExceeded"), True),
        (client_error(429, "TooManyRequests"), True),
        (ConnectionClosedError(endpoint_url="u"), True),
        (ReadTimeoutError(endpoint_url="u"), True),
        (EndpointConnectionError(endpoint_url="u"), True),
        (IncompleteReadError(actual_bytes=1, expected_bytes=2), True),
        (ConnectionResetError(), True),
        (client_error(501, "NotImplemented"), False),
        (client_error(400, "NotImplemented"), False),
        (client_error(505, "HttpVersionNotSupported"), False),
        (client_error(403, "AccessDenied"), False),
        (client_error(404, "NoSuchKey"), False),
        (client_error(404, "NoSuchBucket"), False),
        (NoCredentialsError(), False),
        (ParamValidationError(report="bad"), False),
        (ValueError("x"), False),
    ],
)
def test_retryable_classification(exc: BaseException, expected: bool) -> None:
    assert is_retryable(exc) is expected


class Flaky:
    def __init__(self, failures: int, exc: BaseException) -> None:
        self.failures, self.exc, self.calls = failures, exc, 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.exc
        return "ok"


def fail(exc: BaseException, attempts: int, elapsed: float) -> BaseException:
    return RuntimeError(f"gave up after {attempts} in {elapsed:.2f} s: {exc}")


def test_retries_then_succeeds_and_gives_up_with_attempt_count() -> None:
    sleeps: list[float] = []
    policy = RetryPolicy(max_attempts=4, base_delay=0.01, deadline_seconds=10)
    op = Flaky(3, client_error(503, "SlowDown"))
    assert call_with_retries(policy, op, fail=fail, describe="t", sleep=sleeps.append) == "ok"
    assert op.calls == 4 and len(sleeps) == 3
    op = Flaky(10, client_error(503, "SlowDown"))
    with pytest.raises(RuntimeError, match="gave up after 4"):
        call_with_retries(policy, op, fail=fail, describe="t", sleep=sleeps.append)
    assert op.calls == 4


def test_non_retryable_fails_at_once() -> None:
    op = Flaky(1, client_error(403, "AccessDenied"))
    with pytest.raises(RuntimeError, match="gave up after 1"):
        call_with_retries(RetryPolicy(), op, fail=fail, describe="t", sleep=lambda _: None)
    assert op.calls == 1


def test_never_sleeps_past_the_deadline() -> None:
    policy = RetryPolicy(max_attempts=10**6, base_delay=0.05, max_delay=0.05, deadline_seconds=0.5)
    op = Flaky(10**9, ConnectionClosedError(endpoint_url="u"))
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="gave up after"):
        call_with_retries(policy, op, fail=fail, describe="t")
    elapsed = time.monotonic() - t0
    assert elapsed < 0.5 + 0.05, elapsed  # the deadline, plus the OS waking a sleeper a little late
    assert op.calls > 3


class FakeClock:
    """Time that passes only when an attempt or a sleep says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_no_retry_starts_that_would_end_past_the_deadline() -> None:
    """Attempts that each hang for a read timeout of 1 s, deadline 3.5 s: the third attempt
    ends near 3 s, a fourth would end past 3.5 s, so there is none."""
    clock = FakeClock()
    policy = RetryPolicy(max_attempts=100, base_delay=0.01, max_delay=0.01, deadline_seconds=3.5)
    calls = []

    def hung() -> str:
        calls.append(clock.now)
        clock.now += 1.0
        raise ReadTimeoutError(endpoint_url="u")

    with pytest.raises(RuntimeError, match=r"gave up after 3 in 3\.0\d s"):
        call_with_retries(policy, hung, fail=fail, describe="t", sleep=clock.sleep, clock=clock)
    assert len(calls) == 3 and clock.now <= 3.5


def test_fast_failures_use_the_whole_deadline() -> None:
    clock = FakeClock()
    policy = RetryPolicy(max_attempts=10**6, base_delay=0.1, max_delay=0.1, deadline_seconds=2.0)
    op = Flaky(10**9, client_error(503, "SlowDown"))
    with pytest.raises(RuntimeError, match="gave up after"):
        call_with_retries(policy, op, fail=fail, describe="t", sleep=clock.sleep, clock=clock)
    assert clock.now <= 2.0 and op.calls > 15  # mean delay 0.05 s: about 40 attempts fit


def test_each_attempt_knows_the_time_its_call_has_left() -> None:
    """The transport caps an attempt's read timeout at this, so an attempt started late in
    the deadline cannot run a full timeout past it."""
    clock = FakeClock()
    policy = RetryPolicy(max_attempts=10, base_delay=0.5, max_delay=0.5, deadline_seconds=3.0)
    seen: list[float | None] = []

    def op() -> str:
        seen.append(attempt_time_left())
        clock.now += 0.25
        if len(seen) < 3:
            raise client_error(503, "SlowDown")
        return "ok"

    assert attempt_time_left() is None
    assert call_with_retries(policy, op, fail=fail, describe="t", sleep=clock.sleep, clock=clock) == "ok"
    assert attempt_time_left() is None  # cleared when the call ends
    left = [x for x in seen if x is not None]
    assert len(left) == 3 and left[0] == 3.0
    assert left == sorted(left, reverse=True) and 0 < left[2] < 2.5  # time spent is time gone


def test_a_call_inside_another_ends_by_the_outer_deadline() -> None:
    clock = FakeClock()
    inner_left: list[float | None] = []

    def inner() -> str:
        inner_left.append(attempt_time_left())
        return "inner"

    def outer() -> str:
        clock.now += 2.0
        return call_with_retries(RetryPolicy(deadline_seconds=10.0), inner, fail=fail, describe="i", clock=clock)

    call_with_retries(RetryPolicy(deadline_seconds=3.0), outer, fail=fail, describe="o", clock=clock)
    assert inner_left == [1.0]
