"""``TieringPlugin`` is registered once: by the plugins folder's file where no installed
distribution registers it, by the entry point alone where one does."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.airflow_support import ROOT
from tiering_airflow.plugin import ENTRY_POINT, TieringPlugin, by_entry_point


def plugins_folder_module():
    """``plugins/tiering_plugin.py`` loaded as Airflow's plugin manager loads it: by path."""
    spec = importlib.util.spec_from_file_location("tiering_plugin_probe", ROOT / "plugins" / "tiering_plugin.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def installed_with_entry_point(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A distribution on ``sys.path`` whose metadata registers the plugin (what ``pip install``
    of the wheel writes)."""
    info = folder / "kafka_tiering_probe-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: kafka-tiering-probe\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(f"[airflow.plugins]\ntiering = {ENTRY_POINT}\n")
    monkeypatch.syspath_prepend(str(folder))


def test_the_page_and_its_nav_entry() -> None:
    (app,) = TieringPlugin.fastapi_apps
    assert (TieringPlugin.name, app["url_prefix"], app["name"]) == ("tiering", "/tiering", "Tiering")
    (view,) = TieringPlugin.external_views
    assert (view["href"], view["destination"], view["url_route"]) == ("tiering/", "nav", "tiering")


def test_the_plugins_folder_file_defines_the_plugin_only_without_the_entry_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    defined = getattr(plugins_folder_module(), "TieringPlugin", None)
    assert defined is (None if by_entry_point() else TieringPlugin)  # as this environment is installed
    installed_with_entry_point(tmp_path, monkeypatch)
    assert by_entry_point()
    assert not hasattr(plugins_folder_module(), "TieringPlugin")  # the entry point's alone
