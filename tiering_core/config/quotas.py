"""The ``quotas:`` section: a broker host's upload and fetch caps, under Kafka's names (KIP-956).

``quotas:`` at the top level applies to every broker; ``brokers.<id>.quotas`` overrides it key by
key for one broker. A key absent is unlimited, Kafka's default (docs/operations.md, "Upload and
fetch quotas").
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tiering_core.config.parsing import as_int, check_keys, require_mapping
from tiering_core.storage.quota import COPY_QUOTA_KEY, FETCH_QUOTA_KEY, QuotaConfig

#: Each key's field of ``QuotaConfig``.
QUOTA_KEYS = {COPY_QUOTA_KEY: "copy_bytes_per_second", FETCH_QUOTA_KEY: "fetch_bytes_per_second"}


def parse_quotas(raw: Any, where: str, base: QuotaConfig | None = None) -> QuotaConfig:
    """``{remote.log.manager.copy.max.bytes.per.second: N, ...fetch...: N}`` over ``base``: each cap
    a positive integer of bytes per second; an unknown key or a bad value names the key."""
    section = require_mapping(raw if raw is not None else {}, where)
    check_keys(section, set(QUOTA_KEYS), where)
    values = {QUOTA_KEYS[key]: as_int(value, f"{where}.{key}", 1) for key, value in section.items()}
    return replace(base or QuotaConfig(), **values)
