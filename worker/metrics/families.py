"""Every metric a worker exports: its name, help text, label names and buckets, in one registry.

Label names are limited to :data:`LABEL_NAMES`. The families are created in a fixed order, the
order of the text exposition.
"""

from __future__ import annotations

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

CONTENT_TYPE = CONTENT_TYPE_LATEST
LABEL_NAMES = frozenset({"topic", "partition", "op", "reason", "type", "kind", "trigger", "unit",
                         "status"})

DELETE_TO_RELEASE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                             2.5, 5.0, 10.0)
SNAPSHOT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                    60.0)
RESTORE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                   120.0)
REQUEST_RECORDS_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 10000)
AGE_BUCKETS = (10, 100, 1000, 2000, 5000, 10000, 20000, 50000, 100000, 200000, 500000, 1000000,
               10000000)
#: The plan's assumptions a worker exports (settings, docs/accounting.md 13): gauge name -> setting.
PLAN_SETTINGS = {"olu_plan_deletion_rate": "expected_deletion_rate",
                 "olu_plan_records_per_request": "planned_records_per_request",
                 "olu_plan_deletion_age_events": "planned_deletion_age_events"}
BY_PARTITION = ("topic", "partition")
#: The privacy gauges: a partition's series carry its privacy unit.
BY_PARTITION_UNIT = BY_PARTITION + ("unit",)
#: Labels of the noise-in-the-release series: per partition, like olu_deletion_noise_sigma (a
#: release carries one noise, whatever the unit). To label them by unit too, use
#: BY_PARTITION_UNIT here and pass the unit in ``Metrics.set_noise``, nowhere else.
NOISE_LABELS = BY_PARTITION


class MetricFamilies:
    """The worker's metric families, all in its own registry (never the global default one), so
    tests and two workers in one process do not clash; ``render()`` gives the text exposition."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self._privacy_families(self.registry)
        self._work_families(self.registry)
        self._state_families(self.registry)
        # Model
        self.prequential_loss = Gauge("olu_prequential_loss", "Running mean of the test-then-train "
                                      "loss as of the newest release (outside the certificate; "
                                      "OLU_QUALITY_METRIC)", BY_PARTITION, registry=self.registry)

    def render(self) -> bytes:
        """Prometheus text exposition of this worker's registry (content type
        :data:`CONTENT_TYPE`)."""
        return generate_latest(self.registry)

    def _privacy_families(self, r: CollectorRegistry) -> None:
        tp, tpu = BY_PARTITION, BY_PARTITION_UNIT
        # ``unit``: what one guarantee protects (all-deletions: every deleted record together;
        # per-request: each deletion request alone, docs/accounting.md 8).
        self.privacy_epsilon = Gauge("olu_privacy_epsilon", "Privacy epsilon of the partition's "
                                                            "model at delta olu_privacy_delta, per "
                                                            "privacy unit: for all its deleted "
                                                            "records together (unit all-deletions) "
                                                            "or for each deletion request (unit "
                                                            "per-request)", tpu, registry=r)
        self.privacy_delta = Gauge("olu_privacy_delta", "The delta at which olu_privacy_epsilon is "
                                                        "reported", tpu, registry=r)
        self.privacy_budget_used = Gauge("olu_privacy_budget_used_ratio", "Fraction of the "
                                         "lifetime Renyi budget spent (rho spent / rho; always 0 "
                                         "for unit per-request)", tpu, registry=r)
        self.privacy_rdp_slope = Gauge("olu_privacy_rdp_slope", "Renyi slope spent this epoch, per "
                                                                "unit (D_alpha <= alpha * "
                                                                "slope)", tpu, registry=r)
        self.privacy_rho = Gauge("olu_privacy_rho", "The configured Renyi slope per privacy unit "
                                                    "(set, or derived from the target epsilon at "
                                                    "delta)", tpu,
                                 registry=r)
        self.privacy_requests = Gauge("olu_privacy_requests", "Deletion requests charged in the "
                                                              "model's current "
                                                              "epoch", tpu, registry=r)
        self.deletions = Counter("olu_deletions", "Deletions honoured that changed the model "
                                                  "(noised, exact, restarted or "
                                                  "retrained)", tp, registry=r)
        self.deletions_noop = Counter("olu_deletions_noop", "Deletions that needed no change: "
                                      "not_applied (never learned), duplicate (already deleted), "
                                      "ignored (baseline), dp_covered (dp-tofw: honoured by the DP "
                                      "guarantee of every release)", tp + ("reason",), registry=r)
        self.deletions_refused = Counter("olu_deletions_refused", "Deletions refused because the "
                                                                  "privacy budget was exhausted "
                                                                  "(on_budget=refuse; sent to the "
                                                                  "dead-letter "
                                                                  "topic)", tp, registry=r)
        self.deletion_noise_sigma = Gauge("olu_deletion_noise_sigma", "Noise standard deviation of "
                                                                      "the last noised "
                                                                      "deletion", tp, registry=r)
        # The noise the release carries (docs/accounting.md 10): public, from the constants and
        # the ledger.
        self.release_noise_std = Gauge("olu_release_noise_std", "Bound on the per-coordinate noise "
                                       "standard deviation of the last release (accumulated "
                                       "deletion noise, contracted by the public schedule); absent "
                                       "where the algorithm's noise is not tracked (memory-pair, "
                                       "dp-tofw)", NOISE_LABELS, registry=r)
        self.noise_to_signal = Gauge("olu_noise_to_signal_ratio", "Noise norm expected in the last "
                                                                  "release (olu_release_noise_std "
                                                                  "* sqrt(dim)) over the norm of "
                                                                  "its weights; above about 1 the "
                                                                  "release is mostly noise",
                                     NOISE_LABELS, registry=r)
        self.deletion_capacity_left = Gauge("olu_deletion_capacity_left", "Deletions left before "
                                                                          "the model's capacity "
                                                                          "(only where the "
                                                                          "algorithm has "
                                                                          "one)", tp, registry=r)
        # The planned split and the rotation (docs/accounting.md 11, docs/accounting.md 12):
        # public counts.
        self.capacity_planned = Gauge("olu_deletion_capacity_planned", "Planned split: deletions "
                                                                       "planned per model "
                                                                       "lifetime", tp, registry=r)
        self.capacity_used = Gauge("olu_deletion_capacity_used", "Planned split: deletions of the "
                                                                 "released model's epoch inside "
                                                                 "the plan", tp, registry=r)
        self.overflow_deletions = Gauge("olu_deletion_overflow", "Planned split: deletions of the "
                                                                 "released model's epoch beyond "
                                                                 "the plan, paid from the "
                                                                 "reserve", tp, registry=r)
        self.model_generation = Gauge("olu_model_generation", "Rotation: generation of the "
                                                              "released model", tp, registry=r)
        self.model_rotations = Gauge("olu_model_rotations", "Rotation: promotions of a standby so "
                                                            "far", tp, registry=r)
        self.model_age = Gauge("olu_model_age_events", "Rotation: input events since the released "
                                                       "model was born", tp, registry=r)
        # The deletion workload as it arrives (public request metadata: how many records a request
        # names, the insert steps of those the model held), beside the plan's assumptions
        # (settings).
        self.request_records = Histogram("olu_deletion_request_records", "Records each deletion "
                                                                         "request named (public "
                                                                         "request metadata)", tp,
                                         buckets=REQUEST_RECORDS_BUCKETS, registry=r)
        self.deleted_age = Histogram("olu_deleted_record_age_events", "Age of each deleted record "
                                                                      "the model held: insert "
                                                                      "steps between its insert "
                                                                      "and its deletion (at most a "
                                                                      "poll batch late)", tp,
                                     buckets=AGE_BUCKETS, registry=r)
        self.plan_gauges = {name: Gauge(name, f"The plan's assumption OLU_{setting.upper()} this "
                                              "worker was started with (absent when unset)", tp,
                                        registry=r)
                            for name, setting in PLAN_SETTINGS.items()}
        # The per-key contribution bound (docs/accounting.md 13): public counts of the keys'
        # arrivals.
        self.max_records_per_key = Gauge("olu_max_records_per_key", "Records of one partitioning "
                                         "key the released model learns in its lifetime "
                                         "(OLU_MAX_RECORDS_PER_KEY)", tp, registry=r)
        self.records_over_key_cap = Gauge("olu_records_over_key_cap", "Records of the released "
                                          "model's lifetime consumed and not learned: their key "
                                          "had reached OLU_MAX_RECORDS_PER_KEY", tp, registry=r)
        # The DP tree mechanism (dp-tofw, docs/accounting.md 7): public schedule figures, not data.
        self.dp_noise_sigma = Gauge("olu_dp_noise_sigma", "dp-tofw: Gaussian noise standard "
                                                          "deviation per tree node", tp, registry=r)
        self.dp_sensitivity = Gauge("olu_dp_sensitivity", "dp-tofw: l2 sensitivity 2(beta D + L) "
                                                          "of one record's tree "
                                                          "term", tp, registry=r)
        self.dp_epsilon_at_horizon = Gauge("olu_dp_epsilon_projected_at_horizon", "dp-tofw: "
                                           "epsilon (at olu_privacy_delta) spent by the end of the "
                                           "tree's horizon, the most any record ever spends", tp,
                                           registry=r)
        self.dp_horizon_remaining = Gauge("olu_dp_horizon_remaining", "dp-tofw: records left in "
                                                                      "the current tree epoch "
                                                                      "before a new one starts", tp,
                                          registry=r)

    def _work_families(self, r: CollectorRegistry) -> None:
        tp = BY_PARTITION
        self.events = Counter("olu_events", "Valid input events consumed, by op", tp + ("op",),
                              registry=r)
        self.events_skipped = Counter("olu_events_skipped", "Valid events that did not change the "
                                                            "model, by reason (also counted in "
                                                            "olu_events_total)",
                                      tp + ("reason",), registry=r)
        self.dead_letters = Counter("olu_dead_letters", "Records sent to the dead-letter topic, by "
                                                        "reason", ("topic", "reason"), registry=r)
        self.features_clipped = Counter("olu_features_clipped", "Inserts whose value of a feature "
                                        "spec field was out of its declared range and clipped, by "
                                        "field", ("topic", "field"), registry=r)
        self.releases = Counter("olu_releases", "Parameter releases published, by trigger",
                                tp + ("trigger",), registry=r)
        self.delete_to_release = Histogram("olu_delete_to_release_seconds", "Time from handling a "
                                           "delete to the delivery of the release that reflects "
                                           "it", buckets=DELETE_TO_RELEASE_BUCKETS, registry=r)
        self.consumer_lag = Gauge("olu_consumer_lag", "Consumer group lag in messages: last stable "
                                                      "offset minus committed offset (librdkafka "
                                                      "consumer_lag; offsets are committed with "
                                                      "snapshots)", tp, registry=r)
        self.consumer_processing_lag = Gauge("olu_consumer_processing_lag", "Messages not yet "
                                             "handed to the worker: last stable offset minus the "
                                             "application offset", tp, registry=r)
        self.model_version = Gauge("olu_model_version", "Version of the last release (after a "
                                                        "restore, until the next one: the restored "
                                                        "state's, its next input "
                                                        "offset)", tp, registry=r)
        self.model_deletions = Gauge("olu_model_deletions", "Deletions applied to the partition's "
                                                            "model over its whole life, from its "
                                                            "state (the release's deletions; "
                                                            "olu_deletions_total counts this "
                                                            "process's only)",
                                     tp, registry=r)
        self.applied_records = Gauge("olu_applied_records", "Records in the applied-record index: "
                                                            "applied and still deletable (about 12 "
                                                            "bytes of memory and state "
                                                            "each)", tp, registry=r)
        self.model_steps = Gauge("olu_model_steps", "Steps t applied in the model's current epoch",
                                 tp, registry=r)
        self.receipts = Counter("olu_receipts", "Deletion receipts produced, by status (honoured, "
                                                "nothing_to_unlearn, refused)",
                                tp + ("status",), registry=r)
        self.requests_pending = Gauge("olu_deletion_requests_pending", "Deletion requests the "
                                      "partition has answered whose receipt is not yet delivered "
                                      "(waiting for the release that reflects them, or in "
                                      "flight)", tp, registry=r)
        self.oldest_pending = Gauge("olu_deletion_request_oldest_pending_seconds", "Age of the "
                                    "oldest pending deletion request: now minus its delete "
                                    "record's Kafka timestamp (0 when none is pending); read at "
                                    "scrape time, so it grows while the worker is stuck",
                                    tp, registry=r)
        self.deletion_deadline = Gauge("olu_deletion_deadline_seconds", "The promised bound from "
                                       "a delete to the release that reflects it "
                                       "(OLU_DELETION_DEADLINE_SECONDS)", registry=r)

    def _state_families(self, r: CollectorRegistry) -> None:
        tp = BY_PARTITION
        self.snapshot_duration = Histogram("olu_snapshot_duration_seconds", "Time to write a "
                                           "snapshot", ("kind",), buckets=SNAPSHOT_BUCKETS,
                                           registry=r)
        self.snapshot_bytes = Gauge("olu_snapshot_bytes", "Bytes the last snapshot wrote: the "
                                                          "object, plus for a full snapshot the "
                                                          "shared index blobs written for it "
                                                          "(blobs reused from earlier ones are "
                                                          "free)",
                                    ("kind",), registry=r)
        self.snapshot_failures = Counter("olu_snapshot_failures", "Snapshot writes that failed",
                                         ("kind",), registry=r)
        self.snapshot_last_success = Gauge("olu_snapshot_last_success_timestamp_seconds", "Unix "
                                           "time of the partition's last successful full "
                                           "snapshot", tp, registry=r)
        self.snapshot_age = Gauge("olu_snapshot_age_seconds", "Seconds since the partition's last "
                                                              "successful full "
                                                              "snapshot", tp, registry=r)
        self.restore_duration = Histogram("olu_restore_duration_seconds", "Time to restore a "
                                          "partition on assignment", buckets=RESTORE_BUCKETS,
                                          registry=r)
        self.rebalances = Counter("olu_rebalances", "Rebalance callbacks, by type", ("type",),
                                  registry=r)
        self.assigned_partitions = Gauge("olu_assigned_partitions", "Partitions currently "
                                                                    "assigned", registry=r)
