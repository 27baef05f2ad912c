"""The Spark DAGs: each one ``spark-submit`` of a ``spark_apps`` application.

Built by ``tiering_airflow.dags`` (module ``tiering_airflow.dags.spark``, whose docstring says what it builds).
It loads even when the config is broken (``tiering_dags.py`` reports that).
"""

from tiering_airflow.dags import tiering_dags

globals().update(tiering_dags("spark"))
