"""scripts/airflow_e2e.py against a real Airflow (standalone: API server, scheduler, dag-processor,
triggerer): REST-triggered copy runs, a deferral through the triggerer, refused params, the Tiering
page behind Airflow's login and its screenshots as a logged-in user, on its own and inside Airflow's
UI at a laptop's and a phone's size, checked in the browser; and the script's cleanup when it is
stopped mid-run."""

from __future__ import annotations

import json
import os
import re
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.airflow_support import load_e2e_script

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "airflow_e2e.py"
#: What the run saves in its ``--artifacts`` directory (the test's own; the committed screenshots in
#: docs/images are the Tiering page test's, docs/airflow.md says how to refresh them).
SHOT = "tiering-page.png"
DOM = "tiering-page.html"
#: The page inside Airflow's UI, by window size (a laptop, a phone).
FRAMED = {(w, h): f"tiering-in-airflow-{w}x{h}.png" for w, h in ((1280, 800), (390, 844))}
LOG_SHOT = "tiering-last-task-log-1280x800.png"  # Airflow's page a task log link opened
E2E_SECONDS = 900  # the script bounds each wait itself; this only guards against a hang
STOP_GRACE_SECONDS = 120  # after SIGTERM, for the script to stop Airflow before it is killed
# Above both, so pytest-timeout never SIGKILLs the run before the script could clean up.
TEST_TIMEOUT = E2E_SECONDS + STOP_GRACE_SECONDS + 180


def start_script(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )


def stop_script(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """SIGTERM first (the script exits through its cleanup and stops Airflow), SIGKILL only after a grace."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.communicate(timeout=STOP_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("artifacts")


@pytest.fixture(scope="module")
def e2e(artifacts: Path) -> subprocess.CompletedProcess[str]:
    proc = start_script("--artifacts", str(artifacts))
    try:
        out, err = proc.communicate(timeout=E2E_SECONDS)
    except subprocess.TimeoutExpired:
        out, err = stop_script(proc)
        pytest.fail(f"the e2e script hung for {E2E_SECONDS} s and was stopped:\n{out[-3000:]}\n{err[-3000:]}")
    except BaseException:  # interrupted (pytest-timeout, Ctrl-C): never leave Airflow running
        stop_script(proc)
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def line(output: str, prefix: str) -> str:
    found = [ln for ln in output.splitlines() if ln.startswith(prefix)]
    assert found, f"no line starting with {prefix!r} in:\n{output[-3000:]}"
    return found[-1]


@pytest.mark.slow
@pytest.mark.timeout(TEST_TIMEOUT)
def test_rest_triggered_runs_copy_defer_and_show_on_the_tiering_page(e2e) -> None:
    out = e2e.stdout
    assert e2e.returncode == 0, out[-3000:] + e2e.stderr[-5000:]
    assert re.search(r"run manual__\S+ finished: success", out)
    copied = json.loads(line(out, "e2e: copied per partition: ").split(": ", 2)[2])
    assert sorted(copied) == ["orders-0", "orders-1", "orders-2"] and all(n > 0 for n in copied.values())
    assert "the sensor is deferred to the triggerer" in out
    assert line(out, "e2e: deferred run ").endswith("finished: success; trigger fired for partitions [3]")
    assert "invalid removal params refused with HTTP 400" in out
    for dag_id in ("tiering_copy__payments", "tiering_retention__orders"):
        assert re.search(rf"run manual__\S+ of {dag_id} finished: success", out)
    assert line(out, "e2e: Tiering page: topics ") == "e2e: Tiering page: topics orders, payments"
    refused = line(out, "e2e: anonymous requests to the Tiering page refused: ")
    assert re.fullmatch(r"e2e: .*refused: /tiering/ 40[13], /tiering/api/partitions 40[13]", refused)
    page = json.loads(line(out, "e2e: Tiering page: remote segments per partition: ").split(": ", 3)[3])
    assert {k: page[k] for k in copied} == copied and page["orders-3"] == 1
    assert line(out, "e2e: OK in ") and line(out, "e2e: airflow stopped (")


def require_chromium(e2e) -> None:  # type: ignore[no-untyped-def]
    """Skips a screenshot check on a machine without Chromium; under CI (where the bootstrap
    installs it) a missing Chromium fails instead."""
    if "e2e: WARNING: no Chromium" in e2e.stdout:
        assert not load_e2e_script().in_ci(), "under CI a missing Chromium must fail the run"
        pytest.skip("no Chromium installed (apt-get install -y chromium, or set TIERING_CHROMIUM)")


@pytest.mark.slow
@pytest.mark.timeout(TEST_TIMEOUT)
def test_tiering_page_screenshot_as_a_logged_in_user(e2e, artifacts: Path) -> None:
    assert e2e.returncode == 0, e2e.stdout[-3000:]
    require_chromium(e2e)
    shot, dom_file = artifacts / SHOT, artifacts / DOM
    labels = ["orders-0", "orders-1", "orders-2", "orders-3"]
    assert line(e2e.stdout, f"e2e: screenshot saved to {shot} (").endswith(
        f"logged in; the page lists {', '.join(labels)})"
    )
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000
    dom = dom_file.read_text()  # the page the browser rendered, not a login page or an error
    assert "<h1>Kafka tiered storage</h1>" in dom and "Tier state unavailable" not in dom
    assert all(f"<td>{label}</td>" in dom for label in labels)


@pytest.mark.slow
@pytest.mark.timeout(TEST_TIMEOUT)
def test_tiering_page_inside_airflows_ui_checked_at_a_laptop_and_a_phone_size(e2e, artifacts: Path) -> None:
    """From Airflow's navigation (the page in Airflow's frame), checked in that frame: a summary row
    per topic, no horizontal overflow, both charts drawn; the shots are the window's size."""
    assert e2e.returncode == 0, e2e.stdout[-3000:]
    require_chromium(e2e)
    for (width, height), name in FRAMED.items():
        shot = artifacts / name
        found = re.fullmatch(
            rf"e2e: in Airflow's UI at {width}x{height}: summary rows (.*); scrollWidth (\d+) <= innerWidth (\d+); "
            rf"chart pixels drawn \[(.*)\], points \[(.*)\]; saved to (.*)",
            line(e2e.stdout, f"e2e: in Airflow's UI at {width}x{height}: "),
        )
        assert found, e2e.stdout[-3000:]
        rows, scroll_width, inner_width, pixels, points, saved = found.groups()
        assert rows == "orders, payments"
        assert int(scroll_width) <= int(inner_width) <= width
        assert [int(n) > 0 for n in pixels.split(", ")] == [True, True]  # the 24 h and 7 d charts
        assert int(points.split(", ")[0]) >= 1
        data = shot.read_bytes()
        assert saved == str(shot) and data.startswith(b"\x89PNG\r\n\x1a\n")
        assert struct.unpack(">II", data[16:24]) == (width, height)  # the PNG header's size
    followed = line(e2e.stdout, "e2e: in Airflow's UI a partition's last task log link opened ")
    assert re.fullmatch(
        r"e2e: .* opened /dags/tiering_copy__orders/runs/manual__\S+/tasks/copy/mapped/\d in Airflow's window; "
        rf"saved to {re.escape(str(artifacts / LOG_SHOT))}",
        followed,
    )
    assert (artifacts / LOG_SHOT).read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


@pytest.mark.slow
@pytest.mark.timeout(TEST_TIMEOUT)
def test_sigterm_mid_run_stops_every_airflow_process(tmp_path: Path) -> None:
    """What the fixture above does on a hang: SIGTERM; the script must take all of Airflow with it."""
    import psutil

    proc = start_script("--artifacts", str(tmp_path))
    assert proc.stdout is not None
    try:
        group = None
        for text in proc.stdout:
            if m := re.match(r"e2e: airflow standalone \(pid (\d+), process group (\d+)\)", text):
                group = int(m.group(2))
                break
        assert group is not None, "the script ended before it started Airflow"
        standalone = psutil.Process(group)
        deadline = time.monotonic() + 240
        while len(standalone.children(recursive=True)) < 3 and time.monotonic() < deadline:
            time.sleep(2)  # its components (API server, scheduler, ...) are starting
        started = [(p, p.create_time()) for p in [standalone, *standalone.children(recursive=True)]]
        assert len(started) >= 4, f"standalone started too few components: {started}"
    except BaseException:
        stop_script(proc)
        raise
    out, err = stop_script(proc)
    assert proc.returncode == 143, out[-3000:] + err[-3000:]
    assert "e2e: airflow stopped (" in out
    survivors = [p.pid for p, created in started if p.is_running() and p.create_time() == created]
    assert survivors == []
    with pytest.raises(ProcessLookupError):
        os.killpg(group, 0)  # nothing left in Airflow's process group


def test_missing_chromium_fails_under_ci_and_is_a_warning_elsewhere(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    e2e = load_e2e_script()
    api = e2e.Api("http://127.0.0.1:9")
    api.token = "unused"
    monkeypatch.setenv("PATH", str(tmp_path))  # no browser anywhere
    monkeypatch.delenv("TIERING_CHROMIUM", raising=False)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(e2e.E2EError, match="CI requires the Tiering page screenshot"):
        e2e.screenshot(api, ["orders-0"], tmp_path)
    monkeypatch.delenv("CI")
    e2e.screenshot(api, ["orders-0"], tmp_path)
    assert "e2e: WARNING: no Chromium" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


def test_chromium_is_found_on_path_or_named_by_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    e2e = load_e2e_script()
    browser = tmp_path / "bin" / "chromium-browser"
    browser.parent.mkdir()
    browser.write_text("#!/bin/sh\n")
    browser.chmod(0o755)
    monkeypatch.setenv("PATH", str(browser.parent))
    monkeypatch.delenv("TIERING_CHROMIUM", raising=False)
    assert e2e.find_chromium() == str(browser)
    elsewhere = tmp_path / "opt" / "my-chrome"
    elsewhere.parent.mkdir()
    elsewhere.write_text("#!/bin/sh\n")
    elsewhere.chmod(0o755)
    monkeypatch.setenv("TIERING_CHROMIUM", str(elsewhere))
    assert e2e.find_chromium() == str(elsewhere)
    monkeypatch.setenv("TIERING_CHROMIUM", str(tmp_path / "absent"))
    with pytest.raises(e2e.E2EError, match=r"TIERING_CHROMIUM=.* is not an executable"):
        e2e.find_chromium()


def test_screenshots_go_to_a_directory_git_ignores_unless_one_is_named() -> None:
    """A run changes no committed file: the default ``--artifacts`` is ignored by git (the
    screenshots README shows are refreshed with ``--artifacts docs/images``)."""
    e2e = load_e2e_script()
    default = e2e.parse_args([]).artifacts
    for name in (SHOT, DOM, LOG_SHOT, *FRAMED.values()):
        ignored = subprocess.run(["git", "check-ignore", "-q", str(default / name)], cwd=ROOT, check=False)
        assert ignored.returncode == 0, f"{default / name} is not ignored by git"
    assert e2e.parse_args(["--artifacts", "docs/images"]).artifacts == Path("docs/images")


def test_a_poll_the_api_server_does_not_answer_in_time_is_asked_again_and_a_post_is_not() -> None:
    """A busy API server's slow answer to one GET costs a try, not the test; a POST is sent once."""
    import http.server
    import threading

    e2e = load_e2e_script()
    asked_again = threading.Event()
    seen: list[str] = []

    class Slow(http.server.BaseHTTPRequestHandler):
        def answer(self) -> None:
            seen.append(self.command)
            if len(seen) == 1 or self.command == "POST":
                asked_again.wait(10)  # the first ask outlives the client's timeout
            else:
                asked_again.set()
            body = b'{"ok": true}'
            try:
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:  # the client gave up on this one
                pass

        do_GET = do_POST = answer

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        api = e2e.Api(f"http://127.0.0.1:{server.server_address[1]}")
        api.TIMEOUT_S = 0.5
        assert api.call("GET", "/dags") == (200, {"ok": True})
        assert seen == ["GET", "GET"]
        asked_again.clear()
        with pytest.raises(TimeoutError):
            api.call("POST", "/dags/x/dagRuns", {})
        assert seen == ["GET", "GET", "POST"]
        asked_again.set()
    finally:
        server.shutdown()
        server.server_close()
