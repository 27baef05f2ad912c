"""Retries for remote calls: capped exponential backoff with full jitter, within a deadline.

botocore's own retries are off; this one loop decides, so every call honours one deadline
and the final failure is a single error that says how many attempts were made.

An attempt in flight cannot be interrupted, so two rules keep a call within its deadline:
a retry starts only if it is expected to end in time (the next attempt is assumed to take as
long as the last), and the transport caps each attempt's read timeout at the time the call
has left (``attempt_time_left``). After quick 503s, a retry that meets a hung endpoint
therefore gives up at the deadline, not one full read timeout past it.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TypeVar

from botocore.exceptions import ClientError, HTTPClientError, IncompleteReadError
from botocore.exceptions import ConnectionError as BotoConnectionError

log = logging.getLogger(__name__)
T = TypeVar("T")

#: S3 error codes that mean "slow down" or "try again", whatever the HTTP status.
RETRYABLE_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestLimitExceeded",
        "RequestThrottled",
        "TooManyRequests",
        "RequestTimeout",
        "InternalError",
        "ServiceUnavailable",
    }
)


#: 5xx answers that say "never", not "not now": the same request fails the same way again.
PERMANENT_STATUSES = frozenset({501, 505})
PERMANENT_CODES = frozenset({"NotImplemented"})

#: (clock, the moment the innermost running call must end by), per thread.
_CALL_END: ContextVar[tuple[Callable[[], float], float] | None] = ContextVar("tiering_call_end", default=None)


def is_retryable(exc: BaseException) -> bool:
    """Throttling, 5xx (but 501 Not Implemented and 505), connection errors and resets,
    connect and read timeouts, cut-off bodies."""
    if isinstance(exc, ClientError):
        code = exc.response.get("Error", {}).get("Code", "")
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        if code in PERMANENT_CODES or status in PERMANENT_STATUSES:
            return False
        return code in RETRYABLE_CODES or status == 429 or status >= 500
    # HTTPClientError covers resets, read timeouts and broken response streams; botocore's
    # ConnectionError covers refused connections and connect timeouts.
    return isinstance(exc, HTTPClientError | BotoConnectionError | IncompleteReadError | ConnectionError | TimeoutError)


@dataclass(frozen=True)
class RetryPolicy:
    """``max_attempts`` in all (1 = no retry); ``deadline_seconds`` bounds one call with its retries."""

    max_attempts: int = 5
    base_delay: float = 0.1
    max_delay: float = 5.0
    deadline_seconds: float = 120.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or self.base_delay < 0 or self.max_delay < 0 or self.deadline_seconds <= 0:
            raise ValueError(f"invalid retry policy {self}")

    def backoff(self, attempt: int) -> float:
        """Full jitter: uniform in [0, min(max_delay, base * 2^attempt)]."""
        return random.uniform(0, min(self.max_delay, self.base_delay * (2 ** min(attempt, 62))))


def attempt_time_left() -> float | None:
    """Seconds the running call (``call_with_retries`` in this thread) has until its deadline;
    None outside one. A transport caps the attempt's socket timeouts at it."""
    current = _CALL_END.get()
    if current is None:
        return None
    clock, end = current
    return end - clock()


def call_with_retries(
    policy: RetryPolicy,
    operation: Callable[[], T],
    *,
    retryable: Callable[[BaseException], bool] = is_retryable,
    fail: Callable[[BaseException, int, float], BaseException],
    describe: str,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """Run ``operation``; retry what ``retryable`` accepts while attempts and the deadline
    allow; ``fail(last_error, attempts, elapsed_seconds)`` builds the one final error."""
    started = clock()
    end = started + policy.deadline_seconds
    outer = _CALL_END.get()
    if outer is not None and outer[0] is clock:
        end = min(end, outer[1])  # a call made inside another ends by the outer deadline too
    token = _CALL_END.set((clock, end))
    try:
        attempt = 0
        while True:
            attempt += 1
            attempt_started = clock()
            try:
                return operation()
            except Exception as exc:
                now = clock()
                elapsed = now - started
                delay = policy.backoff(attempt)
                expected_end = now + delay + (now - attempt_started)
                if not retryable(exc) or attempt >= policy.max_attempts or expected_end > end:
                    raise fail(exc, attempt, elapsed) from exc
                log.warning("%s failed (attempt %d): %s; retrying in %.2f s", describe, attempt, exc, delay)
                sleep(delay)
    finally:
        _CALL_END.reset(token)
