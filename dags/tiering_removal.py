"""``tiering_delete_partition``: delete all remote data of removed partitions, by hand only.

Built by ``tiering_airflow.dags`` (module ``tiering_airflow.dags.removal``, whose docstring says what it builds).
It loads even when the config is broken (``tiering_dags.py`` reports that).
"""

from tiering_airflow.dags import tiering_dags

globals().update(tiering_dags("delete_partition"))
