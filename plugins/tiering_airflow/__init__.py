"""Airflow glue for the tiering platform: the package ``tiering_airflow``, an Airflow provider.

``hooks``, ``operators``, ``sensors`` and ``triggers`` are a few lines each over
``tiering_core``; ``dags`` builds the platform's DAGs from the config; ``ui`` is the Tiering page,
which ``plugin`` registers. Installed as a distribution, Airflow finds the provider through its
``apache_airflow_provider`` entry point (``get_provider_info``) and the plugin through its
``airflow.plugins`` one; from a plugins folder, ``plugins/tiering_plugin.py`` registers the plugin
(see ``plugins/.airflowignore``). The package has one name everywhere, so serialized trigger
class paths resolve in every component.
"""

from __future__ import annotations
