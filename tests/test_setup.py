"""The distribution setup.cfg and setup.py describe, installed the way a user installs it: a wheel
built from a copy of the repository, installed into a fresh virtualenv that holds Airflow but not
the checkout; Airflow there finds the provider, the plugin (once, with the plugins folder's file
present too) and, from a three-line file in its dags folder, every DAG, with the config's ``dags:``
schedules."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
#: What the wheel is built from (setup.py's packages, setup.cfg's metadata and README).
SOURCES = ("setup.cfg", "setup.py", "pyproject.toml", "README.md", "tiering_core", "spark_apps")
SOURCES += ("plugins/tiering_airflow",)
THREE_LINES = "from tiering_airflow.dags import tiering_dags\n\nglobals().update(tiering_dags())\n"
#: Distributions of the running environment the fresh one must not see: the checkout's own.
OURS = ("kafka_tiering", "__editable__", "kafka-tiering")


@dataclass(frozen=True)
class Installed:
    """A virtualenv with the wheel installed, and where its Airflow keeps its state."""

    python: Path
    venv: Path
    work: Path

    def env(self, **extra: str) -> dict[str, str]:
        """Airflow's settings in ``work``; no PYTHONPATH, so nothing of the checkout is importable."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "AIRFLOW", "TIERING"))}
        return {
            **env,
            "AIRFLOW_HOME": str(self.work / "airflow-home"),
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.work / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(self.work / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{self.work / 'airflow.db'}",
            "TIERING_CONFIG": str(self.work / "tiering.yaml"),
            **extra,
        }

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(self.python), *args], env=self.env(), cwd=self.work, capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, f"{args}: {proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
        return proc


def build_wheel(out: Path) -> Path:
    """``pip wheel`` of a copy of the repository's sources: the checkout gets no build/ or egg-info."""
    source = out / "source"
    for name in SOURCES:
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy2
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        copy(ROOT / name, source / name)
    wheel = ["wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", str(out / "wheels")]
    subprocess.run(
        [sys.executable, "-m", "pip", *wheel, str(source)],
        check=True,
        capture_output=True,
        timeout=300,
        cwd=out,
    )
    (built,) = (out / "wheels").glob("kafka_tiering-*.whl")
    return built


def third_party(out: Path) -> Path:
    """The running environment's site-packages without the checkout's own distribution, as a
    folder of links for the fresh virtualenv's path (Airflow and every dependency, not ours)."""
    site = next(Path(p) for p in sys.path if Path(p).name == "site-packages" and (Path(p) / "airflow").is_dir())
    links = out / "third-party"
    links.mkdir()
    for entry in site.iterdir():
        if not entry.name.startswith(OURS) and entry.suffix != ".pth":
            (links / entry.name).symlink_to(entry)
    return links


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    out = tmp_path_factory.mktemp("wheel")
    wheel = build_wheel(out)
    venv = out / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (site,) = (venv / "lib").glob("python3*/site-packages")
    (site / "third_party.pth").write_text(f"{third_party(out)}\n")
    work = out / "work"
    yield Installed(python, venv, work)


def tiering_config(work: Path) -> None:
    (work / "kafka-logs").mkdir(parents=True)
    doc = {
        "log_dirs": [str(work / "kafka-logs")],
        "metadata": {"url": f"sqlite:///{work / 'metadata.db'}"},
        "remote": {"backend": "filesystem", "root": str(work / "tier")},
        "topics": {"orders": {}},
        "dags": {"copy": {"schedule": "*/15 * * * *"}, "export": {"queue": "spark"}},
    }
    (work / "tiering.yaml").write_text(yaml.safe_dump(doc))


DAGBAG = """
import json, tiering_airflow, tiering_core
from airflow.dag_processing.dagbag import DagBag
from airflow import plugins_manager
from airflow.providers_manager import ProvidersManager
plugins_manager.ensure_plugins_loaded()
bag = DagBag()
hook = ProvidersManager().hooks["tiering"]
print(json.dumps({
    "files": [tiering_airflow.__file__, tiering_core.__file__],
    "plugin_errors": plugins_manager.get_import_errors(),
    "hook": [hook.hook_class_name, hook.package_name, hook.connection_id_attribute_name],
    "errors": bag.import_errors,
    "dags": sorted(bag.dag_ids),
    "copy": bag.dags["tiering_copy__orders"].timetable.expression,
    "export_queue": bag.dags["tiering_export"].tasks[0].queue,
}))
"""


def test_airflow_finds_the_provider_the_plugin_once_and_every_dag_of_a_three_line_file(installed: Installed) -> None:
    work = installed.work
    tiering_config(work)
    (work / "dags").mkdir()
    (work / "dags" / "tiering.py").write_text(THREE_LINES)
    (work / "plugins").mkdir()
    shutil.copy2(ROOT / "plugins" / "tiering_plugin.py", work / "plugins")  # the folder's file, beside the wheel's
    commands = [
        ("-m", "airflow", "providers", "get", "kafka-tiering", "-o", "json"),
        ("-m", "airflow", "plugins", "-o", "json"),
        ("-c", DAGBAG),
    ]
    with ThreadPoolExecutor(len(commands)) as pool:
        provider, plugins, dags = (p.stdout for p in pool.map(lambda c: installed.run(*c), commands))

    assert json.loads(provider[provider.index("[") :]) == [{"Provider": "kafka-tiering", "Version": "0.1.0"}]

    (plugin,) = json.loads(plugins[plugins.index("[") :])
    assert plugin["name"] == "tiering" and "tiering_airflow.plugin:TieringPlugin" in plugin["source"]

    out = json.loads(dags.strip().splitlines()[-1])
    assert all(Path(f).is_relative_to(installed.venv) for f in out["files"]), out["files"]
    assert out["hook"] == ["tiering_airflow.hooks.tiering.TieringHook", "kafka-tiering", "aws_conn_id"]
    assert out["errors"] == {} and out["plugin_errors"] == {}  # no "Plugin 'tiering' already registered"
    assert {"tiering_copy__orders", "tiering_retention__orders", "tiering_copy_default_topics"} <= set(out["dags"])
    assert {"tiering_delete_partition", "tiering_delete_records", "tiering_rewrite", "tiering_replay"} <= set(
        out["dags"]
    )
    assert {"tiering_spark_bulk_upload", "tiering_spark_verify", "tiering_export"} <= set(out["dags"])
    assert (out["copy"], out["export_queue"]) == ("*/15 * * * *", "spark")
