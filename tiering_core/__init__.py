"""Batch tiered storage for Apache Kafka with KIP-405 semantics.

The core library holds all domain logic and imports neither Airflow nor Spark.
"""

from __future__ import annotations

__version__ = "0.1.0"
