"""The Helm chart (helm/olu-worker), rendered and linted offline with helm-python-sdk (Helm v4).

No cluster: ``Chart.render`` is ``helm template`` and ``lint(strict=True)`` is ``helm lint
--strict``; both validate values against values.schema.json first, as ``helm install`` does.
Rendered manifests are parsed and checked object by object. The environment the chart
generates is fed to the worker's own settings loader, so a value the chart formats wrongly
(Helm reads every YAML number as a float) fails here, not in a crash-looping pod.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import helm_python as helm
import pytest
import yaml

from worker.config import OPTION_BY_NAME, OPTIONS, load_settings

CHART = Path(__file__).resolve().parents[2] / "helm" / "olu-worker"
NAME, NAMESPACE = "olu", "streaming"
FULLNAME = "olu-olu-worker"
REQUIRED = {"config": {"bootstrap_servers": "kafka-0.kafka:9092,kafka-1.kafka:9092", "dim": 10,
                       "state_url": "s3://olu-state/prod", "privacy_unit": "all-deletions"}}


def merge(base: dict, extra: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


VALUE_SETS = {
    "defaults": REQUIRED,
    "s3-sasl-tls": merge(REQUIRED, {
        "objectStore": {"existingSecret": "olu-s3", "region": "eu-west-1", "endpoint": "https://s3.example.internal",
                        "sessionTokenKey": "AWS_SESSION_TOKEN"},
        "kafkaAuth": {"sasl": {"enabled": True, "mechanism": "SCRAM-SHA-256", "existingSecret": "olu-kafka-user",
                               "usernameKey": "user", "passwordKey": "pass"},
                      "tls": {"enabled": True, "caSecret": "kafka-cluster-ca", "clientSecret": "olu-kafka-client",
                              "keyPasswordKey": "key.password"}},
        "kafka": {"client.rack": "eu-west-1a", "fetch.max.bytes": 104857600},
    }),
    "monitoring": merge(REQUIRED, {"metrics": {
        "serviceMonitor": {"enabled": True, "additionalLabels": {"release": "kube-prometheus-stack"},
                           "interval": "15s", "metricRelabelings": [{"action": "drop", "regex": "olu_model_steps",
                                                                     "sourceLabels": ["__name__"]}]},
        "prometheusRule": {"enabled": True, "additionalLabels": {"release": "kube-prometheus-stack"}},
        "dashboard": {"enabled": True, "annotations": {"grafana_folder": "Streaming"}},
    }}),
    "autoscaling": merge(REQUIRED, {"autoscaling": {"enabled": True, "minReplicas": 2, "maxReplicas": 8}}),
}


@pytest.fixture(scope="module")
def chart():
    with helm.Chart.load(CHART) as loaded:
        yield loaded


def render(chart, values: dict) -> list[dict]:
    """Every rendered object (NOTES.txt and empty templates left out)."""
    manifests = chart.render(values, name=NAME, namespace=NAMESPACE, is_install=True)
    objects = []
    for path, text in sorted(manifests.items()):
        if path.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                doc["__template"] = path
                objects.append(doc)
    return objects


def only(objects: list[dict], kind: str) -> dict:
    found = [o for o in objects if o["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {[o['kind'] for o in objects]}"
    return found[0]


def container(objects: list[dict]) -> dict:
    pod = only(objects, "Deployment")["spec"]["template"]["spec"]
    assert len(pod["containers"]) == 1
    return pod["containers"][0]


def env_of(objects: list[dict]) -> dict[str, dict]:
    entries = container(objects)["env"]
    names = [e["name"] for e in entries]
    assert len(names) == len(set(names)), f"duplicate env names: {names}"
    return {e["name"]: e for e in entries}


def plain_env(objects: list[dict]) -> dict[str, str]:
    return {name: e["value"] for name, e in env_of(objects).items() if "value" in e}


# ----------------------------------------------------------------------------- lint
@pytest.mark.parametrize("name", ["chart defaults", *VALUE_SETS])
def test_lint_strict_is_clean(name):
    values = None if name == "chart defaults" else VALUE_SETS[name]
    report = helm.lint(CHART, values, strict=True, namespace=NAMESPACE)
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert report["errors"] == [] and problems == [], report


def test_lint_reports_bad_values():
    report = helm.lint(CHART, merge(REQUIRED, {"config": {"eps": 0}}), strict=True)
    assert any("eps" in error for error in report["errors"]), report


@pytest.mark.parametrize("name", list(VALUE_SETS))
def test_every_object_follows_the_conventions(chart, name):
    objects = render(chart, VALUE_SETS[name])
    for obj in objects:
        meta = obj["metadata"]
        assert obj["apiVersion"] and meta["name"].startswith(FULLNAME), obj["__template"]
        labels = meta["labels"]
        assert labels["app.kubernetes.io/name"] == "olu-worker"
        assert labels["app.kubernetes.io/instance"] == NAME
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["helm.sh/chart"] == "olu-worker-0.1.0"
        assert meta["namespace"] == NAMESPACE


# ----------------------------------------------------------------------------- the defaults
def test_defaults_render_the_worker_and_nothing_optional(chart):
    objects = render(chart, REQUIRED)
    assert sorted(o["kind"] for o in objects) == ["Deployment", "PodDisruptionBudget", "Service", "ServiceAccount"]
    deployment = only(objects, "Deployment")
    assert deployment["apiVersion"] == "apps/v1" and deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    pod = deployment["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 180
    assert pod["serviceAccountName"] == FULLNAME and pod["automountServiceAccountToken"] is False
    c = container(objects)
    assert c["image"] == "olu-worker:0.1.0" and c["args"] == ["run"]
    assert c["ports"] == [{"name": "metrics", "containerPort": 9464, "protocol": "TCP"}]
    assert c["resources"]["requests"] and "cpu" not in c["resources"]["limits"]


def test_runs_as_non_root_with_a_read_only_root_filesystem(chart):
    objects = render(chart, REQUIRED)
    pod = only(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container(objects)["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 10001
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    # the only writable path: an emptyDir at /tmp, where numba caches its kernels
    mounts = {m["mountPath"]: m["name"] for m in container(objects)["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    assert plain_env(objects)["NUMBA_CACHE_DIR"].startswith("/tmp/")


def test_probes_hit_healthz_and_readyz_on_the_metrics_port(chart):
    objects = render(chart, merge(REQUIRED, {"config": {"http_port": 9100}}))
    c = container(objects)
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert c["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["ports"][0] == {"name": "metrics", "containerPort": 9100, "protocol": "TCP"}
    assert plain_env(objects)["OLU_HTTP_PORT"] == "9100"  # the worker listens where the probes look
    service = only(objects, "Service")
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 9464, "targetPort": "metrics", "protocol": "TCP"}]
    assert service["spec"]["selector"] == only(objects, "Deployment")["spec"]["selector"]["matchLabels"]
    assert service["spec"]["publishNotReadyAddresses"] is True  # scraped while restoring, too


def test_pod_disruption_budget(chart):
    objects = render(chart, REQUIRED)
    pdb = only(objects, "PodDisruptionBudget")
    assert pdb["apiVersion"] == "policy/v1" and pdb["spec"]["maxUnavailable"] == 1 and "minAvailable" not in pdb["spec"]
    pod_labels = only(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    pdb = only(render(chart, merge(REQUIRED, {"podDisruptionBudget": {"maxUnavailable": None, "minAvailable": 1}})),
               "PodDisruptionBudget")
    assert pdb["spec"] == {"minAvailable": 1, "selector": pdb["spec"]["selector"]}
    off = render(chart, merge(REQUIRED, {"podDisruptionBudget": {"enabled": False}}))
    assert not [o for o in off if o["kind"] == "PodDisruptionBudget"]


# ----------------------------------------------------------------------------- settings -> environment
#: A valid non-default value for every setting (transactional_id cannot be set through the chart).
ALL_SETTINGS = {
    "bootstrap_servers": "k1:9092,k2:9092", "group_id": "olu-prod", "input_topics": ["clicks", "views"],
    "params_topic": "olu.params.prod", "dlq_topic": "olu.dlq.prod", "receipts_topic": "olu.receipts.prod",
    "transactional": True, "forget_by_key": False, "deletion_deadline_seconds": 120.0,
    "group_protocol": "consumer", "algorithm": "passive", "dim": 16, "loss": "logistic", "l2": 0.05,
    "label_bound": 2.0, "radius": 5.0, "feature_bound": 1.5, "feature_policy": "clip",
    "schedule": "strongly-convex", "t0": 10.0, "step": 0.125, "rho": 2.5, "privacy_unit": "per-request", "omega": 1.5, "delta": 1e-6,
    "budget_split": "weighted", "deletion_capacity": 500, "expected_deletion_rate": 0.001, "budget_reserve": 0.2,
    "planned_records_per_request": 2.5, "planned_deletion_age_events": 20000,
    "rotation": "on", "rotation_variant": "disjoint", "model_lifetime_events": 200000,
    "max_records_per_key": 50, "max_deletions": 1048576, "dp_horizon": 65536, "restart_c": 2.0, "order_fallback": "restart", "on_budget": "refuse",
    "lbfgs_memory": 20, "checkpoint_every": 512, "retained_rows": "sparse", "retrain_every": 5000, "train_steps": 60, "noise_sigma": 0.02, "model_name": "ctr",
    "deletion_releases": "each", "release_every_events": 50000, "release_every_seconds": 2.5, "snapshot_every_events": 200000,
    "snapshot_every_seconds": 60, "snapshot_keep": 3, "snapshot_max_bytes_per_second": 67108864,
    "snapshot_upload_spread": 0.25,
    "state_url": "s3://olu-state/prod",
    "state_prefix": "olu/prod", "on_corrupt_snapshot": "fail", "purge_bound_seconds": 30.0,
    "max_record_bytes": 2097152, "revoke_budget_fraction": 0.4, "batch_size": 5000, "poll_timeout": 0.05,
    "http_host": "::", "http_port": 9100, "liveness_seconds": 90.0, "log_level": "DEBUG", "log_format": "text",
    "quality_metric": False,
    "input_format": "avro", "release_format": "json-schema", "schema_registry_url": "https://registry:8081",
    "schema_registry_ca_location": "/etc/registry/ca.pem", "schema_registry_cert_location": "/etc/registry/tls.crt",
    "schema_registry_key_location": "/etc/registry/tls.key", "input_fields": "id=user_id,y=clicked",
    "input_feature_fields": [f"f{i}" for i in range(16)],
}
NOT_SETTABLE = {"transactional_id", "schema_registry_user_info"}
#: Settable, but excluded by one in ALL_SETTINGS (rho; dim and input_feature_fields): wired on their own below.
EXCLUSIVE = {"target_epsilon": 2.0}
FEATURES = {"features_file": "features.yaml", "features_reset": True}
SPARSE = {"sparse_input": True}  # JSON input only: ALL_SETTINGS reads Avro
SOFTMAX = {"loss": "softmax", "classes": ["fraud", "ok", "review"]}  # ALL_SETTINGS' loss is logistic


def test_config_keys_are_exactly_the_worker_settings(chart):
    settings = {o.name for o in OPTIONS}
    assert set(chart.values["config"]) == settings, "values.yaml config: must list every setting of worker/config"
    schema = chart.schema["properties"]["config"]
    assert set(schema["properties"]) == settings, "values.schema.json config: must list every setting"
    assert schema["additionalProperties"] is False  # a typo fails at install
    assert set(ALL_SETTINGS) | NOT_SETTABLE | set(EXCLUSIVE) | set(FEATURES) | set(SPARSE) | set(SOFTMAX) == settings


def test_sparse_input_is_wired(chart):
    env = plain_env(render(chart, merge(REQUIRED, {"config": SPARSE})))
    assert env["OLU_SPARSE_INPUT"] == "true"
    assert load_settings([], env).sparse_input is True


@pytest.mark.parametrize(("classes", "wanted"), [
    (SOFTMAX["classes"], ("fraud", "ok", "review")),
    ([0, 1, 2], (0, 1, 2)),  # YAML numbers (floats to Helm) stay integers
    (["1", "2"], ("1", "2")),  # a list keeps its items' kinds: a JSON list in the variable
    (["a,b", "c"], ("a,b", "c")),
    ("fraud,ok", ("fraud", "ok")),
])
def test_softmax_classes_are_wired(chart, classes, wanted):
    env = plain_env(render(chart, merge(REQUIRED, {"config": {**SOFTMAX, "classes": classes}})))
    assert env["OLU_LOSS"] == "softmax"
    settings = load_settings([], env)
    assert settings.classes == wanted and settings.origin("classes") == "env"
    assert all(type(c) is type(wanted[0]) for c in settings.classes)


def test_the_privacy_target_is_wired_on_its_own(chart):
    env = plain_env(render(chart, merge(REQUIRED, {"config": EXCLUSIVE})))
    assert float(env["OLU_TARGET_EPSILON"]) == 2.0 and "OLU_RHO" not in env
    settings = load_settings([], env)
    assert (settings.target_epsilon, settings.rho, settings.origin("target_epsilon")) == (2.0, None, "env")


def test_the_feature_spec_is_wired_on_its_own(chart, tmp_path):
    spec = tmp_path / "features.yaml"
    spec.write_text("features:\n  - {name: age, type: numeric, range: [0, 100]}\n")
    env = plain_env(render(chart, merge(REQUIRED, {"config": {**FEATURES, "features_file": str(spec), "dim": None}})))
    assert env["OLU_FEATURES_FILE"] == str(spec) and env["OLU_FEATURES_RESET"] == "true"
    settings = load_settings([], env)
    assert (settings.dim, settings.features_reset, settings.origin("features_file")) == (2, True, "env")


def test_every_setting_is_wired_to_its_env_var(chart):
    objects = render(chart, merge(REQUIRED, {"config": ALL_SETTINGS}))
    env = plain_env(objects)
    for name, value in ALL_SETTINGS.items():
        opt = OPTION_BY_NAME[name]
        assert opt.env in env, f"{name}: {opt.env} not set"
        shown = ",".join(value) if isinstance(value, list) else str(value).lower() if isinstance(value, bool) else str(value)
        assert opt.parse(env[opt.env]) == opt.parse(shown), (name, env[opt.env])
    # Helm reads YAML numbers as floats: integers must still print as integers
    assert env["OLU_MAX_RECORD_BYTES"] == "2097152" and env["OLU_MAX_DELETIONS"] == "1048576"
    assert env["OLU_DIM"] == "16" and env["OLU_SNAPSHOT_EVERY_EVENTS"] == "200000"
    assert env["OLU_INPUT_TOPICS"] == "clicks,views" and env["OLU_TRANSACTIONAL"] == "true"
    assert "OLU_TRANSACTIONAL_ID" not in env

    # the worker accepts the chart's environment as it is, and every setting comes from it
    settings = load_settings([], env)
    for name in ALL_SETTINGS:
        assert settings.origin(name) == "env", name
    assert settings.input_topics == ("clicks", "views") and settings.delta == 1e-6 and settings.step == 0.125
    assert settings.transactional_id.startswith("olu-prod-")  # derived per pod (HOSTNAME)


def test_unset_settings_leave_the_worker_defaults(chart):
    env = plain_env(render(chart, REQUIRED))
    olu = {k for k in env if k.startswith("OLU_")}
    assert olu == {"OLU_KAFKA_BOOTSTRAP_SERVERS", "OLU_DIM", "OLU_STATE_URL", "OLU_PRIVACY_UNIT", "OLU_HTTP_PORT"}
    settings = load_settings([], env)
    assert settings.dim == 10 and settings.state_url == "s3://olu-state/prod"
    assert (settings.target_epsilon, settings.rho, settings.privacy_unit) == (1.0, None, "all-deletions")
    assert settings.origin("privacy_unit") == "env"  # what run requires, set by the chart


def test_kafka_passthrough_becomes_olu_kafka_env(chart):
    kafka = {"max.poll.interval.ms": 400000, "client.rack": "eu-west-1a", "log_level": 6,
             "statistics.interval.ms": 10000, "fetch.max.bytes": 104857600, "enable.auto.commit": False,
             "acks": "all"}
    objects = render(chart, merge(REQUIRED, {"kafka": kafka, "terminationGracePeriodSeconds": 240}))
    env = plain_env(objects)
    assert env["OLU_KAFKA_MAX_POLL_INTERVAL_MS"] == "400000"
    assert env["OLU_KAFKA_LOG__LEVEL"] == "6"  # "_" in a key is "__" in the variable
    assert env["OLU_KAFKA_FETCH_MAX_BYTES"] == "104857600"
    settings = load_settings([], env)
    assert settings.kafka == {"max.poll.interval.ms": "400000", "client.rack": "eu-west-1a", "log_level": "6",
                              "statistics.interval.ms": "10000", "fetch.max.bytes": "104857600",
                              "enable.auto.commit": "false", "acks": "all"}
    assert settings.revoke_budget_seconds == 200.0


def test_object_store_and_kafka_credentials_come_from_secrets(chart):
    objects = render(chart, VALUE_SETS["s3-sasl-tls"])
    env = env_of(objects)

    def secret(name):
        return env[name]["valueFrom"]["secretKeyRef"]

    assert secret("AWS_ACCESS_KEY_ID") == {"name": "olu-s3", "key": "AWS_ACCESS_KEY_ID"}
    assert secret("AWS_SECRET_ACCESS_KEY") == {"name": "olu-s3", "key": "AWS_SECRET_ACCESS_KEY"}
    assert secret("AWS_SESSION_TOKEN") == {"name": "olu-s3", "key": "AWS_SESSION_TOKEN"}
    assert env["AWS_REGION"]["value"] == "eu-west-1"
    assert env["AWS_ENDPOINT_URL"]["value"] == "https://s3.example.internal"
    assert "AWS_ALLOW_HTTP" not in env
    assert secret("OLU_KAFKA_SASL_USERNAME") == {"name": "olu-kafka-user", "key": "user"}
    assert secret("OLU_KAFKA_SASL_PASSWORD") == {"name": "olu-kafka-user", "key": "pass"}
    assert secret("OLU_KAFKA_SSL_KEY_PASSWORD") == {"name": "olu-kafka-client", "key": "key.password"}
    plain = plain_env(objects)
    assert plain["OLU_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"
    assert plain["OLU_KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-256"
    assert plain["OLU_KAFKA_SSL_CA_LOCATION"] == "/etc/olu/kafka-tls/ca.crt"
    assert plain["OLU_KAFKA_SSL_CERTIFICATE_LOCATION"] == "/etc/olu/kafka-tls/client.crt"
    assert plain["OLU_KAFKA_SSL_KEY_LOCATION"] == "/etc/olu/kafka-tls/client.key"
    # CA, certificate and key are files on a read-only projected volume
    mount = next(m for m in container(objects)["volumeMounts"] if m["mountPath"] == "/etc/olu/kafka-tls")
    assert mount["readOnly"] is True
    pod = only(objects, "Deployment")["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    sources = {s["secret"]["name"]: s["secret"]["items"] for s in volume["projected"]["sources"]}
    assert sources == {"kafka-cluster-ca": [{"key": "ca.crt", "path": "ca.crt"}],
                       "olu-kafka-client": [{"key": "tls.crt", "path": "client.crt"},
                                            {"key": "tls.key", "path": "client.key"}]}
    assert volume["projected"]["defaultMode"] == 0o440
    # the worker accepts it (the secretKeyRef values arrive at run time)
    runtime = {**plain, "OLU_KAFKA_SASL_USERNAME": "u", "OLU_KAFKA_SASL_PASSWORD": "p",
               "OLU_KAFKA_SSL_KEY_PASSWORD": "k", "AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "s"}
    settings = load_settings([], runtime)
    assert settings.kafka["security.protocol"] == "SASL_SSL" and settings.storage_credentials_present
    assert settings.redacted()["kafka"]["sasl.password"] == "***"


@pytest.mark.parametrize(("auth", "kafka", "protocol"), [
    ({"sasl": {"enabled": True, "existingSecret": "u"}}, {}, "SASL_PLAINTEXT"),
    ({"tls": {"enabled": True}}, {}, "SSL"),
    ({"sasl": {"enabled": True, "existingSecret": "u"}, "tls": {"enabled": True}}, {}, "SASL_SSL"),
    ({"sasl": {"enabled": True, "existingSecret": "u"}}, {"security.protocol": "SASL_SSL"}, "SASL_SSL"),
    ({}, {}, None),
])
def test_security_protocol_follows_sasl_and_tls(chart, auth, kafka, protocol):
    objects = render(chart, merge(REQUIRED, {"kafkaAuth": auth, "kafka": kafka}))
    assert plain_env(objects).get("OLU_KAFKA_SECURITY_PROTOCOL") == protocol
    pod = only(objects, "Deployment")["spec"]["template"]["spec"]
    assert [v["name"] for v in pod["volumes"]] == ["tmp"]  # no TLS files without a Secret


def test_object_store_without_a_secret_uses_ambient_credentials(chart):
    objects = render(chart, merge(REQUIRED, {"objectStore": {"endpoint": "http://seaweedfs:8333", "allowHttp": True},
                                             "serviceAccount": {"annotations": {
                                                 "eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/olu"}}}))
    env = env_of(objects)
    assert "AWS_ACCESS_KEY_ID" not in env and env["AWS_ALLOW_HTTP"]["value"] == "true"
    assert only(objects, "ServiceAccount")["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/olu"}


def test_extra_env_is_appended_and_may_not_shadow(chart):
    extra = [{"name": "OLU_KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET",
              "valueFrom": {"secretKeyRef": {"name": "oauth", "key": "secret"}}},
             {"name": "TZ", "value": "UTC"}]
    objects = render(chart, merge(REQUIRED, {"extraEnv": extra, "envFrom": [{"configMapRef": {"name": "x"}}]}))
    names = [e["name"] for e in container(objects)["env"]]
    assert names[-2:] == ["OLU_KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET", "TZ"]
    assert container(objects)["envFrom"] == [{"configMapRef": {"name": "x"}}]
    with pytest.raises(helm.HelmRenderError, match="OLU_DIM is set twice"):
        render(chart, merge(REQUIRED, {"extraEnv": [{"name": "OLU_DIM", "value": "3"}]}))


# ----------------------------------------------------------------------------- grace period vs drain
def test_grace_period_covers_the_revoke_budget(chart):
    deployment = only(render(chart, REQUIRED), "Deployment")
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    settings = load_settings([], plain_env(render(chart, REQUIRED)))
    assert settings.revoke_budget_seconds == 150.0 and grace > settings.revoke_budget_seconds + 20


@pytest.mark.parametrize(("values", "need"), [
    ({"terminationGracePeriodSeconds": 165}, "170 s"),
    ({"config": {"transactional": True}}, "200 s"),
    ({"kafka": {"max.poll.interval.ms": 600000}}, "320 s"),
    ({"config": {"revoke_budget_fraction": 0.9}, "terminationGracePeriodSeconds": 250}, "290 s"),
])
def test_grace_period_shorter_than_the_drain_is_refused(chart, values, need):
    with pytest.raises(helm.HelmRenderError, match="terminationGracePeriodSeconds") as info:
        render(chart, merge(REQUIRED, values))
    assert need in str(info.value)


def test_grace_period_raised_with_the_budget_is_accepted(chart):
    objects = render(chart, merge(REQUIRED, {"kafka": {"max.poll.interval.ms": 600000},
                                             "config": {"transactional": True},
                                             "terminationGracePeriodSeconds": 360}))
    assert only(objects, "Deployment")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 360


# ----------------------------------------------------------------------------- optional objects
def test_service_monitor_prometheus_rule_and_dashboard(chart):
    objects = render(chart, VALUE_SETS["monitoring"])
    monitor = only(objects, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    service = only(objects, "Service")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics" and endpoint["interval"] == "15s"
    assert endpoint["metricRelabelings"][0]["action"] == "drop"

    rule = only(objects, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    shipped = yaml.safe_load((CHART / "files" / "alerts.yaml").read_text())
    assert rule["spec"]["groups"] == shipped["groups"]  # the very rules promtool tests

    board = only(objects, "ConfigMap")
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert board["metadata"]["annotations"] == {"grafana_folder": "Streaming"}
    (data,) = board["data"].values()
    assert json.loads(data) == json.loads((CHART / "files" / "dashboard.json").read_text())


def test_prometheus_rule_options(chart):
    extra = {"name": "team", "rules": [{"alert": "OluCustom", "expr": "olu_assigned_partitions == 0", "for": "30m"}]}
    objects = render(chart, merge(REQUIRED, {"metrics": {"prometheusRule": {
        "enabled": True, "additionalRuleLabels": {"team": "ml-platform"},
        "disabledAlerts": ["OluConsumerLagHigh"], "extraGroups": [extra]}}}))
    groups = only(objects, "PrometheusRule")["spec"]["groups"]
    alerts = {r["alert"]: r for g in groups for r in g["rules"]}
    assert "OluConsumerLagHigh" not in alerts and "OluCustom" in alerts
    assert alerts["OluPrivacyBudgetNearlySpent"]["labels"] == {"severity": "warning", "team": "ml-platform"}
    assert groups[-1] == extra


def test_noise_to_signal_threshold_is_a_value(chart):
    def expr(values):
        groups = only(render(chart, merge(REQUIRED, {"metrics": {"prometheusRule": {"enabled": True, **values}}})),
                      "PrometheusRule")["spec"]["groups"]
        return {r["alert"]: r for g in groups for r in g["rules"]}["OluNoiseToSignalHigh"]["expr"]

    assert expr({}) == "olu_noise_to_signal_ratio > 0.5"
    assert expr({"noiseToSignalThreshold": 0.8}) == "olu_noise_to_signal_ratio > 0.8"
    assert expr({"noiseToSignalThreshold": 2}) == "olu_noise_to_signal_ratio > 2"


def test_autoscaling_on_consumer_lag(chart):
    objects = render(chart, VALUE_SETS["autoscaling"])
    hpa = only(objects, "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": FULLNAME}
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 8)
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "External"
    assert metric["external"]["metric"] == {"name": "olu_consumer_lag", "selector": {"matchLabels": {"service": FULLNAME}}}
    assert metric["external"]["target"] == {"type": "AverageValue", "averageValue": "500000"}
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] >= 300
    assert "replicas" not in only(objects, "Deployment")["spec"]  # the HPA owns the replica count


# ----------------------------------------------------------------------------- bad values fail at install
BAD_VALUES = {
    "replicas negative": {"replicaCount": -1},
    "replicas a string": {"replicaCount": "2"},
    "rho zero": {"config": {"rho": 0}},
    "target epsilon negative": {"config": {"target_epsilon": -0.5}},
    "unknown privacy unit": {"config": {"privacy_unit": "per-record"}},
    "unknown algorithm": {"config": {"algorithm": "sgd"}},
    "unknown loss": {"config": {"loss": "hinge"}},
    "one class": {"config": {"classes": ["fraud"]}},
    "classes twice": {"config": {"classes": ["ok", "ok"]}},
    "classes mixed": {"config": {"classes": ["ok", 1]}},
    "classes fractional": {"config": {"classes": [0.5, 1]}},
    "classes one in a string": {"config": {"classes": "fraud"}},
    "http port zero": {"config": {"http_port": 0}},
    "http port too large": {"config": {"http_port": 70000}},
    "delta one": {"config": {"delta": 1}},
    "omega one": {"config": {"omega": 1}},
    "dim zero": {"config": {"dim": 0}},
    "dim fractional": {"config": {"dim": 2.5}},
    "revoke budget fraction zero": {"config": {"revoke_budget_fraction": 0}},
    "revoke budget fraction above one": {"config": {"revoke_budget_fraction": 1.5}},
    "batch size zero": {"config": {"batch_size": 0}},
    "bad topic name": {"config": {"params_topic": "olu params!"}},
    "file state": {"config": {"state_url": "file:///var/lib/olu"}},
    "memory state": {"config": {"state_url": "memory://"}},
    "unknown setting": {"config": {"epsilon": 1.0}},
    "grace below 30 s": {"terminationGracePeriodSeconds": 10},
    "kafka owned key": {"kafka": {"group.id": "other"}},
    "kafka bootstrap key": {"kafka": {"bootstrap.servers": "k:9092"}},
    "kafka auto commit": {"kafka": {"enable.auto.commit": True}},
    "kafka read uncommitted": {"kafka": {"isolation.level": "read_uncommitted"}},
    "kafka offset reset latest": {"kafka": {"auto.offset.reset": "latest"}},
    "kafka eager assignment": {"kafka": {"partition.assignment.strategy": "range"}},
    "kafka acks one": {"kafka": {"acks": 1}},
    "kafka password in values": {"kafka": {"sasl.password": "hunter2"}},
    "kafka jaas in values": {"kafka": {"sasl.jaas.config": "x"}},
    "kafka key not librdkafka": {"kafka": {"Max Poll": 1}},
    "sasl without secret": {"kafkaAuth": {"sasl": {"enabled": True}}},
    "sasl mechanism": {"kafkaAuth": {"sasl": {"enabled": True, "existingSecret": "s", "mechanism": "GSSAPI"}}},
    "root allowed": {"securityContext": {"runAsNonRoot": False}},
    "privilege escalation": {"securityContext": {"allowPrivilegeEscalation": True}},
    "service port zero": {"service": {"port": 0}},
    "autoscaling min zero": {"autoscaling": {"minReplicas": 0}},
    "pdb not a number": {"podDisruptionBudget": {"maxUnavailable": "one"}},
    "scrape interval": {"metrics": {"serviceMonitor": {"interval": "soon"}}},
    "noise threshold zero": {"metrics": {"prometheusRule": {"noiseToSignalThreshold": 0}}},
    "noise threshold string": {"metrics": {"prometheusRule": {"noiseToSignalThreshold": "0.5"}}},
    "unknown top-level key": {"replicas": 3},
}


@pytest.mark.parametrize("case", list(BAD_VALUES))
def test_schema_rejects_bad_values(chart, case):
    values = merge(REQUIRED, BAD_VALUES[case])
    with pytest.raises(helm.HelmValuesError):
        chart.validate_schema(values)
    with pytest.raises(helm.HelmValuesError):  # what helm install / template does first
        render(chart, values)


@pytest.mark.parametrize(("values", "message"), [
    ({"config": {"bootstrap_servers": None}}, "config.bootstrap_servers is required"),
    ({"config": {"dim": None}}, "config.dim is required"),
    ({"config": {"state_url": None}}, "config.state_url is required"),
    ({"config": {"privacy_unit": None}}, "config.privacy_unit is required .*per-request.*all-deletions"),
    ({"config": {"transactional_id": "olu-1"}}, "fence"),
    ({"autoscaling": {"enabled": True, "minReplicas": 5, "maxReplicas": 2}}, "minReplicas"),
    ({"podDisruptionBudget": {"minAvailable": 1, "maxUnavailable": 1}}, "not both"),
])
def test_templates_refuse_what_the_schema_cannot_express(chart, values, message):
    with pytest.raises(helm.HelmRenderError, match=message):
        render(chart, merge(REQUIRED, values))


def test_chart_defaults_alone_fail_with_a_clear_message(chart):
    with pytest.raises(helm.HelmRenderError, match="config.bootstrap_servers is required"):
        render(chart, {})


def _readme_values_examples() -> list[dict]:
    """Every ``# values-*.yaml`` block of docs/deploy.md, as a user would copy it."""
    text = (CHART.parents[1] / "docs" / "deploy.md").read_text()
    blocks = [b.split("```", 1)[0] for b in text.split("```yaml\n")[1:]]
    return [yaml.safe_load(b) for b in blocks if b.lstrip().startswith("# values")]


def test_the_readme_values_examples_pass_the_schema_and_render(chart):
    """The deploy example is what a newcomer copies first: it must install as shown."""
    examples = _readme_values_examples()
    assert examples, "docs/deploy.md shows no values file"
    for values in examples:
        chart.validate_schema(values)
        objects = render(chart, values)
        assert only(objects, "Deployment")


def test_a_feature_spec_in_the_values_is_mounted_and_named(chart, tmp_path):
    spec = {"features": [{"name": "age", "type": "numeric", "range": [18, 90]},
                         {"name": "plan", "type": "categorical", "vocabulary": ["free", "pro"]}]}
    objects = render(chart, merge(REQUIRED, {"config": {"dim": None}, "featureSpec": spec}))
    config_map = next(o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-features"))
    env = plain_env(objects)
    assert env["OLU_FEATURES_FILE"] == "/etc/olu-worker/features/features.yaml" and "OLU_DIM" not in env
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    pod = deployment["spec"]["template"]
    mounts = {m["name"]: m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert mounts["feature-spec"] == "/etc/olu-worker/features"
    assert pod["metadata"]["annotations"]["checksum/feature-spec"]
    # the worker reads the mounted file as the chart writes it
    (tmp_path / "features.yaml").write_text(config_map["data"]["features.yaml"])
    settings = load_settings([], {**env, "OLU_FEATURES_FILE": str(tmp_path / "features.yaml")})
    assert settings.dim == 5 and [f.name for f in settings.feature_spec.fields] == ["age", "plan"]
    with pytest.raises(Exception, match="exclude each other"):
        render(chart, merge(REQUIRED, {"config": {"features_file": "/x.yaml"}, "featureSpec": spec}))
