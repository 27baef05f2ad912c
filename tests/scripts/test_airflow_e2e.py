"""scripts/airflow_e2e.py against a real Airflow (standalone: API server, scheduler, dag-processor,
triggerer): REST-triggered copy runs, a deferral through the triggerer, refused params, the Tiering
page and its screenshot."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
SHOT = ROOT / "test-artifacts" / "tiering-page.png"


@pytest.fixture(scope="module")
def e2e() -> subprocess.CompletedProcess[str]:
    SHOT.unlink(missing_ok=True)
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "airflow_e2e.py"), "--artifacts", str(SHOT.parent)],
        capture_output=True,
        text=True,
        timeout=900,  # the script bounds each wait itself; this only guards against a hang
        cwd=ROOT,
    )


def line(output: str, prefix: str) -> str:
    found = [ln for ln in output.splitlines() if ln.startswith(prefix)]
    assert found, f"no line starting with {prefix!r} in:\n{output[-3000:]}"
    return found[-1]


@pytest.mark.slow
def test_rest_triggered_runs_copy_defer_and_show_on_the_tiering_page(e2e) -> None:
    out = e2e.stdout
    assert e2e.returncode == 0, out[-3000:] + e2e.stderr[-5000:]
    assert re.search(r"run manual__\S+ finished: success", out)
    copied = json.loads(line(out, "e2e: copied per partition: ").split(": ", 2)[2])
    assert sorted(copied) == ["orders-0", "orders-1", "orders-2"] and all(n > 0 for n in copied.values())
    assert "the sensor is deferred to the triggerer" in out
    assert line(out, "e2e: deferred run ").endswith("finished: success; trigger fired for partitions [3]")
    assert "invalid removal params refused with HTTP 400" in out
    page = json.loads(line(out, "e2e: Tiering page: remote segments per partition: ").split(": ", 3)[3])
    assert {k: page[k] for k in copied} == copied and page["orders-3"] == 1
    assert line(out, "e2e: OK in ") and line(out, "e2e: airflow stopped (")


@pytest.mark.slow
def test_tiering_page_screenshot(e2e) -> None:
    assert e2e.returncode == 0, e2e.stdout[-3000:]
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install -y chromium); the run itself is checked above")
    assert f"e2e: screenshot saved to {SHOT}" in e2e.stdout
    data = SHOT.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000
