"""docker/prometheus/alerts.yml: Prometheus loads it (prometheus.yml's rule_files, mounted beside
it by the compose files), promtool accepts the config and the rules, and ``promtool test rules``
passes alerts_test.yml, which fires and holds back every alert. Each alert reads only metrics the
exposition exports, names its labels in its summary and description, has a severity, a ``for:``
that spans several scrapes and a runbook section that exists; the table of alerts in
docs/metrics.md is the file's.

promtool is Debian's ``prometheus`` package: the test command installs it before the suite
(``python -m tests.deploy.engine tools``), and the test with apt-get when it is still missing (as
the Docker engine's packages are); a machine where it cannot be had skips, CI fails.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import unavailable
from tests.deploy.engine import TOOL_PACKAGES, install_debian_packages
from tests.monitoring.test_exposition import sample_snapshot
from tests.services import ServiceUnavailable
from tests.test_docker_files import mounts
from tests.test_docker_monitoring import FUNCTIONS, promql_names
from tiering_core.metrics import names
from tiering_core.monitoring.exposition import render

ROOT = Path(__file__).resolve().parents[1]
PROMETHEUS = ROOT / "docker" / "prometheus"
RULES = PROMETHEUS / "alerts.yml"
RULE_TESTS = PROMETHEUS / "alerts_test.yml"
OPERATIONS = ROOT / "docs/operations.md"
#: The PromQL functions a rule may call, beyond the dashboard's.
RULE_FUNCTIONS = FUNCTIONS | {"min_over_time", "max_over_time", "deriv", "absent"}
SEVERITIES = {"page", "ticket"}


@pytest.fixture(scope="module")
def promtool() -> str:
    """The promtool binary, installed from Debian's ``prometheus`` package when missing."""
    try:
        install_debian_packages({"promtool": TOOL_PACKAGES["promtool"]}, "no promtool")
    except ServiceUnavailable as exc:
        unavailable("promtool", exc)
    found = shutil.which("promtool")
    assert found is not None
    return found


def rules() -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def seconds(duration: str) -> int:
    """A Prometheus duration (``15m``, ``1h30m``) in seconds."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    parts = re.findall(r"(\d+)([smhd])", duration)
    assert "".join(n + u for n, u in parts) == duration, duration
    return sum(int(n) * units[u] for n, u in parts)


def promtool_run(promtool: str, *args: str, cwd: Path) -> str:
    proc = subprocess.run([promtool, *args], capture_output=True, text=True, cwd=cwd, timeout=120)
    assert proc.returncode == 0, f"promtool {' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


def test_the_config_and_the_rules_pass_promtool_s_checks(promtool: str, tmp_path: Path) -> None:
    """The config as Prometheus sees it in the compose stack: alerts.yml beside prometheus.yml, the
    scrapers' token in its file (a stand-in here)."""
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    assert config["rule_files"] == ["alerts.yml"]
    (job,) = config["scrape_configs"]
    token = tmp_path / "tiering-metrics-token"
    token.write_text("stand-in\n")
    job["authorization"]["credentials_file"] = str(token)
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    shutil.copy(RULES, tmp_path / "alerts.yml")
    out = promtool_run(promtool, "check", "config", "prometheus.yml", cwd=tmp_path)
    assert f"SUCCESS: {len(rules())} rules found" in out
    promtool_run(promtool, "check", "rules", "alerts.yml", cwd=tmp_path)


def test_every_alert_fires_and_holds_back_in_promtool_s_unit_tests(promtool: str, tmp_path: Path) -> None:
    shutil.copy(RULES, tmp_path / "alerts.yml")
    shutil.copy(RULE_TESTS, tmp_path / "alerts_test.yml")
    promtool_run(promtool, "test", "rules", "alerts_test.yml", cwd=tmp_path)
    cases = [
        case for test in yaml.safe_load(RULE_TESTS.read_text())["tests"] for case in test.get("alert_rule_test", [])
    ]
    for rule in rules():
        mine = [case for case in cases if case["alertname"] == rule["alert"]]
        assert any(case.get("exp_alerts") for case in mine), f"{rule['alert']} is never seen firing"
        assert any(not case.get("exp_alerts") for case in mine), f"{rule['alert']} is never seen held back"


def test_every_metric_an_alert_reads_is_exported_with_the_labels_it_names() -> None:
    text = render(sample_snapshot())
    exported = {s.name for family in text_string_to_metric_families(text) for s in family.samples}
    specs = {sample: spec for spec in names.METRICS + names.PLATFORM_METRICS for sample in spec.prometheus_samples}
    for rule in rules():
        metrics, grouped = promql_names(rule["expr"], RULE_FUNCTIONS)
        assert metrics and metrics <= exported, (rule["alert"], metrics - exported)
        labels = {label for metric in metrics for label in specs[metric].labels}
        assert grouped <= labels, (rule["alert"], grouped - labels)
        named = set(re.findall(r"\$labels\.(\w+)", rule["annotations"]["summary"] + rule["annotations"]["description"]))
        kept = grouped or labels  # an aggregation keeps only its grouping labels
        assert named == kept, (rule["alert"], named ^ kept)


def test_every_alert_has_a_severity_a_for_that_does_not_flap_and_a_runbook() -> None:
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    scrape = seconds(config["global"]["scrape_interval"])
    headings = {
        re.sub(r"[^\w-]", "", line.lstrip("#").strip().lower().replace(" ", "-"))
        for line in OPERATIONS.read_text().splitlines()
        if line.startswith("#")
    }
    alerts = rules()
    assert len({rule["alert"] for rule in alerts}) == len(alerts)
    for rule in alerts:
        assert rule["labels"]["severity"] in SEVERITIES, rule["alert"]
        # pending at one evaluation, firing at the next at the earliest: one scrape is never enough
        assert seconds(rule["for"]) >= scrape, rule["alert"]
        annotations = rule["annotations"]
        assert set(annotations) == {"summary", "description", "runbook"}, rule["alert"]
        page, _, anchor = annotations["runbook"].partition("#")
        assert page == "docs/operations.md" and anchor == rule["alert"].lower() and anchor in headings, rule["alert"]


def test_prometheus_reads_the_rules_beside_its_config_in_the_compose_stack() -> None:
    compose = yaml.safe_load((ROOT / "docker" / "docker-compose.yml").read_text())
    by_target = {m.target: m.source for m in mounts(compose["services"]["prometheus"])}
    assert by_target["/etc/prometheus/alerts.yml"] == "./prometheus/alerts.yml"
    assert (
        Path(by_target["/etc/prometheus/prometheus.yml"]).parent == Path(by_target["/etc/prometheus/alerts.yml"]).parent
    )
    # The Debian build only replaces the image: the mounts are docker-compose.yml's.
    debian = yaml.safe_load((ROOT / "docker" / "debian" / "docker-compose.yml").read_text())
    assert "volumes" not in debian["services"]["prometheus"]


def test_the_docs_table_of_alerts_is_the_rule_file_s() -> None:
    page = (ROOT / "docs/metrics.md").read_text()
    section = page.split("\n## Alerts\n", 1)[1].split("\n## ", 1)[0]
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")] for line in section.splitlines() if line.startswith("| `")
    ]
    assert [(row[0].strip("`"), row[1]) for row in rows] == [
        (rule["alert"], rule["labels"]["severity"]) for rule in rules()
    ]
    for row, rule in zip(rows, rules(), strict=True):
        minutes = seconds(rule["for"]) // 60
        assert row[2].endswith(f"for {minutes} minute" + ("s" if minutes > 1 else "")), rule["alert"]
