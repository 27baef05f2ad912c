"""How the page and the exposition read the metadata store: through one open context per config,
kept between requests, each read on a small pool of reader threads and time-limited.

Opening a context costs far more than reading a snapshot (the config, the Airflow connections for
the metadata password and S3, the store's schema check, an S3 client): tens to hundreds of ms, on
every request if nothing were kept. The API server opens it once per config file and keeps it while
the file is unchanged (same size and modification time); a read that fails drops it, so a store
that came back or a corrected config is picked up by the next request. A store that hangs (an
unresponsive database host) makes the request fail in bounded time instead of hanging the server:
it holds at most the pool's threads.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING, TypeVar

from tiering_airflow.hooks.tiering import TieringHook, resolve_config_path

if TYPE_CHECKING:
    from tiering_core.context import TieringContext

T = TypeVar("T")

#: How long one request may spend reading the store (seconds).
DEFAULT_READ_TIMEOUT = 30.0
#: Reads in progress at once: a store that hangs holds at most these threads, never the server.
_READERS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="tiering-reads")

Stamp = tuple[int, int] | None


class StoreUnavailable(Exception):
    """The store could not be read (no or bad config, store down, too slow)."""


def _stamp(path: str) -> Stamp:
    try:
        st = os.stat(path)
    except OSError:
        return None  # opening reports the missing file in its own words
    return (st.st_size, st.st_mtime_ns)


class OpenContexts:
    """The open context of each config file the server was asked about (module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, tuple[Stamp, TieringContext]] = {}

    def _context(self, path: str) -> TieringContext:
        from tiering_core.context import TieringContext

        stamp = _stamp(path)
        with self._lock:
            known = self._open.get(path)
            if known is not None and known[0] == stamp:
                return known[1]
            if known is not None:
                del self._open[path]
                known[1].close()  # reads still running on it finish on their checked-out connection
            hook = TieringHook(config_path=path)
            ctx = TieringContext.open(hook.get_config(), hook.get_credentials())
            self._open[path] = (stamp, ctx)
            return ctx

    def _drop(self, path: str, ctx: TieringContext) -> None:
        with self._lock:
            known = self._open.get(path)
            if known is not None and known[1] is ctx:
                del self._open[path]
                ctx.close()

    def read(self, config_path: str | None, read: Callable[[TieringContext], T]) -> T:
        """``read(ctx)`` on the config's open context; StoreUnavailable naming what went wrong."""
        from tiering_core.errors import TieringError

        try:
            path = resolve_config_path(config_path)
            ctx = self._context(path)
        except TieringError as exc:
            raise StoreUnavailable(str(exc)) from exc
        try:
            return read(ctx)
        except TieringError as exc:
            self._drop(path, ctx)
            raise StoreUnavailable(str(exc)) from exc
        except BaseException:
            self._drop(path, ctx)
            raise


#: The server's open contexts.
CONTEXTS = OpenContexts()


def within(timeout: float, read: Callable[[], T]) -> T:
    """``read()``, run on a reader thread, within ``timeout`` seconds (module docstring)."""
    future = _READERS.submit(read)
    try:
        return future.result(timeout=timeout)
    except FutureTimeout as exc:
        future.cancel()
        raise StoreUnavailable(
            f"reading the metadata store did not finish within {timeout:.0f} s (the store does not answer)"
        ) from exc


def read_store(config_path: str | None, read: Callable[[TieringContext], T], timeout: float) -> T:
    """``read(ctx)`` on the config's open context, within ``timeout`` seconds."""
    return within(timeout, lambda: CONTEXTS.read(config_path, read))
