"""The Tiering page as the ASGI app the plugin mounts: the FastAPI app of ``app.py``, built on the
first request.

Every Airflow component loads plugins, each task process included, but only the API server
serves HTTP. Building the FastAPI app (and importing Airflow's API security for it) there alone
keeps that import, about a second of CPU, off every task start.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class TieringPageApp:
    """The Tiering page's ASGI app, built on its first request (see the module docstring)."""

    def __init__(self) -> None:
        self._app: Callable[[Scope, Receive, Send], Awaitable[None]] | None = None
        self._lock = threading.Lock()

    def app(self) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
        with self._lock:
            if self._app is None:
                from tiering_airflow.ui.app import create_app

                self._app = create_app()
            return self._app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await (self._app or self.app())(scope, receive, send)
