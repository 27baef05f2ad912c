"""The quotas' throttle time reaches the Prometheus exposition in seconds: a copy under
broker 1's upload cap waits, leaves its figures in the store when its process is done with the cap,
and the next scrape (another context, as the API server is another process) reports them."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.engine_support import TieringEnv
from tests.storage.quota_support import COPY_KEY, MiB, set_quotas, write_partition
from tiering_core.config import load_config
from tiering_core.context import TieringContext
from tiering_core.monitoring.collect import collect_metrics
from tiering_core.monitoring.exposition import render
from tiering_core.runs.copy import run_copy


def scrape(env: TieringEnv) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    with TieringContext.open(load_config(env.config_path)) as ctx:
        text = render(collect_metrics(ctx, tasks=False))
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return samples


def test_a_copys_throttle_time_reaches_the_exposition(fs_env: TieringEnv) -> None:
    assert "tiering_remote_copy_throttle_time_max_seconds" not in scrape(fs_env)  # no broker known yet
    set_quotas(fs_env, {COPY_KEY: 2 * MiB})
    w = write_partition(fs_env, 3, segment_mb=1)
    with TieringContext.open(load_config(fs_env.config_path).for_broker(1)) as ctx:
        bucket = ctx.storage.quotas.copy
        assert bucket is not None
        run_copy(ctx, w.tp)
        stats = bucket.stats
    assert stats.throttles > 0
    samples = scrape(fs_env)
    broker = (("broker", "1"),)
    assert samples["tiering_remote_copy_throttle_time_max_seconds"] == {broker: stats.throttle_ms_max / 1000}
    assert (
        samples["tiering_remote_copy_throttle_time_avg_seconds"][broker] == stats.throttle_ms / stats.throttles / 1000
    )
    assert samples["tiering_remote_fetch_throttle_time_max_seconds"] == {broker: 0.0}  # the fetch quota is not capped
