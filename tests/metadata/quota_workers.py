"""A process drawing on a broker's quota: ``python -m tests.metadata.quota_workers URL BROKER CAP TTL_MS``.

It reads commands on stdin, one a line: ``take N`` takes N bytes from its bucket (which refreshes
its share on every take) and prints ``SHARE <holders> <rate>``; ``leave`` leaves the share and
prints ``LEFT``. The test kills it to play a process that died.
"""

from __future__ import annotations

import sys

from tiering_core.metadata.quota_holders import StoreQuotaShare
from tiering_core.metadata.store import RemoteLogMetadataStore
from tiering_core.storage.quota import COPY, TokenBucket


def main(url: str, broker: str, cap: str, ttl_ms: str) -> None:
    with RemoteLogMetadataStore(url) as store:
        share = StoreQuotaShare(store, int(broker), COPY, ttl_ms=int(ttl_ms))
        bucket = TokenBucket(int(cap), share=share, refresh_seconds=0.0)
        print("READY", share.holder, flush=True)
        for line in sys.stdin:
            command, *args = line.split()
            if command == "take":
                bucket.take(int(args[0]))
                print("SHARE", bucket.holders, int(bucket.rate), flush=True)
            elif command == "leave":
                bucket.close()
                print("LEFT", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
