"""The live cluster as a source: offsets, topic ids and topic configs from Kafka's admin API.

With a ``kafka:`` section in the platform config, ``status``, ``copy`` and ``retention`` take the
high watermark, the last stable offset, the log start offset, topic ids and the topic configs Kafka
owns from the cluster (``source.ClusterSource``); ``partition`` holds the rules that say which wins
when the broker's files lag it; ``identity`` whether the cluster that answers is the one the log
dirs belong to (its cluster id), before removal or a DeleteRecords takes its word. Without the
section nothing here is imported, nor kafka-python.
"""
