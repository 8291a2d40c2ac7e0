"""The option table: every setting's parser, meaning, group, environment variable and flag.

Every setting ``name`` has the environment variable ``OLU_<NAME>`` and the flag
``--<name-with-dashes>`` (one exception: the bootstrap servers are ``OLU_KAFKA_BOOTSTRAP_SERVERS``,
with the plain ``KAFKA_BOOTSTRAP_SERVERS`` as a fallback). An option's default is its
:class:`~worker.config.settings.Settings` field's default, read from there: each default is
written once. :func:`settings_table` lists them all (docs/configuration.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..olu.privacy import SPLIT_NAMES, UNITS
from ..olu.rotation import VARIANTS
from .model import ALGORITHMS
from .parsers import (
    boolean,
    bootstrap,
    choice,
    class_labels,
    field_map,
    field_names,
    http_url,
    number,
    state_prefix,
    state_url,
    text,
    topic,
    topics,
    user_info,
)
from .settings import DEFAULTS, DELETION_RELEASES

ENV_PREFIX = "OLU_"
BOOTSTRAP_ENV = "OLU_KAFKA_BOOTSTRAP_SERVERS"
BOOTSTRAP_FALLBACK_ENV = "KAFKA_BOOTSTRAP_SERVERS"

LOSSES = ("logistic", "ridge", "softmax")
FEATURE_POLICIES = ("reject", "clip")
SCHEDULES = ("auto", "strongly-convex", "convex", "constant")
ORDER_FALLBACKS = ("retrain", "restart", "passive")
RETAINED_ROWS = ("dense", "sparse")  # retrain's (tests/test_config_classes.py keeps them equal)
BUDGET_POLICIES = ("retrain", "refuse")
GROUP_PROTOCOLS = ("classic", "consumer")
CORRUPT_POLICIES = ("fallback", "fail")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_FORMATS = ("json", "text")
INPUT_FORMATS = ("json", "avro", "json-schema", "protobuf")
RELEASE_FORMATS = ("json", "avro", "json-schema")
ROTATION_CHOICES = ("off", "on")

GROUP_TITLES = {"kafka": "Kafka", "registry": "Schema Registry", "model": "model",
                "state": "releases and state",
                "http": "HTTP and logging"}


@dataclass(frozen=True)
class Option:
    """One setting: how its raw value is parsed, what it means, and its two names.

    ``default`` is not an argument: it is the ``Settings`` field's default (an option without a
    field fails here, at import).
    """

    name: str
    parse: Callable[[str], Any]
    help: str
    group: str
    env: str = ""
    flag: str = ""
    default: Any = field(init=False)

    def __post_init__(self):
        if self.name not in DEFAULTS:
            raise TypeError(f"option {self.name!r} has no Settings field to take its default from")
        object.__setattr__(self, "default", DEFAULTS[self.name])
        if not self.env:
            object.__setattr__(self, "env", ENV_PREFIX + self.name.upper())
        if not self.flag:
            object.__setattr__(self, "flag", "--" + self.name.replace("_", "-"))

    @property
    def label(self) -> str:
        return f"{self.env} ({self.flag})"


positive = number(0, lo_open=True)
non_negative = number(0)

OPTIONS: tuple[Option, ...] = (
    # Kafka
    Option("bootstrap_servers", bootstrap, "Kafka bootstrap servers, host:port[,host:port] "
                                           f"(required for run; {BOOTSTRAP_FALLBACK_ENV} is read "
                                           f"as a fallback)", "kafka",
           env=BOOTSTRAP_ENV),
    Option("group_id", text, "consumer group id (also the snapshot namespace)", "kafka"),
    Option("input_topics", topics, "input topics, comma-separated", "kafka"),
    Option("params_topic", topic, "topic of released parameters", "kafka"),
    Option("dlq_topic", topic, "dead-letter topic", "kafka"),
    Option("receipts_topic", topic, "topic of deletion receipts, one per request keyed by its id "
           "(compact it; it names the subjects and ids deleted: restrict who reads it)", "kafka"),
    Option("transactional", boolean, "publish releases and commit offsets in Kafka transactions",
           "kafka"),
    Option("transactional_id", text, "transactional.id (default {group_id}-{hostname}; must be "
                                     "stable per replica, e.g. the StatefulSet pod name)", "kafka"),
    Option("group_protocol", choice(GROUP_PROTOCOLS),
           "consumer group protocol: classic (cooperative-sticky) or consumer (KIP-848, broker >= "
           "4.0)", "kafka"),
    # Schema Registry
    Option("input_format", choice(INPUT_FORMATS),
           "input record values: json (schemas/), or Schema Registry framed avro, json-schema or "
           "protobuf (needs schema_registry_url)", "registry"),
    Option("release_format", choice(RELEASE_FORMATS),
           "release values: json, or avro / json-schema framed with a schema registered under the "
           "params topic's subject (needs schema_registry_url)",
           "registry"),
    Option("schema_registry_url", http_url,
           "Schema Registry URL (Confluent API; Apicurio at /apis/ccompat/v7)",
           "registry"),
    Option("schema_registry_user_info", user_info,
           "Schema Registry basic auth USER:PASSWORD (secret)", "registry"),
    Option("schema_registry_ca_location", text, "Schema Registry TLS: CA certificate file",
           "registry"),
    Option("schema_registry_cert_location", text,
           "Schema Registry TLS: client certificate file (mTLS)", "registry"),
    Option("schema_registry_key_location", text, "Schema Registry TLS: client key file (mTLS)",
           "registry"),
    Option("input_fields", field_map, "registry formats: the record field of each role, e.g. "
                                      "id=user_id,y=clicked (roles op, id, x, y, ts; default: the "
                                      "role's own name)",
           "registry"),
    Option("input_feature_fields", field_names,
           "registry formats: features as these named numeric fields, in this order (instead of "
           "the array field x); as many as dim", "registry"),
    # Model
    Option("algorithm", choice(ALGORITHMS), "learner-unlearner", "model"),
    Option("dim", number(1, integer=True),
           "feature dimension (required for run, unless features_file gives it)",
           "model"),
    Option("features_file", text,
           "feature spec (YAML or JSON): inserts carry named fields, turned into the vector by "
           "declared transforms; sets dim and feature_bound (docs/features.md)", "model"),
    Option("features_reset", boolean,
           "a snapshot trained under another feature spec starts a fresh model (default: the "
           "restore is refused)", "model"),
    Option("sparse_input", boolean,
           "inserts carry x as {indices, values} (an array is taken too), or a feature spec's "
           "vector, learned in O(non-zeros) a record: wide hashed or one-hot inputs (JSON input "
           "only)", "model"),
    Option("loss", choice(LOSSES),
           "loss function: logistic (labels -1/+1 or 0/1), ridge (real labels) or softmax (one of "
           "the declared classes)", "model"),
    Option("classes", class_labels,
           "softmax: the class labels, a JSON list or comma-separated (integers when every one "
           "is); required with loss softmax, which learns a K x dim parameter", "model"),
    Option("l2", non_negative, "L2 regularisation (strong convexity mu)", "model"),
    Option("label_bound", positive, "bound on the label magnitude, abs(y) (ridge)", "model"),
    Option("radius", positive, "radius of the parameter ball K", "model"),
    Option("feature_bound", positive, "bound on the Euclidean norm of the features x", "model"),
    Option("feature_policy", choice(FEATURE_POLICIES),
           "features over the bound: reject (dead letter) or clip",
           "model"),
    Option("schedule", choice(SCHEDULES), "step-size schedule", "model"),
    Option("t0", non_negative,
           "strongly-convex schedule offset t0 (default from the loss constants)", "model"),
    Option("step", positive, "constant step size (schedule=constant)", "model"),
    Option("privacy_unit", choice(UNITS),
           "what one guarantee protects: all-deletions (every deleted record together, per model "
           "lifetime) or per-request (each deletion request alone; passive only); required by run, "
           "the default is for demo and plan", "model"),
    Option("target_epsilon", positive,
           "privacy target: epsilon at delta per privacy unit; the worker uses the largest Renyi "
           "slope that meets it (the default unless rho is given)", "model"),
    Option("rho", positive,
           "privacy as a Renyi slope per privacy unit (D_alpha <= alpha rho for every alpha > 1); "
           "excludes target_epsilon", "model"),
    Option("omega", number(1, lo_open=True), "budget split exponent (> 1)", "model"),
    Option("delta", number(0, 1, lo_open=True, hi_open=True), "delta at which epsilon is reported",
           "model"),
    Option("budget_split", choice(SPLIT_NAMES),
           "all-deletions: weighted (omega weights over the model's lifetime) or planned (an even "
           "share for each of deletion_capacity deletions, a reserve beyond)", "model"),
    Option("deletion_capacity", number(1, integer=True),
           "planned split: deletions planned per model lifetime (default: expected_deletion_rate x "
           "model_lifetime_events)", "model"),
    Option("expected_deletion_rate", number(0, 1, hi_open=True),
           "expected deletion requests per event: derives deletion_capacity for the planned split, "
           "exported as olu_plan_deletion_rate and alerted on when exceeded by half", "model"),
    Option("planned_records_per_request", number(1),
           "the plan's records per deletion request (olu-worker plan's workload): exported as "
           "olu_plan_records_per_request, alerted on when requests grow past twice it", "model"),
    Option("planned_deletion_age_events", number(1, integer=True),
           "the plan's median age of deleted records in events: exported as "
           "olu_plan_deletion_age_events, alerted on when deletions turn far younger", "model"),
    Option("budget_reserve", number(0, 1, lo_open=True, hi_open=True),
           "planned split: share of the budget kept for deletions beyond the capacity", "model"),
    Option("rotation", choice(ROTATION_CHOICES),
           "warm-standby rotation: on (an active and a standby model per partition, renewed every "
           "model_lifetime_events / 2 events) or off; on by default under per-request", "model"),
    Option("rotation_variant", choice(VARIANTS),
           "rotation: overlap (every event trains both models) or disjoint (each record trains "
           "one, by a hash of its key); disjoint by default under per-request", "model"),
    Option("model_lifetime_events", number(2, integer=True),
           "rotation: events a model lives (half as standby, half released); also the lifetime the "
           "planned capacity is derived for; 20000 by default under per-request", "model"),
    Option("max_records_per_key", number(1, integer=True),
           "records of one partitioning key (the Kafka key: a data subject) a model learns in its "
           "lifetime, the first to arrive; later ones are consumed, counted and not learned, so a "
           "request naming a subject's records costs at most this many records' noise (default: no "
           "cap)",
           "model"),
    Option("forget_by_key", boolean,
           "keep which records each partitioning key (data subject) gave a new model, 16 bytes a "
           "record, so a delete naming the subject forgets all of them in one request",
           "model"),
    Option("max_deletions", number(1, integer=True),
           "deletion capacity (per epoch; k for the restart and active algorithms)", "model"),
    Option("restart_c", positive, "passive-restart: constant c of the restart test", "model"),
    Option("order_fallback", choice(ORDER_FALLBACKS),
           "active algorithms: what to do when the retained order cannot be honoured", "model"),
    Option("on_budget", choice(BUDGET_POLICIES),
           "memory-pair: a deletion past the zCDP budget retrains on the retained data (release "
           "header olu.budget=retrained) or is refused (dead letter budget_exhausted)", "model"),
    Option("lbfgs_memory", number(1, 1000, integer=True),
           "memory-pair: curvature pairs kept by online L-BFGS (tau)", "model"),
    Option("dp_horizon", number(1, integer=True),
           "dp-tofw: records per tree epoch n, fixed in advance (noise grows with log2 n)",
           "model"),
    Option("checkpoint_every", number(1, integer=True),
           "retrain: steps between the iterate checkpoints a deletion replays from (memory: d "
           "floats each)", "model"),
    Option("retained_rows", choice(RETAINED_ROWS),
           "retrain: dense, or sparse (rows of few non-zeros: every step the sparse one, the rows "
           "kept in 16 bytes a non-zero, a replay O(non-zeros) a step)", "model"),
    Option("retrain_every", number(1, integer=True),
           "rewind: OGD steps between full-batch retrainings of the partition model", "model"),
    Option("train_steps", number(1, integer=True),
           "rewind: full-batch gradient-descent steps T of a retraining", "model"),
    Option("noise_sigma", non_negative,
           "rewind: Gaussian noise sigma of a rewind deletion, fixed in advance (sets the rewind "
           "depth K)", "model"),
    Option("model_name", text, "model name in releases (default: group_id)", "model"),
    # Releases and state
    Option("deletion_releases", choice(DELETION_RELEASES),
           "batch (one release after the last deletion of each poll batch) or each (one release "
           "per deletion request, reporting it)", "state"),
    Option("release_every_events", number(0, integer=True), "release after N events (0 disables)",
           "state"),
    Option("release_every_seconds", non_negative, "release every T seconds if changed (0 disables)",
           "state"),
    Option("snapshot_every_events", number(0, integer=True),
           "full snapshot after N events (0 disables)", "state"),
    Option("snapshot_every_seconds", non_negative, "full snapshot every T seconds (0 disables)",
           "state"),
    Option("snapshot_keep", number(1, integer=True), "full snapshots kept per partition", "state"),
    Option("snapshot_max_bytes_per_second", number(0, integer=True),
           "upload rate limit of background full snapshots, bytes/s (0: none; revoke and shutdown "
           "snapshots are never limited)", "state"),
    Option("snapshot_upload_spread", number(0, 1, hi_open=True),
           "spread a background full snapshot's uploads over this share of the time since the "
           "previous one (0: as fast as the rate limit allows)", "state"),
    Option("state_url", state_url, "object store: file://, memory:// or s3://", "state"),
    Option("state_prefix", state_prefix, "key prefix in the object store", "state"),
    Option("on_corrupt_snapshot", choice(CORRUPT_POLICIES),
           "corrupt newest snapshot: fallback to an older one, or fail", "state"),
    Option("deletion_deadline_seconds", positive,
           "the promised bound from a delete's arrival to the release that reflects it: a request "
           "pending longer is late (olu_deletion_requests_late, the chart's alert, olu-worker "
           "receipts --late)", "state"),
    Option("purge_bound_seconds", positive, "max seconds until stored objects holding a deleted "
                                            "record's raw features are deleted (active "
                                            "algorithms)", "state"),
    Option("max_record_bytes", number(1, integer=True),
           "larger input records go to the dead-letter topic", "state"),
    Option("revoke_budget_fraction", number(0, 1, lo_open=True),
           "share of max.poll.interval.ms for final snapshots on revoke and shutdown", "state"),
    Option("batch_size", number(1, 1_000_000, integer=True),
           "micro-batch size (messages per consume)", "state"),
    Option("poll_timeout", non_negative,
           "seconds to wait for the first message when nothing is fetched", "state"),
    # HTTP and logging
    Option("http_host", text, "bind address of /metrics /healthz /readyz", "http"),
    Option("http_port", number(0, 65535, integer=True), "HTTP port (0: ephemeral)", "http"),
    Option("quality_metric", boolean,
           "export olu_prequential_loss with each release: a figure of incoming records (deleted "
           "ones included) that the certificate does not cover", "http"),
    Option("liveness_seconds", positive,
           "/healthz fails when the loop made no progress for this long", "http"),
    Option("log_level", choice(LOG_LEVELS, upper=True), "log level", "http"),
    Option("log_format", choice(LOG_FORMATS), "log format: json (one object per line) or text",
           "http"),
)
OPTION_BY_NAME = {o.name: o for o in OPTIONS}
OPTION_BY_ENV = {o.env: o for o in OPTIONS}


def settings_table() -> list[dict[str, str]]:
    """One row per setting (name, env, flag, default, meaning): docs/configuration.md."""
    rows = []
    for opt in OPTIONS:
        default = opt.default
        if isinstance(default, tuple):
            default = ",".join(default)
        rows.append({"name": opt.name, "env": opt.env, "flag": opt.flag,
                     "default": "" if default is None else str(default).lower()
                     if isinstance(default, bool)
                     else str(default), "meaning": opt.help})
    rows.append(
        {"name": "kafka", "env": "OLU_KAFKA_<KEY>", "flag": "--kafka KEY=VALUE", "default": "",
         "meaning": "librdkafka pass-through ('.' as '_', '_' as '__'); contract keys rejected"})
    return rows
