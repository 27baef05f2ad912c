"""The platform's metrics as runs record them: one Prometheus-style name each, mapped to Kafka's.

- ``names``: the metric set, each with its kind, labels, meaning and the Kafka metric (KIP-405,
  KIP-956, KIP-1257) it stands for, and its names in Airflow's pipeline (``tiering.<name>``) and
  Prometheus (``tiering_<name>``); the field of the store's ``PartitionCounters`` each counter is
  kept in;
- ``sink``: where a run reports what it did as it happens (Airflow's StatsD or OpenTelemetry
  pipeline inside a task, nothing elsewhere);
- ``tally``: a run's counts of its acts on a partition, reported as they happen and stored in
  the partition's counters once when the run ends.

What is served from the store (the snapshot, the Prometheus exposition, the Tiering page's
figures) is ``tiering_core.monitoring``, above the tier view it reads.
"""
