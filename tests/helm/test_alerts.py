"""Alert rules and the Grafana dashboard shipped with the chart (helm/olu-worker/files/).

``promtool test rules`` runs tests/helm/alerts_test.yaml against files/alerts.yaml, the same file
the chart's PrometheusRule embeds: every alert is shown firing on synthetic series and silent on
healthy ones. promtool comes from PATH (CI installs Debian's ``prometheus`` package) or is fetched
from Debian into a cache by ``worker.devtools.promtool``; the promtool tests skip, saying what to
install, only where neither is possible. Offline checks keep every PromQL expression, in the alerts and
in the dashboard, to metric and label names that worker/metrics/ actually exports.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from worker.devtools.promtool import PromtoolUnavailable, find_promtool
from worker.metrics import LABEL_NAMES, Metrics

HERE = Path(__file__).resolve().parent
FILES = HERE.parents[1] / "helm" / "olu-worker" / "files"
ALERTS = FILES / "alerts.yaml"
DASHBOARD = FILES / "dashboard.json"
UNIT_TESTS = HERE / "alerts_test.yaml"
#: Labels the scrape adds (ServiceMonitor / Prometheus target labels) and the histogram bucket label.
TARGET_LABELS = frozenset({"namespace", "job", "pod", "instance", "service", "container", "endpoint", "le"})
_METRIC = re.compile(r"\bolu_[a-zA-Z0-9_]+")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_SELECTOR_LABELS = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*\"")


@pytest.fixture(scope="module")
def promtool() -> Path:
    try:
        return find_promtool()
    except PromtoolUnavailable as e:
        pytest.skip(str(e))


def exported_series() -> set[str]:
    """Every series name worker/metrics/ can export (counters as *_total, histograms' parts)."""
    names = set()
    for family in Metrics().registry.collect():
        if family.type == "counter":
            names.add(f"{family.name}_total")
        elif family.type == "histogram":
            names.update(f"{family.name}_{suffix}" for suffix in ("bucket", "count", "sum"))
        else:
            names.add(family.name)
    return names


def alert_rules() -> list[dict]:
    return [rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]]


def dashboard_queries(board: dict) -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target and every query variable."""
    out = []
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            out.append((f"panel {panel['title']!r} {target['refId']}", target["expr"]))
    for var in board["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            out.append((f"variable {var['name']}", query))
    return out


def check_promql(where: str, expr: str, known: set[str]) -> None:
    metrics = set(_METRIC.findall(expr))
    assert metrics, f"{where}: references no olu_ metric: {expr}"
    assert metrics <= known, f"{where}: unknown metric(s) {sorted(metrics - known)}"
    allowed = LABEL_NAMES | TARGET_LABELS
    for group in _GROUPING.findall(expr):
        labels = {label.strip() for label in group.split(",") if label.strip()}
        assert labels <= allowed, f"{where}: unknown label(s) {sorted(labels - allowed)} in {expr}"
    selected = set(_SELECTOR_LABELS.findall(expr))
    assert selected <= allowed, f"{where}: unknown label(s) {sorted(selected - allowed)} in {expr}"


# ----------------------------------------------------------------------------- promtool
def test_promtool_checks_the_rule_file(promtool):
    result = subprocess.run([promtool, "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(alert_rules())} rules found" in result.stdout


def test_promtool_unit_tests_of_every_alert(promtool):
    result = subprocess.run([promtool, "test", "rules", str(UNIT_TESTS)], capture_output=True, text=True,
                            timeout=120, cwd=HERE)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_is_tested_firing_and_silent():
    tests = yaml.safe_load(UNIT_TESTS.read_text())
    assert tests["rule_files"] == ["../../helm/olu-worker/files/alerts.yaml"]  # the chart's own file
    firing, silent = set(), set()
    for case in tests["tests"]:
        for check in case["alert_rule_test"]:
            (firing if check.get("exp_alerts") else silent).add(check["alertname"])
    names = {rule["alert"] for rule in alert_rules()}
    assert names == firing, f"alerts never shown firing: {sorted(names - firing)}"
    assert names == silent, f"alerts never shown silent: {sorted(names - silent)}"


# ----------------------------------------------------------------------------- the rules themselves
def test_alert_rules_cover_the_operators_questions():
    rules = {rule["alert"]: rule for rule in alert_rules()}
    exprs = {name: " ".join(rule["expr"].split()) for name, rule in rules.items()}
    assert "olu_privacy_budget_used_ratio > 0.9" in exprs["OluPrivacyBudgetNearlySpent"]
    assert "olu_delete_to_release_seconds_bucket" in exprs["OluDeletionReleaseOverBound"]
    assert "olu_snapshot_last_success_timestamp_seconds" in exprs["OluSnapshotStale"]
    assert "increase(olu_snapshot_failures_total" in exprs["OluSnapshotFailing"]
    assert "rate(olu_dead_letters_total[5m])" in exprs["OluDeadLettersHigh"]
    assert "olu_consumer_lag" in exprs["OluConsumerLagHigh"] and rules["OluConsumerLagHigh"]["for"] == "10m"
    noise = rules["OluNoiseToSignalHigh"]
    # the chart substitutes its threshold value for exactly this text (templates/prometheusrule.yaml)
    assert exprs["OluNoiseToSignalHigh"] == "olu_noise_to_signal_ratio > 0.5" and noise["for"] == "10m"
    runbook = noise["annotations"]["runbook"]
    for remedy in ("deletion rate", "privacy target", "per deletion request", "l2", "rotation"):
        assert remedy in runbook, remedy
    for name, rule in rules.items():
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], name


def test_alert_expressions_use_only_exported_metrics_and_labels():
    known = exported_series()
    for rule in alert_rules():
        check_promql(f"alert {rule['alert']}", rule["expr"], known)


def test_bucket_bounds_in_rules_exist_in_the_worker_histogram():
    """``le="10.0"`` must match the label the Python client writes for the 10 s bucket."""
    metrics = Metrics()
    metrics.observe_delete_to_release(0.1)
    exposition = metrics.render().decode()
    texts = [rule["expr"] for rule in alert_rules()]
    texts += [q for _, q in dashboard_queries(json.loads(DASHBOARD.read_text()))]
    bounds = {b for text in texts for b in re.findall(r'le\s*=\s*"([^"]+)"', text)}
    assert bounds, "expected a bucket bound in the delete-to-release alert"
    for bound in bounds:
        assert f'olu_delete_to_release_seconds_bucket{{le="{bound}"}}' in exposition, bound


# ----------------------------------------------------------------------------- the dashboard
def test_dashboard_is_valid_json_with_the_promised_panels():
    board = json.loads(DASHBOARD.read_text())
    assert board["uid"] and board["title"] and board["schemaVersion"] >= 30
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    variables = {var["name"]: var for var in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for panel in board["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert panel["targets"], panel["title"]
    exprs = " ".join(" ".join(q.split()) for _, q in dashboard_queries(board))
    for needed in ("olu_privacy_budget_used_ratio", "olu_privacy_epsilon", "rate(olu_deletions_total",
                   "histogram_quantile(0.5, sum by (le) (rate(olu_delete_to_release_seconds_bucket",
                   "histogram_quantile(0.99, sum by (le) (rate(olu_delete_to_release_seconds_bucket",
                   "olu_consumer_lag", "rate(olu_events_total"):
        assert needed in exprs, needed
    per_partition = [p for p in board["panels"] if "budget used per partition" in p.get("title", "").lower()]
    assert per_partition and "by (topic, partition)" in per_partition[0]["targets"][0]["expr"]
    noise = {}
    for metric in ("olu_release_noise_std", "olu_noise_to_signal_ratio"):  # the noise in the releases
        panels = [p for p in board["panels"] if metric in " ".join(t["expr"] for t in p.get("targets", []))]
        assert panels and "by (topic, partition)" in panels[0]["targets"][0]["expr"], metric
        noise[metric] = panels[0]
    ratio = noise["olu_noise_to_signal_ratio"]
    assert [s["value"] for s in ratio["fieldConfig"]["defaults"]["thresholds"]["steps"]] == [None, 0.5]
    rows = [(p["gridPos"]["y"], p["gridPos"]["x"]) for p in board["panels"]]
    assert len(rows) == len(set(rows)), "two panels in the same place"


def test_dashboard_queries_use_only_exported_metrics_and_labels():
    known = exported_series()
    for where, query in dashboard_queries(json.loads(DASHBOARD.read_text())):
        check_promql(where, query, known)
