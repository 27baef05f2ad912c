"""Where a command's words go: ``Output`` (as pyiceberg's CLI has), on the console for a person,
or as one JSON document on stdout with the progress lines on stderr. The ``tiering`` command
makes one for its options; the lines themselves are ``lines`` (events) and ``results``.
"""

from __future__ import annotations

import json
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from tiering_core.events import RunEvent
from tiering_core.report.lines import event_line


class Output(ABC):
    """Where a command's words go: its runs' events while they work, its result at the end."""

    @abstractmethod
    def event(self, event: RunEvent) -> None:
        """A run's progress, as it happens."""

    @abstractmethod
    def result(self, payload: Any, human: Callable[[], str]) -> None:
        """The command's result: ``payload`` (plain values, the ``to_dict`` of the run's result)
        or the lines ``human`` makes of it."""

    def progress(self, line: str) -> None:
        """A progress line made elsewhere (a run that emits lines, not events)."""
        print(line, file=self.progress_stream(), flush=True)

    def failure(self, line: str) -> None:
        """A one-line failure on stderr, whatever the output."""
        print(line, file=sys.stderr, flush=True)

    def progress_stream(self) -> Any:
        return sys.stdout


class ConsoleOutput(Output):
    """Lines for a person: progress and result on stdout."""

    def event(self, event: RunEvent) -> None:
        self.progress(event_line(event))

    def result(self, payload: Any, human: Callable[[], str]) -> None:
        text = human()
        if text:
            print(text)


class JsonOutput(Output):
    """The result as JSON on stdout (stable field names, docs/architecture.md); progress lines go
    to stderr so stdout stays one JSON document."""

    def event(self, event: RunEvent) -> None:
        self.progress(event_line(event))

    def result(self, payload: Any, human: Callable[[], str]) -> None:
        print(json.dumps(payload, indent=2, sort_keys=False, default=str))

    def progress_stream(self) -> Any:
        return sys.stderr


def output_for(as_json: bool) -> Output:
    return JsonOutput() if as_json else ConsoleOutput()
