"""``python -m tiering_core.cli`` runs the ``tiering`` command."""

from __future__ import annotations

import sys

from tiering_core.cli.main import main

sys.exit(main())
