"""Warm-standby rotation: renewal of a stream's model under a lasting guarantee.

The design and its proof: docs/accounting.md 12.

Two models of one algorithm per stream: the ACTIVE one (whose weights are released) and a STANDBY
trained alongside it. Stream time is ``events``, the insert rows offered to the rotation (skipped
ones included; dead letters never reach it), so every rotation point is a function of the input
position only and a replay after a crash rotates at the same row. With ``H = lifetime_events // 2``:
at every multiple of H the standby (if any) is promoted, the active model is retired (it is then
``2 H`` events old: its lifetime), and a fresh standby starts from the data-independent point of the
algorithm (the origin), with the tombstones of the deleted ids (public bookkeeping: an insert of a
deleted id is skipped by every model, as by one model, docs/guarantee.md 1.3). Generation ``g`` is
born at ``g H`` (generation 0 at 0), standby until ``(g + 1) H``, active until ``(g + 2) H``.

Variants. ``overlap``: every row trains both models. ``disjoint``: while two models exist, a row
trains only the model whose generation has the parity of the record key's lowest bit (a hash of
the record id, which is the partitioning key: the same id always goes to the same parity).

Budgets (docs/accounting.md 12.2, docs/accounting.md 12.3). Under ``all-deletions`` each model
gets half the slope in both variants: a release history spanning a promotion shows both models,
and the group of deleted records may have touched both. Under ``per-request`` the overlap variant
halves it too (each record is in both models); the disjoint one gives each model the full slope,
and a request whose records are held by both models is charged half of it in each
(``noise_share``), so a request never costs more than the slope over the two models. A model
that never applied a record pays nothing for it.

Deletions are applied to every model before the call returns, and :meth:`deletion_state` holds
both post-noise iterates: the stream layer makes it durable before any later release, so a
promoted standby never ships a state holding a deleted record without its noise.

The package: models.py (:class:`Rotation`: the two models behind the one-model interface),
mixed.py (its pass of a poll batch's inserts and deletes), state.py (its snapshot form) and
budget.py (each model's slope and planned deletion capacity, for the planning layer too).
"""

from .budget import VARIANTS, charged_deletions, model_budget, planned_capacity
from .models import Rotation
from .state import ROTATION_FORMAT

__all__ = ["ROTATION_FORMAT", "Rotation", "VARIANTS", "charged_deletions", "model_budget",
           "planned_capacity"]
