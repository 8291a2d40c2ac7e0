"""A rotation's snapshot form: both models' states under one meta, and the rotation rebuilt.

The models' states are stored whole, each under its slot's prefix (``m0_``: active, ``m1_``:
standby); the rotation's own counters sit in the meta, and a rebuild checks them against the
config and the event count (a state that does not rebuild to itself is ``InvalidState``).
"""

from __future__ import annotations

import numpy as np

from ..core.base import OnlineUnlearner
from ..exceptions import InvalidState

ROTATION_FORMAT = 1
_SLOTS = ("m0", "m1")  # active, standby in the exported arrays


class RotationSnapshots:
    """``export_state`` and ``from_state`` of a :class:`~worker.olu.rotation.Rotation`."""

    def export_state(self) -> dict:
        """Both models' states under ``m0_`` (active) and ``m1_`` (standby); round-trips
        bit-exactly."""
        meta = {"format": ROTATION_FORMAT, "algorithm": self.state_name,
                "config": dict(self.config), "events": self.events,
                "generation": self.generation, "rotations": self.rotations,
                "deletions_applied": self.deletions_applied, "requests": self.requests,
                "retired": [dict(r) for r in self.retired],
                "closed_pair_spent": self.closed_pair_spent, "models": []}
        arrays, shared = {}, {}
        for slot, model in zip(_SLOTS, self.models):
            state = model.export_state()
            meta["models"].append(state["meta"])
            arrays.update({f"{slot}_{k}": v for k, v in state["arrays"].items()})
            shared.update({f"{slot}_{k}": v for k, v in state.get("shared", {}).items()})
        return {"meta": meta, "arrays": arrays, "shared": shared}

    @classmethod
    def from_state(cls, state: dict, noise_rng: np.random.Generator | None = None):
        """Rebuild from :meth:`export_state`; ``InvalidState`` on anything inconsistent."""
        try:
            meta, arrays, shared = state["meta"], state["arrays"], state.get("shared", {})
            if meta["algorithm"] != cls.state_name or meta["format"] != ROTATION_FORMAT:
                raise InvalidState(f"not a rotation state of format {ROTATION_FORMAT}")
            config = meta["config"]
            inner = [OnlineUnlearner.from_state(_slot(slot, m, arrays, shared), noise_rng)
                     for slot, m in zip(_SLOTS, meta["models"])]
            kwargs = dict(config["model"])
            kwargs.pop("rho")
            kwargs["rho" if config["target_epsilon"] is None else "target_epsilon"] = (
                config["rho"] if config["target_epsilon"] is None else config["target_epsilon"])
            rotation = cls(type(inner[0]), lifetime_events=config["lifetime_events"],
                           variant=config["variant"], noise_rng=noise_rng, **kwargs)
            if rotation.config != config:
                raise InvalidState("rotation config does not rebuild to itself")
            events = int(meta["events"])
            generation = max(0, events // rotation.half - 1)
            if int(meta["generation"]) != generation or len(inner) != 1 + (events >= rotation.half):
                raise InvalidState(f"{len(inner)} models at generation {meta['generation']} after "
                                   f"{events} events")
            if any(type(m) is not rotation.cls for m in inner):
                raise InvalidState("the rotated models are of different algorithms")
            rotation.active, rotation.standby = inner[0], (inner[1] if len(inner) > 1 else None)
            rotation.events, rotation.generation = events, generation
            rotation.rotations = int(meta["rotations"])
            rotation.deletions_applied = int(meta["deletions_applied"])
            rotation.requests = int(meta["requests"])
            rotation.retired = [dict(r) for r in meta["retired"]]
            # states before the field: the pairs the archive still shows
            pairs = (a["rho"] + b["rho"] for a, b in zip(rotation.retired, rotation.retired[1:]))
            spent = meta.get("closed_pair_spent", max(pairs, default=0.0))
            rotation.closed_pair_spent = float(spent)
            return rotation
        except InvalidState:
            raise
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise InvalidState(f"malformed rotation state: {exc!r}") from None


def _slot(slot: str, meta: dict, arrays: dict, shared: dict) -> dict:
    prefix = slot + "_"
    return {"meta": meta,
            "arrays": {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)},
            "shared": {k[len(prefix):]: v for k, v in shared.items() if k.startswith(prefix)}}
