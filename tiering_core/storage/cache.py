"""The storage layer's in-memory LRU, bounded by count and by bytes: manifests and data keys of
segments recently read (a segment's objects never change once its manifest is written)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class RecentCache(Generic[K, V]):
    """A thread-safe LRU map bounded by count and, given a ``budget``, by the bytes its values
    weigh (segments are immutable once their manifest is written). A value heavier than the whole
    budget is not kept: it would evict everything else for one entry."""

    def __init__(self, size: int, budget: int | None = None) -> None:
        self.size = size
        self.budget = budget
        self.weight = 0
        self.items: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self.lock:
            held = self.items.get(key)
            if held is None:
                return None
            self.items.move_to_end(key)
            return held[0]

    def put(self, key: K, value: V, weight: int = 0) -> None:
        """Keep ``value`` as weighing ``weight`` bytes, evicting the least recently used."""
        with self.lock:
            self._remove(key)
            if self.budget is not None and weight > self.budget:
                return
            self.items[key] = (value, weight)
            self.weight += weight
            while len(self.items) > self.size or (self.budget is not None and self.weight > self.budget):
                _, (_, evicted) = self.items.popitem(last=False)
                self.weight -= evicted

    def drop(self, key: K) -> None:
        with self.lock:
            self._remove(key)

    def _remove(self, key: K) -> None:
        held = self.items.pop(key, None)
        if held is not None:
            self.weight -= held[1]
