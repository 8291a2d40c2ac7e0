"""The deletion ledger in sealed segments: same entries, same order, whatever is sealed (invariant 4)."""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import orjson
import pytest

from tests.olu.helpers import synthetic_stream
from worker.olu import load_model
from worker.olu.algorithms.passive import PassiveOLU
from worker.olu.core.base import STATE_FORMAT
from worker.olu.exceptions import InvalidState
from worker.olu.privacy import ledger as ledger_module
from worker.olu.privacy.ledger import Ledger
from worker.state.codec import decode

KW = dict(dim=4, loss="logistic", l2=0.01, radius=10.0, feature_bound=1.0, rho=1.0)


def entries(n: int, start: int = 1) -> list[dict]:
    return [{"i": i, "tau": 10 * i, "u": [i, i + 1], "shift": 1.0 / (i + 3), "sigma": 0.1 * i + 1e-17}
            for i in range(start, start + n)]


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 9])
def test_every_entry_reads_back_in_order(n):
    ledger = Ledger(segment_entries=3)
    want = entries(n)
    for e in want:
        ledger.append(e)
    assert len(ledger) == n and ledger.sealed == n // 3
    assert list(ledger) == want and ledger == want
    assert [ledger[j] for j in range(n)] == want
    assert [ledger[-j] for j in range(1, n + 1)] == want[::-1]
    assert ledger[1:5] == want[1:5] and ledger[::-2] == want[::-2]
    with pytest.raises(IndexError):
        ledger[n]
    with pytest.raises(IndexError):
        ledger[-n - 1]


def test_sealed_segments_hold_the_entries_in_read_only_columns():
    ledger = Ledger(segment_entries=2)
    for e in entries(5):
        ledger.append(e)
    open_entries, sealed, shared = ledger.export()
    assert sealed == 2 and open_entries == entries(5)[4:]
    assert set(shared) == {"ledger_seg0", "ledger_seg1"}
    seg = shared["ledger_seg1"]
    assert all(not a.flags.writeable for a in seg.values())
    assert seg["kind"].tolist() == [ledger_module.WHOLE] * 2  # no epoch nor rho: not the common keys
    assert orjson.loads(zlib.decompress(seg["side"].tobytes())) == [[0, entries(5)[2]], [1, entries(5)[3]]]


def deletion(i: int, **extra) -> dict:
    return {"i": i, "epoch": i // 7, "tau": 100 + i, "u": [i + 1], "shift": 1.0 / (i + 3),
            "sigma": 0.1 * i + 1e-17, "rho": 0.5, **extra}


def test_common_entries_are_41_bytes_and_come_back_bit_for_bit():
    rng = np.random.default_rng(4)
    want = [deletion(i) for i in range(10)]
    want[3]["shift"] = float(rng.random())  # any double, bit for bit
    want[4]["sigma"] = np.float64(5e-324)  # a numpy float is a float: read back as the same value
    want[5]["u"] = [2**32 - 1]
    ledger = Ledger(segment_entries=4)
    for e in want:
        ledger.append(e)
    got = list(ledger)
    assert got == want and [list(e) for e in got] == [list(e) for e in want]  # same keys, same order
    assert all(np.float64(g[k]).tobytes() == np.float64(w[k]).tobytes()
               for g, w in zip(got, want) for k in ("shift", "sigma", "rho"))
    _, _, shared = ledger.export()
    seg = shared["ledger_seg0"]
    assert seg["kind"].tolist() == [ledger_module.CORE_ONLY] * 4 and len(seg["side"]) == 0
    assert sum(a.itemsize for name, a in seg.items() if name != "side") == 41


def test_extras_and_odd_entries_keep_their_content_and_order():
    want = [
        deletion(0, outcome="noised", route="rewind", K=3),  # common part in columns, extras aside
        deletion(1, pairs_purged=2, retained=40, removal_scale=0.025),
        {**deletion(2), "u": [3, 4, 5]},  # many steps
        {**deletion(3), "i": 2**32},  # does not fit uint32
        {**deletion(4), "shift": 0},  # an int where a float is usual
        {**deletion(5), "epoch": True},
        {"epoch": 0, **deletion(6)},  # another key order
        {"i": 7},
        deletion(8, **{"nested": {"a": [1, 2.5]}}),
    ]
    for seal_at in (3, 4, 100):
        ledger = Ledger(segment_entries=seal_at)
        for e in want:
            ledger.append(e)
        open_entries, sealed, shared = ledger.export()
        for got in (list(ledger), list(reversed(ledger))[::-1], [ledger[j] for j in range(len(want))],
                    list(Ledger.load(orjson.loads(orjson.dumps(open_entries)), sealed, shared,
                                     segment_entries=seal_at))):
            assert got == want
            assert [list(e) for e in got] == [list(e) for e in want]
            assert [type(g[k]) for g, w in zip(got, want) for k in w] == [type(w[k]) for w in want for k in w]


def test_sealing_depends_only_on_the_entries():
    """A replay appends the same entries, so it seals the very same bytes (shared blobs dedupe)."""
    a, b = Ledger(segment_entries=4), Ledger(segment_entries=4)
    for e in entries(13):
        a.append(e)
        b.append(dict(e))
    _, _, sa = a.export()
    _, _, sb = b.export()
    assert all(sa[g][k].tobytes() == sb[g][k].tobytes() for g in sa for k in sa[g])


def test_export_load_round_trip_adopts_the_sealed_arrays():
    ledger = Ledger(segment_entries=3)
    for e in entries(8):
        ledger.append(e)
    open_entries, sealed, shared = ledger.export()
    back = Ledger.load(open_entries, sealed, shared, segment_entries=3, stored_segment_entries=3)
    assert back == ledger and back.sealed == 2
    _, _, again = back.export()
    assert all(again[g][k] is shared[g][k] for g in shared for k in shared[g])  # not copied: no re-upload
    back.append({"i": 9})
    assert len(back) == 9 and back.sealed == 3 and back[-1] == {"i": 9}


@pytest.mark.parametrize("stored, now", [(2, 5), (5, 2), (3, 3)])
def test_another_segment_size_is_resealed(stored, now):
    old = Ledger(segment_entries=stored)
    for e in entries(11):
        old.append(e)
    open_entries, sealed, shared = old.export()
    back = Ledger.load(open_entries, sealed, shared, segment_entries=now, stored_segment_entries=stored)
    assert back == entries(11) and back.sealed == 11 // now and back.segment_entries == now


def test_an_unsealed_ledger_of_an_older_state_is_sealed_on_load():
    back = Ledger.load(entries(7), 0, None, segment_entries=3)
    assert back == entries(7) and back.sealed == 2


@pytest.mark.parametrize("bad", ["gap", "extra", "dtype", "not_list", "count"])
def test_inconsistent_segments_are_refused(bad):
    ledger = Ledger(segment_entries=2)
    for e in entries(6):
        ledger.append(e)
    open_entries, sealed, shared = ledger.export()
    if bad == "gap":
        del shared["ledger_seg1"]
    elif bad == "extra":
        shared["ledger_seg7"] = shared["ledger_seg0"]
    elif bad == "dtype":
        shared["ledger_seg0"] = {**shared["ledger_seg0"], "tau": shared["ledger_seg0"]["tau"].astype(np.uint64)}
    elif bad == "not_list":
        open_entries = {"i": 7}
    with pytest.raises(ValueError):
        if bad == "count":  # checked when read, not at load (a restore decodes no segment)
            shared["ledger_seg1"] = {"entries": np.frombuffer(orjson.dumps(entries(3)), np.uint8)}
            list(Ledger.load(open_entries, sealed, shared, segment_entries=2))
        else:
            Ledger.load(open_entries, sealed, shared, segment_entries=2)


# ------------------------------------------------------------------------------- in the model
@pytest.fixture
def small_segments(monkeypatch):
    monkeypatch.setattr(ledger_module, "SEGMENT_ENTRIES", 3)


def deleted_model(deletes: int) -> PassiveOLU:
    ids, X, y = synthetic_stream(200, 4, seed=5)
    m = PassiveOLU(**KW, noise_rng=np.random.default_rng(1))
    m.learn_many(ids, X, y)
    for j in range(deletes):
        m.unlearn_one(ids[7 * j])
    return m


def test_the_model_seals_its_ledger_and_exports_only_the_open_entries(small_segments):
    m = deleted_model(8)
    assert len(m.ledger) == 8 and m.ledger.sealed == 2
    assert [e["i"] for e in m.ledger] == list(range(1, 9))
    state = m.export_state()
    meta = state["meta"]
    assert meta["format"] == STATE_FORMAT == 4
    assert [e["i"] for e in meta["ledger"]] == [7, 8]
    assert meta["ledger_sealed"] == {"segments": 2, "segment_entries": 3}
    assert {"ledger_seg0", "ledger_seg1"} <= set(state["shared"])
    header = orjson.loads(orjson.dumps(meta))  # as a snapshot header stores it
    back = load_model({"meta": header, "arrays": state["arrays"], "shared": state["shared"]}, np.random.default_rng(1))
    assert back.ledger == m.ledger and back.accountant.deletions == 8
    # and it goes on where it stopped: the counter and the ledger continue (invariant 4)
    ids, _, _ = synthetic_stream(200, 4, seed=5)
    back.unlearn_one(ids[190])
    assert [e["i"] for e in back.ledger] == list(range(1, 10)) and back.ledger.sealed == 3


def test_a_format_2_state_with_the_whole_ledger_in_its_header_loads(small_segments):
    m = deleted_model(5)
    state = m.export_state()
    meta = dict(state["meta"], format=2, ledger=list(m.ledger))
    del meta["ledger_sealed"]
    shared = {g: v for g, v in state["shared"].items() if not g.startswith("ledger_seg")}
    back = load_model({"meta": meta, "arrays": state["arrays"], "shared": shared})
    assert back.ledger == m.ledger and back.ledger.sealed == 1


def test_a_state_missing_a_ledger_segment_is_invalid(small_segments):
    state = deleted_model(7).export_state()
    del state["shared"]["ledger_seg1"]
    with pytest.raises(InvalidState, match="ledger segments"):
        load_model(state)


def test_an_unknown_state_format_is_refused():
    state = deleted_model(1).export_state()
    state["meta"]["format"] = 5
    with pytest.raises(InvalidState, match="unknown state format 5"):
        load_model(state)


@pytest.mark.parametrize("name", ["passive", "rewind"])
def test_a_format_3_snapshot_with_json_segments_still_restores(name):
    """Written by the build of commit 61f409a (tests/olu/data/make_format3.py): 21 deletions,
    segments of 8, two sealed as JSON. Read, sealed again in columns, exported in format 4."""
    header, arrays = decode((Path(__file__).parents[1] / "data" / f"format3_{name}.snap").read_bytes())
    state = {"meta": header["meta"], "arrays": {}, "shared": {}}
    for key, arr in arrays.items():
        parts = key.split("/")
        if parts[0] == "a":
            state["arrays"][parts[1]] = arr
        else:
            state["shared"].setdefault(parts[1], {})[parts[2]] = arr
    assert state["meta"]["format"] == 3 and state["meta"]["ledger_sealed"]["segments"] == 2
    model = load_model(state, np.random.default_rng(1))
    assert list(model.ledger) == header["ledger"] and model.z.tolist() == header["z"]
    again = model.export_state()
    assert again["meta"]["format"] == 4
    back = load_model(again, np.random.default_rng(1))
    assert list(back.ledger) == header["ledger"] and np.array_equal(back.z, model.z)
