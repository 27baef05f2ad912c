"""End to end through a real Airflow: the copy DAG triggered over the REST API, then the Tiering page.

Starts ``airflow standalone`` (API server, scheduler, dag-processor, triggerer; SQLite and the
LocalExecutor) on a free port with an isolated AIRFLOW_HOME, the project's DAGs and plugin, a
demo broker log dir and a local S3 endpoint whose address and credentials reach the tasks only
through the Airflow connection ``aws_default``. Then, through REST API v2 with a token from the
simple auth manager:

1. triggers ``tiering_copy__orders`` and waits for success; reads each mapped task's label and
   result (XCom);
2. triggers it again with nothing eligible: the sensor defers to the triggerer; a new partition
   with a closed segment appears; the trigger fires and the run copies it;
3. checks that invalid params for ``tiering_delete_partition`` are refused (HTTP 400);
4. runs ``tiering_copy__payments`` and ``tiering_retention__orders`` once each;
5. checks that the Tiering page and its JSON refuse anonymous requests (401/403) and answer the
   token's holder; reads ``/tiering/api/partitions``; opens ``/tiering/`` in headless Chromium
   logged in (the JWT in the cookie Airflow's UI uses, set over Chromium's DevTools protocol),
   opens the orders topic, checks the rendered page lists the partitions, and saves its screenshot
   and DOM to ``<artifacts>/tiering-page.png`` and ``.html``;
6. opens the page from Airflow's navigation (``/plugin/tiering``: the plugin's external view, the
   page in Airflow's iframe) at 1280x800 and 390x844 and checks it in its frame over the DevTools
   protocol (``Runtime.evaluate``): a summary row for every topic, no horizontal overflow
   (``scrollWidth <= innerWidth``), the orders charts' canvases drawn (pixels read back with
   ``getImageData``, the last 24 hours with at least one point); saved to
   ``<artifacts>/tiering-in-airflow-<width>x<height>.png``; at 1280x800 it then clicks a
   partition's link to its last task's log and checks that Airflow's own window shows that task
   instance (``tiering-last-task-log-1280x800.png``).

The runs name the demo broker (``TIERING_BROKER_ID``) so that they record their observations in
the metadata store, which the page is computed from.

Chromium is ``$TIERING_CHROMIUM`` (a path or a command name), else the first of chromium,
chromium-browser, google-chrome on ``PATH``. Without it the screenshot is skipped with a
warning, except under CI (``CI`` set), where a missing browser fails the run.

Every process it started is stopped at the end, whatever happened: Airflow runs in a process
group of its own, which is terminated (then killed) as a whole, together with any process under
it that moved to a session of its own. SIGTERM to this script does the same before it exits.

    python scripts/airflow_e2e.py [--artifacts DIR] [--timeout SECONDS] [--keep]

The screenshots go to ``test-artifacts/`` (ignored by git), so a run changes no committed file;
``--artifacts DIR`` puts them elsewhere. (The screenshots docs/airflow.md shows are the Tiering page test's,
``tests/tiering_airflow/ui/test_health.py``.)
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DAG_ID = "tiering_copy__orders"
#: Run once each after the orders copies, before the page is checked: a second topic, a retention.
MORE_DAG_IDS = ("tiering_copy__payments", "tiering_retention__orders")
REMOVAL_DAG_ID = "tiering_delete_partition"
CHROMIUM_ENV = "TIERING_CHROMIUM"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
JWT_COOKIE = "_token"  # where Airflow's UI keeps the logged-in user's JWT
BUCKET = "kafka-tiered-e2e"
#: Where the screenshots go unless ``--artifacts`` says otherwise: ignored by git, so a run changes
#: no committed file.
DEFAULT_ARTIFACTS = ROOT / "test-artifacts"
T = TypeVar("T")


class E2EError(Exception):
    """A step of the end-to-end run did not go as required."""


def say(line: str) -> None:
    print(f"e2e: {line}", flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(what: str, check: Callable[[], T | None], timeout: float, interval: float = 1.0) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            result = check()
        except (OSError, urllib.error.URLError, KeyError, ValueError):
            result = None
        if result:
            return result
        time.sleep(interval)
    raise E2EError(f"timed out after {timeout:.0f} s waiting for {what}")


class Api:
    """Airflow's REST API v2 with a bearer token.

    A GET that times out is asked again (``GET_TRIES`` in all): an API server on a busy machine
    may take longer than ``TIMEOUT_S`` to answer one poll, and a poll is safe to repeat. Any other
    method is sent once."""

    TIMEOUT_S = 30
    GET_TRIES = 3

    def __init__(self, base: str) -> None:
        self.base = base
        self.token: str | None = None

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        req = urllib.request.Request(
            self.base + path, data=None if body is None else json.dumps(body).encode(), method=method
        )
        req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        tries = self.GET_TRIES if method == "GET" else 1
        for attempt in range(1, tries + 1):
            try:
                with urllib.request.urlopen(req, timeout=self.TIMEOUT_S) as resp:
                    status, text = resp.status, resp.read().decode()
                break
            except urllib.error.HTTPError as exc:
                status, text = exc.code, exc.read().decode()
                break
            except (TimeoutError, urllib.error.URLError) as exc:
                timed_out = isinstance(exc, TimeoutError) or isinstance(exc.reason, TimeoutError)
                if not timed_out or attempt == tries:
                    raise
                say(f"{method} {path}: no answer in {self.TIMEOUT_S} s (try {attempt} of {tries}), asking again")
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def ok(self, method: str, path: str, body: Any = None) -> Any:
        status, answer = self.call(method, path, body)
        if status not in (200, 201):
            raise E2EError(f"{method} {path} answered {status}: {str(answer)[:500]}")
        return answer

    def login(self, password: str) -> None:
        self.token = self.ok("POST", "/auth/token", {"username": "admin", "password": password})["access_token"]

    def has_dag(self, dag_id: str) -> bool:
        return self.call("GET", f"/api/v2/dags/{dag_id}")[0] == 200

    def run_path(self, dag_id: str, run_id: str) -> str:
        return f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}"

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None) -> str:
        return str(
            self.ok("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf or {}})["dag_run_id"]
        )

    def wait_run(self, dag_id: str, run_id: str, timeout: float) -> str:
        def finished() -> str | None:
            state = self.ok("GET", self.run_path(dag_id, run_id))["state"]
            return state if state in ("success", "failed") else None

        return wait_for(f"run {run_id} of {dag_id}", finished, timeout, 2)

    def task_state(self, dag_id: str, run_id: str, task_id: str) -> str | None:
        return self.ok("GET", f"{self.run_path(dag_id, run_id)}/taskInstances/{task_id}").get("state")

    def xcom(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> Any:
        path = f"{self.run_path(dag_id, run_id)}/taskInstances/{task_id}/xcomEntries/return_value"
        value = self.ok("GET", f"{path}?map_index={map_index}")["value"]
        return json.loads(value) if isinstance(value, str) else value

    def mapped_results(self, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
        """Each successful mapped task's XCom, by its label (a lane's: a list, one result per partition)."""
        listed = self.ok("GET", f"{self.run_path(dag_id, run_id)}/taskInstances/{task_id}/listMapped")
        return {
            ti["rendered_map_index"]: self.xcom(dag_id, run_id, task_id, ti["map_index"])
            for ti in listed["task_instances"]
            if ti["state"] == "success"
        }


def one_partition_lanes(lanes: dict[str, Any]) -> dict[str, Any]:
    """A run whose partitions fit the lane bound: each lane's one partition result, by its label."""
    if not all(isinstance(lane, list) and len(lane) == 1 for lane in lanes.values()):
        raise E2EError(f"expected one partition per lane: {lanes}")
    return {label: lane[0] for label, lane in lanes.items()}


def write_config(work: Path) -> Path:
    import yaml

    from tiering_core.kafka.demo_log_dir import build_demo_log_dir

    build_demo_log_dir(work / "kafka-logs")
    config = work / "tiering.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "log_dirs": [str(work / "kafka-logs")],
                "metadata": {"url": f"sqlite:///{work / 'metadata.db'}"},
                # No endpoint here: it comes from the Airflow connection aws_default.
                "remote": {"backend": "s3", "bucket": BUCKET, "prefix": "e2e/", "region": "us-east-1"},
                "topics": {"*": {"retention.ms": -1}, "orders": {}, "payments": {}, "clicks": {}},
            }
        )
    )
    return config


def add_partition_with_a_closed_segment(log_dir: Path, topic: str, partition: int) -> None:
    """The broker gains a partition of ``topic`` (same topic id) whose first segment is closed."""
    from tiering_core.kafka.checkpoints import PARTITION_METADATA, read_partition_metadata
    from tiering_core.kafka.log_writer import PartitionWriter
    from tiering_core.kafka.topic import TopicPartition

    topic_id = read_partition_metadata(log_dir / f"{topic}-0" / PARTITION_METADATA)
    writer = PartitionWriter(log_dir, TopicPartition(topic, partition), topic_id=topic_id)
    writer.append_records(20, value_size=100)
    writer.roll()
    writer.append_records(2)
    writer.set_high_watermark()


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def find_chromium() -> str | None:
    """``$TIERING_CHROMIUM`` (a path or a command), else the first Chromium on ``PATH``."""
    override = os.environ.get(CHROMIUM_ENV, "").strip()
    if override:
        found = shutil.which(override)
        if found is None:
            raise E2EError(f"{CHROMIUM_ENV}={override!r} is not an executable")
        return found
    return next((path for name in CHROMIUM_NAMES if (path := shutil.which(name))), None)


class DevTools:
    """Chromium's DevTools protocol over its websocket: only the calls a logged-in screenshot needs."""

    def __init__(self, ws_url: str) -> None:
        from websockets.sync.client import connect

        self.ws = connect(ws_url, max_size=None, proxy=None, open_timeout=30)
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        self.next_id += 1
        message: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        self.ws.send(json.dumps(message))
        while True:
            reply = json.loads(self.ws.recv(timeout=60))
            if reply.get("id") != self.next_id:
                self.events.append(reply)
                continue
            if "error" in reply:
                raise E2EError(f"Chromium: {method} failed: {reply['error']}")
            return dict(reply.get("result") or {})

    def wait_event(self, method: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            for i, event in enumerate(self.events):
                if event.get("method") == method:
                    return dict(self.events.pop(i).get("params") or {})
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise E2EError(f"Chromium: no {method} within {timeout:.0f} s")
            self.events.append(json.loads(self.ws.recv(timeout=remaining)))

    def close(self) -> None:
        self.ws.close()


@dataclass(frozen=True)
class RenderedPage:
    """What a logged-in browser got for the page: HTTP status, DOM and screenshot."""

    status: int
    dom: str
    png: bytes


@dataclass(frozen=True)
class FramedPage:
    """The Tiering page inside Airflow's UI at one window size, as checked in its frame."""

    size: tuple[int, int]
    topics: list[str]
    scroll_width: int
    inner_width: int
    chart_pixels: list[int]
    chart_points: list[int]
    png: bytes


def stop_browser(browser: subprocess.Popen[bytes]) -> None:
    """Stop Chromium and every helper process it started (its own process group), and wait until
    they are gone: a renderer still writing would keep the profile directory from being removed."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(browser.pid, sig)
        except ProcessLookupError:
            break
        try:
            browser.wait(timeout=20)
        except subprocess.TimeoutExpired:
            continue
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                os.killpg(browser.pid, 0)  # helpers of the group still alive
            except ProcessLookupError:
                return
            time.sleep(0.1)


#: In the Tiering page's document: opens the topics named (as a user clicking their summary row).
OPEN_TOPICS_JS = """(function (topics) {
  document.querySelectorAll("details.topic").forEach(function (d) {
    if (topics.indexOf(d.getAttribute("data-topic")) >= 0) d.open = true;
  });
  return true;
})(%s)"""
#: In the Tiering page's document: every open topic has its partition table and its charts drawn.
LOADED_JS = """(function () {
  var open = Array.prototype.slice.call(document.querySelectorAll("details.topic[open]"));
  return open.length > 0 && open.every(function (d) {
    return d.querySelector("table.partitions") && d.querySelectorAll("figure.chart canvas").length === 2;
  });
})()"""
#: In the Tiering page's document: what the checks need (topics, overflow, chart pixels drawn).
MEASURE_JS = """(function () {
  var canvases = Array.prototype.slice.call(document.querySelectorAll("details.topic[open] figure.chart canvas"));
  return {
    topics: Array.prototype.map.call(document.querySelectorAll("details.topic > summary.row"), function (s) {
      return s.parentElement.getAttribute("data-topic");
    }),
    scrollWidth: document.documentElement.scrollWidth,
    innerWidth: window.innerWidth,
    chartPixels: canvases.map(function (c) {
      var data = c.getContext("2d").getImageData(0, 0, c.width, c.height).data, n = 0;
      for (var i = 3; i < data.length; i += 4) if (data[i] !== 0) n++;
      return n;
    }),
    chartPoints: Array.prototype.map.call(document.querySelectorAll("details.topic[open] .uplot"), function (u) {
      return Number(u.getAttribute("data-points"));
    })
  };
})()"""


class Browser:
    """Headless Chromium over its DevTools protocol, with ``token`` in Airflow's JWT cookie as a
    logged-in user's browser holds it: one tab, opened at a window size, evaluated in, shot."""

    def __init__(self, chromium: str, token: str) -> None:
        self.chromium, self.token = chromium, token

    def __enter__(self) -> Browser:
        self._profile = tempfile.TemporaryDirectory(prefix="e2e-chromium-")
        self.process = subprocess.Popen(
            [
                self.chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--hide-scrollbars",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                f"--user-data-dir={self._profile.name}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            active = Path(self._profile.name) / "DevToolsActivePort"  # "<port>\n<browser websocket path>"
            port, path = wait_for("Chromium's DevTools port", lambda: active.read_text().split(), 60, 0.2)[:2]
            self.tools = DevTools(f"ws://127.0.0.1:{port}{path}")
            target = self.tools.call("Target.createTarget", {"url": "about:blank"})["targetId"]
            self.session = self.tools.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            self.call("Network.enable")
            self.call("Page.enable")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if hasattr(self, "tools"):
                self.tools.close()
        finally:
            stop_browser(self.process)
            self._profile.cleanup()

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.tools.call(method, params, session=self.session)

    def open(self, url: str, size: tuple[int, int], mobile: bool = False) -> int:
        """Open ``url`` logged in at ``size`` (CSS pixels); the document's HTTP status, after load."""
        origin = urllib.parse.urlsplit(url)
        self.call(
            "Network.setCookie",
            {"name": JWT_COOKIE, "value": self.token, "url": f"{origin.scheme}://{origin.netloc}/", "httpOnly": True},
        )
        width, height = size
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile},
        )
        self.tools.events.clear()
        navigated = self.call("Page.navigate", {"url": url})
        if navigated.get("errorText"):
            raise E2EError(f"Chromium could not open {url}: {navigated['errorText']}")
        status = 0
        while not status:
            event = self.tools.wait_event("Network.responseReceived", 60)
            if event.get("type") == "Document":
                status = int(event["response"]["status"])
        self.tools.wait_event("Page.loadEventFired", 60)
        return status

    def frame_context(self, path_suffix: str, timeout: float = 60) -> int:
        """An execution context in the frame whose URL ends with ``path_suffix`` (waits for it)."""

        def frame() -> str | None:
            pending = [self.call("Page.getFrameTree")["frameTree"]]
            while pending:
                node = pending.pop()
                if urllib.parse.urlsplit(node["frame"]["url"]).path.endswith(path_suffix) and node["frame"].get(
                    "parentId"
                ):
                    return str(node["frame"]["id"])
                pending.extend(node.get("childFrames", []))
            return None

        frame_id = wait_for(f"a frame showing {path_suffix}", frame, timeout, 0.5)
        world = self.call("Page.createIsolatedWorld", {"frameId": frame_id, "worldName": "e2e-checks"})
        return int(world["executionContextId"])

    def evaluate(self, expression: str, context: int | None = None) -> Any:
        params: dict[str, Any] = {"expression": expression, "returnByValue": True, "awaitPromise": True}
        if context is not None:
            params["contextId"] = context
        answer = self.call("Runtime.evaluate", params)
        if "exceptionDetails" in answer:
            raise E2EError(f"Chromium: {expression[:80]!r} threw {answer['exceptionDetails']}")
        return answer["result"].get("value")

    def wait_true(self, what: str, expression: str, context: int | None = None, timeout: float = 60) -> None:
        wait_for(what, lambda: self.evaluate(expression, context) is True, timeout, 0.3)

    def screenshot(self, full_page: bool = False) -> bytes:
        shot = self.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": full_page})
        return base64.b64decode(shot["data"])


def render_logged_in(
    browser: Browser, url: str, topics: list[str], size: tuple[int, int] = (1760, 480)
) -> RenderedPage:
    """``url`` (the Tiering page on its own) with ``topics`` opened: status, DOM and a full-page PNG."""
    status = browser.open(url, size)
    if status == 200:
        browser.evaluate(OPEN_TOPICS_JS % json.dumps(topics))
        browser.wait_true("the opened topics' partitions and charts", LOADED_JS)
    dom = browser.evaluate("document.documentElement.outerHTML")
    return RenderedPage(status, str(dom), browser.screenshot(full_page=True))


def render_in_airflow(
    browser: Browser, base: str, topics: list[str], size: tuple[int, int], follow_link: bool = False
) -> tuple[FramedPage, str | None]:
    """The Tiering page from Airflow's navigation (the plugin's external view, in Airflow's iframe)
    at ``size``, ``topics`` opened; measured in the page's frame, shot as the window shows it; with
    ``follow_link``, then a last task's log link followed (the path it opened)."""
    status = browser.open(f"{base}/plugin/tiering", size, mobile=size[0] < 600)
    if status != 200:
        raise E2EError(f"Airflow's UI answered HTTP {status} for /plugin/tiering")
    context = browser.frame_context("/tiering/")
    browser.wait_true(
        "the Tiering page in Airflow's frame", "document.querySelector('details.topic') !== null", context
    )
    browser.evaluate(OPEN_TOPICS_JS % json.dumps(topics), context)
    browser.wait_true("the opened topics' partitions and charts in Airflow's frame", LOADED_JS, context)

    def drawn() -> dict[str, Any] | None:
        m: dict[str, Any] = browser.evaluate(MEASURE_JS, context)
        return m if m["chartPixels"] and all(m["chartPixels"]) else None

    measure = wait_for("the charts to be drawn", drawn, 30, 0.3)
    page = FramedPage(
        size,
        list(measure["topics"]),
        int(measure["scrollWidth"]),
        int(measure["innerWidth"]),
        [int(n) for n in measure["chartPixels"]],
        [int(n) for n in measure["chartPoints"]],
        browser.screenshot(),
    )
    return page, follow_task_log_link(browser, context) if follow_link else None


#: In the Tiering page's document: click the first last-task link, answer the path it leads to.
CLICK_TASK_LOG_JS = """(function () {
  var a = document.querySelector("details.topic[open] table.partitions a.airflow[href*='/runs/']");
  if (!a) return null;
  var path = new URL(a.getAttribute("href"), window.location.href).pathname;
  a.click();
  return path;
})()"""


def follow_task_log_link(browser: Browser, context: int) -> str:
    """Click a partition's link to its last task's log in the page's frame; the path Airflow's own
    window then shows (its router took the link: the page's iframe is sandboxed)."""
    path = browser.evaluate(CLICK_TASK_LOG_JS, context)
    if not path:
        raise E2EError("no partition links to its last task's log")
    wait_for(
        f"Airflow's window to show {path}",
        lambda: browser.evaluate("window.location.pathname") == path,
        30,
        0.3,
    )
    # Airflow's task instance page (no Tiering frame left) showing the copy lane's line per partition.
    shown = (
        "document.querySelector('iframe') === null && /\\d+ segment\\(s\\), [^;]* copied/.test(document.body.innerText)"
    )
    browser.wait_true("Airflow's page of the task with its log", shown, timeout=60)
    return str(path)


#: The window sizes the page is shot at inside Airflow's UI: a laptop and a phone.
FRAMED_SIZES: tuple[tuple[int, int], ...] = ((1280, 800), (390, 844))


def check_framed(page: FramedPage, topics: list[str]) -> None:
    """Every topic's summary row present, no horizontal overflow on a narrow screen, charts drawn."""
    width, height = page.size
    missing = sorted(set(topics) - set(page.topics))
    if missing:
        raise E2EError(f"at {width}x{height} the page in Airflow's UI has no summary row for {missing}")
    if page.scroll_width > page.inner_width:
        raise E2EError(
            f"at {width}x{height} the page overflows horizontally: scrollWidth {page.scroll_width} > "
            f"innerWidth {page.inner_width}"
        )
    if len(page.chart_pixels) < 2 or not all(n > 0 for n in page.chart_pixels):
        raise E2EError(f"at {width}x{height} a chart canvas is blank: {page.chart_pixels} pixels drawn")
    if not page.chart_points or page.chart_points[0] < 1:
        raise E2EError(f"at {width}x{height} the last 24 hours' chart has no point: {page.chart_points}")
    if not page.png.startswith(b"\x89PNG\r\n\x1a\n"):
        raise E2EError("Chromium returned no PNG")


def screenshot(api: Api, labels: list[str], artifacts: Path, topics: list[str] | None = None) -> None:
    """The Tiering page as a logged-in user sees it: on its own, checked to list ``labels`` (its
    topics opened), saved as PNG and HTML; then inside Airflow's UI at each of ``FRAMED_SIZES``,
    checked (a summary row per topic of ``topics``, no horizontal overflow, charts drawn) and saved."""
    chromium = find_chromium()
    if chromium is None:
        names = ", ".join(CHROMIUM_NAMES)
        if in_ci():
            raise E2EError(f"no Chromium ({names} or ${CHROMIUM_ENV}); CI requires the Tiering page screenshot")
        say(f"WARNING: no Chromium ({names} or ${CHROMIUM_ENV}); no screenshot taken")
        return
    assert api.token is not None
    topics = topics or sorted({label.rsplit("-", 1)[0] for label in labels})
    opened = sorted({label.rsplit("-", 1)[0] for label in labels})
    with Browser(chromium, api.token) as browser:
        page = render_logged_in(browser, f"{api.base}/tiering/", opened)
        if page.status != 200:
            raise E2EError(f"the logged-in browser got HTTP {page.status} for /tiering/: {page.dom[:500]}")
        missing = [label for label in labels if f"<td>{label}</td>" not in page.dom]
        if missing:
            raise E2EError(f"the rendered Tiering page does not list {missing}: {page.dom[:2000]}")
        if not page.png.startswith(b"\x89PNG\r\n\x1a\n"):
            raise E2EError("Chromium returned no PNG")
        artifacts.mkdir(parents=True, exist_ok=True)
        shot, dom = artifacts / "tiering-page.png", artifacts / "tiering-page.html"
        shot.write_bytes(page.png)
        dom.write_text(page.dom)
        say(f"screenshot saved to {shot} ({len(page.png)} bytes, logged in; the page lists {', '.join(labels)})")
        for size in FRAMED_SIZES:
            framed, followed = render_in_airflow(browser, api.base, opened, size, follow_link=size == FRAMED_SIZES[0])
            check_framed(framed, topics)
            width, height = size
            path = artifacts / f"tiering-in-airflow-{width}x{height}.png"
            path.write_bytes(framed.png)
            say(
                f"in Airflow's UI at {width}x{height}: summary rows {', '.join(framed.topics)}; "
                f"scrollWidth {framed.scroll_width} <= innerWidth {framed.inner_width}; chart pixels drawn "
                f"{framed.chart_pixels}, points {framed.chart_points}; saved to {path}"
            )
            if followed:
                log_shot = artifacts / f"tiering-last-task-log-{width}x{height}.png"
                log_shot.write_bytes(browser.screenshot())
                say(
                    f"in Airflow's UI a partition's last task log link opened {followed} in Airflow's window; "
                    f"saved to {log_shot}"
                )


def airflow_env(work: Path, port: int, endpoint: str, config: Path) -> dict[str, str]:
    from tiering_core.kafka.log_writer import DEMO_NODE_ID

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("AIRFLOW")}
    venv_bin = str(Path(sys.executable).parent)
    return {
        **env,
        "PATH": f"{venv_bin}:{env.get('PATH', '')}",
        # This checkout's packages, in every Airflow process, whatever the venv has installed.
        "PYTHONPATH": str(ROOT),
        "AIRFLOW_HOME": str(work / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        # Only the runs triggered here: scheduled runs would race them for the same segments.
        "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
        "AIRFLOW_CONN_AWS_DEFAULT": json.dumps(
            {
                "conn_type": "aws",
                "login": "e2e-access-key",
                "password": "e2e-secret-key",
                "extra": {"endpoint_url": endpoint, "region_name": "us-east-1"},
            }
        ),
        "TIERING_CONFIG": str(config),
        "TIERING_SENSOR_POKE_SECONDS": "2",
        # The demo broker's id: runs record what they observe, which the Tiering page shows.
        "TIERING_BROKER_ID": str(DEMO_NODE_ID),
    }


def start_standalone(work: Path, env: dict[str, str], upload_slots: int) -> subprocess.Popen[bytes]:
    """Airflow's database migrated, the ``tiering_uploads`` pool sized, then ``airflow standalone``
    in a process group of its own (``stop`` ends it as a whole, never the caller's group), its
    output in ``<work>/standalone.log``."""
    airflow = str(Path(sys.executable).parent / "airflow")
    subprocess.run([airflow, "db", "migrate"], env=env, check=True, capture_output=True, timeout=600)
    subprocess.run(
        [airflow, "pools", "set", "tiering_uploads", str(upload_slots), "concurrent uploads"],
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    with (work / "standalone.log").open("w") as log:
        return subprocess.Popen(
            [airflow, "standalone"], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )


def run(work: Path, artifacts: Path, timeout: float) -> None:
    import boto3

    from tiering_core.cli.demo import local_s3_endpoint

    config = write_config(work)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with local_s3_endpoint() as endpoint:
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=BUCKET)
        env = airflow_env(work, port, endpoint, config)
        proc = start_standalone(work, env, upload_slots=4)
        say(f"airflow standalone (pid {proc.pid}, process group {proc.pid}) on {base}, log {work / 'standalone.log'}")
        try:
            exercise(Api(base), work, env, artifacts, timeout)
        finally:
            stop(proc)


def exercise(api: Api, work: Path, env: dict[str, str], artifacts: Path, timeout: float) -> None:
    started = time.monotonic()
    wait_for("the API server", lambda: api.call("GET", "/api/v2/monitor/health")[0] == 200, 150)
    passwords = Path(env["AIRFLOW_HOME"]) / "simple_auth_manager_passwords.json.generated"
    api.login(wait_for("the admin password", lambda: json.loads(passwords.read_text()).get("admin"), 30))
    wait_for(f"{DAG_ID} to be parsed", lambda: api.call("GET", f"/api/v2/dags/{DAG_ID}")[0] == 200, 90)
    api.ok("PATCH", f"/api/v2/dags/{DAG_ID}", {"is_paused": False})
    say(f"API up, token issued, {DAG_ID} parsed and unpaused after {time.monotonic() - started:.0f} s")

    first = api.trigger(DAG_ID)
    state = api.wait_run(DAG_ID, first, timeout)
    say(f"run {first} finished: {state}")
    if state != "success":
        raise E2EError(f"run {first} of {DAG_ID} ended {state}")
    results = one_partition_lanes(api.mapped_results(DAG_ID, first, "copy"))
    say("copied per partition: " + json.dumps({k: v["segments_copied"] for k, v in sorted(results.items())}))
    if sorted(results) != ["orders-0", "orders-1", "orders-2"] or not all(
        r["segments_copied"] > 0 and f"{r['topic']}-{r['partition']}" == label for label, r in results.items()
    ):
        raise E2EError(f"unexpected per-partition results: {results}")

    second = api.trigger(DAG_ID)
    wait_for(
        "the sensor to defer", lambda: api.task_state(DAG_ID, second, "wait_for_eligible_segment") == "deferred", 90
    )
    say(f"run {second}: nothing eligible, the sensor is deferred to the triggerer")
    add_partition_with_a_closed_segment(work / "kafka-logs", "orders", 3)
    state = api.wait_run(DAG_ID, second, timeout)
    fired = api.xcom(DAG_ID, second, "wait_for_eligible_segment")
    late = one_partition_lanes(api.mapped_results(DAG_ID, second, "copy"))
    say(f"deferred run {second} finished: {state}; trigger fired for partitions {fired}")
    if state != "success" or fired != [3] or late.get("orders-3", {}).get("segments_copied") != 1:
        raise E2EError(f"the deferred run did not copy the new segment: {state} {fired} {late}")

    status, answer = api.call(
        "POST",
        f"/api/v2/dags/{REMOVAL_DAG_ID}/dagRuns",
        {"logical_date": None, "conf": {"topic": "bad topic!", "partitions": [-1], "confirm": "bad topic!"}},
    )
    say(f"invalid removal params refused with HTTP {status}")
    if status != 400:
        raise E2EError(f"invalid removal params were not refused: {status} {answer}")

    more = {}
    for dag_id in MORE_DAG_IDS:
        wait_for(f"{dag_id} to be parsed", partial(api.has_dag, dag_id), 90)
        api.ok("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
        more[dag_id] = api.trigger(dag_id)
    for dag_id, run_id in more.items():
        state = api.wait_run(dag_id, run_id, timeout)
        say(f"run {run_id} of {dag_id} finished: {state}")
        if state != "success":
            raise E2EError(f"run {run_id} of {dag_id} ended {state}")

    anonymous = Api(api.base)
    refused = {path: anonymous.call("GET", path)[0] for path in ("/tiering/", "/tiering/api/partitions")}
    say("anonymous requests to the Tiering page refused: " + ", ".join(f"{p} {s}" for p, s in refused.items()))
    if any(status not in (401, 403) for status in refused.values()):
        raise E2EError(f"the Tiering page answered anonymous requests: {refused}")
    status, partitions = api.call("GET", "/tiering/api/partitions")
    if status != 200:
        raise E2EError(f"/tiering/api/partitions answered {status} with a token: {partitions}")
    remote = {f"{p['topic']}-{p['partition']}": p["remote_segments"] for p in partitions}
    say("Tiering page: remote segments per partition: " + json.dumps(remote, sort_keys=True))
    expected = {label: r["segments_copied"] for label, r in results.items()} | {"orders-3": 1}
    if {k: remote.get(k) for k in expected} != expected:
        raise E2EError(f"the Tiering page disagrees with the runs: {remote} vs {expected}")
    topics = sorted({p["topic"] for p in partitions})
    say("Tiering page: topics " + ", ".join(topics))
    if topics != ["orders", "payments"]:
        raise E2EError(f"the Tiering page does not show the topics copied: {topics}")
    screenshot(api, sorted(expected), artifacts, topics)
    say(f"OK in {time.monotonic() - started:.0f} s")


def signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop standalone's whole process group, and any process under it that left the group
    (some components start sessions of their own): SIGTERM, then SIGKILL for what remains."""
    import psutil

    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the cleanup short
    try:
        family = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        family = []
    signal_group(proc.pid, signal.SIGTERM)
    for member in family:
        try:
            member.terminate()
        except psutil.NoSuchProcess:
            pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass
    _, alive = psutil.wait_procs(family, timeout=20)
    signal_group(proc.pid, signal.SIGKILL)  # anything in the group that ignored SIGTERM
    for member in alive:
        try:
            member.kill()
        except psutil.NoSuchProcess:
            pass
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    psutil.wait_procs(alive, timeout=10)
    say(f"airflow stopped ({len(family)} processes under standalone, {len(alive)} needed SIGKILL)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--artifacts",
        type=Path,
        default=DEFAULT_ARTIFACTS,
        help="where the screenshots go (default: test-artifacts/, ignored by git)",
    )
    parser.add_argument("--timeout", type=float, default=120, help="seconds each DAG run may take")
    parser.add_argument("--keep", action="store_true", help="keep the work dir (logs, AIRFLOW_HOME)")
    return parser.parse_args(argv)


def main() -> int:
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # the local S3 endpoint's request log
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a polite kill still stops Airflow (finally)
    args = parse_args()
    work = Path(tempfile.mkdtemp(prefix="tiering-e2e-"))
    try:
        run(work, args.artifacts, args.timeout)
        return 0
    except (E2EError, subprocess.CalledProcessError) as exc:
        say(f"FAILED: {exc}")
        log = work / "standalone.log"
        if log.exists():
            print(log.read_text()[-6000:], file=sys.stderr)
        return 1
    finally:
        if args.keep:
            say(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
