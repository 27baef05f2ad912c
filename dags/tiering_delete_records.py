"""``tiering_delete_records``: a DeleteRecords applied through the platform, by hand only.

Built by ``tiering_airflow.dags`` (module ``tiering_airflow.dags.delete_records``, whose docstring says what it builds).
It loads even when the config is broken (``tiering_dags.py`` reports that).
"""

from tiering_airflow.dags import tiering_dags

globals().update(tiering_dags("delete_records"))
