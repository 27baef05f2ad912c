"""Per-topic copy and retention DAGs, generated from the platform config.

Built by ``tiering_airflow.dags`` (module ``tiering_airflow.dags.topics``, whose docstring says what
it builds); a missing or invalid config is this file's import error and names the problem, and the
other files load.
"""

from tiering_airflow.dags import tiering_dags

globals().update(tiering_dags("topics"))
