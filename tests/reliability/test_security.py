"""Security: no noise vector and no pre-noise state in any artifact of a run; /metrics without
record ids or features; secrets never logged; SASL settings passed through to the real broker (a
wrong password fails fast and clearly); the chart runs the worker as non-root whatever the values.

Existing tests this builds on rather than repeats: ``tests/stream/test_worker_kafka.py``
(pre-noise iterates of selected passive deletions, recomputed by a replay, absent from snapshots,
logs and releases), ``tests/test_config.py`` (``Settings.redacted``), ``tests/test_metrics_http.py``
(label names and bounded values, unit level), ``tests/helm/test_chart.py`` (the default values'
security contexts). Here the worker runs under a tap (``tests/reliability/noise_tap.py``) that
records the *exact* noise vector and pre-noise iterate of every deletion, and every object the
worker ever wrote (also those deleted later), with an active algorithm whose pre-noise iterate
(after descent-to-delete) is a state no legitimate artifact holds.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.helm.test_chart import REQUIRED, VALUE_SETS, merge, render
from tests.reliability import noise_tap
from tests.stream.kafka_harness import (
    REPO,
    Topics,
    WorkerProcess,
    covered,
    create_topics,
    delete_topics,
    end_offsets,
    event_stream,
    insert,
    produce,
    read_topic,
    releases,
    stored_objects,
    wait_for,
    worker_env,
)
from worker.metrics import LABEL_NAMES
from worker.state.store import SnapshotStore, open_store

RADIUS = 10.0  # worker_env keeps the default radius of the parameter ball
NORM_FEATURE = 3.0123456789  # a feature over the bound: dead-lettered, must never be quoted


class TappedWorker(WorkerProcess):
    """``olu-worker run`` under :mod:`tests.reliability.noise_tap`."""

    def start(self) -> TappedWorker:
        full = {k: v for k, v in os.environ.items()
                if not k.startswith(("OLU_", "AWS_")) and k != "KAFKA_BOOTSTRAP_SERVERS"}
        full.update(self.env)
        self._log = open(self.log_path, "ab")
        self._offset = self.log_path.stat().st_size
        self._http_port = None
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.reliability.noise_tap", "run"], cwd=REPO,
                                     env=full, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=self._log)
        return self


# --------------------------------------------------------------------------- one tapped run

@pytest.fixture(scope="module")
def tapped(kafka_bootstrap, tmp_path_factory):
    tag = uuid.uuid4().hex[:8]
    topics = Topics(f"sec-{tag}.events", f"sec-{tag}.params", f"sec-{tag}.dlq", 1)
    names = {topics.input: 1, topics.params: 1, topics.dlq: 1}
    create_topics(kafka_bootstrap, names)
    root = tmp_path_factory.mktemp("security")
    tap = root / "tap"
    group = f"sec-{tag}"
    env = worker_env(kafka_bootstrap, topics, group, f"file://{root}/state", OLU_ALGORITHM="active-d2d",
                     OLU_MAX_DELETIONS="200", OLU_LOG_LEVEL="DEBUG", OLU_SNAPSHOT_EVERY_EVENTS="100",
                     OLU_TEST_NOISE_TAP=str(tap),
                     # a release after every deletion: the most released states to search for noise
                     OLU_DELETION_RELEASES="each")
    # Ids that could not turn up anywhere by chance, and two poison records (dead letters).
    stream = event_stream(700, seed=71, delete_rate=0.1, prefix=f"secret-{tag}")
    stream += [insert(f"secret-{tag}-norm", [NORM_FEATURE, 0.0, 0.0, 0.0], 1),
               (f"secret-{tag}-junk".encode(), b"{not json", "poison")]
    worker = TappedWorker(env, root / "worker.log")
    try:
        produce(kafka_bootstrap, topics.input, stream)
        worker.start()
        wait_for(covered(kafka_bootstrap, topics, end_offsets(kafka_bootstrap, topics.input)), 120,
                 "the tapped worker to reach the end", interval=0.3)
        metrics = worker.metrics()
        assert worker.terminate() == 0, worker.log_text()[-3000:]
        snapshots = SnapshotStore(open_store(f"file://{root}/state"), prefix="olu", group=group)
        yield SimpleNamespace(
            topics=topics, env=env, stream=stream, metrics=metrics, log=worker.log_text().encode(),
            releases=releases(kafka_bootstrap, topics.params), dead_letters=read_topic(kafka_bootstrap, topics.dlq),
            secrets=noise_tap.read_secrets(tap), persisted=noise_tap.persisted(tap),
            stored=stored_objects(snapshots, topics.input, 0),
        )
    finally:
        worker.cleanup()
        delete_topics(kafka_bootstrap, names)


_FLOAT = re.compile(rb"-?\d+\.\d+(?:[eE][-+]?\d+)?|-?\d+[eE][-+]?\d+")


def _texts(run) -> dict[str, bytes]:
    """Every text artifact: the log, each release, each dead letter, the metrics page."""
    texts = {"log": run.log, "metrics": run.metrics.encode()}
    texts.update({f"release {r.offset}": r.value for r in run.releases})
    texts.update({f"dead letter {r.offset}": (r.value or b"") + repr(r.headers).encode() for r in run.dead_letters})
    return texts


def _blobs(run) -> dict[str, bytes]:
    """Every binary artifact: each object ever written (tap) and each object still stored."""
    blobs = {f"put #{i}": blob for i, blob in enumerate(run.persisted)}
    blobs.update({o.key: o.blob for o in run.stored})
    blobs.update({key: blob for o in run.stored for key, blob in o.shared_blobs.items()})
    return blobs


def _assert_absent(vector: np.ndarray, what: str, run) -> None:
    """No float64 of ``vector`` in any artifact: not as 8 bytes (either byte order, so no window
    of the vector can be there either), not as text, not as a released or logged number."""
    blobs, texts = _blobs(run), _texts(run)
    numbers = {float(m) for text in texts.values() for m in _FLOAT.findall(text)}
    for c in vector:
        for raw in (np.float64(c).astype("<f8").tobytes(), np.float64(c).astype(">f8").tobytes()):
            for name, blob in blobs.items():
                assert raw not in blob, f"{what} coordinate {c!r} stored in {name}"
        for token in {repr(float(c)).encode(), orjson.dumps(float(c))}:
            for name, text in texts.items():
                assert token not in text, f"{what} coordinate {c!r} written in {name}"
        assert float(c) not in numbers, f"{what} coordinate {c!r} in a logged or released number"
    whole = vector.astype("<f8").tobytes()
    assert not any(whole in blob for blob in blobs.values())
    norm = repr(float(np.linalg.norm(vector))).encode()  # a function of the secret, not a public quantity
    assert not any(norm in text for text in texts.values()), f"the norm of a {what} was written"


@pytest.mark.kafka
def test_the_tap_sees_the_real_noise(tapped):
    """Guards the tests below: the taps record what the worker really drew, and the byte scan
    finds a vector that is (legitimately) stored, so an absent secret is absent for real."""
    assert len(tapped.secrets) >= 3, "the run should make several noised deletions"
    # Every noised deletion of the run was tapped: one draw per ledger entry with noise.
    newest = [o for o in tapped.stored if o.kind == "full"][-1]
    noised = [e for e in newest.header["model"]["ledger"] if e["sigma"] > 0]
    assert len(noised) == len(tapped.secrets)
    released = {np.array(r.json()["weights"], np.float64).tobytes() for r in tapped.releases}
    blobs = _blobs(tapped).values()
    matched = 0
    for s in tapped.secrets:
        assert np.any(s["noise"] != 0) and s["noise"].shape == s["pre_noise"].shape == (4,)
        post = s["pre_noise"] + s["noise"]
        if np.linalg.norm(post) < RADIUS:  # no projection: the post-noise iterate is exactly this
            # ... and it is public: released, and stored in the deletion's delta (found by the scan).
            assert post.tobytes() in released
            assert any(post.astype("<f8").tobytes() in blob for blob in blobs)
            matched += 1
    assert matched >= 1


@pytest.mark.kafka
def test_no_noise_vector_in_any_object_log_release_or_metric(tapped):
    for i, s in enumerate(tapped.secrets):
        _assert_absent(s["noise"], f"noise vector #{i}", tapped)


@pytest.mark.kafka
def test_no_pre_noise_iterate_in_any_object_log_release_or_metric(tapped):
    for i, s in enumerate(tapped.secrets):
        _assert_absent(s["pre_noise"], f"pre-noise iterate #{i}", tapped)


@pytest.mark.kafka
def test_metrics_carry_no_record_ids_or_features(tapped):
    text = tapped.metrics
    assert "olu_deletions_total" in text and "olu_dead_letters_total" in text  # a page with content
    for key, value, _kind in tapped.stream:
        assert key.decode() not in text
        if value and b'"x"' in value:
            record = orjson.loads(value)
            for v in record["x"]:
                if len(repr(float(v))) >= 10:  # short ones ("0.0") match counts by chance
                    assert repr(float(v)) not in text and orjson.dumps(float(v)).decode() not in text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            assert set(sample.labels) - {"le", "quantile"} <= LABEL_NAMES, sample
            for name, value in sample.labels.items():
                assert len(value) <= 64 and "secret" not in value, sample
                if name == "partition":
                    assert value.isdigit()
                if name in ("op", "reason", "type", "kind", "trigger"):
                    assert re.fullmatch(r"[a-z][a-z0-9_]*", value), sample


@pytest.mark.kafka
def test_dead_letter_details_and_logs_name_no_record_values(tapped):
    """The dead letter carries the original bytes (its purpose), but the worker's own words about
    it -- the detail header and every log line -- name no id and no feature value."""
    tag = tapped.topics.input.split(".")[0].removeprefix("sec-")
    assert len(tapped.dead_letters) == 2
    for rec in tapped.dead_letters:
        assert f"secret-{tag}".encode() not in rec.headers["olu.error.detail"]
    assert f"secret-{tag}".encode() not in tapped.log
    details = b"".join(r.headers["olu.error.detail"] for r in tapped.dead_letters)
    assert any(r.headers["olu.error.reason"] == b"norm_exceeded" for r in tapped.dead_letters)
    for token in (repr(NORM_FEATURE).encode(), b"3.0123"):
        assert token not in details and token not in tapped.log


# --------------------------------------------------------------------------- SASL pass-through

AWS_SECRET = f"aws-secret-{uuid.uuid4().hex}"


def _sasl_env(sasl, topics: Topics, group: str, state: Path, password: str) -> dict[str, str]:
    env = worker_env(sasl.bootstrap, topics, group, f"file://{state}",
                     OLU_KAFKA_SECURITY_PROTOCOL="SASL_PLAINTEXT", OLU_KAFKA_SASL_MECHANISM="PLAIN",
                     OLU_KAFKA_SASL_USERNAME=sasl.username, OLU_KAFKA_SASL_PASSWORD=password,
                     # librdkafka's own configuration dump and security handshake logs, too
                     OLU_KAFKA_DEBUG="conf,security", OLU_LOG_LEVEL="DEBUG",
                     # object-store credentials in the environment are recorded as present only
                     AWS_ACCESS_KEY_ID="AKIATESTONLY", AWS_SECRET_ACCESS_KEY=AWS_SECRET)
    return env


@pytest.fixture
def sasl_topics(kafka_sasl_broker):
    tag = uuid.uuid4().hex[:8]
    topics = Topics(f"sasl-{tag}.events", f"sasl-{tag}.params", f"sasl-{tag}.dlq", 1)
    names = {topics.input: 1, topics.params: 1, topics.dlq: 1}
    create_topics(kafka_sasl_broker.plaintext, names)  # set-up through the unauthenticated listener
    yield topics
    delete_topics(kafka_sasl_broker.plaintext, names)


@pytest.mark.kafka
def test_worker_authenticates_with_sasl_plain_and_never_logs_the_password(kafka_sasl_broker, sasl_topics,
                                                                        tmp_path):
    sasl, topics = kafka_sasl_broker, sasl_topics
    produce(sasl.plaintext, topics.input, event_stream(120, seed=81, delete_rate=0.05))
    env = _sasl_env(sasl, topics, f"sasl-{uuid.uuid4().hex[:8]}", tmp_path / "state", sasl.password)
    worker = WorkerProcess(env, tmp_path / "worker.log")
    try:
        worker.start()
        ends = end_offsets(sasl.plaintext, topics.input)
        wait_for(covered(sasl.plaintext, topics, ends), 90, "a release through the SASL listener", interval=0.3)
        assert worker.terminate() == 0, worker.log_text()[-3000:]
    finally:
        worker.cleanup()
    values = [r.json() for r in releases(sasl.plaintext, topics.params)]
    assert values and values[-1]["version"] == ends[0]
    log = worker.log_text()
    [config] = worker.log_lines("effective configuration", all_runs=True)
    kafka = config["settings"]["kafka"]
    assert kafka["security.protocol"] == "SASL_PLAINTEXT" and kafka["sasl.username"] == sasl.username
    assert kafka["sasl.password"] == "***"
    assert config["settings"]["storage_credentials_present"] is True
    # librdkafka's configuration dump is in the log being searched (and masks the password itself)
    assert "sasl.password = [redacted]" in log and "Selected provider PLAIN" in log
    assert sasl.password not in log
    assert AWS_SECRET not in log and "AKIATESTONLY" not in log


@pytest.mark.kafka
def test_wrong_sasl_password_fails_fast_with_a_clear_error(kafka_sasl_broker, sasl_topics, tmp_path):
    sasl, topics = kafka_sasl_broker, sasl_topics
    wrong = f"wrong-{uuid.uuid4().hex}"
    env = _sasl_env(sasl, topics, f"sasl-bad-{uuid.uuid4().hex[:8]}", tmp_path / "state", wrong)
    worker = WorkerProcess(env, tmp_path / "worker.log")
    started = time.monotonic()
    try:
        worker.start()
        code = worker.proc.wait(60)  # no hang: librdkafka alone would retry forever
    finally:
        worker.cleanup()
    elapsed = time.monotonic() - started
    assert code != 0, worker.log_text()[-3000:]
    [failed] = worker.log_lines("worker failed", all_runs=True)
    assert failed["error_type"] == "ClientFailed"
    assert "Authentication failed" in failed["error"] or "authentication" in failed["error"].lower()
    assert wrong not in worker.log_text() and sasl.password not in worker.log_text()
    assert not releases(sasl.plaintext, topics.params)
    print(f"wrong password: worker exited {code} after {elapsed:.1f} s")


def test_local_broker_sasl_listener_configuration():
    """worker.devtools.kafka_broker: the SASL_PLAINTEXT listener's properties, and credentials
    that would break out of the JAAS line are refused."""
    from worker.devtools.kafka_broker import KafkaBroker

    broker = KafkaBroker(sasl_users={"alice": "s3cret", "bob": "hunter2"})
    props = broker.server_properties()
    assert broker.sasl_bootstrap_servers == f"127.0.0.1:{broker.sasl_port}"
    assert len({broker.port, broker.controller_port, broker.sasl_port}) == 3
    assert f"SASL_PLAINTEXT://127.0.0.1:{broker.sasl_port}" in props["listeners"]
    assert f"SASL_PLAINTEXT://127.0.0.1:{broker.sasl_port}" in props["advertised.listeners"]
    assert "SASL_PLAINTEXT:SASL_PLAINTEXT" in props["listener.security.protocol.map"]
    assert props["inter.broker.listener.name"] == "PLAINTEXT"  # the broker's own traffic stays plain
    jaas = props["listener.name.sasl_plaintext.plain.sasl.jaas.config"]
    assert 'user_alice="s3cret"' in jaas and 'user_bob="hunter2"' in jaas and jaas.endswith(";")
    plain = KafkaBroker()
    assert plain.sasl_port is None and "SASL" not in plain.server_properties()["listeners"]
    with pytest.raises(RuntimeError):
        _ = plain.sasl_bootstrap_servers
    for user, password in [("alice", 'a"b'), ("alice", "a;b"), ("al ice", "x"), ("alice", ""), ("", "x")]:
        with pytest.raises(ValueError):
            KafkaBroker(sasl_users={user: password})


# --------------------------------------------------------------------------- the chart

POD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob", "Pod"}
OVERRIDES = {
    "another uid": {"podSecurityContext": {"runAsUser": 20000, "runAsGroup": 20000, "fsGroup": 20000},
                    "securityContext": {"runAsUser": 20000, "runAsGroup": 20000}},
    "pod context loosened": {"podSecurityContext": {"runAsNonRoot": False, "runAsUser": 0}},
    "pod context dropped": {"podSecurityContext": None},
    "container uid dropped": {"securityContext": {"runAsUser": None}},
    "both non-root flags dropped": {"podSecurityContext": {"runAsNonRoot": None},
                                    "securityContext": {"runAsNonRoot": None}},
    "root uid, guards dropped": {"podSecurityContext": {"runAsUser": 0, "runAsNonRoot": None},
                                 "securityContext": {"runAsUser": None, "runAsNonRoot": None,
                                                     "allowPrivilegeEscalation": None}},
    "contexts dropped": {"podSecurityContext": None, "securityContext": None},
}


def _pod_specs(objects):
    for obj in objects:
        if obj.get("kind") not in POD_KINDS:
            continue
        spec = obj["spec"]
        if obj["kind"] == "CronJob":
            spec = spec["jobTemplate"]["spec"]
        yield obj, spec if obj["kind"] == "Pod" else spec["template"]["spec"]


@pytest.mark.parametrize("values", list(VALUE_SETS) + list(OVERRIDES))
def test_every_container_of_the_chart_runs_as_non_root(values):
    """The effective context (the container's settings over the pod's) of every container, init
    containers included, forbids root, privilege and escalation, for every accepted value set."""
    import helm_python as helm

    chosen = VALUE_SETS[values] if values in VALUE_SETS else merge(REQUIRED, OVERRIDES[values])
    with helm.Chart.load(REPO / "helm" / "olu-worker") as chart:
        objects = render(chart, chosen)
    specs = list(_pod_specs(objects))
    assert specs, "the chart renders no workload"
    for obj, pod in specs:
        pod_ctx = pod.get("securityContext") or {}
        containers = pod.get("containers", []) + pod.get("initContainers", [])
        assert containers
        for c in containers:
            ctx = {**pod_ctx, **(c.get("securityContext") or {})}
            where = f"{obj['kind']}/{c['name']} ({values})"
            # runAsNonRoot makes the kubelet refuse to start a container that would run as uid 0
            # (a root uid from the values then fails closed instead of running as root).
            assert ctx.get("runAsNonRoot") is True, where
            assert not ctx.get("privileged", False), where
            assert ctx.get("allowPrivilegeEscalation") is False, where
            if values not in ("contexts dropped", "root uid, guards dropped"):  # defaults kept
                assert ctx.get("runAsUser", 1) != 0 and ctx.get("runAsGroup", 1) != 0, where
                assert "ALL" in (ctx.get("capabilities") or {}).get("drop", []), where
            assert not (ctx.get("capabilities") or {}).get("add"), where
        assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
