"""The plugin is registered with its FastAPI app and navigation entry, and loads the way Airflow
loads it: by path from the plugins folder, in a process started outside the project."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.airflow_support import AIRFLOW_BIN, ROOT, airflow_env
from tests.engine_support import TieringEnv
from tiering_core.kafka.topic import TopicPartition
from tiering_core.runs.copy_plan import plan_copies


def registered_from(source: str) -> bool:
    """Whether the plugin's source is where this environment registers it: the plugins folder's
    file, or the entry point of an installed distribution (which the file then leaves alone)."""
    from tiering_airflow.plugin import ENTRY_POINT, by_entry_point

    return ENTRY_POINT in source if by_entry_point() else source.endswith("tiering_plugin.py")


def test_plugin_is_registered_with_its_app_and_nav_entry() -> None:
    from airflow import plugins_manager

    assert plugins_manager.get_import_errors() == {}
    info = {p["name"]: p for p in plugins_manager.get_plugin_info()}
    plugin = info["tiering"]
    assert registered_from(str(plugin["source"]))
    (app,) = plugin["fastapi_apps"]
    assert (app["url_prefix"], app["name"]) == ("/tiering", "Tiering")
    (view,) = plugin["external_views"]
    assert (view["name"], view["destination"], view["url_route"]) == ("Tiering", "nav", "tiering")
    assert view["href"] == "tiering/"  # relative, as Airflow's UI expects


def test_plugin_folder_only_registers_the_plugin_module() -> None:
    """The package's other modules are imported as ``tiering_airflow.*``, never by the plugin manager."""
    from airflow import plugins_manager

    plugins_manager.ensure_plugins_loaded()
    assert "tiering_plugin" in sys.modules
    assert not {"tiering", "__init__", "app"} & set(sys.modules)


def test_plugin_and_trigger_load_from_a_process_outside_the_project(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import json, sys
        assert not any(p.rstrip("/") == sys.argv[1] for p in sys.path), sys.path
        from airflow import plugins_manager
        from airflow._shared.module_loading import import_string
        plugins_manager.ensure_plugins_loaded()
        names = [p["name"] for p in plugins_manager.get_plugin_info()]
        page_built = sorted({"tiering_airflow.ui.app", "airflow.api_fastapi.core_api.security"} & set(sys.modules))
        trigger = import_string("tiering_airflow.triggers.tiering.EligibleSegmentTrigger")
        print(json.dumps({"plugins": names, "errors": plugins_manager.get_import_errors(),
                          "trigger": trigger.__module__, "page_built": page_built}))
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-c", script, str(ROOT)],
        env={**env, **airflow_env()},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    # Loading the plugin (as every task process does) builds no web app: that waits for a request.
    assert out == {
        "plugins": ["tiering"],
        "errors": {},
        "trigger": "tiering_airflow.triggers.tiering",
        "page_built": [],
    }


def test_airflow_plugins_command_lists_it(tmp_path: Path) -> None:
    proc = subprocess.run(
        [AIRFLOW_BIN, "plugins", "--output", "json"],
        env={**os.environ, **airflow_env()},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    start = proc.stdout.index("[")
    (plugin,) = json.loads(proc.stdout[start:])
    assert plugin["name"] == "tiering" and registered_from(plugin["source"])


def test_mounted_in_airflows_api_server_the_page_requires_a_logged_in_user(
    tiering: TieringEnv, airflow_home: Path
) -> None:
    """Airflow's own API app, with its auth manager and this plugin mounted: anonymous -> 401, a token
    from ``POST /auth/token`` -> 200 by bearer header and by the UI's cookie."""
    from airflow.api_fastapi.app import create_app, purge_cached_app
    from fastapi.testclient import TestClient

    tiering.writer("orders", 3).append_records(2)
    with tiering.context() as ctx:  # what a run on broker 1 records: the page reads the store
        plan_copies(ctx, [TopicPartition("orders", 3)], broker_id=1)
    client = TestClient(create_app(apps="core"))
    try:
        for path in ("/tiering/", "/tiering/api/partitions"):
            assert client.get(path).status_code == 401
        passwords = json.loads((airflow_home / "simple_auth_manager_passwords.json.generated").read_text())
        login = client.post("/auth/token", json={"username": "admin", "password": passwords["admin"]})
        assert login.status_code == 201
        token = login.json()["access_token"]
        rows = client.get("/tiering/api/partitions", headers={"Authorization": f"Bearer {token}"})
        assert rows.status_code == 200
        assert [(r["topic"], r["partition"]) for r in rows.json()] == [("orders", 3)]
        browser = TestClient(client.app, cookies={"_token": token})
        page = browser.get("/tiering/")
        assert page.status_code == 200 and '<details class="topic" data-topic="orders">' in page.text
        partitions = browser.get("/tiering/fragments/partitions", params={"topic": "orders"})  # the topic, opened
        assert partitions.status_code == 200 and "<td>orders-3</td>" in partitions.text
    finally:
        purge_cached_app()
