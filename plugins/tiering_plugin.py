"""Registers the Tiering page (a FastAPI app under ``/tiering``) and its "Tiering" navigation entry.

Airflow's plugin manager loads this file by path as the top-level module ``tiering_plugin``,
with the plugins folder on ``sys.path`` but not its parent. The rest of the package is imported
as ``plugins.*`` (its name from the project root), so the folder's parent goes on ``sys.path``
first; every Airflow component loads plugins at start, so the triggerer and the workers can then
import ``plugins.triggers.tiering`` too.
"""

from __future__ import annotations

import sys
from pathlib import Path

_PROJECT_ROOT = str(Path(__file__).resolve().parents[1])
if _PROJECT_ROOT not in sys.path:
    sys.path.append(_PROJECT_ROOT)

from airflow.plugins_manager import AirflowPlugin  # noqa: E402

from plugins.tiering_ui.app import create_app  # noqa: E402


class TieringPlugin(AirflowPlugin):
    name = "tiering"
    fastapi_apps = [{"app": create_app(), "url_prefix": "/tiering", "name": "Tiering"}]
    external_views = [
        {
            "name": "Tiering",
            "href": "tiering/",
            "destination": "nav",
            "category": "browse",
            "url_route": "tiering",
        }
    ]
