"""``tiering_rewrite``: re-encode a topic's remote segments in the current format, by hand only.

Built by ``tiering_airflow.dags`` (module ``tiering_airflow.dags.rewrite``, whose docstring says what it builds).
It loads even when the config is broken (``tiering_dags.py`` reports that).
"""

from tiering_airflow.dags import tiering_dags

globals().update(tiering_dags("rewrite"))
