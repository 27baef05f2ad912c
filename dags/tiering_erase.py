"""``tiering_erase``: erase the records of some keys from a topic's remote tier, by hand only.

Built by ``tiering_airflow.dags`` (module ``tiering_airflow.dags.erase``, whose docstring says what it builds).
It loads even when the config is broken (``tiering_dags.py`` reports that).
"""

from tiering_airflow.dags import tiering_dags

globals().update(tiering_dags("erase"))
