"""The deletion ledger in sealed segments: same entries, same order, whatever is sealed (invariant 4)."""

from __future__ import annotations

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


def test_sealed_segments_hold_the_entries_as_json_and_are_read_only():
    ledger = Ledger(segment_entries=2)
    for e in entries(5):
        ledger.append(e)
    open_entries, sealed, shared = ledger.export()
    assert sealed == 2 and open_entries == entries(5)[4:]
    assert set(shared) == {"ledger_seg0", "ledger_seg1"}
    seg = shared["ledger_seg1"]["entries"]
    assert seg.dtype == np.uint8 and not seg.flags.writeable
    assert orjson.loads(seg.tobytes()) == entries(5)[2:4]


def test_sealing_depends_only_on_the_entries():
    """A replay appends the same entries, so it seals the very same bytes (shared blobs dedupe)."""
    a, b = Ledger(segment_entries=4), Ledger(segment_entries=4)
    for e in entries(13):
        a.append(e)
        b.append(dict(e))
    _, _, sa = a.export()
    _, _, sb = b.export()
    assert all(sa[g]["entries"].tobytes() == sb[g]["entries"].tobytes() for g in sa)


def test_export_load_round_trip_adopts_the_sealed_arrays():
    ledger = Ledger(segment_entries=3)
    for e in entries(8):
        ledger.append(e)
    open_entries, sealed, shared = ledger.export()
    back = Ledger.load(open_entries, sealed, shared, segment_entries=3, stored_segment_entries=3)
    assert back == ledger and back.sealed == 2
    _, _, again = back.export()
    assert all(again[g]["entries"] is shared[g]["entries"] for g in shared)  # not copied: no re-upload
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
        shared["ledger_seg0"] = {"entries": shared["ledger_seg0"]["entries"].astype(np.uint32)}
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
    assert meta["format"] == STATE_FORMAT == 3
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
    state["meta"]["format"] = 4
    with pytest.raises(InvalidState, match="unknown state format 4"):
        load_model(state)
