"""Label values kept bounded: the fixed sets of codes, and anything else reported as ``other``.

Topics come from the configuration and partitions are numbers; op / reason / trigger / kind / type
are short codes from the sets here (or, for reasons, any short lower-case code), so no label can
carry a record id, a key or a feature value.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

OPS = ("insert", "delete", "tombstone")
KINDS = ("full", "delta")
REBALANCE_TYPES = ("assign", "revoke", "lost")
#: Deletion outcomes of the engine (worker.olu.core.base.Deletion) that did not change the model.
NOOP_REASONS = ("not_applied", "duplicate", "ignored", "dp_covered")
CHANGED_OUTCOMES = ("noised", "exact", "restarted", "retrained")
OTHER = "other"
_REASON = re.compile(r"[a-z][a-z0-9_]{0,39}")


def code(value: str, allowed: Iterable[str] | None = None) -> str:
    """A bounded label value: one of ``allowed``, else a short lower-case code, else ``other``."""
    value = str(value)
    if allowed is not None:
        return value if value in allowed else OTHER
    return value if _REASON.fullmatch(value) else OTHER
