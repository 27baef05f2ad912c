"""What a copy lane has finished, kept where Airflow sees it while the lane still works.

A lane's task may be stopped before it returns: its ``execution_timeout``, an error, or Airflow's
SIGTERM (the task marked failed, the worker shut down). ``LaneProgress`` fills the lane's report as
each partition ends and pushes the results so far to the task's XCom (at most every ``every``
seconds while it works, and once more when it is stopped), so the XCom and the Tiering page list
what finished. A kill also ends the lane's budget at once: nothing new starts. The lane runs inside
it (``with``), so that whatever stops the run pushes what ended before.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from tiering_core.events import RunEvent
from tiering_core.runs.copy_report import ParallelCopyReport


class LaneProgress:
    """The report a copy lane fills (``report``), its clock (``clock``) and its pushes to XCom; as
    a context manager, one push more when the lane's run is stopped by an exception."""

    def __init__(
        self,
        context: Any,
        tell: Callable[[RunEvent], None],
        results: Callable[[ParallelCopyReport], list[dict[str, Any]]],
        every: float,
    ) -> None:
        self.ti = context.get("ti")
        self.tell = tell
        self.results = results
        self.every = every
        self.killed = False
        self.pushed_at = -math.inf
        self.report = ParallelCopyReport(announce=self.ended)

    def clock(self) -> float:
        """The lane's clock: past every deadline once the task is being killed."""
        return math.inf if self.killed else time.monotonic()

    def ended(self, event: RunEvent) -> None:
        """A partition ended: its line in the log, and the results so far to XCom unless they were
        pushed less than ``every`` seconds ago."""
        self.tell(event)
        if time.monotonic() - self.pushed_at >= self.every:
            self.push()

    def push(self) -> None:
        """The results of the partitions ended so far, as the lane's XCom (none ended: nothing)."""
        if self.ti is not None and self.report.results:
            self.ti.xcom_push(key="return_value", value=self.results(self.report))
            self.pushed_at = time.monotonic()

    def __enter__(self) -> LaneProgress:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if error is not None:
            self.push()  # what ended before the lane was stopped
