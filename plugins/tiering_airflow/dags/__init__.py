"""The platform's DAGs, built from the config, for a dags folder that holds one short file::

    from tiering_airflow.dags import tiering_dags

    globals().update(tiering_dags())

``tiering_dags()`` returns every DAG by id: the copy and retention DAGs of the config's topics and
of the ``"*"`` default (``topics``), the manual ``tiering_delete_partition``,
``tiering_delete_records``, ``tiering_rewrite`` and ``tiering_replay``, and the Spark DAGs
(``spark``). Each DAG's schedule and queue come from the config's ``dags:`` section.
"""

from __future__ import annotations

from tiering_airflow.dags.factory import GROUPS, tiering_dags

__all__ = ["GROUPS", "tiering_dags"]
