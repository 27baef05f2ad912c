"""Registers the Tiering page (a FastAPI app under ``/tiering``) and its "Tiering" navigation entry.

Airflow's plugin manager loads this file by path as the top-level module ``tiering_plugin``,
with the plugins folder on ``sys.path`` but not its parent. The rest of the package is imported
as ``plugins.*`` (its name from the project root), so the folder's parent goes on ``sys.path``
first; every Airflow component loads plugins at start, so the triggerer and the workers can then
import ``plugins.triggers.tiering`` too.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

_PROJECT_ROOT = str(Path(__file__).resolve().parents[1])
if _PROJECT_ROOT not in sys.path:
    sys.path.append(_PROJECT_ROOT)

from airflow.plugins_manager import AirflowPlugin  # noqa: E402

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class TieringPageApp:
    """The Tiering page's ASGI app, built on its first request.

    Every Airflow component loads plugins, each task process included, but only the API server
    serves HTTP. Building the FastAPI app (and importing Airflow's API security for it) there
    alone keeps that import, about a second of CPU, off every task start.
    """

    def __init__(self) -> None:
        self._app: Callable[[Scope, Receive, Send], Awaitable[None]] | None = None
        self._lock = threading.Lock()

    def app(self) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
        with self._lock:
            if self._app is None:
                from plugins.tiering_ui.app import create_app

                self._app = create_app()
            return self._app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await (self._app or self.app())(scope, receive, send)


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
