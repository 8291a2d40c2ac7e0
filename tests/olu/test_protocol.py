"""Every registered algorithm and a rotation meet ``worker.olu.Model``, the Protocol of what the
stream may use of a model (worker/olu/protocol.py): its members, and its methods' parameters."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from worker.olu import ALGORITHMS, Model
from worker.olu.rotation import Rotation

METHODS = [name for name, member in vars(Model).items() if inspect.isfunction(member) and not name.startswith("_")]
FACTS = sorted(Model.__annotations__)


def models():
    for name, cls in sorted(ALGORITHMS.items()):
        yield name, cls(dim=3, noise_rng=np.random.default_rng(0), **cls.example_params)
        if getattr(cls, "rotates", False):
            yield f"{name}[rotation]", Rotation(cls, lifetime_events=100, dim=3, **cls.example_params)


MODELS = dict(models())


def _parameters(func) -> list[tuple[str, object]]:
    return [(p.name, p.kind) for p in inspect.signature(func).parameters.values() if p.name != "self"]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_model_meets_the_protocol(name):
    model = MODELS[name]
    assert isinstance(model, Model)
    missing = [fact for fact in FACTS if not hasattr(model, fact)]
    assert not missing, missing
    for method in METHODS:
        wanted = _parameters(getattr(Model, method))
        found = _parameters(getattr(model, method))
        assert found[:len(wanted)] == wanted or set(wanted) <= set(found), (method, found, wanted)


def test_the_protocol_covers_what_the_stream_calls():
    """A model member the stream reads is in the Protocol (a method renamed in the engine fails here)."""
    assert {"prepare_batch", "learn_prepared", "learn_many", "unlearn_request", "deletion_state",
            "prefetch_deletes", "export_state", "privacy", "noise_figures"} <= set(METHODS)
    assert {"dim", "loss", "key_cap", "keeps_examples", "z", "weights", "t", "epoch"} <= set(FACTS)


def test_an_object_missing_a_method_is_not_a_model():
    class Partial:
        def privacy(self):
            return {}

    assert not isinstance(Partial(), Model)
