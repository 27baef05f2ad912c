"""Where the words go (console or JSON), and an import of the reporting layer that loads no run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tiering_core.events.read import SegmentRestored
from tiering_core.kafka.topic import TopicPartition
from tiering_core.report.output import ConsoleOutput, JsonOutput, output_for

RESTORED = SegmentRestored(TopicPartition("orders", 0), 0, 99, 1, 3, 4096)


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
        "import sys, tiering_core.report.output, tiering_core.report.results, tiering_core.cli.main\n"
        "print(sorted(m for m in ('pyarrow', 'pyiceberg', 'boto3', 'numba') if m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert loaded.strip() == "[]"
