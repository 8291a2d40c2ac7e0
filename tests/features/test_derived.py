"""Derived coordinates of a feature spec: bins and hashed crosses (worker/features/derived.py)."""

from __future__ import annotations

import math

import numpy as np
import orjson
import pytest
from confluent_kafka import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from worker.config import load_settings
from worker.features.exceptions import FeatureSpecError
from worker.features.spec import parse_spec
from worker.features.transform import vectorize
from worker.olu import ALGORITHMS, PassiveOLU, SparseRows
from worker.state.store import SnapshotStore, open_store
from worker.stream.input.batch import decode_batch
from worker.stream.input.scan import python_decoder
from worker.stream.partition import PartitionRunner

FIELDS = [{"name": "age", "type": "numeric", "range": [0, 100]},
          {"name": "plan", "type": "categorical", "vocabulary": ["free", "pro", "team"]},
          {"name": "vip", "type": "boolean"},
          {"name": "city", "type": "hashed", "buckets": 16},
          {"name": "score", "type": "numeric", "center": 0.0, "scale": 2.0, "missing": {"fill": 0.5}}]
DERIVED = [{"type": "bins", "field": "age", "edges": [30, 45, 60]},
           {"type": "bins", "field": "score", "range": [-4, 4], "count": 8, "encoding": "cumulative", "weight": 0.5},
           {"type": "cross", "fields": ["plan", "age"], "buckets": 64},
           {"type": "cross", "fields": ["plan", "vip", "city"], "buckets": 128, "weight": 0.7}]


def spec(derived=DERIVED, **extra):
    return parse_spec({"features": FIELDS, "derived": derived, **extra})


def test_bins_put_a_threshold_rule_within_a_linear_model():
    s = spec()
    at = s.names.index("age<30")
    assert s.names[at:at + 4] == ("age<30", "age[30,45)", "age[45,60)", "age>=60")
    rows = {age: vectorize(s, {"age": age, "plan": "pro", "vip": False, "city": "x"})[0] for age in (29.9, 30, 59, 60)}
    assert [int(np.argmax(rows[a][at:at + 4])) for a in (29.9, 30, 59, 60)] == [0, 1, 2, 3]  # an edge is its upper bin
    cum = s.names.index("score>=-3")
    x, _ = vectorize(s, {"age": 1, "plan": "free", "vip": True, "city": "y", "score": 0.1})
    assert s.names[cum:cum + 7] == tuple(f"score>={e}" for e in (-3, -2, -1, 0, 1, 2, 3))
    assert x[cum:cum + 7].tolist() == [0.5 / math.sqrt(7)] * 4 + [0.0] * 3  # >= -3 .. >= 0, not >= 1


def test_a_missing_optional_field_bins_its_fill_and_out_of_range_values_bin_as_they_are():
    s = spec()
    filled, _ = vectorize(s, {"age": 5, "plan": "pro", "vip": False, "city": "x"})
    given_half, _ = vectorize(s, {"age": 5, "plan": "pro", "vip": False, "city": "x", "score": 0.5})
    assert filled.tolist() == given_half.tolist()
    far, clipped = vectorize(s, {"age": 1e6, "plan": "pro", "vip": False, "city": "x"})
    assert far[s.names.index("age>=60")] == 1.0 and clipped == 1  # the linear term clipped, the bin the last


def test_a_cross_is_one_signed_slot_per_combination_and_the_same_on_every_reader():
    s = spec()
    start = s.names.index("plan&age#0")
    a = vectorize(s, {"age": 35, "plan": "pro", "vip": False, "city": "x"})[0][start:start + 64]
    b = vectorize(s, {"age": 40, "plan": "pro", "vip": True, "city": "q"})[0][start:start + 64]  # same bin, plan
    c = vectorize(s, {"age": 35, "plan": "team", "vip": False, "city": "x"})[0][start:start + 64]
    assert np.count_nonzero(a) == 1 and abs(a).max() == 1.0 and a.tolist() == b.tolist()
    assert a.tolist() != c.tolist()  # another plan: (almost surely) another slot or sign
    again = parse_spec(orjson.loads(orjson.dumps(s.source)))  # the release carries the canonical form
    assert again.digest == s.digest and again.names == s.names


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(age=st.floats(-1e9, 1e9), score=st.floats(-1e9, 1e9), plan=st.sampled_from(["free", "pro", "team", "else"]),
       vip=st.booleans(), city=st.text(max_size=8))
def test_the_vector_stays_within_the_declared_norm_bound(age, score, plan, vip, city):
    s = spec()
    x, _ = vectorize(s, {"age": age, "plan": plan, "vip": vip, "city": city, "score": score})
    assert math.sqrt(sum(v * v for v in x.tolist())) <= s.norm_bound * (1 + 1e-12)
    # each block adds its weight's worth, no more: the bound is the declaration's
    base = parse_spec({"features": FIELDS})
    assert s.norm_bound ** 2 == pytest.approx(base.norm_bound ** 2 + 1 + 0.25 + 1 + 0.49)


def test_a_spec_without_derived_blocks_keeps_its_digest():
    plain = parse_spec({"features": FIELDS})
    assert "derived" not in plain.source
    assert parse_spec({"features": FIELDS, "derived": []}).digest == plain.digest


@pytest.mark.parametrize(("derived", "message"), [
    ([{"type": "bins", "field": "plan", "edges": [1]}], "derived[0]: 'field' must name a numeric field"),
    ([{"type": "bins", "field": "age", "edges": [3, 2]}], "'edges' must be 1 to 1024 increasing"),
    ([{"type": "bins", "field": "age", "edges": [1], "range": [0, 1], "count": 2}], "either 'edges' or"),
    ([{"type": "bins", "field": "age", "range": [0, 1], "count": 1}], "'count' must be an integer from 2"),
    ([{"type": "bins", "field": "age", "edges": [1], "encoding": "gray"}], "encoding 'gray' is not one of"),
    ([{"type": "bins", "field": "age", "edges": [1], "weight": 0}], "weight 0 is not a positive number"),
    ([{"type": "cross", "fields": ["plan"], "buckets": 8}], "'fields' must list 2 or 3 different fields"),
    ([{"type": "cross", "fields": ["plan", "age"], "buckets": 8}], "numeric 'age' enters a cross by its bins"),
    ([{"type": "cross", "fields": ["plan", "nope"], "buckets": 8}], "'nope' is not a field of the spec"),
    ([{"type": "cross", "fields": ["plan", "vip"], "buckets": 1}], "'buckets' must be an integer from 2"),
    ([{"type": "cross", "fields": ["plan", "vip"], "buckets": 8, "seed": 1}], "derived[0]: unknown key 'seed'"),
    ([{"type": "poly"}], "derived[0]: a mapping with type bins, cross or fourier expected"),
    ({"type": "bins"}, "derived: a list of bins, crosses and fourier blocks expected"),
])
def test_every_derived_mistake_has_its_message(derived, message):
    with pytest.raises(FeatureSpecError) as err:
        parse_spec({"features": FIELDS, "derived": derived})
    assert message in str(err.value)


def _records(n, seed=3):
    rng = np.random.default_rng(seed)
    plans, out = ["free", "pro", "team", "other"], []
    for i in range(n):
        rec = {"op": "insert", "id": f"r-{i}", "age": float(rng.uniform(-10, 110)), "plan": plans[i % 4],
               "vip": bool(rng.random() < 0.3), "city": f"c{int(rng.integers(40))}"}
        if rng.random() < 0.7:
            rec["score"] = float(rng.normal(0, 2))
        rec["y"] = int((rec["age"] > 45) == (rec["plan"] == "pro"))
        out.append(rec)
    return out


def test_the_worker_learns_the_derived_vector_of_each_record(tmp_path):
    """A spec with derived blocks: the compiled reader takes every record, its rows are the
    transform's and the Python decoder's bit for bit, the model the one learn_many makes of those
    rows (every reader shares the reference arithmetic)."""
    path = tmp_path / "spec.json"
    fourier = {"type": "fourier", "fields": ["age", "score"], "components": 64, "bandwidth": 0.7, "seed": 3}
    path.write_bytes(orjson.dumps({"features": FIELDS, "derived": DERIVED + [fourier], "bound": 2.0}))
    env = {"OLU_FEATURES_FILE": str(path), "OLU_KAFKA_BOOTSTRAP_SERVERS": "localhost:1", "OLU_RELEASE_EVERY_EVENTS": "50"}
    s = load_settings([], env=env)
    records = _records(300)
    msgs = [Message(topic="t", partition=0, offset=i, key=r["id"].encode(), value=orjson.dumps(r), timestamp=(1, i))
            for i, r in enumerate(records)]
    decoded = decode_batch(msgs, dim=s.dim, max_bytes=4096, features=s.feature_spec)
    assert decoded.scan is not None and [(a, b, ok) for a, b, ok in decoded.stretches] == [(0, 300, True)]
    expected = np.array([vectorize(s.feature_spec, r)[0] for r in records])
    assert decoded.scan.X.tobytes() == expected.tobytes()
    with python_decoder():
        assert decode_batch(msgs, dim=s.dim, max_bytes=4096, features=s.feature_spec).runs[0].X.tobytes() == \
            expected.tobytes()
    model = PassiveOLU(dim=s.dim, feature_bound=s.feature_bound, noise_rng=np.random.default_rng(1))
    runner = PartitionRunner("t", 0, model, snapshots=SnapshotStore(open_store("memory://"), prefix="p", group="g"),
                             settings=s, model_name="m")
    for j in range(0, 300, 70):
        runner.process(msgs[j:j + 70])
    reference = PassiveOLU(dim=s.dim, feature_bound=s.feature_bound, noise_rng=np.random.default_rng(1))
    reference.learn_many([r["id"] for r in records], expected, [float(r["y"]) for r in records])
    assert runner.model.z.tobytes() == reference.z.tobytes() and runner.model.t == 300


def test_a_sparse_input_worker_learns_and_unlearns_the_derived_rows_as_the_engine_does(tmp_path):
    """OLU_SPARSE_INPUT under a spec with derived blocks: the compiled reader writes each record's
    non-zeros (CSR), and the runner, through batches split by deletes, leaves the model the engine
    leaves after the same sparse rows learned and the same requests honoured, bit for bit."""
    path = tmp_path / "spec.json"
    fourier = {"type": "fourier", "fields": ["age", "score"], "components": 64, "bandwidth": 0.7, "seed": 3}
    path.write_bytes(orjson.dumps({"features": FIELDS, "derived": DERIVED + [fourier], "bound": 2.0}))
    env = {"OLU_FEATURES_FILE": str(path), "OLU_KAFKA_BOOTSTRAP_SERVERS": "localhost:1",
           "OLU_RELEASE_EVERY_EVENTS": "50", "OLU_SPARSE_INPUT": "1"}
    s = load_settings([], env=env)
    records = _records(300)
    events = []  # every 40th record deletes the record 17 before it
    for i, r in enumerate(records):
        events.append(r)
        if i % 40 == 39:
            events.append({"op": "delete", "id": records[i - 17]["id"]})
    msgs = [Message(topic="t", partition=0, offset=i, key=e["id"].encode(), value=orjson.dumps(e), timestamp=(1, i))
            for i, e in enumerate(events)]
    decoded = decode_batch(msgs, dim=s.dim, max_bytes=4096, features=s.feature_spec, sparse=True)
    assert decoded.scan is not None and all(ok == (e["op"] == "insert") for e, ok in
                                            zip(events, decoded.scan.accepted))
    rows = SparseRows.from_dense(np.array([vectorize(s.feature_spec, r)[0] for r in records]))
    assert 0 < len(rows.values) < len(records) * s.dim / 3  # the rows are sparse

    def model():
        return PassiveOLU(dim=s.dim, feature_bound=s.feature_bound, noise_rng=np.random.default_rng(1))
    runner = PartitionRunner("t", 0, model(), snapshots=SnapshotStore(open_store("memory://"), prefix="p", group="g"),
                             settings=s, model_name="m")
    for j in range(0, len(msgs), 70):
        runner.process(msgs[j:j + 70])
    reference, learned = model(), 0
    for e in events:
        if e["op"] == "delete":
            reference.unlearn_request([e["id"]])
            continue
        reference.learn_many([e["id"]], rows[learned:learned + 1], [float(e["y"])])
        learned += 1
    assert runner.model.t == reference.t == 300 and runner.model.counters == reference.counters
    assert runner.model.z.tobytes() == reference.z.tobytes()


# --------------------------------------------------------------------------- random Fourier features

RFF = [{"name": "u", "type": "numeric", "range": [-1, 1]}, {"name": "v", "type": "numeric", "range": [-1, 1]}]


def fourier_spec(components=512, bandwidth=0.5, seed=7, **block):
    return parse_spec({"features": RFF, "derived": [{"type": "fourier", "fields": ["u", "v"],
                                                     "components": components, "bandwidth": bandwidth,
                                                     "seed": seed, **block}]})


def test_fourier_features_approximate_the_gaussian_kernel():
    s = fourier_spec(components=4096)
    at = s.names.index("fourier(u,v)#0")
    rng = np.random.default_rng(0)
    for _ in range(20):
        a, b = rng.uniform(-1, 1, 2), rng.uniform(-1, 1, 2)
        xa = vectorize(s, {"u": float(a[0]), "v": float(a[1])})[0][at:]
        xb = vectorize(s, {"u": float(b[0]), "v": float(b[1])})[0][at:]
        kernel = math.exp(-float(np.sum((a - b) ** 2)) / (2 * 0.5 ** 2))
        assert abs(float(xa @ xb) - kernel) < 0.06  # Monte Carlo error ~ 1/sqrt(D)


def test_the_fourier_map_is_the_declaration_s_alone():
    """The seed draws the map: the same on every parse (and every reader), another seed another map;
    the norm bound is sqrt(2) weight for the block, whatever the record."""
    a, b, c = fourier_spec(seed=7), fourier_spec(seed=7), fourier_spec(seed=8)
    assert a.derived[0].w == b.derived[0].w and a.derived[0].b == b.derived[0].b
    assert a.derived[0].w != c.derived[0].w and a.digest != c.digest
    assert a.norm_bound ** 2 == pytest.approx(1 + 2 + 2)  # intercept, two fields, the block
    again = parse_spec(orjson.loads(orjson.dumps(a.source)))
    x = vectorize(a, {"u": 0.3, "v": -0.9})[0]
    assert vectorize(again, {"u": 0.3, "v": -0.9})[0].tobytes() == x.tobytes()
    assert float(np.linalg.norm(x)) <= a.norm_bound


def test_fourier_coordinates_are_the_same_bits_as_the_written_out_definition():
    """cos is portable.cos (no libm, no SIMD), the phase summed in the fields' order."""
    from worker.features import portable

    s = fourier_spec(components=16, bandwidth=0.25, seed=11, weight=0.5)
    block = s.derived[0]
    x = vectorize(s, {"u": 0.125, "v": 0.75})[0][block.slot:]
    draws = portable.gaussians(11, 0, 32)
    for j in range(16):
        t = 6.283185307179586 * portable.uniform(11, 1, j) + (draws[2 * j] / 0.25) * 0.125 + (draws[2 * j + 1] / 0.25) * 0.75
        assert x[j] == 0.5 * math.sqrt(2.0 / 16) * portable.cos(t)


@pytest.mark.parametrize(("block", "message"), [
    ({"fields": ["u", "plan"]}, "'plan' is not a numeric field of the spec"),
    ({"components": 0}, "'components' must be an integer from 1 to 4096"),
    ({"bandwidth": 0}, "'bandwidth' must be a positive number"),
    ({"seed": -1}, "'seed' must be an integer from 0 to 2^63 - 1"),
    ({"bandwidth": 1e-7}, "too small for the fields' scales"),
])
def test_every_fourier_mistake_has_its_message(block, message):
    item = {"type": "fourier", "fields": ["u", "v"], "components": 8, "bandwidth": 0.5, "seed": 1, **block}
    with pytest.raises(FeatureSpecError) as err:
        parse_spec({"features": [*RFF, {"name": "plan", "type": "boolean"}], "derived": [item]})
    assert message in str(err.value)


def test_a_curved_boundary_is_learnable_through_fourier_features():
    """Inside or outside a circle: linear in (u, v) no better than the majority, near-perfect on
    the Fourier features (the certificate's constants untouched: it is still a linear model)."""
    rng = np.random.default_rng(5)
    U = rng.uniform(-1, 1, (6000, 2))
    y = (np.sum(U ** 2, axis=1) < 0.5).astype(float)
    for spec, least in ((parse_spec({"features": RFF}), None), (fourier_spec(components=256), 0.9)):
        X = np.array([vectorize(spec, {"u": float(a), "v": float(b)})[0] for a, b in U])
        model = ALGORITHMS["ogd"](dim=spec.dim, feature_bound=spec.norm_bound * (1 + 1e-9), l2=1e-4, radius=100.0)
        model.learn_many([f"r{j}" for j in range(5000)], X[:5000], y[:5000])
        accuracy = float(np.mean((X[5000:] @ model.z >= 0) == (y[5000:] > 0)))
        if least is None:
            assert accuracy < 0.75
        else:
            assert accuracy >= least, accuracy


def test_the_choosing_features_example_of_the_docs_is_a_valid_spec():
    import re
    from pathlib import Path

    import yaml

    text = (Path(__file__).resolve().parents[2] / "docs" / "features.md").read_text()
    block = re.search(r"### Choosing features.*?```yaml\n(.*?)```", text, re.S)
    assert block, "docs/features.md's Choosing features example moved"
    s = parse_spec(yaml.safe_load(block.group(1)))
    assert {d.kind for d in s.derived} == {"bins", "cross", "fourier"}


def test_the_compiled_cos_is_portable_cos_bit_for_bit():
    """derived_kernel's branch-free cos: the same operations as portable.cos, so the same bits,
    over its whole domain, the quadrant edges and the ties of its rounding included."""
    from worker.features import portable
    from worker.stream.input.derived_kernel import _cos_many

    rng = np.random.default_rng(11)
    xs = np.concatenate([rng.uniform(-1e6 + 1, 1e6 - 1, 4000), rng.uniform(-10, 10, 4000),
                         np.arange(-40, 41) * (math.pi / 4), (np.arange(-40, 41) + 0.5) / portable._TWO_OVER_PI,
                         [0.0, -0.0, 1e-300, math.pi, -math.pi]])
    want = np.array([portable.cos(float(x)) for x in xs])
    many = xs.copy()  # the branch-free form the reader runs in SIMD lanes
    _cos_many(many, len(many))
    assert many.view(np.uint64).tolist() == want.view(np.uint64).tolist()


def test_the_worker_hints_at_sparse_input_for_a_spec_of_mostly_zeros(monkeypatch):
    import worker.stream.app as app

    said = []
    monkeypatch.setattr(app.log, "info", lambda message, extra=None: said.append((message, extra)))
    env = {"OLU_FEATURES_FILE": "examples/agrawal.yaml", "OLU_KAFKA_BOOTSTRAP_SERVERS": "localhost:1"}
    app._hint_sparse_rows(load_settings([], env=env))
    assert len(said) == 1 and "OLU_SPARSE_INPUT=true" in said[0][0]
    assert said[0][1]["dim"] == 5260 and said[0][1]["most_non_zeros"] < 5260 / 4
    app._hint_sparse_rows(load_settings([], env={**env, "OLU_SPARSE_INPUT": "1"}))  # already sparse
    app._hint_sparse_rows(load_settings([], env={**env, "OLU_FEATURES_FILE": "examples/bananas.yaml"}))  # d = 675
    assert len(said) == 1
