"""A partition's privacy spend and model figures: the gauges set from the engine's ``privacy()``
dict, the noise of a release, each deletion and request, the plan's assumptions, the model's
size and quality."""

from __future__ import annotations

import math

from ..olu import Deletion
from ..olu.privacy import UNITS
from .families import PLAN_SETTINGS
from .labels import CHANGED_OUTCOMES, NOOP_REASONS, code


class PrivacyGauges:
    """The privacy and model part of :class:`worker.metrics.Metrics`, on its families
    (:class:`~worker.metrics.families.MetricFamilies`) and its ``series``
    (:class:`~worker.metrics.series.PartitionSeries`)."""

    def set_privacy(self, topic: str, partition: int, *, epsilon: float, delta: float,
                    budget_used: float, rdp_slope: float, capacity_left: int | None = None,
                    unit: str = "all-deletions", rho: float | None = None,
                    requests: int | None = None) -> None:
        child = self.series.child
        child(self.privacy_epsilon, topic, partition, unit).set(epsilon)
        child(self.privacy_delta, topic, partition, unit).set(delta)
        child(self.privacy_budget_used, topic, partition, unit).set(budget_used)
        child(self.privacy_rdp_slope, topic, partition, unit).set(rdp_slope)
        if rho is not None:
            child(self.privacy_rho, topic, partition, unit).set(rho)
        if requests is not None:
            child(self.privacy_requests, topic, partition, unit).set(requests)
        if capacity_left is not None and math.isfinite(capacity_left):
            child(self.deletion_capacity_left, topic, partition).set(capacity_left)

    def set_dp_tree(self, topic: str, partition: int, privacy: dict) -> None:
        """The DP tree figures, for models whose ``privacy()`` has them (dp-tofw)."""
        if "horizon_remaining" not in privacy:
            return
        for gauge, name in ((self.dp_noise_sigma, "noise_sigma"),
                            (self.dp_sensitivity, "sensitivity"),
                            (self.dp_epsilon_at_horizon, "epsilon_at_horizon"),
                            (self.dp_horizon_remaining, "horizon_remaining")):
            value = privacy.get(name)
            if isinstance(value, (int, float)) and math.isfinite(value):
                self.series.child(gauge, topic, partition).set(value)

    def set_split_and_rotation(self, topic: str, partition: int, privacy: dict) -> None:
        """Capacity and overflow of the planned split, generation and age of a rotation, the
        per-key cap and what it refused, where present."""
        for gauge, name in ((self.capacity_planned, "capacity_planned"),
                            (self.capacity_used, "capacity_used"),
                            (self.overflow_deletions, "overflow_deletions"),
                            (self.model_generation, "generation"),
                            (self.model_rotations, "rotations"), (self.model_age, "model_age"),
                            (self.max_records_per_key, "max_records_per_key"),
                            (self.records_over_key_cap, "records_over_key_cap")):
            value = privacy.get(name)
            if isinstance(value, int) and not isinstance(value, bool):
                self.series.child(gauge, topic, partition).set(value)

    def update_privacy(self, topic: str, partition: int, model) -> None:
        """Privacy gauges from the engine's ``model.privacy()`` dict."""
        p = model.privacy()
        self.set_privacy(topic, partition, epsilon=p["epsilon"], delta=p["delta"],
                         budget_used=p["budget_used"], rdp_slope=p["eps_rdp_slope"],
                         capacity_left=p.get("deletions_capacity_left"),
                         unit=code(p.get("unit", "all-deletions"), UNITS), rho=p.get("rho"),
                         requests=p.get("requests"))
        self.set_dp_tree(topic, partition, p)
        self.set_split_and_rotation(topic, partition, p)
        self.series.note_privacy_exported(topic, partition)

    def set_noise(self, topic: str, partition: int, std: float | None,
                  ratio: float | None) -> None:
        """Both noise gauges (labels :data:`worker.metrics.families.NOISE_LABELS`); None (not
        tracked, or a ratio undefined for zero weights and no noise) drops the series rather than
        export a number that means nothing."""
        for gauge, v in ((self.release_noise_std, std), (self.noise_to_signal, ratio)):
            if v is not None:
                self.series.child(gauge, topic, partition).set(v)
            else:
                self.series.drop(gauge, topic, partition)

    def record_deletion(self, topic: str, partition: int, outcome: str,
                        sigma: float = 0.0) -> None:
        """One deletion by the engine's outcome code (``Deletion.outcome``)."""
        if outcome in CHANGED_OUTCOMES:
            self.series.child(self.deletions, topic, partition).inc()
            if sigma > 0:
                self.series.child(self.deletion_noise_sigma, topic, partition).set(sigma)
        else:
            noop = code(outcome, NOOP_REASONS)
            self.series.child(self.deletions_noop, topic, partition, noop).inc()

    def record_request(self, topic: str, partition: int, deletion: Deletion,
                       now: int | None) -> None:
        """A deletion request's size (records it named) and the age of each record it deleted."""
        named = deletion.records + len(deletion.not_applied) + len(deletion.duplicates)
        if named:
            self.series.child(self.request_records, topic, partition).observe(named)
        if now is not None:
            ages = self.series.child(self.deleted_age, topic, partition)
            for u in deletion.steps:
                ages.observe(max(0, now - int(u)))

    def set_plan(self, topic: str, partition: int, settings) -> None:
        """The plan's assumptions the worker was started with (settings; a gauge only where
        set)."""
        if settings is None:
            return
        for name, setting in PLAN_SETTINGS.items():
            value = getattr(settings, setting)
            if value is not None:
                self.series.child(self.plan_gauges[name], topic, partition).set(value)

    def set_model(self, topic: str, partition: int, *, steps: int | None = None,
                  version: int | None = None, prequential_loss: float | None = None,
                  applied_records: int | None = None, deletions: int | None = None) -> None:
        child = self.series.child
        if deletions is not None:
            child(self.model_deletions, topic, partition).set(deletions)
        if steps is not None:
            child(self.model_steps, topic, partition).set(steps)
        if applied_records is not None:
            child(self.applied_records, topic, partition).set(applied_records)
        if version is not None:
            child(self.model_version, topic, partition).set(version)
        if prequential_loss is not None and math.isfinite(prequential_loss):
            child(self.prequential_loss, topic, partition).set(prequential_loss)
