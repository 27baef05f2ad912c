"""``/tiering/metrics`` answers only an Airflow user allowed to see plugin views (as the page) or a
scraper presenting the config's static token; everyone else gets 401 (403: an Airflow user
without the permission), before anything is read."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from tests.engine_support import TieringEnv
from tests.tiering_airflow.test_ui import COOKIE, token_for
from tiering_airflow.ui.app import create_app

TOKEN = "scrape-token-7b1f0e2a9c4d4e31"


@pytest.fixture(scope="module")
def auth_manager():
    """Airflow's configured auth manager (the simple one), initialised as the API server does."""
    from airflow.api_fastapi.app import init_auth_manager

    return init_auth_manager()


def with_token_file(tiering: TieringEnv, token: str = TOKEN) -> Path:
    """The env's config with ``metrics.bearer_token_file`` naming a file holding ``token``."""
    secret = tiering.root / "scrape-token"
    secret.write_text(token + "\n")
    doc = yaml.safe_load(tiering.config_path.read_text())
    doc["metrics"] = {"bearer_token_file": str(secret)}
    tiering.config_path.write_text(yaml.safe_dump(doc))
    return secret


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_anonymous_forged_and_unauthorised_scrapes_are_refused_before_any_state_is_read(
    tiering: TieringEnv, auth_manager
) -> None:
    with_token_file(tiering)
    tiering.writer("orders", 0).append_records(1)
    app = create_app(str(tiering.config_path))
    anonymous = TestClient(app).get("/metrics")
    assert anonymous.status_code == 401 and "orders" not in anonymous.text
    assert anonymous.headers["www-authenticate"] == "Bearer"
    for wrong in (TOKEN[:-1], TOKEN + "x", "not-a-jwt", token_for(auth_manager, "admin")[:-4] + "AAAA"):
        answer = TestClient(app, headers=bearer(wrong)).get("/metrics")
        assert answer.status_code == 401 and "orders" not in answer.text, wrong
    assert TestClient(app, headers={"Authorization": f"Basic {TOKEN}"}).get("/metrics").status_code == 401
    forged = TestClient(app, cookies={COOKIE: "not-a-jwt"}).get("/metrics")
    assert forged.status_code == 403 and "orders" not in forged.text  # as the page answers it
    no_role = TestClient(app, headers=bearer(token_for(auth_manager, None, "nobody"))).get("/metrics")
    assert no_role.status_code == 403 and "orders" not in no_role.text
    by_cookie = TestClient(app, cookies={COOKIE: token_for(auth_manager, None, "nobody")}).get("/metrics")
    assert by_cookie.status_code == 403


def test_the_page_routes_still_require_airflow_access(tiering: TieringEnv) -> None:
    """Each page route carries Airflow's check (the app no longer does): the static token opens
    /metrics only."""
    with_token_file(tiering)
    app = create_app(str(tiering.config_path))
    paths = [route.path for route in app.routes if isinstance(route, APIRoute) and route.path != "/metrics"]
    assert "/" in paths and "/api/partitions" in paths
    for path in paths:
        assert TestClient(app).get(path).status_code == 401, path
        assert TestClient(app, headers=bearer(TOKEN)).get(path).status_code == 403, path
