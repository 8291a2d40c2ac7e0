"""Prometheus metrics of one worker (docs/worker.md 6), privacy spend first.

Every metric lives in the worker's own :class:`prometheus_client.CollectorRegistry` (never the
global default one), so tests and two workers in one process do not clash. Names start with
``olu_``. Label names are limited to :data:`LABEL_NAMES` and their values are bounded: topics come
from the configuration, partitions are numbers, and op / reason / trigger / kind / type are short
codes from fixed sets (anything else is reported as ``other``); unit is a privacy unit. No method
takes a record id, a key or a feature value, so none can end up in a label.

The parts, each a module: families (every metric's name, help, labels and buckets), labels (the
bounded label values), series (what is kept per partition, dropped on revoke), privacy (privacy
spend and model gauges), work (events, releases, snapshots, rebalances), lag (consumer lag), loop
(what the loop records off a partition's runner, and :class:`Metrics`, all of them together).
"""

from __future__ import annotations

from .families import CONTENT_TYPE, LABEL_NAMES
from .loop import Metrics, RunnerView

__all__ = ["CONTENT_TYPE", "LABEL_NAMES", "Metrics", "RunnerView"]
