"""Registers the Tiering page (a FastAPI app under ``/tiering``) and its "Tiering" navigation entry.

Airflow's plugin manager loads this file by path as the top-level module ``tiering_plugin``.
Everything else is the package ``tiering_airflow`` beside it: Airflow puts the plugins folder on
``sys.path`` in every component (API server, scheduler, DAG processor, triggerer, workers), and
``pip install .`` installs the same package for anything that runs outside Airflow.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from tiering_airflow.ui.page import TieringPageApp


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
