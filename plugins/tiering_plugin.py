"""The plugins-folder registration of the Tiering page: ``tiering_airflow.plugin.TieringPlugin``.

Airflow's plugin manager loads this file by path as the top-level module ``tiering_plugin`` and
registers every plugin class it finds in it. Everything else is the package ``tiering_airflow``
beside it: Airflow puts the plugins folder on ``sys.path`` in every component (API server,
scheduler, DAG processor, triggerer, workers). Where the package is installed as a distribution
(``pip install .``), its ``airflow.plugins`` entry point registers the plugin and this file
defines none, so that the page is registered once.
"""

from __future__ import annotations

from tiering_airflow import plugin

if not plugin.by_entry_point():
    TieringPlugin = plugin.TieringPlugin
