"""The plan's search of a spec's Fourier bandwidth on the sample (worker/planning/fourier.py)."""

from __future__ import annotations

import os

import numpy as np
import orjson
import pytest

from worker.cli import main
from worker.features.spec import parse_spec
from worker.planning.fourier import FACTORS, with_bandwidth


@pytest.fixture(autouse=True)
def no_olu_environment(monkeypatch):
    for name in [n for n in os.environ if n.startswith("OLU_")]:
        monkeypatch.delenv(name)


def _spec(bandwidth: float) -> dict:
    return {"features": [{"name": "a", "type": "numeric", "range": [-1, 1]},
                         {"name": "b", "type": "numeric", "range": [-1, 1]}],
            "derived": [{"type": "bins", "field": "a", "range": [-1, 1], "count": 4},
                        {"type": "fourier", "fields": ["a", "b"], "components": 64,
                         "bandwidth": bandwidth, "seed": 3}]}


def _plan(tmp_path, capsys, bandwidth: float) -> dict:
    """The plan of a disk-shaped boundary (curved: the fields alone cannot draw it)."""
    spec_path = tmp_path / f"spec-{bandwidth}.json"
    spec_path.write_bytes(orjson.dumps(_spec(bandwidth)))
    rng = np.random.default_rng(5)
    lines = []
    for j in range(3_000):
        a, b = (float(v) for v in rng.uniform(-1, 1, 2))
        lines.append(orjson.dumps({"op": "insert", "id": f"r-{j}", "a": a, "b": b,
                                   "y": int(a * a + b * b < 0.5)}))
    sample = tmp_path / "sample.jsonl"
    sample.write_bytes(b"\n".join(lines) + b"\n")
    code = main(["plan", "--features-file", str(spec_path), "--privacy-unit", "per-request",
                 "--sample", str(sample), "--deletion-rate", "0.005", "--events", "20000",
                 "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return orjson.loads(out)


def test_a_variant_changes_the_bandwidth_alone():
    spec = parse_spec(_spec(2.0))
    variant = with_bandwidth(spec, 1, 0.5)
    assert variant.dim == spec.dim and variant.norm_bound == spec.norm_bound
    assert variant.source["derived"][1]["bandwidth"] == 0.5 and variant.digest != spec.digest
    assert variant.source["derived"][0] == spec.source["derived"][0]


def test_a_too_wide_bandwidth_is_found_and_a_better_one_proposed(tmp_path, capsys):
    report = _plan(tmp_path, capsys, bandwidth=8.0)  # far wider than the ring: nearly linear
    found = report["search"]["fourier"]
    assert [t["bandwidth"] for t in found["tried"]] == [8.0 * f for f in FACTORS]
    best = found["best"]
    assert best is not None and best["bandwidth"] < 8.0 and best["fields"] == ["a", "b"]
    assert best["score"] >= found["declared_score"] + 0.005
    said = [t for t in report["recommendation"]["text"] if t.startswith("the spec's fourier block")]
    assert said and f"bandwidth {best['bandwidth']:.4g} than at the declared 8" in said[0]


def test_a_spec_without_fourier_features_is_not_searched(tmp_path, capsys):
    spec_path = tmp_path / "plain.json"
    spec_path.write_bytes(orjson.dumps({"features": _spec(1.0)["features"]}))
    sample = tmp_path / "sample.jsonl"
    sample.write_bytes(b"\n".join(orjson.dumps({"op": "insert", "id": f"r-{j}", "a": 0.1 * (j % 9),
                                                "b": -0.05 * (j % 7), "y": j % 2})
                                  for j in range(600)) + b"\n")
    assert main(["plan", "--features-file", str(spec_path), "--privacy-unit", "per-request",
                 "--sample", str(sample), "--deletion-rate", "0.005", "--json"]) == 0
    assert orjson.loads(capsys.readouterr().out)["search"]["fourier"] is None


def test_a_well_chosen_bandwidth_is_kept(tmp_path, capsys):
    found = _plan(tmp_path, capsys, bandwidth=0.5)["search"]["fourier"]
    assert found["best"] is None and len(found["tried"]) == len(FACTORS)
    assert max(t["score"] for t in found["tried"]) < found["declared_score"] + 0.005
