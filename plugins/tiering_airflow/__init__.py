"""Airflow glue for the tiering platform, importable as the package ``plugins``.

``hooks``, ``operators``, ``sensors`` and ``triggers`` are a few lines each over
``tiering_core``; ``tiering_ui`` is the Tiering page; ``tiering_plugin.py`` registers the page
with Airflow. Airflow's plugin manager loads only ``tiering_plugin.py`` (see ``.airflowignore``);
everything else is imported as ``plugins.<module>``, the same name from the project root and
from inside Airflow, so serialized trigger class paths resolve everywhere.
"""

from __future__ import annotations
