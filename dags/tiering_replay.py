"""``tiering_replay``: a range of the remote tier put back into a Kafka topic, by hand only.

Built by ``tiering_airflow.dags`` (module ``tiering_airflow.dags.replay``, whose docstring says what it builds).
It loads even when the config is broken (``tiering_dags.py`` reports that).
"""

from tiering_airflow.dags import tiering_dags

globals().update(tiering_dags("replay"))
