"""The Tiering page and its JSON answer with the live state of the store on every request, and
only to an Airflow user allowed to see plugin views (a JWT from Airflow's auth manager, sent as
the UI sends it: the ``_token`` cookie, or as a REST client does: a bearer header)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.engine_support import TieringEnv, write_segments
from tiering_airflow.ui.app import COLUMNS, create_app
from tiering_core.errors import TieringGapError
from tiering_core.runs.copy import run_copy
from tiering_core.tier.status import STATUS_FIELDS

COOKIE = "_token"  # the cookie Airflow's UI keeps its JWT in (COOKIE_NAME_JWT_TOKEN)


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


@pytest.mark.parametrize("path", ["/", "/api/partitions", "/api/partitions?topic=orders"])
def test_anonymous_and_unauthorised_requests_are_refused_before_any_state_is_read(
    tiering: TieringEnv, auth_manager, path: str
) -> None:
    tiering.writer("orders", 0).append_records(1)
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
    (before,) = client.get("/api/partitions").json()
    assert set(STATUS_FIELDS) | {"local_retention_risk"} <= set(before)
    assert (before["topic"], before["partition"], before["last_stable_offset"]) == ("orders", 0, 17)
    assert (before["highest_copied_offset"], before["copy_lag_segments"], before["remote_bytes"]) == (-1, 3, 0)
    with tiering.context() as ctx:
        run_copy(ctx, w.tp)
    (after,) = client.get("/api/partitions").json()
    assert (after["highest_copied_offset"], after["copy_lag_segments"], after["remote_segments"]) == (14, 0, 3)
    assert after["remote_bytes"] > 0 and after["gaps"] == [] and after["delete_state"] is None


def test_topic_filter(tiering: TieringEnv, client: TestClient) -> None:
    for topic in ("orders", "payments"):
        tiering.writer(topic, 0).append_records(1)
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
            run_copy(ctx, w.tp)
    write_segments(broken, 2)
    broken.set_high_watermark()
    broken.delete_oldest_segments(3)  # [10..14] was never copied: a tiering gap
    with tiering.context() as ctx, pytest.raises(TieringGapError):
        run_copy(ctx, broken.tp)
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    text = page.text
    for _, title in COLUMNS:
        assert f"<th>{title}</th>" in text
    assert "<td>orders-0</td>" in text and "<td>orders-1</td>" in text
    assert '<td class="bad">10..14</td>' in text  # the gap, flagged
    assert text.count('<tr class="alert">') == 1 and "1 with tiering gaps" in text
    assert "href='api/partitions'" in text  # relative: works under any prefix


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
    assert [r["topic"] for r in client.get("/api/partitions").json()] == ["orders"]
    monkeypatch.delenv("TIERING_CONFIG")
    answer = client.get("/api/partitions")
    assert answer.status_code == 503 and "TIERING_CONFIG" in answer.json()["detail"]


def test_a_log_dir_that_hangs_makes_the_page_say_so_in_bounded_time(
    tiering: TieringEnv, auth_manager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A log dir on a mount that stops answering (injected: a status read that never returns): the
    page and the JSON answer 503 within the time limit instead of hanging the API server."""
    import threading
    import time

    import tiering_core.tier.status as status_mod

    released = threading.Event()

    def hung(*args: object, **kwargs: object) -> list[object]:
        released.wait(30)
        return []

    monkeypatch.setattr(status_mod, "collect_status", hung)
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
