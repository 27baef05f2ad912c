"""The platform's metrics as they are served, read from the metadata store alone.

- ``snapshot``: the values the store holds for every partition, from which the Prometheus
  exposition and the Tiering page are computed (so counters survive restarts and every broker
  is reflected);
- ``collect``: a snapshot (and a topic's chart series) read from the store in a few set-wise
  queries, by the cluster view's rules (``tier.cluster``);
- ``overview``: what the Tiering page shows above its partitions (per-topic sums, the partitions
  and replicas in an alert state), read for only that, by the snapshot's rules;
- ``exposition``: a snapshot as Prometheus text format 0.0.4 (``/tiering/metrics`` serves it).

The runs record what they do through ``tiering_core.metrics`` (names, sink, tally), below this.
"""
