"""The operator pages' metric list (docs/running.md) and alert table (docs/deploy.md) name
everything the worker exports and the chart alerts on: an operator reads them there first."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from worker.metrics import Metrics

ROOT = Path(__file__).resolve().parents[1]
METRICS_PAGE = (ROOT / "docs" / "running.md").read_text()
ALERTS_PAGE = (ROOT / "docs" / "deploy.md").read_text()


def test_every_exported_metric_is_in_the_metric_list():
    names = {mf.name + ("_total" if mf.type == "counter" else "") for mf in Metrics().registry.collect()}
    assert len(names) > 30
    missing = sorted(n for n in names if f"`{n}`" not in METRICS_PAGE)
    assert not missing, f"metrics docs/running.md does not list: {missing}"


def test_every_alert_of_the_chart_is_in_the_alert_table():
    rules = yaml.safe_load((ROOT / "helm" / "olu-worker" / "files" / "alerts.yaml").read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    assert len(alerts) >= 10
    table = set(re.findall(r"^\| `(Olu\w+)`", ALERTS_PAGE, flags=re.M))
    assert alerts == table, f"missing from docs/deploy.md's table: {sorted(alerts - table)}; stale: {sorted(table - alerts)}"
