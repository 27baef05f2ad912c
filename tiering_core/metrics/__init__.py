"""The platform's metrics, in Kafka's names (KIP-405 and KIP-930).

- ``names``: the metric set, each with its kind, labels and meaning, and its names in StatsD
  (``tiering.<Name>``) and Prometheus (``tiering_<Name>``);
- ``sink``: where a run reports what it did as it happens (Airflow's StatsD or OpenTelemetry
  pipeline inside a task, nothing elsewhere);
- ``snapshot``: the values the store holds for every partition, from which the Prometheus
  exposition and the Tiering page are computed (so counters survive restarts and every broker
  is reflected);
- ``collect``: a snapshot (and a topic's chart series) read from the store in a few set-wise
  queries;
- ``overview``: what the Tiering page shows above its partitions (per-topic sums, the partitions
  and replicas in an alert state), read for only that, by the snapshot's rules;
- ``tally``: a run's counts of its acts on a partition, reported as they happen and stored in
  the partition's counters once when the run ends;
- ``exposition``: a snapshot as Prometheus text format 0.0.4 (``/tiering/metrics`` serves it).
"""
