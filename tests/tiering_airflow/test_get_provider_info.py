"""The provider info Airflow's providers manager reads: valid by Airflow's own schema, naming the
distribution, modules that import and the hook of the ``tiering`` connection type."""

from __future__ import annotations

import configparser
import importlib
import json
from pathlib import Path

from tests.airflow_support import ROOT
from tiering_airflow.get_provider_info import get_provider_info
from tiering_core import __version__


def test_the_info_is_valid_by_airflow_s_schema_and_names_the_distribution() -> None:
    import airflow
    import jsonschema

    info = get_provider_info()
    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    jsonschema.validate(info, schema)
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    assert info["package-name"] == setup["metadata"]["name"] and info["versions"] == [__version__]
    assert "plugins" not in info  # the airflow.plugins entry point registers it, once
    entry_points = setup["options.entry_points"]
    assert "tiering_airflow.get_provider_info:get_provider_info" in entry_points["apache_airflow_provider"]
    assert "tiering_airflow.plugin:TieringPlugin" in entry_points["airflow.plugins"]


def test_every_module_imports_and_the_connection_type_is_the_hook_s() -> None:
    info = get_provider_info()
    integrations = {i["integration-name"] for i in info["integrations"]}
    for kind in ("hooks", "operators", "sensors", "triggers"):
        for entry in info[kind]:
            assert entry["integration-name"] in integrations
            for module in entry["python-modules"]:
                importlib.import_module(module)
    (connection,) = info["connection-types"]
    module, _, name = connection["hook-class-name"].rpartition(".")
    hook = getattr(importlib.import_module(module), name)
    assert (hook.conn_type, hook.hook_name) == (connection["connection-type"], connection["hook-name"])
    assert set(hook.get_ui_field_behaviour()["hidden_fields"]) == {"host", "schema", "login", "port", "extra"}
