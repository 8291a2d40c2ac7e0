"""The README's metric list and alert table name everything the worker exports and the chart
alerts on: an operator reads them there first."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from worker.metrics import Metrics

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_every_exported_metric_is_in_the_readme():
    names = {mf.name + ("_total" if mf.type == "counter" else "") for mf in Metrics().registry.collect()}
    assert len(names) > 30
    missing = sorted(n for n in names if f"`{n}`" not in README)
    assert not missing, f"metrics the README does not list: {missing}"


def test_every_alert_of_the_chart_is_in_the_readme_table():
    rules = yaml.safe_load((ROOT / "helm" / "olu-worker" / "files" / "alerts.yaml").read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    assert len(alerts) >= 10
    table = set(re.findall(r"^\| `(Olu\w+)`", README, flags=re.M))
    assert alerts == table, f"missing from the README's table: {sorted(alerts - table)}; stale: {sorted(table - alerts)}"
