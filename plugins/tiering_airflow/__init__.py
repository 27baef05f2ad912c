"""Airflow glue for the tiering platform: the package ``tiering_airflow``.

``hooks``, ``operators``, ``sensors`` and ``triggers`` are a few lines each over
``tiering_core``; ``ui`` is the Tiering page. ``plugins/tiering_plugin.py`` registers the page
with Airflow, whose plugin manager loads only that file (see ``plugins/.airflowignore``). The
package has one name everywhere, from Airflow's plugins folder on ``sys.path`` or from
``pip install .``, so serialized trigger class paths resolve in every component.
"""

from __future__ import annotations
