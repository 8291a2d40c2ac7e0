"""Prometheus metrics of one worker (docs/worker.md 6), privacy spend first.

Every metric lives in the worker's own :class:`prometheus_client.CollectorRegistry` (never the
global default one), so tests and two workers in one process do not clash. Names start with
``olu_``. Label names are limited to :data:`LABEL_NAMES` and their values are bounded: topics come
from the configuration, partitions are numbers, and op / reason / trigger / kind / type are short
codes from fixed sets (anything else is reported as ``other``); unit is a privacy unit. No method
takes a record id, a key or a feature value, so none can end up in a label.

The loop-facing methods (``record_outcome``, ``record_release``, ``record_snapshot``,
``record_restore``) take the partition runner and read only its ``topic``, ``partition``,
``model`` (``privacy()``, ``t``, ``release_noise_std()``, ``noise_to_signal()``) and ``released_version``,
and of a release its ``trigger``, ``version``, ``noise_std``, ``noise_to_signal`` and
``prequential_loss`` (the quality figure as of that release: outside the certificate, docs/guarantee.md 2.4).
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Iterable
from typing import Any, Protocol

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from .olu import Deletion, Model
from .olu.privacy import UNITS
from .stream.outcome import Outcome, Release
from .wire import TRIGGERS

__all__ = ["CONTENT_TYPE", "LABEL_NAMES", "Metrics"]


class RunnerView(Protocol):
    """What the metrics read of a partition's runner (``worker.stream.partition.PartitionRunner``)."""

    topic: str
    partition: int
    model: Model  # the engine model (worker.olu.Model)
    settings: Any  # worker.config.settings.Settings, or None
    released_version: int | None
    next_offset: int | None


CONTENT_TYPE = CONTENT_TYPE_LATEST
LABEL_NAMES = frozenset({"topic", "partition", "op", "reason", "type", "kind", "trigger", "unit"})

OPS = ("insert", "delete", "tombstone")
KINDS = ("full", "delta")
REBALANCE_TYPES = ("assign", "revoke", "lost")
#: Deletion outcomes of the engine (worker.olu.core.base.Deletion) that did not change the model.
NOOP_REASONS = ("not_applied", "duplicate", "ignored", "dp_covered")
CHANGED_OUTCOMES = ("noised", "exact", "restarted", "retrained")
OTHER = "other"
_REASON = re.compile(r"[a-z][a-z0-9_]{0,39}")

DELETE_TO_RELEASE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
SNAPSHOT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
RESTORE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
REQUEST_RECORDS_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 10000)
AGE_BUCKETS = (10, 100, 1000, 2000, 5000, 10000, 20000, 50000, 100000, 200000, 500000, 1000000, 10000000)
#: The plan's assumptions a worker exports (settings, docs/accounting.md 13): gauge name -> setting.
PLAN_SETTINGS = {"olu_plan_deletion_rate": "expected_deletion_rate",
                 "olu_plan_records_per_request": "planned_records_per_request",
                 "olu_plan_deletion_age_events": "planned_deletion_age_events"}
_TP = ("topic", "partition")
_TPU = _TP + ("unit",)  # the privacy gauges: a partition's series carry its privacy unit
#: Labels of the noise-in-the-release series: per partition, like olu_deletion_noise_sigma (a release
#: carries one noise, whatever the unit). To label them by unit too, use _TPU here and pass the
#: unit in :meth:`Metrics.set_noise`, nowhere else.
_NOISE_LABELS = _TP


def _labels(child_key: tuple) -> tuple[str, str]:
    """The (topic, partition) labels of a key of ``Metrics._children``."""
    return str(child_key[1]), str(int(child_key[2]))


def _code(value: str, allowed: Iterable[str] | None = None) -> str:
    """A bounded label value: one of ``allowed``, else a short lower-case code, else ``other``."""
    value = str(value)
    if allowed is not None:
        return value if value in allowed else OTHER
    return value if _REASON.fullmatch(value) else OTHER


def _count(value) -> bool:
    """A known, non-negative number in librdkafka statistics (-1 and -1001 mean unknown)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0


class Metrics:
    """The worker's metrics; ``render()`` gives the Prometheus text exposition."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self._lock = threading.Lock()
        self._series: dict[tuple[str, str], set[tuple[object, tuple[str, ...]]]] = {}
        # labelled children by (metric, topic, partition, extra): ``labels()`` costs ~5 us, and a
        # deletion alone sets two series (their partition's series are dropped with it)
        self._children: dict[tuple, object] = {}
        self._privacy_known: set[tuple[str, str]] = set()

        # Privacy
        # ``unit``: what one guarantee protects (all-deletions: every deleted record together;
        # per-request: each deletion request alone, docs/accounting.md 8).
        self.privacy_epsilon = Gauge("olu_privacy_epsilon", "Privacy epsilon of the partition's model at delta "
                                     "olu_privacy_delta, per privacy unit: for all its deleted records together "
                                     "(unit all-deletions) or for each deletion request (unit per-request)",
                                     _TPU, registry=r)
        self.privacy_delta = Gauge("olu_privacy_delta", "The delta at which olu_privacy_epsilon is reported",
                                   _TPU, registry=r)
        self.privacy_budget_used = Gauge("olu_privacy_budget_used_ratio", "Fraction of the lifetime Renyi "
                                         "budget spent (rho spent / rho; always 0 for unit per-request)", _TPU,
                                         registry=r)
        self.privacy_rdp_slope = Gauge("olu_privacy_rdp_slope", "Renyi slope spent this epoch, per unit "
                                       "(D_alpha <= alpha * slope)", _TPU, registry=r)
        self.privacy_rho = Gauge("olu_privacy_rho", "The configured Renyi slope per privacy unit (set, or "
                                 "derived from the target epsilon at delta)", _TPU, registry=r)
        self.privacy_requests = Gauge("olu_privacy_requests", "Deletion requests charged in the model's current "
                                      "epoch", _TPU, registry=r)
        self.deletions = Counter("olu_deletions", "Deletions honoured that changed the model "
                                 "(noised, exact, restarted or retrained)", _TP, registry=r)
        self.deletions_noop = Counter("olu_deletions_noop", "Deletions that needed no change: not_applied "
                                      "(never learned), duplicate (already deleted), ignored (baseline), "
                                      "dp_covered (dp-tofw: honoured by the DP guarantee of every release)",
                                      _TP + ("reason",), registry=r)
        self.deletions_refused = Counter("olu_deletions_refused", "Deletions refused because the privacy "
                                         "budget was exhausted (on_budget=refuse; sent to the dead-letter topic)",
                                         _TP, registry=r)
        self.deletion_noise_sigma = Gauge("olu_deletion_noise_sigma", "Noise standard deviation of the last "
                                          "noised deletion", _TP, registry=r)
        # The noise the release carries (docs/accounting.md 10): public, from the constants and the ledger.
        self.release_noise_std = Gauge("olu_release_noise_std", "Bound on the per-coordinate noise standard "
                                       "deviation of the last release (accumulated deletion noise, contracted "
                                       "by the public schedule); absent where the algorithm's noise is not "
                                       "tracked (memory-pair, dp-tofw)", _NOISE_LABELS, registry=r)
        self.noise_to_signal = Gauge("olu_noise_to_signal_ratio", "Noise norm expected in the last release "
                                     "(olu_release_noise_std * sqrt(dim)) over the norm of its weights; above "
                                     "about 1 the release is mostly noise", _NOISE_LABELS, registry=r)
        self.deletion_capacity_left = Gauge("olu_deletion_capacity_left", "Deletions left before the model's "
                                            "capacity (only where the algorithm has one)", _TP, registry=r)
        # The planned split and the rotation (docs/accounting.md 11, docs/accounting.md 12): public counts.
        self.capacity_planned = Gauge("olu_deletion_capacity_planned", "Planned split: deletions planned per "
                                      "model lifetime", _TP, registry=r)
        self.capacity_used = Gauge("olu_deletion_capacity_used", "Planned split: deletions of the released "
                                   "model's epoch inside the plan", _TP, registry=r)
        self.overflow_deletions = Gauge("olu_deletion_overflow", "Planned split: deletions of the released "
                                        "model's epoch beyond the plan, paid from the reserve", _TP, registry=r)
        self.model_generation = Gauge("olu_model_generation", "Rotation: generation of the released model",
                                      _TP, registry=r)
        self.model_rotations = Gauge("olu_model_rotations", "Rotation: promotions of a standby so far", _TP,
                                     registry=r)
        self.model_age = Gauge("olu_model_age_events", "Rotation: input events since the released model was "
                               "born", _TP, registry=r)
        # The deletion workload as it arrives (public request metadata: how many records a request
        # names, the insert steps of those the model held), beside the plan's assumptions (settings).
        self.request_records = Histogram("olu_deletion_request_records", "Records each deletion request named "
                                         "(public request metadata)", _TP, buckets=REQUEST_RECORDS_BUCKETS,
                                         registry=r)
        self.deleted_age = Histogram("olu_deleted_record_age_events", "Age of each deleted record the model held: "
                                     "insert steps between its insert and its deletion (at most a poll batch "
                                     "late)", _TP, buckets=AGE_BUCKETS, registry=r)
        self.plan_gauges = {name: Gauge(name, f"The plan's assumption OLU_{setting.upper()} this worker was started "
                                        "with (absent when unset)", _TP, registry=r)
                            for name, setting in PLAN_SETTINGS.items()}
        # The per-key contribution bound (docs/accounting.md 13): public counts of the keys' arrivals.
        self.max_records_per_key = Gauge("olu_max_records_per_key", "Records of one partitioning key the "
                                         "released model learns in its lifetime (OLU_MAX_RECORDS_PER_KEY)", _TP,
                                         registry=r)
        self.records_over_key_cap = Gauge("olu_records_over_key_cap", "Records of the released model's lifetime "
                                          "consumed and not learned: their key had reached "
                                          "OLU_MAX_RECORDS_PER_KEY", _TP, registry=r)
        # The DP tree mechanism (dp-tofw, docs/accounting.md 7): public schedule figures, not data.
        self.dp_noise_sigma = Gauge("olu_dp_noise_sigma", "dp-tofw: Gaussian noise standard deviation per "
                                    "tree node", _TP, registry=r)
        self.dp_sensitivity = Gauge("olu_dp_sensitivity", "dp-tofw: l2 sensitivity 2(beta D + L) of one "
                                    "record's tree term", _TP, registry=r)
        self.dp_epsilon_at_horizon = Gauge("olu_dp_epsilon_projected_at_horizon", "dp-tofw: epsilon (at "
                                           "olu_privacy_delta) spent by the end of the tree's horizon, the "
                                           "most any record ever spends", _TP, registry=r)
        self.dp_horizon_remaining = Gauge("olu_dp_horizon_remaining", "dp-tofw: records left in the current "
                                          "tree epoch before a new one starts", _TP, registry=r)
        # Work
        self.events = Counter("olu_events", "Valid input events consumed, by op", _TP + ("op",), registry=r)
        self.events_skipped = Counter("olu_events_skipped", "Valid events that did not change the model, "
                                      "by reason (also counted in olu_events_total)", _TP + ("reason",),
                                      registry=r)
        self.dead_letters = Counter("olu_dead_letters", "Records sent to the dead-letter topic, by reason",
                                    ("topic", "reason"), registry=r)
        self.features_clipped = Counter("olu_features_clipped", "Inserts whose value of a feature spec field was "
                                        "out of its declared range and clipped, by field", ("topic", "field"),
                                        registry=r)
        self.releases = Counter("olu_releases", "Parameter releases published, by trigger",
                                _TP + ("trigger",), registry=r)
        self.delete_to_release = Histogram("olu_delete_to_release_seconds", "Time from handling a delete to "
                                           "the delivery of the release that reflects it",
                                           buckets=DELETE_TO_RELEASE_BUCKETS, registry=r)
        self.consumer_lag = Gauge("olu_consumer_lag", "Consumer group lag in messages: last stable offset "
                                  "minus committed offset (librdkafka consumer_lag; offsets are committed "
                                  "with snapshots)", _TP, registry=r)
        self.consumer_processing_lag = Gauge("olu_consumer_processing_lag", "Messages not yet handed to the "
                                             "worker: last stable offset minus the application offset",
                                             _TP, registry=r)
        self.model_version = Gauge("olu_model_version", "Version of the last release (after a restore, until "
                                   "the next one: the restored state's, its next input offset)", _TP, registry=r)
        self.model_deletions = Gauge("olu_model_deletions", "Deletions applied to the partition's model over its "
                                     "whole life, from its state (the release's deletions; olu_deletions_total "
                                     "counts this process's only)", _TP, registry=r)
        self.applied_records = Gauge("olu_applied_records", "Records in the applied-record index: applied and "
                                     "still deletable (about 12 bytes of memory and state each)", _TP, registry=r)
        self.model_steps = Gauge("olu_model_steps", "Steps t applied in the model's current epoch", _TP,
                                 registry=r)
        # State
        self.snapshot_duration = Histogram("olu_snapshot_duration_seconds", "Time to write a snapshot",
                                           ("kind",), buckets=SNAPSHOT_BUCKETS, registry=r)
        self.snapshot_bytes = Gauge("olu_snapshot_bytes",
                                    "Bytes the last snapshot wrote: the object, plus for a full snapshot the "
                                    "shared index blobs written for it (blobs reused from earlier ones are free)",
                                    ("kind",),
                                    registry=r)
        self.snapshot_failures = Counter("olu_snapshot_failures", "Snapshot writes that failed", ("kind",),
                                         registry=r)
        self.snapshot_last_success = Gauge("olu_snapshot_last_success_timestamp_seconds", "Unix time of the "
                                           "partition's last successful full snapshot", _TP, registry=r)
        self.snapshot_age = Gauge("olu_snapshot_age_seconds", "Seconds since the partition's last successful "
                                  "full snapshot", _TP, registry=r)
        self.restore_duration = Histogram("olu_restore_duration_seconds", "Time to restore a partition on "
                                          "assignment", buckets=RESTORE_BUCKETS, registry=r)
        self.rebalances = Counter("olu_rebalances", "Rebalance callbacks, by type", ("type",), registry=r)
        self.assigned_partitions = Gauge("olu_assigned_partitions", "Partitions currently assigned", registry=r)
        # Model
        self.prequential_loss = Gauge("olu_prequential_loss", "Running mean of the test-then-train loss as of the "
                                      "newest release (outside the certificate; OLU_QUALITY_METRIC)",
                                      _TP, registry=r)

    # ------------------------------------------------------------------ plumbing
    def _child(self, metric, topic: str, partition: int, *extra: str):
        """The labelled child, remembered so :meth:`remove_partition` can drop it."""
        key = (metric, topic, partition, extra)
        child = self._children.get(key)
        if child is None:
            values = (str(topic), str(int(partition)), *extra)
            with self._lock:
                self._series.setdefault(values[:2], set()).add((metric, values))
            child = self._children[key] = metric.labels(*values)
        return child

    def _drop(self, metric, topic: str, partition: int) -> None:
        """Remove one series (no extra labels) that may no longer be exported."""
        series = (str(topic), str(int(partition)))
        with self._lock:
            self._children = {k: c for k, c in self._children.items() if k[0] is not metric or _labels(k) != series}
        try:
            metric.remove(str(topic), str(int(partition)))
        except KeyError:
            pass

    def remove_partition(self, topic: str, partition: int) -> None:
        """Drop every series labelled with this partition (on revoke or loss)."""
        key = (str(topic), str(int(partition)))
        with self._lock:
            series = self._series.pop(key, set())
            self._privacy_known.discard(key)
            self._children = {k: c for k, c in self._children.items() if _labels(k) != key}
        for metric, values in series:
            try:
                metric.remove(*values)
            except KeyError:
                pass

    def render(self) -> bytes:
        """Prometheus text exposition of this worker's registry (content type :data:`CONTENT_TYPE`)."""
        return generate_latest(self.registry)

    # ------------------------------------------------------------------ privacy and model
    def set_privacy(self, topic: str, partition: int, *, epsilon: float, delta: float, budget_used: float,
                    rdp_slope: float, capacity_left: int | None = None, unit: str = "all-deletions",
                    rho: float | None = None, requests: int | None = None) -> None:
        self._child(self.privacy_epsilon, topic, partition, unit).set(epsilon)
        self._child(self.privacy_delta, topic, partition, unit).set(delta)
        self._child(self.privacy_budget_used, topic, partition, unit).set(budget_used)
        self._child(self.privacy_rdp_slope, topic, partition, unit).set(rdp_slope)
        if rho is not None:
            self._child(self.privacy_rho, topic, partition, unit).set(rho)
        if requests is not None:
            self._child(self.privacy_requests, topic, partition, unit).set(requests)
        if capacity_left is not None and math.isfinite(capacity_left):
            self._child(self.deletion_capacity_left, topic, partition).set(capacity_left)

    def set_dp_tree(self, topic: str, partition: int, privacy: dict) -> None:
        """The DP tree figures, for models whose ``privacy()`` has them (dp-tofw)."""
        if "horizon_remaining" not in privacy:
            return
        for gauge, name in ((self.dp_noise_sigma, "noise_sigma"), (self.dp_sensitivity, "sensitivity"),
                            (self.dp_epsilon_at_horizon, "epsilon_at_horizon"),
                            (self.dp_horizon_remaining, "horizon_remaining")):
            value = privacy.get(name)
            if isinstance(value, (int, float)) and math.isfinite(value):
                self._child(gauge, topic, partition).set(value)

    def set_split_and_rotation(self, topic: str, partition: int, privacy: dict) -> None:
        """Capacity and overflow of the planned split, generation and age of a rotation, the per-key
        cap and what it refused, where present."""
        for gauge, name in ((self.capacity_planned, "capacity_planned"), (self.capacity_used, "capacity_used"),
                            (self.overflow_deletions, "overflow_deletions"), (self.model_generation, "generation"),
                            (self.model_rotations, "rotations"), (self.model_age, "model_age"),
                            (self.max_records_per_key, "max_records_per_key"),
                            (self.records_over_key_cap, "records_over_key_cap")):
            value = privacy.get(name)
            if isinstance(value, int) and not isinstance(value, bool):
                self._child(gauge, topic, partition).set(value)

    def update_privacy(self, topic: str, partition: int, model) -> None:
        """Privacy gauges from the engine's ``model.privacy()`` dict."""
        p = model.privacy()
        self.set_privacy(topic, partition, epsilon=p["epsilon"], delta=p["delta"], budget_used=p["budget_used"],
                         rdp_slope=p["eps_rdp_slope"], capacity_left=p.get("deletions_capacity_left"),
                         unit=_code(p.get("unit", "all-deletions"), UNITS), rho=p.get("rho"),
                         requests=p.get("requests"))
        self.set_dp_tree(topic, partition, p)
        self.set_split_and_rotation(topic, partition, p)
        with self._lock:
            self._privacy_known.add((str(topic), str(int(partition))))

    def set_noise(self, topic: str, partition: int, std: float | None, ratio: float | None) -> None:
        """Both noise gauges (labels :data:`_NOISE_LABELS`); None (not tracked, or a ratio undefined
        for zero weights and no noise) drops the series rather than export a number that means nothing."""
        for gauge, v in ((self.release_noise_std, std), (self.noise_to_signal, ratio)):
            if v is not None:
                self._child(gauge, topic, partition).set(v)
            else:
                self._drop(gauge, topic, partition)

    def record_deletion(self, topic: str, partition: int, outcome: str, sigma: float = 0.0) -> None:
        """One deletion by the engine's outcome code (``Deletion.outcome``)."""
        if outcome in CHANGED_OUTCOMES:
            self._child(self.deletions, topic, partition).inc()
            if sigma > 0:
                self._child(self.deletion_noise_sigma, topic, partition).set(sigma)
        else:
            self._child(self.deletions_noop, topic, partition, _code(outcome, NOOP_REASONS)).inc()

    def record_request(self, topic: str, partition: int, deletion: Deletion, now: int | None) -> None:
        """A deletion request's size (records it named) and the age of each record it deleted."""
        named = deletion.records + len(deletion.not_applied) + len(deletion.duplicates)
        if named:
            self._child(self.request_records, topic, partition).observe(named)
        if now is not None:
            ages = self._child(self.deleted_age, topic, partition)
            for u in deletion.steps:
                ages.observe(max(0, now - int(u)))

    def set_plan(self, topic: str, partition: int, settings) -> None:
        """The plan's assumptions the worker was started with (settings; a gauge only where set)."""
        if settings is None:
            return
        for name, setting in PLAN_SETTINGS.items():
            value = getattr(settings, setting)
            if value is not None:
                self._child(self.plan_gauges[name], topic, partition).set(value)

    def set_model(self, topic: str, partition: int, *, steps: int | None = None, version: int | None = None,
                  prequential_loss: float | None = None, applied_records: int | None = None,
                  deletions: int | None = None) -> None:
        if deletions is not None:
            self._child(self.model_deletions, topic, partition).set(deletions)
        if steps is not None:
            self._child(self.model_steps, topic, partition).set(steps)
        if applied_records is not None:
            self._child(self.applied_records, topic, partition).set(applied_records)
        if version is not None:
            self._child(self.model_version, topic, partition).set(version)
        if prequential_loss is not None and math.isfinite(prequential_loss):
            self._child(self.prequential_loss, topic, partition).set(prequential_loss)

    # ------------------------------------------------------------------ work
    def count_events(self, topic: str, partition: int, op: str, n: int = 1) -> None:
        if n:
            self._child(self.events, topic, partition, _code(op, OPS)).inc(n)

    def count_skipped(self, topic: str, partition: int, reason: str, n: int = 1) -> None:
        if n:
            self._child(self.events_skipped, topic, partition, _code(reason)).inc(n)

    def record_dead_letter(self, topic: str, reason: str) -> None:
        # Topic-level only (no partition label): dead letters are rare and alerting is per topic.
        self.dead_letters.labels(str(topic), _code(reason)).inc()

    def count_release(self, topic: str, partition: int, trigger: str, version: int | None = None) -> None:
        self._child(self.releases, topic, partition, _code(trigger, TRIGGERS)).inc()
        if version is not None:
            self._child(self.model_version, topic, partition).set(version)

    def set_lag(self, topic: str, partition: int, *, committed: int | None, processing: int | None) -> None:
        """Both lags, from offsets the worker asked for itself (at assignment: librdkafka's
        statistics know neither until the worker consumes and commits)."""
        if committed is not None and committed >= 0:
            self._child(self.consumer_lag, topic, partition).set(committed)
        if processing is not None and processing >= 0:
            self._child(self.consumer_processing_lag, topic, partition).set(processing)

    def observe_delete_to_release(self, seconds: float) -> None:
        self.delete_to_release.observe(max(0.0, seconds))

    def update_from_stats(self, stats_json: str | bytes) -> int:
        """Consumer lag from librdkafka's statistics JSON (``stats_cb``); returns the lags set.

        Reads ``topics -> {topic} -> partitions -> {p}``: ``consumer_lag`` (the group lag against
        the committed offset, -1 until the first commit) into ``olu_consumer_lag``, and
        ``ls_offset - app_offset`` (what the worker has not received yet) into
        ``olu_consumer_processing_lag``. Skips the internal partition -1, unknown (negative) values,
        and partitions the consumer does not want (``desired`` false: their series are dropped).
        Never raises: it runs inside ``poll()``.
        """
        try:
            stats = orjson.loads(stats_json)
            topics = stats.get("topics") or {}
        except (orjson.JSONDecodeError, TypeError, AttributeError):
            return 0
        updated = 0
        for topic, tstats in topics.items() if isinstance(topics, dict) else ():
            partitions = tstats.get("partitions") if isinstance(tstats, dict) else None
            for pstats in (partitions or {}).values() if isinstance(partitions, dict) else ():
                try:
                    partition = int(pstats["partition"])
                    lag = pstats.get("consumer_lag", -1)
                except (KeyError, TypeError, ValueError, AttributeError):
                    continue
                if partition < 0:
                    continue
                if pstats.get("desired") is False:
                    for gauge in (self.consumer_lag, self.consumer_processing_lag):
                        self._drop(gauge, topic, partition)
                    continue
                if _count(lag):
                    self._child(self.consumer_lag, topic, partition).set(lag)
                    updated += 1
                end, position = pstats.get("ls_offset"), pstats.get("app_offset")
                if _count(end) and _count(position):
                    self._child(self.consumer_processing_lag, topic, partition).set(max(0, end - position))
        return updated

    # ------------------------------------------------------------------ state
    def record_snapshot_success(self, topic: str, partition: int, kind: str, seconds: float, size: int) -> None:
        kind = _code(kind, KINDS)
        self.snapshot_duration.labels(kind).observe(max(0.0, seconds))
        self.snapshot_bytes.labels(kind).set(size)
        if kind == "full":
            now = time.time()
            self._child(self.snapshot_last_success, topic, partition).set(now)
            self._child(self.snapshot_age, topic, partition).set_function(lambda at=now: max(0.0, time.time() - at))

    def snapshot_failure(self, kind: str) -> None:
        self.snapshot_failures.labels(_code(kind, KINDS)).inc()

    def observe_restore(self, seconds: float) -> None:
        self.restore_duration.observe(max(0.0, seconds))

    def rebalance(self, type_: str) -> None:
        self.rebalances.labels(_code(type_, REBALANCE_TYPES)).inc()

    def set_assigned(self, n: int) -> None:
        self.assigned_partitions.set(n)

    # ------------------------------------------------------------------ loop-facing (duck-typed runner)
    def record_outcome(self, runner: RunnerView, outcome: Outcome) -> None:
        """Counters and gauges after ``runner.process(batch)``.

        ``outcome.inserts`` (applied) + ``outcome.skipped`` (inserts of ids deleted before they
        arrived) are the insert events; ``outcome.deletes`` the delete events, of which
        ``outcome.tombstones`` were tombstones.
        """
        topic, partition = runner.topic, runner.partition
        skipped = outcome.skipped
        self.count_events(topic, partition, "insert", outcome.inserts + skipped)
        self.count_skipped(topic, partition, "deleted_before_insert", skipped)
        self.count_events(topic, partition, "delete", outcome.deletes - outcome.tombstones)
        self.count_events(topic, partition, "tombstone", outcome.tombstones)
        now = runner.model.t
        for d in outcome.deletions:
            self.record_deletion(topic, partition, d.outcome, d.sigma)
            self.record_request(topic, partition, d, now)
        if outcome.refused:
            self._child(self.deletions_refused, topic, partition).inc(outcome.refused)
        for name, count in outcome.clipped.items():
            self.features_clipped.labels(str(topic), name).inc(count)
        self._update_model(runner, privacy=bool(outcome.deletions) or bool(outcome.refused))

    def record_release(self, runner: RunnerView, release: Release) -> None:
        self.count_release(runner.topic, runner.partition, release.trigger, release.version)
        # the figures in the release's value, not the model's now
        self.set_noise(runner.topic, runner.partition, release.noise_std, release.noise_to_signal)
        # the quality figure as of this release, never of a state not yet released
        self.set_model(runner.topic, runner.partition, prequential_loss=release.prequential_loss)

    def record_snapshot(self, runner: RunnerView, kind: str, seconds: float, size: int) -> None:
        self.record_snapshot_success(runner.topic, runner.partition, kind, seconds, size)

    def record_restore(self, runner: RunnerView, seconds: float) -> None:
        """A partition was assigned and restored: its privacy spend and model are exported at once,
        so a worker with nothing left to consume still shows them."""
        self.observe_restore(seconds)
        self._update_model(runner, privacy=True)
        self.set_plan(runner.topic, runner.partition, runner.settings)
        model = runner.model
        self.set_noise(runner.topic, runner.partition, model.release_noise_std(), model.noise_to_signal())
        if runner.released_version is None and runner.next_offset is not None:
            self._child(self.model_version, runner.topic, runner.partition).set(runner.next_offset)

    def _update_model(self, runner: RunnerView, *, privacy: bool) -> None:
        topic, partition, model = runner.topic, runner.partition, runner.model
        known = (str(topic), str(int(partition))) in self._privacy_known
        # dp-tofw spends with every record learned, not only with deletions.
        if privacy or not known or model.spends_on_learn:
            self.update_privacy(topic, partition, model)
        self.set_model(topic, partition, steps=model.t, version=runner.released_version,
                       applied_records=len(model.index),
                       deletions=model.deletions_applied)
