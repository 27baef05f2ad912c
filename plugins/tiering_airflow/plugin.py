"""``TieringPlugin``: the Tiering page (a FastAPI app under ``/tiering``) and its "Tiering"
navigation entry.

Airflow finds it two ways: through the ``airflow.plugins`` entry point of the installed
distribution, and through ``plugins/tiering_plugin.py`` in a plugins folder. Airflow registers a
plugin name once and reports a second registration as an import error, so the plugins folder's
file defines the plugin only where the entry point does not (``by_entry_point``).
"""

from __future__ import annotations

from importlib.metadata import entry_points

from airflow.plugins_manager import AirflowPlugin

from tiering_airflow.ui.page import TieringPageApp

#: The ``airflow.plugins`` entry point's object reference (setup.cfg).
ENTRY_POINT = "tiering_airflow.plugin:TieringPlugin"


class TieringPlugin(AirflowPlugin):
    name = "tiering"
    fastapi_apps = [{"app": TieringPageApp(), "url_prefix": "/tiering", "name": "Tiering"}]
    external_views = [
        {
            "name": "Tiering",
            "href": "tiering/",
            "destination": "nav",
            "category": "browse",
            "url_route": "tiering",
        }
    ]


def by_entry_point() -> bool:
    """Whether an installed distribution registers this plugin through its entry point."""
    return any(ep.value == ENTRY_POINT for ep in entry_points(group="airflow.plugins"))
