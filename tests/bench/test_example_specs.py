"""The example specs of examples/ are the capacity specs bench/model_capacity.py measures, so the
README's accuracy figures are what a user who copies one gets."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from worker.features.spec import load_spec, parse_spec

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import model_capacity  # noqa: E402

STREAMS = {"agrawal": "agrawal-0", "bananas": "bananas", "phishing": "phishing"}


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_example_spec_is_the_benchs_capacity_spec(name):
    _, _, plain = model_capacity.stream(STREAMS[name], 10, seed=7)
    bench = parse_spec(model_capacity.capacity_spec(plain))
    example = load_spec(ROOT / "examples" / f"{name}.yaml")
    assert example.digest == bench.digest
    assert any(block.kind == "fourier" for block in example.derived)
