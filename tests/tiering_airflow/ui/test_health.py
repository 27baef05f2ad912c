"""The Tiering page's first screen, as Chromium renders it at 1280x800 from a store with history:
real copy DAG runs spread over hours (the store's recorded history moved back between runs, as if
each run had been an hour apart), then a run whose lane failed on a tiering gap, and a topic whose
local retention is already past. The first screen names the failing run with its error and a log
link inside the viewport, the partitions at risk, the oldest uncopied segment and the throughput;
the charts draw every recorded bucket, not one dot; an opened topic's partition table fits the
window with every link on screen; a broker's view and the Grafana link are there.

Its screenshots are the ones ``docs/images`` holds: ``TIERING_PAGE_SCREENSHOTS=docs/images`` writes
them there on purpose; otherwise they go to the test's temporary directory, so a run leaves the
checkout clean. Chromium comes from ``scripts/bootstrap.sh`` (the test command installs it when
run as root); without it the test is skipped, except under CI, where that fails.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from tests.airflow_support import ROOT, load_e2e_script
from tests.dags.test_tiering_dags import DAGS, dagbag, partitions_with_segments
from tests.engine_support import TieringEnv, write_segments
from tests.tiering_airflow.ui.test_app import BROKER, token_for
from tiering_airflow.ui.health import broker_filter, grafana_link
from tiering_core.metadata.observations import POINTS
from tiering_core.metadata.queries import HI
from tiering_core.runs.copy_plan import plan_copies

SCREENSHOTS_ENV = "TIERING_PAGE_SCREENSHOTS"
GRAFANA = "https://grafana.example.com/d/kafka-tiering"
HOUR_MS = 3_600_000
#: Copy runs an hour apart before the failing one.
ROUNDS = 4
SIZE = (1280, 800)


def screenshots_dir(tmp_path: Path) -> Path:
    """Where the screenshots go: ``$TIERING_PAGE_SCREENSHOTS`` (relative to the checkout), else
    the test's own directory."""
    chosen = os.environ.get(SCREENSHOTS_ENV, "").strip()
    target = (ROOT / chosen) if chosen else tmp_path / "screenshots"
    target.mkdir(parents=True, exist_ok=True)
    return target


def chromium() -> str:
    e2e = load_e2e_script()
    found = e2e.find_chromium()
    if found is None:
        assert not e2e.in_ci(), "under CI a missing Chromium must fail the test"
        pytest.skip("no Chromium installed (apt-get install -y chromium, or set TIERING_CHROMIUM)")
    return str(found)


def an_hour_earlier(tiering: TieringEnv) -> None:
    """Move the store's recorded history (state changes, chart points) back by an hour, as if
    everything so far had happened an hour before the next run. The latest observations stay:
    they are the brokers' word now."""
    with tiering.context() as ctx, ctx.metadata.engine.begin() as conn:
        conn.execute(update(HI).values(at_ms=HI.c.at_ms - HOUR_MS))
        conn.execute(
            update(POINTS).values(bucket_ms=POINTS.c.bucket_ms - HOUR_MS, observed_ms=POINTS.c.observed_ms - HOUR_MS)
        )


@pytest.fixture()
def history(tiering: TieringEnv) -> dict[str, Any]:
    """Copy runs of ``orders`` an hour apart, then one failed by a gap on orders-1; ``clicks``
    observed with its local retention already past (at risk). The DAG's run of the failure."""
    tiering.sections["metrics"] = {"grafana_url": GRAFANA}
    tiering.write_config(orders={}, clicks={"local.retention.ms": 60_000})
    writers = partitions_with_segments(tiering, "orders", 3, 1)
    dag = dagbag(DAGS / "tiering_dags.py").dags["tiering_copy__orders"]
    for _ in range(ROUNDS):
        assert dag.test().state == "success"
        an_hour_earlier(tiering)
        for w in writers:
            write_segments(w, 1)
            w.set_high_watermark()
    gap = writers[1]
    gap.delete_oldest_segments(ROUNDS + 1)  # through the last closed segment, never copied: a gap
    failed = dag.test()
    assert failed.state == "failed"
    clicks = tiering.writer("clicks", 0)
    write_segments(clicks, 2)
    clicks.set_high_watermark()
    with tiering.context() as ctx:
        plan_copies(ctx, [clicks.tp], broker_id=BROKER)  # the sensor's planning records the risk
    return {"run_id": failed.run_id, "dag_id": dag.dag_id}


@pytest.fixture(scope="module")
def auth_manager() -> Any:
    """Airflow's configured auth manager, initialised as the API server does."""
    from airflow.api_fastapi.app import init_auth_manager

    return init_auth_manager()


@pytest.fixture()
def served(tiering: TieringEnv) -> Iterator[str]:
    """The page's app under ``/tiering/`` (as Airflow mounts it) on a loopback port; its URL."""
    import uvicorn
    from fastapi import FastAPI

    from tiering_airflow.ui.app import create_app

    root = FastAPI()
    root.mount("/tiering", create_app(str(tiering.config_path)))
    server = uvicorn.Server(uvicorn.Config(root, host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    e2e = load_e2e_script()
    e2e.wait_for("the page's server", lambda: server.started, 60, 0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/tiering/"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


#: What the first screen shows, read in the page: texts, links and where they are drawn.
FIRST_SCREEN_JS = """(() => {
  const box = (el) => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const health = document.querySelector("section.health");
  const tile = (t) => {
    const el = health.querySelector(`.tile[data-label="${t}"] .value`);
    return el && el.textContent;
  };
  const failures = Array.from(health.querySelectorAll("ul.failures li"));
  return {
    verdict: health.querySelector("h2.verdict").textContent,
    tiles: {failing: tile("Failing runs"), risk: tile("At risk"), oldest: tile("Oldest uncopied"),
            throughput: tile("Throughput"), gaps: tile("Tiering gaps")},
    failures: failures.map((li) => li.textContent),
    logLinks: failures.map((li) => ({href: li.querySelector("a.airflow").getAttribute("href"),
                                       box: box(li.querySelector("a.airflow"))})),
    risks: Array.from(health.querySelectorAll("ul.risks li")).map((li) => [li.textContent, box(li)]),
    grafana: Array.from(document.querySelectorAll(".nav a.grafana")).map((a) => a.getAttribute("href")),
    brokers: Array.from(document.querySelectorAll("nav.brokers a")).map((a) => a.textContent),
    copyPoints: Number(health.querySelector("figure.copy-history .uplot").getAttribute("data-points")),
    pageWidth: document.documentElement.scrollWidth,
  };
})()"""

#: The opened topic's table and charts: widths, every link's box, the charts' points.
TABLE_JS = """(() => {
  const d = document.querySelector('details.topic[data-topic="orders"]');
  const table = d.querySelector("table.partitions");
  const box = (el) => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  return {
    headers: Array.from(table.querySelectorAll("th")).map((th) => th.textContent),
    tableRight: box(table)[2],
    wrapScroll: [d.querySelector(".partitions-wrap").scrollWidth, d.querySelector(".partitions-wrap").clientWidth],
    links: Array.from(table.querySelectorAll("a.airflow")).map((a) => [a.textContent, box(a)]),
    grafana: Array.from(d.querySelectorAll(".topic-links a.grafana")).map((a) => a.getAttribute("href")),
    points: Array.from(d.querySelectorAll(".uplot")).map((u) => Number(u.getAttribute("data-points"))),
    pageWidth: document.documentElement.scrollWidth,
  };
})()"""

LOADED_JS = """(() => {
  const d = document.querySelector('details.topic[data-topic="orders"]');
  return !!(d && d.querySelector("table.partitions") && d.querySelectorAll(".uplot[data-points]").length === 2);
})()"""


def ours(failures: list[str], history: dict[str, Any]) -> list[str]:
    """The failing runs listed of the history's DAG run."""
    return [f for f in failures if history["dag_id"] in f]


def test_the_first_screen_at_1280x800_shows_the_failing_run_and_the_partitions_at_risk(
    history: dict[str, Any], served: str, auth_manager: Any, tmp_path: Path
) -> None:
    e2e = load_e2e_script()
    shots = screenshots_dir(tmp_path)
    with e2e.Browser(chromium(), token_for(auth_manager, "viewer")) as browser:
        assert browser.open(served, SIZE) == 200
        browser.wait_true("the copy history chart", "!!document.querySelector('figure.copy-history .uplot')")
        first = browser.evaluate(FIRST_SCREEN_JS)
        (shots / "tiering-health-1280x800.png").write_bytes(browser.screenshot())

        # (The session's Airflow database may hold other tests' failed runs: ours is the one named.)
        assert first["verdict"].startswith("Not healthy") and first["tiles"]["failing"] == str(len(first["failures"]))
        (failure,) = ours(first["failures"], history)
        assert "orders-1: " in failure and "gap" in failure.lower()
        (link,) = [link for link in first["logLinks"] if f"/dags/{history['dag_id']}/" in link["href"]]
        assert f"/dags/{history['dag_id']}/runs/" in link["href"] and "/tasks/copy" in link["href"]
        left, top, right, bottom = link["box"]
        assert 0 <= left and right <= SIZE[0] and 0 <= top and bottom <= SIZE[1]  # on the first screen
        ((risk, risk_box),) = first["risks"]
        assert risk.startswith("clicks-0 on broker 1: past due") and risk_box[3] <= SIZE[1]
        assert first["tiles"]["risk"] == "1 replica(s)" and first["tiles"]["gaps"] == "1 partition(s)"
        assert first["tiles"]["oldest"] not in ("none", "") and first["tiles"]["throughput"].endswith("/s")
        assert first["copyPoints"] >= ROUNDS  # one bar per run's hour, not one dot
        assert first["grafana"] == [GRAFANA] and first["brokers"] == ["all brokers", f"broker {BROKER}"]
        assert first["pageWidth"] <= SIZE[0]

        browser.evaluate("document.querySelector('details.topic[data-topic=\"orders\"]').open = true")
        browser.wait_true("the orders topic's partitions and charts", LOADED_JS)
        browser.evaluate("document.querySelector('details.topic[data-topic=\"orders\"]').scrollIntoView()")
        table = browser.evaluate(TABLE_JS)
        (shots / "tiering-partitions-1280x800.png").write_bytes(browser.screenshot())
        assert table["headers"][:2] == ["Partition", "Links"]
        assert table["tableRight"] <= SIZE[0] and table["wrapScroll"][0] <= table["wrapScroll"][1]
        assert table["pageWidth"] <= SIZE[0]
        texts = [text for text, _ in table["links"]]
        assert texts.count("copy") == 3 and texts.count("copy log") == 3
        assert all(0 <= b[0] and b[2] <= SIZE[0] for _, b in table["links"])
        assert all(points >= ROUNDS for points in table["points"])  # the 24h and 7d charts: history
        assert table["grafana"] == [f"{GRAFANA}?var-topic=orders"]

        assert browser.open(served, (390, 844), mobile=True) == 200
        browser.wait_true("the copy history chart", "!!document.querySelector('figure.copy-history .uplot')")
        phone = browser.evaluate(FIRST_SCREEN_JS)
        (shots / "tiering-health-390x844.png").write_bytes(browser.screenshot())
        assert len(ours(phone["failures"], history)) == len(phone["risks"]) == 1 and phone["pageWidth"] <= 390

        # Another broker's view: its replicas only, so clicks-0's risk (on broker 1) is not there.
        assert browser.open(served + f"?broker={BROKER + 1}", SIZE) == 200
        browser.wait_true("the copy history chart", "!!document.querySelector('figure.copy-history .uplot')")
        other = browser.evaluate(FIRST_SCREEN_JS)
        assert other["risks"] == [] and other["verdict"].endswith(f"(broker {BROKER + 1})")
        assert other["tiles"]["risk"] == "0 replica(s)" and len(ours(other["failures"], history)) == 1

        # A topic's view: its failing runs, risks and gaps only.
        for topic, failing, risks, gaps in (("orders", 1, 0, "1 partition(s)"), ("clicks", 0, 1, "0 partition(s)")):
            assert browser.open(served + f"?topic={topic}", SIZE) == 200
            browser.wait_true("the copy history chart", "!!document.querySelector('figure.copy-history .uplot')")
            scoped = browser.evaluate(FIRST_SCREEN_JS)
            assert scoped["verdict"].endswith(f"(topic {topic})"), scoped["verdict"]
            found = (len(ours(scoped["failures"], history)), len(scoped["risks"]), scoped["tiles"]["gaps"])
            assert found == (failing, risks, gaps)


def test_the_broker_filter_marks_the_current_view_and_grafana_is_linked_only_when_configured() -> None:
    nav = broker_filter([1, 2], 2)
    assert '<a href="?">all brokers</a>' in nav and '<a href="?broker=2" aria-current=page>broker 2</a>' in nav
    assert broker_filter([], None) == ""
    assert grafana_link(None) == "" and grafana_link("") == ""
    link = grafana_link(GRAFANA, "orders<b>")
    assert f'href="{GRAFANA}?var-topic=orders%3Cb%3E"' in link and 'rel="noopener noreferrer"' in link


def test_the_screenshots_go_where_asked_else_under_the_test_s_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(SCREENSHOTS_ENV, raising=False)
    assert screenshots_dir(tmp_path) == tmp_path / "screenshots"
    monkeypatch.setenv(SCREENSHOTS_ENV, str(tmp_path / "elsewhere"))
    assert screenshots_dir(tmp_path) == tmp_path / "elsewhere"
