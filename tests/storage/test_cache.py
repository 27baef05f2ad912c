"""The cache of recently read manifests: least recently used out first, bounded by count and by
the bytes of JSON its manifests were read from."""

from __future__ import annotations

import threading

from tiering_core.storage.cache import RecentCache


def test_the_least_recently_used_goes_first_when_the_count_is_reached() -> None:
    cache: RecentCache[str, str] = RecentCache(2)
    cache.put("a", "A")
    cache.put("b", "B")
    assert cache.get("a") == "A"  # "b" is now the least recently used
    cache.put("c", "C")
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == ("A", None, "C")


def test_entries_are_evicted_until_their_bytes_fit_the_budget() -> None:
    cache: RecentCache[str, str] = RecentCache(100, budget=1000)
    cache.put("a", "A", 400)
    cache.put("b", "B", 400)
    cache.get("a")
    cache.put("c", "C", 300)  # 1100 bytes: "b", the least recently used, goes
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == ("A", None, "C")
    assert cache.weight == 700
    cache.put("d", "D", 1000)  # the whole budget: everything else goes
    assert (cache.get("a"), cache.get("c"), cache.get("d")) == (None, None, "D")
    assert cache.weight == 1000


def test_an_entry_heavier_than_the_budget_is_not_kept_and_evicts_nothing() -> None:
    cache: RecentCache[str, str] = RecentCache(100, budget=1000)
    cache.put("a", "A", 600)
    cache.put("big", "BIG", 1001)
    assert (cache.get("a"), cache.get("big"), cache.weight) == ("A", None, 600)


def test_a_replaced_or_dropped_entry_gives_its_bytes_back() -> None:
    cache: RecentCache[str, str] = RecentCache(100, budget=1000)
    cache.put("a", "A", 600)
    cache.put("a", "A2", 200)
    assert (cache.get("a"), cache.weight) == ("A2", 200)
    cache.put("a", "A3", 5000)  # too heavy now: the old value is not kept either
    assert (cache.get("a"), cache.weight) == (None, 0)
    cache.put("b", "B", 300)
    cache.drop("b")
    cache.drop("never there")
    assert (cache.get("b"), cache.weight, len(cache.items)) == (None, 0, 0)


def test_concurrent_puts_keep_both_bounds() -> None:
    cache: RecentCache[int, int] = RecentCache(50, budget=10_000)

    def fill(first: int) -> None:
        for key in range(first, first + 2000):
            cache.put(key, key, 300)
            cache.get(key - 7)

    threads = [threading.Thread(target=fill, args=(n * 10_000,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(cache.items) <= 50 and cache.weight <= 10_000
    assert cache.weight == 300 * len(cache.items)


def test_without_a_budget_only_the_count_bounds_it() -> None:
    cache: RecentCache[str, int] = RecentCache(3)
    for n, key in enumerate("abcd"):
        cache.put(key, n, 10**12)
    assert [key for key in "abcd" if cache.get(key) is not None] == ["b", "c", "d"]
    assert cache.weight == 3 * 10**12
