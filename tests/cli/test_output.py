"""The reporting layer: where the words go (console or JSON), a line for every run event, and an
import that loads no run."""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys
from dataclasses import dataclass

import pytest

import tiering_core.events
from tiering_core.cli.output import ConsoleOutput, JsonOutput, event_line, output_for
from tiering_core.events import RunEvent
from tiering_core.events.read import SegmentRestored
from tiering_core.kafka.topic import TopicPartition

RESTORED = SegmentRestored(TopicPartition("orders", 0), 0, 99, 1, 3, 4096)


def all_event_types() -> list[type[RunEvent]]:
    for module in pkgutil.iter_modules(tiering_core.events.__path__):
        importlib.import_module(f"tiering_core.events.{module.name}")
    found: list[type[RunEvent]] = []
    pending = list(RunEvent.__subclasses__())
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return [cls for cls in found if cls.__module__.startswith("tiering_core.")]


def test_every_run_event_has_a_line_of_its_own() -> None:
    fallback = event_line.dispatch(RunEvent)
    types = all_event_types()
    assert SegmentRestored in types
    missing = [cls.__qualname__ for cls in types if event_line.dispatch(cls) is fallback]
    assert missing == []


def test_an_event_without_a_line_still_reads_by_its_fields() -> None:
    @dataclass(frozen=True)
    class Unheard(RunEvent):
        segment: int

    assert event_line(Unheard(7)) == "Unheard: segment=7"


def test_the_console_prints_events_and_the_human_result_on_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    out = output_for(False)
    assert isinstance(out, ConsoleOutput)
    out.event(RESTORED)
    out.result({"segments": 1}, lambda: "restored 1 segment")
    captured = capsys.readouterr()
    assert captured.out == "orders-0: restored segment 0..99 (1/3, 4096 bytes)\nrestored 1 segment\n"
    assert captured.err == ""


def test_json_keeps_stdout_one_document_and_progress_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    out = output_for(True)
    assert isinstance(out, JsonOutput)
    out.event(RESTORED)
    out.result({"segments": 1}, lambda: "never called")
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"segments": 1}
    assert captured.err == "orders-0: restored segment 0..99 (1/3, 4096 bytes)\n"


def test_the_reporting_layer_loads_no_run() -> None:
    """The command starts fast: its lines and events import neither Arrow, pyiceberg nor boto3."""
    code = (
        "import sys, tiering_core.cli.output, tiering_core.cli.main\n"
        "print(sorted(m for m in ('pyarrow', 'pyiceberg', 'boto3', 'numba') if m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert loaded.strip() == "[]"
