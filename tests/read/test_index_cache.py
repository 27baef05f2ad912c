"""The index cache on disk (``tiering_core/read/index_cache.py``): bounded by bytes, a corrupt
entry discarded and fetched again, and only its own files ever evicted (docs/kafka-rules.md
section 8)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engine_support import TieringEnv, tip_of
from tests.read.test_reader import build
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.read.index_cache import RemoteIndexCache, cache_directory
from tiering_core.runs.copy import run_copy
from tiering_core.storage.layout import ObjectKind


def test_disk_cache_discards_a_corrupt_entry_and_stays_within_its_bound(fs_env: TieringEnv, tmp_path: Path) -> None:
    w = build(fs_env)
    cache_dir = tmp_path / "index-cache"
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
        segments = [
            s for s in ctx.metadata.list_segments(tip_of(w)) if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        ]
        first = RemoteIndexCache(ctx.storage, 1 << 20, cache_dir)
        original = first.get(segments[0], ObjectKind.OFFSET_INDEX)
        assert original and (cache_dir / f"{segments[0].segment_id}.index").read_bytes() == original

        (cache_dir / f"{segments[0].segment_id}.index").write_bytes(b"\x00" * len(original))  # corrupted on disk
        second = RemoteIndexCache(ctx.storage, 1 << 20, cache_dir)  # a later process
        assert second.get(segments[0], ObjectKind.OFFSET_INDEX) == original
        assert (second.hits, second.misses) == (0, 1)
        assert (cache_dir / f"{segments[0].segment_id}.index").read_bytes() == original
        assert second.get(segments[0], ObjectKind.OFFSET_INDEX) == original and second.hits == 1

        sizes = [len(second.get(s, ObjectKind.TIME_INDEX) or b"") for s in segments]
        bound = max(sizes) + len(original)
        small = RemoteIndexCache(ctx.storage, bound, cache_dir)  # reopening trims to the new bound
        assert small.size_bytes <= bound
        for s in segments:
            small.get(s, ObjectKind.OFFSET_INDEX)
            small.get(s, ObjectKind.TIME_INDEX)
            assert small.size_bytes <= bound
            on_disk = sum(p.stat().st_size for p in cache_dir.iterdir() if not p.name.startswith("."))
            assert on_disk == small.size_bytes
        assert small.get(segments[-1], ObjectKind.TIME_INDEX) is not None and small.hits >= 1


def test_the_disk_cache_never_touches_files_it_did_not_create(fs_env: TieringEnv, tmp_path: Path) -> None:
    """A cache over a directory holding a metadata DB and a broker's segment, bounded below their
    size, evicts only its own entries; reads through the config use a subdirectory it owns."""
    w = build(fs_env)
    shared = tmp_path / "shared"
    shared.mkdir()
    foreign = {"meta.db": b"d" * 4096, "00000000000000000000.log": b"l" * 4096, "notes": b"n"}
    for name, data in foreign.items():
        (shared / name).write_bytes(data)
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
        segments = [
            s for s in ctx.metadata.list_segments(tip_of(w)) if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        ]
        cache = RemoteIndexCache(ctx.storage, 64, shared)
        for s in segments:
            cache.get(s, ObjectKind.OFFSET_INDEX)
        assert cache.size_bytes <= 64
        assert {name: (shared / name).read_bytes() for name in foreign} == foreign
        with pytest.raises(ValueError, match="positive"):
            RemoteIndexCache(ctx.storage, 0, shared)
        assert cache_directory(shared) == shared / "remote-index-cache"
