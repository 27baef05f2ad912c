"""Items made on a thread of their own, a bounded number ahead of their consumer: the export decodes
a segment's groups while the Parquet writer writes the ones before, the replay reads a partition's
transactions while the producer sends the ones before (numba's kernels, pyarrow and the network
release the GIL, so the two overlap). An error of the maker reaches the consumer after the items
made before it, so what the consumer did when it fails is as without the thread.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Generator, Iterator
from typing import Any, TypeVar

_POLL_SECONDS = 0.1

T = TypeVar("T")


def read_ahead(
    produce: Callable[[], Iterator[T]], depth: int, *, thread_name: str = "read-ahead"
) -> Generator[T, None, None]:
    """The items of ``produce()``, made on a thread of their own at most ``depth`` ahead of the
    consumer. An exception of ``produce`` is raised here, after the items made before it; once
    the consumer stops (done, an error of its own, ``close``), the thread stops at its next item
    and is joined. ``thread_name`` names the thread for a thread dump."""
    items: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: tuple[bool, Any]) -> bool:
        while not stop.is_set():
            try:
                items.put(item, timeout=_POLL_SECONDS)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        made = produce()
        try:
            for item in made:
                if not put((True, item)):
                    return
        except BaseException as exc:  # the consumer's to raise, in its thread
            put((False, exc))
        else:
            put((False, None))
        finally:
            close = getattr(made, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=run, name=thread_name, daemon=True)
    thread.start()
    try:
        while True:
            more, value = items.get()
            if not more:
                if value is not None:
                    raise value
                return
            yield value
    finally:
        stop.set()
        thread.join()
