"""What Airflow's providers manager reads about this distribution (``apache_airflow_provider``
entry point): the modules of its hooks, operators, sensors and triggers and its connection type,
in the schema of Airflow's ``provider_info.schema.json``.

The plugin (the Tiering page) is not listed here: the ``airflow.plugins`` entry point registers
it, and a provider's ``plugins`` would register it a second time.
"""

from __future__ import annotations

from typing import Any

from tiering_core import __version__

#: The distribution's name (setup.cfg's ``name``): Airflow refuses provider info naming another.
PACKAGE_NAME = "kafka-tiering"
INTEGRATION = "Kafka Tiering"


def by_integration(*modules: str) -> list[dict[str, Any]]:
    return [{"integration-name": INTEGRATION, "python-modules": list(modules)}]


def get_provider_info() -> dict[str, Any]:
    """The provider's info: Airflow calls this when it lists or loads providers."""
    return {
        "package-name": PACKAGE_NAME,
        "name": INTEGRATION,
        "description": "Batch tiered storage for Apache Kafka with KIP-405 semantics: copy, retention, "
        "removal, replay and Spark DAGs over a remote tier, and the Tiering page.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": INTEGRATION,
                "external-doc-url": "https://kafka.apache.org/documentation/#tiered_storage",
                "tags": ["software"],
            }
        ],
        "hooks": by_integration("tiering_airflow.hooks.tiering"),
        "operators": by_integration("tiering_airflow.operators.tiering", "tiering_airflow.operators.spark"),
        "sensors": by_integration("tiering_airflow.sensors.tiering"),
        "triggers": by_integration("tiering_airflow.triggers.tiering"),
        "connection-types": [
            {
                "hook-class-name": "tiering_airflow.hooks.tiering.TieringHook",
                "hook-name": INTEGRATION,
                "connection-type": "tiering",
            }
        ],
    }
