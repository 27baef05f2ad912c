"""The Tiering page and its JSON answer with the live state of the metadata store on every request
(what the runs recorded: no log dir is read), and only to an Airflow user allowed to see plugin
views (a JWT from Airflow's auth manager, sent as the UI sends it: the ``_token`` cookie, or as a
REST client does: a bearer header)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.engine_support import TieringEnv, write_segments
from tiering_airflow.ui.app import STATIC_TYPES, create_app
from tiering_airflow.ui.view import PARTITION_COLUMNS, SUMMARY_COLUMNS
from tiering_core.errors import TieringGapError
from tiering_core.kafka.topic import TopicPartition
from tiering_core.runs.copy import run_copy
from tiering_core.runs.copy_plan import plan_copies
from tiering_core.runs.delete_records import apply_delete_records

COOKIE = "_token"  # the cookie Airflow's UI keeps its JWT in (COOKIE_NAME_JWT_TOKEN)
BROKER = 1  # the demo writer's broker (its log dir's meta.properties): runs record what they observe


def observe(tiering: TieringEnv, *tps: TopicPartition) -> None:
    """What the copy sensor's planning records of each partition: the broker's observation."""
    with tiering.context() as ctx:
        plan_copies(ctx, list(tps), broker_id=BROKER)


@pytest.fixture(scope="module")
def auth_manager():
    """Airflow's configured auth manager (the simple one), initialised as the API server does."""
    from airflow.api_fastapi.app import init_auth_manager

    return init_auth_manager()


def token_for(auth_manager, role: str | None, username: str = "viewer") -> str:
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    return auth_manager.generate_jwt(SimpleAuthManagerUser(username=username, role=role))


@pytest.fixture()
def client(tiering: TieringEnv, auth_manager) -> TestClient:
    """A logged-in viewer, as inside Airflow's UI."""
    return TestClient(create_app(str(tiering.config_path)), cookies={COOKIE: token_for(auth_manager, "viewer")})


def test_the_cookie_name_is_airflows() -> None:
    from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN

    assert COOKIE == COOKIE_NAME_JWT_TOKEN


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/api/partitions",
        "/api/partitions?topic=orders",
        "/api/series?topic=orders&window=7d",
        "/fragments/partitions?topic=orders",
        "/static/tiering.js",
    ],
)
def test_anonymous_and_unauthorised_requests_are_refused_before_any_state_is_read(
    tiering: TieringEnv, auth_manager, path: str
) -> None:
    tiering.writer("orders", 0).append_records(1)
    observe(tiering, TopicPartition("orders", 0))
    app = create_app(str(tiering.config_path))
    anonymous = TestClient(app).get(path)
    assert anonymous.status_code == 401 and "orders" not in anonymous.text
    forged = TestClient(app, cookies={COOKIE: "not-a-jwt"}).get(path)
    assert forged.status_code == 403 and "orders" not in forged.text
    signed_elsewhere = token_for(auth_manager, "admin")[:-4] + "AAAA"  # signature no longer matches
    assert TestClient(app, headers={"Authorization": f"Bearer {signed_elsewhere}"}).get(path).status_code == 403
    no_role = TestClient(app, cookies={COOKIE: token_for(auth_manager, None, "nobody")}).get(path)
    assert no_role.status_code == 403 and "orders" not in no_role.text
    # The same requests with a valid viewer token, by cookie (the UI) or bearer header (REST).
    assert TestClient(app, cookies={COOKIE: token_for(auth_manager, "viewer")}).get(path).status_code == 200
    bearer = {"Authorization": f"Bearer {token_for(auth_manager, 'viewer')}"}
    assert TestClient(app, headers=bearer).get(path).status_code == 200


def test_a_broken_config_is_not_revealed_to_anonymous_users(tiering: TieringEnv) -> None:
    anonymous = TestClient(create_app(str(tiering.root / "absent.yaml")))
    for path in ("/", "/api/partitions"):
        answer = anonymous.get(path)
        assert answer.status_code == 401 and "absent.yaml" not in answer.text


def test_json_follows_the_live_state(tiering: TieringEnv, client: TestClient) -> None:
    w = tiering.writer("orders", 0)
    write_segments(w, 3)
    w.append_records(2)
    w.set_high_watermark()
    observe(tiering, w.tp)
    (before,) = client.get("/api/partitions").json()
    (replica,) = before["replicas"]
    assert (before["topic"], before["partition"], replica["last_stable_offset"]) == ("orders", 0, 17)
    assert (replica["broker_id"], before["best_broker"]) == (BROKER, BROKER)
    assert (before["copy_lag_segments"], before["remote_segments"], before["remote_bytes"]) == (3, 0, 0)
    with tiering.context() as ctx:
        run_copy(ctx, w.tp, broker_id=BROKER)
    (after,) = client.get("/api/partitions").json()
    assert (after["copy_lag_segments"], after["copy_lag_bytes"], after["remote_segments"]) == (0, 0, 3)
    assert after["remote_bytes"] > 0 and after["gap_count"] == 0 and after["delete_state"] is None
    assert (after["remote_log_start_offset"], after["remote_only_offsets"]) == (0, None)
    w.delete_oldest_segments(2)  # the broker's own retention: [0..9] is on the tier only now
    observe(tiering, w.tp)
    (dropped,) = client.get("/api/partitions").json()
    assert (dropped["remote_log_start_offset"], dropped["remote_only_offsets"]) == (0, [0, 9])
    table = client.get("/fragments/partitions", params={"topic": "orders"}).text
    assert '<td data-label="Remote only">0..9</td>' in table
    series = client.get("/api/series", params={"topic": "orders", "window": "24h"}).json()
    assert len(series["at"]) == len(series["remote_bytes"]) == len(series["copy_lag_bytes"]) >= 1
    assert series["remote_bytes"][-1] == after["remote_bytes"] and series["copy_lag_bytes"][-1] == 0
    assert client.get("/api/series", params={"topic": "orders", "window": "30d"}).status_code == 422


def test_topic_filter(tiering: TieringEnv, client: TestClient) -> None:
    for topic in ("orders", "payments"):
        tiering.writer(topic, 0).append_records(1)
    observe(tiering, TopicPartition("orders", 0), TopicPartition("payments", 0))
    assert [r["topic"] for r in client.get("/api/partitions").json()] == ["orders", "payments"]
    assert [r["topic"] for r in client.get("/api/partitions", params={"topic": "payments"}).json()] == ["payments"]


def test_page_lists_every_partition_with_its_tier_state_and_flags_gaps(tiering: TieringEnv, client) -> None:
    healthy = tiering.writer("orders", 0)
    write_segments(healthy, 1)
    broken = tiering.writer("orders", 1)
    write_segments(broken, 2)
    for w in (healthy, broken):
        w.set_high_watermark()
        with tiering.context() as ctx:
            run_copy(ctx, w.tp, broker_id=BROKER)
    write_segments(broken, 2)
    broken.set_high_watermark()
    broken.delete_oldest_segments(3)  # [10..14] was never copied: a tiering gap
    with tiering.context() as ctx, pytest.raises(TieringGapError):
        run_copy(ctx, broken.tp, broker_id=BROKER)
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    text = page.text
    for title in SUMMARY_COLUMNS:
        assert f'<span class="cell">{title}</span>' in text
    assert text.count('<summary class="row">') == 1 and '<details class="topic alert" data-topic="orders">' in text
    assert "Tiering gap: 1 partition(s) of orders lost 5 offset(s)" in text and "(orders-1)" in text  # on top
    assert "1 topic(s), 2 partition(s)" in text
    assert "href='api/partitions'" in text  # relative: works under any prefix
    assert "src='static/uPlot.iife.min.js'" in text and "href='static/uPlot.min.css'" in text
    # The partitions, as the page loads them when the topic is opened.
    table = client.get("/fragments/partitions", params={"topic": "orders"})
    assert table.status_code == 200 and table.headers["content-type"].startswith("text/html")
    for title in PARTITION_COLUMNS:
        assert f"<th>{title}</th>" in table.text
    assert "<td>orders-0</td>" in table.text and "<td>orders-1</td>" in table.text
    assert '<td data-label="Tiering gaps" class="bad">1 (5 offsets lost)</td>' in table.text  # the gap, flagged
    assert table.text.count('<tr class="alert">') == 1
    assert 'class="airflow" href="../dags/tiering_copy_default_topics"' in table.text  # orders: the "*" default
    assert table.text.count("<button") == 0


def test_a_gap_a_delete_records_passes_is_no_longer_flagged(tiering: TieringEnv, client: TestClient) -> None:
    """A DeleteRecords applied through the platform into a tiering gap: the page reports the gap
    from the new log start on; applied past it, nowhere on the page any more."""
    w = tiering.writer("orders", 0)
    write_segments(w, 2)
    w.set_high_watermark()
    with tiering.context() as ctx:
        run_copy(ctx, w.tp, broker_id=BROKER)
    write_segments(w, 2)
    w.set_high_watermark()
    w.delete_oldest_segments(3)  # [10..14] was never copied: a tiering gap
    with tiering.context() as ctx, pytest.raises(TieringGapError):
        run_copy(ctx, w.tp, broker_id=BROKER)

    def shown() -> tuple[str, str, tuple[int, int]]:
        (row,) = client.get("/api/partitions").json()
        table = client.get("/fragments/partitions", params={"topic": "orders"}).text
        return client.get("/").text, table, (row["gap_count"], row["gap_offsets"])

    with tiering.context() as ctx:
        apply_delete_records(ctx, w.tp, 12)
    page, table, figures = shown()
    assert "Tiering gap: 1 partition(s) of orders lost 3 offset(s)" in page and figures == (1, 3)
    assert '<td data-label="Tiering gaps" class="bad">1 (3 offsets lost)</td>' in table
    with tiering.context() as ctx:
        apply_delete_records(ctx, w.tp, 15)
    page, table, figures = shown()
    assert "Tiering gap:" not in page and '<p class="no-alerts ok">No alerts' in page and figures == (0, 0)
    assert '<details class="topic" data-topic="orders">' in page  # no longer an alert
    assert '<td data-label="Tiering gaps" class="ok">none</td>' in table and '<tr class="alert">' not in table


def test_partitions_load_a_page_of_rows_at_a_time(tiering: TieringEnv, client: TestClient) -> None:
    tps = [TopicPartition("orders", p) for p in range(5)]
    for tp in tps:
        tiering.writer(tp.topic, tp.partition).append_records(1)
    observe(tiering, *tps)
    first = client.get("/fragments/partitions", params={"topic": "orders", "limit": 2}).text
    assert "<td>orders-1</td>" in first and "<td>orders-2</td>" not in first
    assert '2 of 5 partitions shown. <button type="button" data-offset="2">' in first
    last = client.get("/fragments/partitions", params={"topic": "orders", "offset": 4, "limit": 2}).text
    assert "<td>orders-4</td>" in last and "<td>orders-3</td>" not in last and "<button" not in last


def test_the_chart_library_is_served_by_the_plugin(client: TestClient) -> None:
    for name, media_type in STATIC_TYPES.items():
        answer = client.get(f"/static/{name}")
        assert answer.status_code == 200 and answer.headers["content-type"].startswith(media_type)
    assert "uPlot" in client.get("/static/uPlot.iife.min.js").text
    assert client.get("/static/uPlot.LICENSE").status_code == 404  # only what the page loads
    assert client.get("/static/..%2Fapp.py").status_code == 404


def test_a_broken_config_is_reported_not_crashed(tiering: TieringEnv, auth_manager) -> None:
    client = TestClient(
        create_app(str(tiering.root / "absent.yaml")), cookies={COOKIE: token_for(auth_manager, "viewer")}
    )
    answer = client.get("/api/partitions")
    assert answer.status_code == 503 and "cannot read config file" in answer.json()["detail"]
    page = client.get("/")
    assert page.status_code == 503 and "Tier state unavailable: cannot read config file" in page.text


def test_without_an_explicit_path_the_config_is_resolved_per_request(
    tiering: TieringEnv, monkeypatch: pytest.MonkeyPatch, auth_manager
) -> None:
    client = TestClient(create_app(), headers={"Authorization": f"Bearer {token_for(auth_manager, 'viewer')}"})
    tiering.writer("orders", 0).append_records(1)
    observe(tiering, TopicPartition("orders", 0))
    assert [r["topic"] for r in client.get("/api/partitions").json()] == ["orders"]
    monkeypatch.delenv("TIERING_CONFIG")
    answer = client.get("/api/partitions")
    assert answer.status_code == 503 and "TIERING_CONFIG" in answer.json()["detail"]


def test_a_store_that_hangs_makes_the_page_say_so_in_bounded_time(
    tiering: TieringEnv, auth_manager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A metadata store that stops answering (injected: a snapshot read and an overview read that
    never return): the page and the JSON answer 503 within the time limit instead of hanging the
    API server."""
    import threading
    import time

    import tiering_core.monitoring.collect as collect_mod
    import tiering_core.monitoring.overview as overview_mod

    released = threading.Event()

    def hung(*args: object, **kwargs: object) -> list[object]:
        released.wait(30)
        return []

    monkeypatch.setattr(collect_mod, "collect_metrics", hung)
    monkeypatch.setattr(overview_mod, "collect_overview", hung)
    client = TestClient(
        create_app(str(tiering.config_path), status_timeout=0.5), cookies={COOKIE: token_for(auth_manager, "viewer")}
    )
    try:
        started = time.monotonic()
        answer = client.get("/api/partitions")
        page = client.get("/")
        assert time.monotonic() - started < 10
    finally:
        released.set()
    assert answer.status_code == 503 and "did not finish within" in answer.json()["detail"]
    assert page.status_code == 503 and "does not answer" in page.text


def test_each_partition_shows_what_its_export_table_holds(tiering: TieringEnv, client: TestClient, tmp_path) -> None:
    from tests.export.support import sqlite_catalog, with_export
    from tiering_core.export import run_export

    w = tiering.writer("orders", 0)
    write_segments(w, 2)
    w.set_high_watermark()
    with tiering.context() as ctx:
        run_copy(ctx, w.tp, broker_id=BROKER)
    table = client.get("/fragments/partitions", params={"topic": "orders"}).text
    assert '<td data-label="Exported up to">-</td>' in table  # no export section: nothing exported
    with_export(tiering, sqlite_catalog(tmp_path))
    with tiering.context() as ctx:
        result = run_export(ctx, "orders")
    assert result.rows > 0 and not result.failed
    up_to = max(segment.end_offset for segment in result.exported)
    table = client.get("/fragments/partitions", params={"topic": "orders"}).text
    assert f'<td data-label="Exported up to">{up_to:,}</td>' in table


def test_the_page_says_which_topics_are_not_tiered_and_why(tiering: TieringEnv, client: TestClient) -> None:
    """``ledger`` (in the store: its broker reported it) and ``audit`` (named, never seen) are
    compacted while ``"*"`` enables remote storage: the page names them with the reason, ``orders``
    is tiered and carries no such note."""
    from tiering_core.tier.status import collect_status

    reason = "cleanup.policy compact: Kafka never tiers a compacted topic"
    tiering.write_config(ledger={"cleanup.policy": "compact"}, audit={"cleanup.policy": "compact,delete"})
    for topic in ("orders", "ledger"):
        w = tiering.writer(topic, 0)
        write_segments(w, 2)
        w.set_high_watermark()
    with tiering.context() as ctx:
        rows = collect_status(ctx, broker_id=BROKER)  # what the broker saw, recorded
        assert {r.topic: r.not_tiered_reason for r in rows} == {"ledger": reason, "orders": None}
    page = client.get("/")
    assert page.status_code == 200
    assert f"1 topic(s) not tiered ({reason}): ledger" in page.text
    assert "1 topic(s) not tiered (cleanup.policy compact,delete: Kafka never tiers a compacted topic): audit" in (
        page.text
    )
    assert f'ledger <span class="note">not tiered: {reason}</span>' in page.text
    assert 'orders <span class="note">' not in page.text and 'data-topic="orders"' in page.text


def test_a_black_holed_database_does_not_pin_the_page_s_readers(
    tiering: TieringEnv, auth_manager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The metadata store's host accepts connections and never answers (a black hole, not an
    injected fault): every request answers 503 within the page's time limit, and the readers it
    used are free again within the connect timeout, not pinned until the host comes back."""
    import time

    import yaml

    from tests.metadata.test_timeouts import black_hole, black_hole_url
    from tiering_airflow.ui import reads

    monkeypatch.delenv("AIRFLOW_CONN_TIERING_METADATA", raising=False)
    with black_hole() as port:
        doc = yaml.safe_load(tiering.config_path.read_text())
        doc["metadata"] = {"url": black_hole_url(port), "connect_timeout_seconds": 2}
        tiering.config_path.write_text(yaml.safe_dump(doc))
        client = TestClient(
            create_app(str(tiering.config_path), status_timeout=0.5),
            cookies={COOKIE: token_for(auth_manager, "viewer")},
        )
        started = time.monotonic()
        answers = [client.get(path) for path in ("/", "/api/partitions", "/metrics", "/", "/api/partitions")]
        assert [a.status_code for a in answers] == [503] * 5
        assert time.monotonic() - started < 20  # each within its 0.5 s limit, give or take the machine
        # Every reader is free again once the attempts it holds reach the connect timeout: a read
        # queued behind them runs (five attempts, one at a time under the open-context lock).
        assert reads.within(60, lambda: "free") == "free"
        assert time.monotonic() - started < 45


def test_the_page_lists_the_last_replays_newest_first_escaped(tiering: TieringEnv, client: TestClient) -> None:
    from tiering_core.metadata.values import ReplayRecord

    tiering.writer("orders", 0).append_records(1)
    observe(tiering, TopicPartition("orders", 0))
    assert "Last replays" not in client.get("/").text  # none yet: no section
    with tiering.context() as ctx:
        now = ctx.metadata.database_now_ms()
        ctx.metadata.record_replay(
            ReplayRecord(
                "orders",
                "AAAAAAAAAAAAAAAAAAAAAA",
                0,
                "orders-again",
                0,
                99,
                None,
                100,
                2048,
                "replayed",
                None,
                (),
                now - 120_000,
                now - 60_000,
            )
        )
        ctx.metadata.record_replay(
            ReplayRecord(
                "orders",
                "AAAAAAAAAAAAAAAAAAAAAA",
                1,
                "orders-again",
                5,
                40,
                19,
                21,
                512,
                "failed",
                "<b>no</b> leader",
                ((41, 50, "tiering gap"),),
                now - 30_000,
                now - 10_000,
            )
        )
    page = client.get("/").text
    section = page[page.index("Last replays") :]
    assert section.index("orders-1") < section.index("orders-0")  # newest first
    assert "5-40 (resumed after 19)" in section and "0-99" in section
    assert "failed: &lt;b&gt;no&lt;/b&gt; leader" in section and "<b>no</b>" not in section
    assert '<td class="bad" data-label="Not replayed">41-50 (tiering gap)</td>' in section
    assert ">100<" in section and "2.0 KiB" in section


def test_the_page_lists_the_last_erasures_newest_first_with_no_key_nor_digest(
    tiering: TieringEnv, client: TestClient
) -> None:
    from tiering_core.metadata.erasures import FINISHED, ErasureRecord, SegmentErasure

    tiering.writer("orders", 0).append_records(1)
    observe(tiering, TopicPartition("orders", 0))
    assert "Last erasures" not in client.get("/").text  # none yet: no section
    digest = "ab" * 32
    with tiering.context() as ctx:
        now = ctx.metadata.database_now_ms()
        done = ErasureRecord(
            "e-1", "orders", "AAAAAAAAAAAAAAAAAAAAAA", 0, (digest, "cd" * 32), "DAG run tiering_erase/<run 7>",
            now - 120_000, (SegmentErasure("old-1", "new-1", 4), SegmentErasure("old-2", "new-2", 3)),
            segments_read=5, outcome=FINISHED, finished_ms=now - 100_000,
        )  # fmt: skip
        killed = ErasureRecord(
            "e-2", "orders", "AAAAAAAAAAAAAAAAAAAAAA", 1, (digest,), "tiering erase", now - 30_000,
            (SegmentErasure("old-3", "new-3", 2), SegmentErasure("old-4", None, 9)),
        )  # fmt: skip
        ctx.metadata.record_erasure(done)
        ctx.metadata.record_erasure(killed)
    page = client.get("/").text
    section = page[page.index("Last erasures") :]
    assert section.index("orders-1") < section.index("orders-0")  # newest first
    assert "DAG run tiering_erase/&lt;run 7&gt;" in section and "<run 7>" not in section
    rows = section.split("<tr>")[2:]
    assert '<td data-label="Keys">2</td>' in rows[1] and '<td data-label="Records removed">7</td>' in rows[1]
    assert '<td data-label="Segments copied again">1</td>' in rows[0]  # the copy under way is not counted
    assert '<td data-label="Records removed">2</td>' in rows[0]
    assert '<td class="bad" data-label="Outcome">not finished' in rows[0] and ">finished<" in rows[1]
    assert digest not in page and "cd" * 32 not in page


def test_the_page_lists_the_last_erasures_from_export_tables_after_the_partitions(
    tiering: TieringEnv, client: TestClient
) -> None:
    from tiering_core.metadata.erasures import FINISHED, HELD, ErasureRecord, TableErasureRecord

    tiering.writer("orders", 0).append_records(1)
    observe(tiering, TopicPartition("orders", 0))
    assert "Last erasures from export tables" not in client.get("/").text  # none yet: no section
    with tiering.context() as ctx:
        now = ctx.metadata.database_now_ms()
        ctx.metadata.record_erasure(
            ErasureRecord("e-1", "orders", "AAAAAAAAAAAAAAAAAAAAAA", 0, ("ab" * 32,), "tiering erase", now - 60_000)
        )
        ctx.metadata.record_table_erasure(
            TableErasureRecord(
                "e-1", "orders", "kafka.orders", "1" * 36, now - 50_000, rows_deleted=1_234,
                data_files_deleted=2, snapshots_expired=3, outcome=FINISHED, finished_ms=now - 40_000,
            )
        )  # fmt: skip
        ctx.metadata.record_table_erasure(
            TableErasureRecord("e-1", "orders", "kafka.orders_dead_letters", "2" * 36, now - 45_000, outcome=HELD)
        )
    page = client.get("/").text
    assert page.index("Last erasures") < page.index("Last erasures from export tables")
    section = page[page.index("Last erasures from export tables") :]
    rows = section.split("<tr>")[2:]
    assert '<td data-label="Table">kafka.orders_dead_letters</td>' in rows[0]  # newest first
    assert '<td class="bad" data-label="Outcome">held: a tag or branch keeps a snapshot' in rows[0]
    assert '<td data-label="Rows deleted">1,234</td><td data-label="Snapshots expired">3</td>' in rows[1]
    assert '<td data-label="Data files deleted">2</td><td data-label="Outcome">finished</td>' in rows[1]
    assert "ab" * 32 not in page


def test_a_broker_s_view_shows_the_partitions_with_a_replica_on_it(tiering: TieringEnv, client: TestClient) -> None:
    w = tiering.writer("orders", 0)
    write_segments(w, 2)
    w.set_high_watermark()
    observe(tiering, w.tp)
    on = client.get("/fragments/partitions", params={"topic": "orders", "broker": BROKER}).text
    elsewhere = client.get("/fragments/partitions", params={"topic": "orders", "broker": BROKER + 1}).text
    assert "<td>orders-0</td>" in on and "<td>orders-0</td>" not in elsewhere
    page = client.get("/", params={"broker": BROKER + 1}).text
    assert f"(broker {BROKER + 1})" in page and '"broker": 2' in page  # the script asks for its tables
    assert f'<a href="?broker={BROKER}">broker {BROKER}</a>' in page


def test_the_first_screen_says_when_airflow_s_runs_cannot_be_read(
    tiering: TieringEnv, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlalchemy.exc import OperationalError

    def unreachable() -> list[object]:
        raise OperationalError("SELECT 1", {}, Exception("postgresql://airflow:db-Secret-7@db/airflow is down"))

    monkeypatch.setattr("tiering_airflow.ui.app.failed_tasks", unreachable)
    answer = client.get("/")
    assert answer.status_code == 200 and "Failing runs unavailable" in answer.text
    assert "db-Secret-7" not in answer.text
    assert "<div class='tile bad' data-label='Failing runs'><span class='title'>Failing runs</span>" in answer.text
