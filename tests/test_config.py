"""Settings: precedence, validation messages that name the setting, librdkafka pass-through, redaction,
one default per setting (and the README table that shows it)."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import fields
from pathlib import Path

import orjson
import pytest

from worker import config
from worker.config import ConfigError, Settings, add_arguments, load_settings
from worker.config.settings import NOT_OPTIONS
from worker.olu.registry import ALGORITHMS

ROOT = Path(__file__).resolve().parents[1]

BASE = {"OLU_KAFKA_BOOTSTRAP_SERVERS": "broker:9092", "OLU_DIM": "4"}


def load(argv=(), **env):
    return load_settings(list(argv), {**BASE, **env})


# --------------------------------------------------------------------------- defaults and precedence
def test_defaults():
    s = load()
    assert s.bootstrap_servers == "broker:9092" and s.dim == 4
    assert s.group_id == "olu-worker" and s.input_topics == ("olu.events",)
    assert (s.params_topic, s.dlq_topic) == ("olu.params", "olu.events.dlq")
    assert s.algorithm == "passive" and s.loss == "logistic" and s.schedule == "auto"
    assert (s.rho, s.target_epsilon, s.privacy_unit) == (None, 1.0, "all-deletions")
    assert (s.omega, s.delta, s.l2, s.radius) == (1.2, 1e-5, 0.01, 10.0)
    assert s.max_deletions is None and s.t0 is None and s.step is None
    assert s.release_every_events == 10_000 and s.snapshot_keep == 2
    assert s.state_url == "file://./olu-state" and s.state_prefix == "olu"
    assert s.http_port == 9464 and s.log_level == "INFO" and s.log_format == "json"
    assert s.model_name == "olu-worker"
    assert s.origin("rho") == "default" and s.origin("dim") == "env"


def test_precedence_flag_over_env_over_default():
    s = load(["--rho", "3"], OLU_RHO="2", OLU_OMEGA="1.5")
    assert s.rho == 3.0 and s.origin("rho") == "flag"
    assert s.omega == 1.5 and s.origin("omega") == "env"
    assert s.delta == 1e-5 and s.origin("delta") == "default"


def test_bootstrap_fallback_and_precedence():
    env = {"OLU_DIM": "2", "KAFKA_BOOTSTRAP_SERVERS": "fallback:9092"}
    assert load_settings([], env).bootstrap_servers == "fallback:9092"
    env["OLU_KAFKA_BOOTSTRAP_SERVERS"] = "primary:9092"
    assert load_settings([], env).bootstrap_servers == "primary:9092"
    assert load_settings(["--bootstrap-servers", "flag:9092"], env).bootstrap_servers == "flag:9092"


def test_empty_env_counts_as_unset():
    s = load(OLU_RHO="", OLU_MAX_DELETIONS="")
    assert s.rho is None and s.target_epsilon == 1.0 and s.max_deletions is None


def test_types_and_lists():
    s = load(["--input-topics", "a, b,c", "--transactional", "--max-deletions", "7", "--t0", "0"],
             OLU_LOG_LEVEL="debug", OLU_ALGORITHM="Passive-Restart")
    assert s.input_topics == ("a", "b", "c")
    assert s.transactional is True and s.max_deletions == 7 and s.t0 == 0.0
    assert s.log_level == "DEBUG" and s.algorithm == "passive-restart"
    assert load(["--no-transactional"], OLU_TRANSACTIONAL="true").transactional is False
    assert load(OLU_TRANSACTIONAL="yes").transactional is True


def test_transactional_id_and_model_name_defaults():
    s = load(["--group-id", "g1"], HOSTNAME="pod-7")
    assert s.transactional_id == "g1-pod-7" and s.model_name == "g1"
    s = load(["--group-id", "g1", "--transactional-id", "tx", "--model-name", "m"], HOSTNAME="pod-7")
    assert s.transactional_id == "tx" and s.model_name == "m"


def test_namespace_from_a_subcommand_parser():
    parser = argparse.ArgumentParser(prog="olu-worker")
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser("run")
    add_arguments(run)
    demo = sub.add_parser("demo")
    add_arguments(demo, exclude={"dim", "rho", "algorithm"})
    demo.add_argument("--dim", type=int, default=10)
    args = parser.parse_args(["run", "--rho", "5", "--kafka", "client.rack=r1", "--no-transactional"])
    s = load_settings(args, BASE)
    assert s.rho == 5.0 and s.kafka == {"client.rack": "r1"} and s.transactional is False
    assert s.origin("rho") == "flag" and s.origin("transactional") == "flag"
    args = parser.parse_args(["demo"])
    assert args.dim == 10 and not hasattr(args, "rho")


def test_demo_needs_neither_bootstrap_nor_dim():
    s = load_settings([], {}, command="demo")
    assert s.bootstrap_servers is None and s.dim == config.DEMO_DIM
    assert "bootstrap.servers" not in s.consumer_config()
    with pytest.raises(ValueError):
        load_settings([], {}, command="bogus")


def test_help_lists_env_names():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    text = parser.format_help()
    for opt in config.OPTIONS:
        assert opt.flag in text and opt.env in text


def test_settings_table_covers_every_option():
    rows = config.settings_table()
    assert {r["name"] for r in rows} == {o.name for o in config.OPTIONS} | {"kafka"}
    assert all(r["env"].startswith("OLU_") and r["flag"].startswith("--") and r["meaning"] for r in rows)


# --------------------------------------------------------------------------- bad settings name themselves
BAD_ENV = [
    ("OLU_RHO", "abc", "OLU_RHO (--rho) must be a number > 0, got 'abc'"),
    ("OLU_RHO", "0", "OLU_RHO (--rho)"),
    ("OLU_RHO", "nan", "OLU_RHO (--rho)"),
    ("OLU_RHO", "inf", "OLU_RHO (--rho)"),
    ("OLU_OMEGA", "1", "OLU_OMEGA (--omega) must be a number > 1"),
    ("OLU_DELTA", "1", "OLU_DELTA (--delta) must be a number in (0, 1)"),
    ("OLU_DELTA", "0", "OLU_DELTA (--delta)"),
    ("OLU_L2", "-0.1", "OLU_L2 (--l2) must be a number >= 0"),
    ("OLU_LABEL_BOUND", "0", "OLU_LABEL_BOUND (--label-bound)"),
    # librdkafka would take these and then fail to resolve, hundreds of log lines later
    ("OLU_KAFKA_BOOTSTRAP_SERVERS", "not a url", "OLU_KAFKA_BOOTSTRAP_SERVERS (--bootstrap-servers) must be host:port"),
    ("OLU_KAFKA_BOOTSTRAP_SERVERS", "broker:99999", "OLU_KAFKA_BOOTSTRAP_SERVERS (--bootstrap-servers)"),
    ("OLU_KAFKA_BOOTSTRAP_SERVERS", "a:9092,,b:9092", "OLU_KAFKA_BOOTSTRAP_SERVERS (--bootstrap-servers)"),
    ("OLU_RADIUS", "-1", "OLU_RADIUS (--radius)"),
    ("OLU_FEATURE_BOUND", "x", "OLU_FEATURE_BOUND (--feature-bound)"),
    ("OLU_T0", "-1", "OLU_T0 (--t0)"),
    ("OLU_STEP", "0", "OLU_STEP (--step)"),
    ("OLU_RESTART_C", "0", "OLU_RESTART_C (--restart-c)"),
    ("OLU_DIM", "0", "OLU_DIM (--dim) must be an integer >= 1, got '0'"),
    ("OLU_DIM", "2.5", "OLU_DIM (--dim)"),
    ("OLU_MAX_DELETIONS", "0", "OLU_MAX_DELETIONS (--max-deletions)"),
    ("OLU_ALGORITHM", "sgd", "OLU_ALGORITHM (--algorithm) must be one of passive, passive-restart"),
    ("OLU_LOSS", "hinge", "OLU_LOSS (--loss) must be one of logistic, ridge"),
    ("OLU_FEATURE_POLICY", "drop", "OLU_FEATURE_POLICY (--feature-policy)"),
    ("OLU_SCHEDULE", "adam", "OLU_SCHEDULE (--schedule)"),
    ("OLU_ORDER_FALLBACK", "ignore", "OLU_ORDER_FALLBACK (--order-fallback)"),
    ("OLU_GROUP_PROTOCOL", "eager", "OLU_GROUP_PROTOCOL (--group-protocol)"),
    ("OLU_ON_CORRUPT_SNAPSHOT", "skip", "OLU_ON_CORRUPT_SNAPSHOT (--on-corrupt-snapshot)"),
    ("OLU_TRANSACTIONAL", "maybe", "OLU_TRANSACTIONAL (--transactional) must be a boolean"),
    ("OLU_INPUT_TOPICS", " , ", "OLU_INPUT_TOPICS (--input-topics)"),
    ("OLU_INPUT_TOPICS", "a,a", "OLU_INPUT_TOPICS (--input-topics)"),
    ("OLU_INPUT_TOPICS", "bad topic", "OLU_INPUT_TOPICS (--input-topics)"),
    ("OLU_PARAMS_TOPIC", "a/b", "OLU_PARAMS_TOPIC (--params-topic)"),
    ("OLU_DLQ_TOPIC", "..", "OLU_DLQ_TOPIC (--dlq-topic)"),
    ("OLU_RELEASE_EVERY_EVENTS", "-1", "OLU_RELEASE_EVERY_EVENTS (--release-every-events)"),
    ("OLU_RELEASE_EVERY_SECONDS", "soon", "OLU_RELEASE_EVERY_SECONDS (--release-every-seconds)"),
    ("OLU_SNAPSHOT_EVERY_EVENTS", "1e3", "OLU_SNAPSHOT_EVERY_EVENTS (--snapshot-every-events)"),
    ("OLU_SNAPSHOT_EVERY_SECONDS", "-5", "OLU_SNAPSHOT_EVERY_SECONDS (--snapshot-every-seconds)"),
    ("OLU_SNAPSHOT_KEEP", "0", "OLU_SNAPSHOT_KEEP (--snapshot-keep)"),
    ("OLU_STATE_URL", "ftp://host/x", "OLU_STATE_URL (--state-url) must be a URL with scheme file://, memory://, s3://"),
    ("OLU_STATE_URL", "gs://bucket", "OLU_STATE_URL (--state-url)"),
    ("OLU_STATE_URL", "./olu-state", "OLU_STATE_URL (--state-url)"),
    ("OLU_STATE_URL", "s3://", "OLU_STATE_URL (--state-url)"),
    ("OLU_STATE_PREFIX", "a/../b", "OLU_STATE_PREFIX (--state-prefix)"),
    ("OLU_PURGE_BOUND_SECONDS", "0", "OLU_PURGE_BOUND_SECONDS (--purge-bound-seconds)"),
    ("OLU_MAX_RECORD_BYTES", "0", "OLU_MAX_RECORD_BYTES (--max-record-bytes)"),
    ("OLU_REVOKE_BUDGET_FRACTION", "1.5", "OLU_REVOKE_BUDGET_FRACTION (--revoke-budget-fraction)"),
    ("OLU_REVOKE_BUDGET_FRACTION", "0", "OLU_REVOKE_BUDGET_FRACTION (--revoke-budget-fraction)"),
    ("OLU_BATCH_SIZE", "0", "OLU_BATCH_SIZE (--batch-size)"),
    ("OLU_POLL_TIMEOUT", "-0.1", "OLU_POLL_TIMEOUT (--poll-timeout)"),
    ("OLU_HTTP_PORT", "65536", "OLU_HTTP_PORT (--http-port) must be an integer in [0, 65535]"),
    ("OLU_HTTP_PORT", "http", "OLU_HTTP_PORT (--http-port)"),
    ("OLU_LIVENESS_SECONDS", "0", "OLU_LIVENESS_SECONDS (--liveness-seconds)"),
    ("OLU_LOG_LEVEL", "verbose", "OLU_LOG_LEVEL (--log-level)"),
    ("OLU_LOG_FORMAT", "xml", "OLU_LOG_FORMAT (--log-format)"),
    ("OLU_GROUP_ID", "  ", "OLU_GROUP_ID (--group-id) must be a non-empty string"),
    ("OLU_MODEL_NAME", "x" * 300, "OLU_MODEL_NAME (--model-name)"),
    ("OLU_KAFKA_BOOTSTRAP_SERVERS", "a\nb", "OLU_KAFKA_BOOTSTRAP_SERVERS (--bootstrap-servers)"),
]


@pytest.mark.parametrize("name,value,message", BAD_ENV, ids=[f"{n}={v[:12]!r}" for n, v, _ in BAD_ENV])
def test_bad_env_value_names_the_setting(name, value, message):
    with pytest.raises(ConfigError) as err:
        load(**{name: value})
    assert message in str(err.value)
    assert repr(value) in str(err.value)


@pytest.mark.parametrize("flag,value,env_name", [
    ("--rho", "abc", "OLU_RHO"), ("--dim", "-3", "OLU_DIM"), ("--algorithm", "x", "OLU_ALGORITHM"),
    ("--http-port", "-1", "OLU_HTTP_PORT"), ("--state-url", "http://x", "OLU_STATE_URL"),
])
def test_bad_flag_value_names_the_setting(flag, value, env_name):
    with pytest.raises(ConfigError) as err:
        load([flag, value])
    assert f"{env_name} ({flag})" in str(err.value) and repr(value) in str(err.value)


def test_flag_overrides_a_bad_env_value_is_still_checked_only_when_used():
    assert load(["--rho", "2"], OLU_RHO="abc").rho == 2.0  # the flag wins; the env value is unused


@pytest.mark.parametrize("env,message", [
    ({"OLU_DIM": ""}, "OLU_DIM (--dim) is required"),
    ({"OLU_KAFKA_BOOTSTRAP_SERVERS": ""}, "OLU_KAFKA_BOOTSTRAP_SERVERS (--bootstrap-servers)"),
])
def test_missing_required_settings_for_run(env, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_settings([], {**BASE, **env})


@pytest.mark.parametrize("argv,env,names", [
    (["--schedule", "constant"], {}, ["OLU_STEP (--step)", "OLU_SCHEDULE (--schedule)"]),
    (["--schedule", "strongly-convex", "--l2", "0"], {}, ["OLU_L2 (--l2)"]),
    (["--params-topic", "olu.events"], {}, ["OLU_PARAMS_TOPIC (--params-topic)"]),
    (["--dlq-topic", "in"], {"OLU_INPUT_TOPICS": "x,in"}, ["OLU_DLQ_TOPIC (--dlq-topic)"]),
    (["--dlq-topic", "olu.params"], {}, ["OLU_PARAMS_TOPIC", "OLU_DLQ_TOPIC"]),
    (["--snapshot-every-events", "0", "--snapshot-every-seconds", "0"], {},
     ["OLU_SNAPSHOT_EVERY_EVENTS", "OLU_SNAPSHOT_EVERY_SECONDS"]),
])
def test_cross_checks_name_the_settings(argv, env, names):
    with pytest.raises(ConfigError) as err:
        load(argv, **env)
    for name in names:
        assert name in str(err.value)


def test_constant_schedule_with_step_is_fine():
    s = load(["--schedule", "constant", "--step", "0.05"])
    assert s.model_kwargs()["step"] == 0.05


def test_every_registered_algorithm_is_a_choice_and_loads():
    from worker.olu import ALGORITHMS

    assert config.ALGORITHMS == tuple(ALGORITHMS)
    for algorithm in ALGORITHMS:
        loss = "ridge" if algorithm == "active-newton" else "logistic"
        assert load(OLU_ALGORITHM=algorithm, OLU_LOSS=loss).algorithm == algorithm
    with pytest.raises(ConfigError, match=r"OLU_ALGORITHM \(--algorithm\)"):
        load(OLU_ALGORITHM="no-such-algorithm")


# --------------------------------------------------------------------------- typo protection
@pytest.mark.parametrize("typo,suggestion", [
    ("OLU_TARGET_EPSLON", "OLU_TARGET_EPSILON"),
    ("OLU_RELEASE_EVERY_EVENT", "OLU_RELEASE_EVERY_EVENTS"),
    ("OLU_STATEURL", "OLU_STATE_URL"),
    ("OLU_GROUPID", "OLU_GROUP_ID"),
    ("OLU_HTTP_PROT", "OLU_HTTP_PORT"),
])
def test_unknown_olu_variable_suggests_closest(typo, suggestion):
    with pytest.raises(ConfigError) as err:
        load(**{typo: "1"})
    text = str(err.value)
    assert typo in text and f"did you mean {suggestion}" in text


def test_unknown_olu_variable_without_a_close_match():
    with pytest.raises(ConfigError, match="unknown environment variable OLU_ZZZZZZZZZZZZ$"):
        load(OLU_ZZZZZZZZZZZZ="1")


def test_non_setting_olu_variables_are_tolerated():
    s = load(OLU_REFERENCE_KERNEL="1", OLU_KAFKA_LOCAL="1", OLU_TEST_S3_ENDPOINT="http://x", olu_eps="junk",
             KAFKA_SOMETHING="x")
    assert s.kafka == {}


def test_unknown_flag_suggests_closest():
    with pytest.raises(ConfigError, match="--rhoo.*did you mean --rho"):
        load(["--rhoo", "1"])
    with pytest.raises(ConfigError, match="expected one argument"):
        load(["--rho"])


# --------------------------------------------------------------------------- librdkafka pass-through
def test_passthrough_mapping():
    s = load(["--kafka", "client.rack=rack-1", "--kafka", "ssl.ca.location=/flag/ca.pem"],
             OLU_KAFKA_SASL_MECHANISM="PLAIN", OLU_KAFKA_SSL_CA_LOCATION="/etc/ca.pem",
             OLU_KAFKA_SECURITY_PROTOCOL="SASL_SSL", OLU_KAFKA_LOG__LEVEL="7",
             OLU_KAFKA_SASL_OAUTHBEARER_CLIENT_ID="cid",
             OLU_KAFKA_SSL_ENDPOINT_IDENTIFICATION_ALGORITHM="none")
    assert s.kafka == {
        "sasl.mechanism": "PLAIN", "ssl.ca.location": "/flag/ca.pem", "security.protocol": "SASL_SSL",
        "log_level": "7", "client.rack": "rack-1", "sasl.oauthbearer.client.id": "cid",
        "ssl.endpoint.identification.algorithm": "none",
    }
    for conf in (s.consumer_config(), s.producer_config()):
        assert conf["sasl.mechanism"] == "PLAIN" and conf["ssl.ca.location"] == "/flag/ca.pem"
        assert conf["log_level"] == "7"


@pytest.mark.parametrize("key", ["sasl.mechanism", "ssl.ca.location", "log_level", "enabled_events",
                                 "sasl.oauthbearer.token.endpoint.url"])
def test_env_key_round_trip(key):
    assert config.env_to_kafka_key(config.kafka_key_to_env(key)) == key


def test_passthrough_routing_consumer_vs_producer():
    s = load(OLU_KAFKA_MAX_POLL_INTERVAL_MS="600000", OLU_KAFKA_LINGER_MS="1",
             OLU_KAFKA_TRANSACTION_TIMEOUT_MS="30000", OLU_KAFKA_SESSION_TIMEOUT_MS="30000")
    c, p = s.consumer_config(), s.producer_config()
    assert c["max.poll.interval.ms"] == "600000" and "max.poll.interval.ms" not in p
    assert c["session.timeout.ms"] == "30000" and "session.timeout.ms" not in p
    assert p["linger.ms"] == "1" and "linger.ms" not in c
    assert p["transaction.timeout.ms"] == "30000" and "transaction.timeout.ms" not in c
    assert s.max_poll_interval_ms == 600_000
    assert s.revoke_budget_seconds == pytest.approx(300.0)
    assert load().revoke_budget_seconds == pytest.approx(150.0)


def test_consumer_and_producer_contract():
    s = load(["--transactional", "--transactional-id", "tx-1"])
    c = s.consumer_config()
    assert c["bootstrap.servers"] == "broker:9092" and c["group.id"] == "olu-worker"
    assert c["enable.auto.commit"] is False and c["enable.auto.offset.store"] is False
    assert c["partition.assignment.strategy"] == "cooperative-sticky"
    assert c["auto.offset.reset"] == "earliest" and c["isolation.level"] == "read_committed"
    assert c["enable.partition.eof"] is False and c["statistics.interval.ms"] > 0
    assert c["group.protocol"] == "classic"
    p = s.producer_config()
    assert p["enable.idempotence"] is True and p["acks"] == "all" and p["linger.ms"] <= 10
    assert p["transactional.id"] == "tx-1" and p["bootstrap.servers"] == "broker:9092"
    assert "transactional.id" not in load().producer_config()


def test_kip848_protocol_drops_the_assignor():
    c = load(["--group-protocol", "consumer"]).consumer_config()
    assert c["group.protocol"] == "consumer" and "partition.assignment.strategy" not in c
    with pytest.raises(ConfigError, match="session.timeout.ms.*OLU_GROUP_PROTOCOL"):
        load(["--group-protocol", "consumer"], OLU_KAFKA_SESSION_TIMEOUT_MS="10000")


@pytest.mark.parametrize("env_name,value,needle", [
    ("OLU_KAFKA_ENABLE_AUTO_COMMIT", "true", "enable.auto.commit"),
    ("OLU_KAFKA_ENABLE_AUTO_OFFSET_STORE", "true", "enable.auto.offset.store"),
    ("OLU_KAFKA_ISOLATION_LEVEL", "read_uncommitted", "isolation.level"),
    ("OLU_KAFKA_AUTO_OFFSET_RESET", "latest", "auto.offset.reset"),
    ("OLU_KAFKA_PARTITION_ASSIGNMENT_STRATEGY", "range,roundrobin", "partition.assignment.strategy"),
    ("OLU_KAFKA_ENABLE_PARTITION_EOF", "true", "enable.partition.eof"),
    ("OLU_KAFKA_ENABLE_IDEMPOTENCE", "false", "enable.idempotence"),
    ("OLU_KAFKA_ACKS", "1", "acks"),
    ("OLU_KAFKA_REQUEST_REQUIRED_ACKS", "0", "request.required.acks"),
    ("OLU_KAFKA_GROUP_ID", "other", "OLU_GROUP_ID (--group-id)"),
    ("OLU_KAFKA_METADATA_BROKER_LIST", "b:1", "OLU_KAFKA_BOOTSTRAP_SERVERS (--bootstrap-servers)"),
    ("OLU_KAFKA_GROUP_PROTOCOL", "consumer", "OLU_GROUP_PROTOCOL (--group-protocol)"),
    ("OLU_KAFKA_TRANSACTIONAL_ID", "x", "OLU_TRANSACTIONAL_ID (--transactional-id)"),
    ("OLU_KAFKA_STATS__CB", "x", "only be set through the API"),
    ("OLU_KAFKA_ENABLE_AUTO_COMMMIT", "false", "did you mean 'enable.auto.commit'"),
    ("OLU_KAFKA_MAX_POLL_INTERVAL_MS", "soon", "max.poll.interval.ms"),
    ("OLU_KAFKA_STATISTICS_INTERVAL_MS", "-1", "statistics.interval.ms"),
])
def test_passthrough_rejects_contract_breakers(env_name, value, needle):
    with pytest.raises(ConfigError) as err:
        load(**{env_name: value})
    text = str(err.value)
    assert env_name in text and needle in text


@pytest.mark.parametrize("item,needle", [
    ("enable.auto.commit=true", "--kafka enable.auto.commit"),
    ("bootstrap.servers=x:1", "OLU_KAFKA_BOOTSTRAP_SERVERS (--bootstrap-servers)"),
    ("no-equals-sign", "KEY=VALUE"),
    ("Sasl.Mechanism=PLAIN", "not a librdkafka property name"),
])
def test_passthrough_flag_rejections(item, needle):
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        load(["--kafka", item])


def test_passthrough_accepts_harmless_contract_values():
    s = load(OLU_KAFKA_ENABLE_AUTO_COMMIT="false", OLU_KAFKA_ISOLATION_LEVEL="read_committed",
             OLU_KAFKA_AUTO_OFFSET_RESET="error", OLU_KAFKA_ACKS="-1", OLU_KAFKA_ENABLE_IDEMPOTENCE="true")
    assert s.consumer_config()["auto.offset.reset"] == "error"
    assert s.producer_config()["acks"] == "-1"


def test_fetch_queue_backoff_is_short_by_default_and_can_be_overridden():
    # librdkafka's 1 s default leaves a fast worker idle once its prefetch queue is drained
    assert load().consumer_config()["fetch.queue.backoff.ms"] == 10
    assert load(OLU_KAFKA_FETCH_QUEUE_BACKOFF_MS="250").consumer_config()["fetch.queue.backoff.ms"] == "250"
    assert "fetch.queue.backoff.ms" not in load().producer_config()


def test_the_producer_takes_any_record_the_consumer_can_receive():
    # a dead letter is the original record whole: librdkafka's consumer receives records up to
    # receive.message.max.bytes (100 MB), or fetch.max.bytes + 512 when that is larger
    p = load().producer_config()
    assert p["message.max.bytes"] >= 100_000_000 + 1024 and p["batch.size"] <= 65_536
    bigger = load(OLU_KAFKA_FETCH_MAX_BYTES="200000000").producer_config()["message.max.bytes"]
    assert bigger >= 200_000_512 + 1024
    assert load(OLU_KAFKA_RECEIVE_MESSAGE_MAX_BYTES="999999999").producer_config()["message.max.bytes"] \
        == 1_000_000_000  # librdkafka's ceiling
    assert load(OLU_KAFKA_MESSAGE_MAX_BYTES="2000000").producer_config()["message.max.bytes"] == "2000000"
    admin = load(["--transactional", "--transactional-id", "tx-1"], OLU_KAFKA_SECURITY_PROTOCOL="SASL_SSL").admin_config()
    assert admin["security.protocol"] == "SASL_SSL" and admin["bootstrap.servers"] == "broker:9092"
    assert not {"transactional.id", "enable.idempotence", "acks", "batch.size", "message.max.bytes"} & set(admin)


def test_flag_wins_over_env_for_the_same_passthrough_key():
    s = load(["--kafka", "client.rack=flag"], OLU_KAFKA_CLIENT_RACK="env")
    assert s.kafka["client.rack"] == "flag"


# --------------------------------------------------------------------------- redaction
SECRET = "s3cr3t-hunter2-value"


def test_redacted_hides_every_secret():
    s = load(["--kafka", f"ssl.key.password={SECRET}-flag", "--state-url", f"s3://user:{SECRET}-url@bucket/x"],
             OLU_KAFKA_SASL_USERNAME="alice", OLU_KAFKA_SASL_PASSWORD=SECRET,
             OLU_KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET=SECRET + "-oidc",
             OLU_KAFKA_SSL_KEYSTORE_PASSWORD=SECRET + "-ks", OLU_KAFKA_SSL_KEY_PEM=SECRET + "-pem",
             OLU_KAFKA_SASL_OAUTHBEARER_CONFIG=f"principal=admin token={SECRET}",
             OLU_KAFKA_SASL_OAUTHBEARER_ASSERTION_PRIVATE_KEY_PASSPHRASE=SECRET + "-pp",
             AWS_ACCESS_KEY_ID="AKIAEXAMPLE", AWS_SECRET_ACCESS_KEY=SECRET + "-aws",
             AWS_SESSION_TOKEN=SECRET + "-sts")
    dumped = orjson.dumps(s.redacted()).decode()
    assert SECRET not in dumped and SECRET not in repr(s) and SECRET not in str(s)
    assert "AKIAEXAMPLE" not in dumped
    red = s.redacted()
    assert red["kafka"]["sasl.username"] == "alice"  # not a secret
    assert red["kafka"]["sasl.password"] == "***" and red["kafka"]["ssl.key.password"] == "***"
    assert red["storage_credentials_present"] is True
    assert red["dim"] == 4 and red["origins"]["dim"] == "env"
    assert s.consumer_config()["sasl.password"] == SECRET  # the clients still get it


def test_no_credentials_recorded_as_absent():
    assert load().redacted()["storage_credentials_present"] is False


# --------------------------------------------------------------------------- model kwargs
def test_model_kwargs_build_the_engine():
    from worker.olu import ALGORITHMS

    s = load(["--rho", "2", "--max-deletions", "50"])
    kwargs = s.model_kwargs()
    assert kwargs["dim"] == 4 and kwargs["rho"] == 2.0 and kwargs["capacity"] == 50
    assert "t0" not in kwargs and "restart_c" not in kwargs and "order_fallback" not in kwargs
    model = ALGORITHMS["passive"](**kwargs)
    assert model.dim == 4 and model.accountant.capacity == 50


def test_model_kwargs_per_algorithm():
    from worker.olu import ALGORITHMS

    for algorithm in config.ALGORITHMS:
        loss = "ridge" if algorithm == "active-newton" else "logistic"
        s = Settings(dim=3, algorithm=algorithm, loss=loss, max_deletions=9, restart_c=2.0, t0=1.0)
        kwargs = s.model_kwargs()
        assert kwargs["dim"] == 3 and kwargs["t0"] == 1.0
        if algorithm in ALGORITHMS:  # the engine accepts exactly these
            ALGORITHMS[algorithm](**kwargs)
        if algorithm == "passive-restart":
            assert kwargs["restart_c"] == 2.0 and kwargs["max_deletions"] == 9
        if algorithm.startswith("active-") and algorithm not in ALGORITHMS:
            assert kwargs["max_deletions"] == 9 and kwargs["order_fallback"] == "retrain"
        if algorithm in ("ogd", "restart"):
            assert not {"max_deletions", "capacity", "restart_c", "order_fallback"} & set(kwargs)


def test_settings_are_frozen():
    s = load()
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.rho = 5.0  # type: ignore[misc]


def test_model_combinations_the_engine_refuses_fail_at_start_naming_the_setting():
    env = {"OLU_KAFKA_BOOTSTRAP_SERVERS": "k:9092", "OLU_DIM": "3"}
    with pytest.raises(ConfigError, match="OLU_LOSS"):
        load_settings([], {**env, "OLU_ALGORITHM": "active-newton"})
    with pytest.raises(ConfigError, match="OLU_L2"):
        load_settings([], {**env, "OLU_ALGORITHM": "active-anchor", "OLU_L2": "0"})


# --------------------------------------------------------------------------- one default per setting
def test_options_and_settings_fields_agree():
    """Every option is a Settings field and every field but the non-options is an option, in the
    same order (the README table follows OPTIONS, the start-up log line follows the fields)."""
    settings_fields = [f for f in fields(Settings) if f.name not in NOT_OPTIONS]
    assert [o.name for o in config.OPTIONS] == [f.name for f in settings_fields]
    for opt, f in zip(config.OPTIONS, settings_fields):
        assert opt.default == f.default and type(opt.default) is type(f.default), opt.name


def test_every_default_survives_its_own_parser():
    """The default as the table shows it parses back to the default (so the table can be copied)."""
    shown = {row["name"]: row["default"] for row in config.settings_table()}
    for opt in config.OPTIONS:
        if opt.default is not None:
            assert opt.parse(shown[opt.name]) == opt.default, opt.name


def test_the_configuration_page_is_generated_from_the_options():
    """docs/configuration.md is ``python -m worker.config``'s output, byte for byte."""
    from worker.config.reference import settings_markdown

    page = (ROOT / "docs" / "configuration.md").read_text()
    assert page == settings_markdown(), "run: .venv/bin/python -m worker.config > docs/configuration.md"


def test_the_configuration_table_has_one_row_per_setting():
    lines = (ROOT / "docs" / "configuration.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        table.append(line)
    assert table[0] == "| env | flag | default | meaning |"
    rows = [[cell.strip() for cell in line.strip().strip("|").split(" | ")] for line in table[2:]]
    expected = [[f"`{r['env']}`", f"`{r['flag']}`", f"`{r['default'] or '—'}`", r["meaning"]]
                for r in config.settings_table()]
    assert rows == expected, "docs/configuration.md's table differs from worker.config.settings_table()"


# --------------------------------------------------------------------------- privacy settings
@pytest.mark.parametrize("argv,env", [([], {"OLU_EPS": "1"}), (["--eps", "1"], {}), (["--eps=2"], {})])
def test_the_removed_eps_is_refused_naming_both_replacements(argv, env):
    with pytest.raises(ConfigError) as err:
        load(argv, **env)
    text = str(err.value)
    assert "OLU_EPS (--eps) was removed" in text
    assert "OLU_RHO (--rho)" in text and "OLU_TARGET_EPSILON (--target-epsilon)" in text


def test_rho_and_target_epsilon_are_mutually_exclusive():
    with pytest.raises(ConfigError, match=r"OLU_RHO \(--rho\) and OLU_TARGET_EPSILON \(--target-epsilon\) are "
                                          "mutually exclusive"):
        load(["--rho", "1"], OLU_TARGET_EPSILON="2")


def test_an_explicit_rho_replaces_the_default_target():
    s = load(OLU_RHO="0.5")
    assert (s.rho, s.target_epsilon) == (0.5, None)
    assert s.model_kwargs()["rho"] == 0.5 and "target_epsilon" not in s.model_kwargs()


def test_the_target_reaches_the_engine_as_the_exact_inverse():
    from worker.olu.privacy.analysis.rdp import rdp_to_dp, rho_for_epsilon
    from worker.olu.privacy.analysis.units import unit_epsilon, unit_rho_for_epsilon

    s = load(OLU_TARGET_EPSILON="2", OLU_DELTA="1e-6", OLU_PRIVACY_UNIT="per-request")
    model = ALGORITHMS[s.algorithm](**s.model_kwargs())
    assert model.accountant.unit == "per-request"  # inverted through the exact Gaussian curve
    assert model.accountant.budget == unit_rho_for_epsilon("per-request", 2.0, 1e-6) > rho_for_epsilon(2.0, 1e-6)
    assert unit_epsilon("per-request", model.accountant.budget, 1e-6) <= 2.0
    s = load(OLU_TARGET_EPSILON="2", OLU_DELTA="1e-6", OLU_PRIVACY_UNIT="all-deletions")
    model = ALGORITHMS[s.algorithm](**s.model_kwargs())
    assert model.accountant.budget == rho_for_epsilon(2.0, 1e-6)
    assert rdp_to_dp(model.accountant.budget, 1e-6) <= 2.0


def test_per_request_is_refused_for_an_algorithm_without_its_proof():
    with pytest.raises(ConfigError, match=r"OLU_PRIVACY_UNIT \(--privacy-unit\).*not available for algorithm "
                                          "'active-d2d'"):
        load(OLU_PRIVACY_UNIT="per-request", OLU_ALGORITHM="active-d2d", OLU_MAX_DELETIONS="5")


def test_rewind_refuses_a_rho():
    with pytest.raises(ConfigError, match="rewind is calibrated to an \\(epsilon, delta\\) target"):
        load(OLU_RHO="1", OLU_ALGORITHM="rewind", OLU_MAX_DELETIONS="5")


def test_an_algorithm_setting_has_one_default_the_classes():
    """Every setting an algorithm class declares defaults in Settings to the class's own constructor
    default (or to None: unset, the class decides), so a default is written once (issue 40)."""
    import inspect

    from worker.config.model import engine_default
    from worker.config.settings import DEFAULTS
    from worker.olu.registry import ALGORITHMS

    declared = {name for cls in ALGORITHMS.values() for name in cls.settings}
    assert {"restart_c", "order_fallback", "on_budget", "lbfgs_memory", "dp_horizon", "retrain_every",
            "train_steps", "noise_sigma"} <= declared
    for name in sorted(declared):
        if DEFAULTS[name] is not None:
            assert DEFAULTS[name] == engine_default(name), name
        for cls in ALGORITHMS.values():  # and the model built from the defaults has exactly them
            keyword = cls.settings.get(name)
            if keyword and DEFAULTS[name] is not None:
                init = next(k.__init__ for k in cls.__mro__ if "__init__" in vars(k)
                            and keyword in inspect.signature(k.__init__).parameters)
                assert inspect.signature(init).parameters[keyword].default == DEFAULTS[name], (cls, name)


def test_retained_rows_reach_retrain_and_name_the_engines_choices():
    from worker.config.options import RETAINED_ROWS
    from worker.olu import ALGORITHMS
    from worker.olu.algorithms.retrain import RETAINED_ROWS as ENGINE_CHOICES

    assert RETAINED_ROWS == ENGINE_CHOICES
    s = load(["--algorithm", "retrain", "--retained-rows", "sparse"])
    model = ALGORITHMS["retrain"](**s.model_kwargs())
    assert model.sparse_steps and model.config["retained_rows"] == "sparse"
    assert "retained_rows" not in load(["--algorithm", "passive"]).model_kwargs()
    with pytest.raises(ConfigError, match="retained_rows|OLU_RETAINED_ROWS|retained-rows"):
        load(["--algorithm", "retrain", "--retained-rows", "csr"])
