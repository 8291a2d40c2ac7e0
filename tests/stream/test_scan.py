"""The compiled fast path (stream/scan.py): whatever it accepts, decode_event accepts with the very
same values; the common record is accepted; numbers are read exactly as orjson reads them."""

from __future__ import annotations

import json
import random
import struct

import numpy as np
import orjson
import pytest
from confluent_kafka import Message
from hypothesis import example, given
from hypothesis import strategies as st

from tests.stream.test_decode import BIG, SETTINGS, records
from worker.olu import record_key
from worker.stream.exceptions import DeadLetter
from worker.stream.input import pow10
from worker.stream.input import scan as scan_mod
from worker.stream.input.decode import Insert, decode_event
from worker.stream.input.scan import scan_batch


def _scan(pairs, dim, max_bytes=BIG):
    msgs = [Message(topic="t", partition=0, offset=i, key=k, value=v, timestamp=(1, 1000 + i))
            for i, (k, v) in enumerate(pairs)]
    return msgs, scan_batch(msgs, dim=dim, max_bytes=max_bytes)


def _bits(values) -> list[int]:
    return np.asarray(values, np.float64).view(np.uint64).tolist()


def _numbers(texts: list[str]):
    """Scan one record per number text: (accepted, value) each."""
    pairs = [(b"k", b'{"op":"insert","id":"k","x":[' + t.encode() + b'],"y":1}') for t in texts]
    _, scan = _scan(pairs, dim=1)
    return scan.accepted.tolist(), scan.X[:, 0]


def _orjson_double(text: str) -> float | None:
    try:
        return float(orjson.loads(text))
    except orjson.JSONDecodeError:
        return None


def assert_numbers_agree(texts: list[str]) -> int:
    """Every accepted number equals orjson's double bit for bit; returns how many were accepted."""
    accepted, values = _numbers(texts)
    for text, ok, value in zip(texts, accepted, values):
        if ok:
            expected = _orjson_double(text)
            assert expected is not None, f"accepted {text!r}, which orjson rejects"
            assert _bits([value]) == _bits([expected]), text
    return sum(accepted)


# ------------------------------------------------------------------ numbers
def test_power_of_ten_table_matches_known_entries():
    # Go's strconv table (detailedPowersOfTen) for 10^0, 10^1, 10^-1 and 10^23: (hi, lo), rounded down.
    table = {0: (0x8000000000000000, 0), 1: (0xA000000000000000, 0),
             -1: (0xCCCCCCCCCCCCCCCC, 0xCCCCCCCCCCCCCCCC), 23: (0xA968163F0A57B400, 0)}
    for e, (hi, lo) in table.items():
        i = e + 348
        assert (int(pow10.POW10_HI[i]), int(pow10.POW10_LO[i])) == (hi, lo), e


@pytest.mark.parametrize("text, accepted, value", [
    ("0.1", True, 0.1), ("2.5e-1", True, 0.25), ("1E+2", True, 100.0), ("1.0", True, 1.0),
    ("-0", True, 0.0),  # orjson: the int 0, which float() makes +0.0
    ("-0.0", True, -0.0), ("0e5", True, 0.0), ("123456789012345678", True, 1.2345678901234568e17),
    ("0.30000000000000004", True, 0.30000000000000004), ("1.7976931348623157e308", True, 1.7976931348623157e308),
    ("2.2250738585072014e-308", True, 2.2250738585072014e-308),
    ("2.2250738585072011e-308", False, None),  # subnormal: declined, decode.py decides
    ("4.9e-324", False, None), ("1e-400", False, None), ("1.7976931348623159e308", False, None),  # inf
    ("9007199254740993", False, None),  # exactly half-way between two doubles
    ("1234567890123456789", False, None),  # a 19-digit integer: orjson's reading depends on range
    ("1.00000000000000011102230246251565404236316680908203125", False, None),  # > 19 digits
    # eight fraction digits at a time: chunk edges, zeros inside, a chunk cut by an exponent
    ("0.1234567812345678", True, 0.1234567812345678), ("12345678.12345678", True, 12345678.12345678),
    ("0.000000001234567890123", True, 1.234567890123e-09), ("1.23456789e-5", True, 1.23456789e-05),
    ("0.10000000000000000", True, 0.1), ("9.999999999999999999", True, 10.0),
    ("1.2345678901234567890", False, None),  # 20 significant digits
    ("01", False, None), ("1.", False, None), (".5", False, None), ("+1", False, None), ("-", False, None),
    ("1e", False, None), ("NaN", False, None), ("Infinity", False, None), ("0x10", False, None),
])
def test_number_cases(text, accepted, value):
    ok, values = _numbers([text])
    assert ok == [accepted]
    if accepted:
        assert _bits(values) == _bits([value])
        assert _bits([_orjson_double(text)]) == _bits([value])


def test_random_doubles_are_read_exactly():
    rng = random.Random(20261122)
    texts = []
    while len(texts) < 50_000:
        f = struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0]
        if f == f and abs(f) != float("inf"):
            texts.append(repr(f))
    texts += [repr(rng.gauss(0, 1)) for _ in range(50_000)]  # the typical feature value
    accepted = assert_numbers_agree(texts)
    assert accepted >= 0.99 * len(texts)  # declines: subnormals and rare exact .5 cases, see module doc


def test_random_decimal_strings_agree_with_orjson():
    rng = random.Random(7)
    texts = []
    for _ in range(60_000):
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 21))).lstrip("0") or "0"
        point = rng.randint(0, len(digits))
        text = (digits[:point] or "0") + ("." + digits[point:] if point < len(digits) else "")
        if rng.random() < 0.6:
            text += rng.choice("eE") + rng.choice(["", "+", "-"]) + str(rng.randint(0, 340))
        texts.append(rng.choice(["", "-"]) + text)
    accepted = assert_numbers_agree(texts)
    assert accepted > len(texts) // 2


@SETTINGS
@given(st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(10**18) + 1, 10**18 - 1))
@example(0.1)
@example(-4480657516823541.5)
def test_any_number_agrees(number):
    assert_numbers_agree([json.dumps(number)])


# ------------------------------------------------------------------ records
def _assert_accepted_agree(msgs, scan, dim, max_bytes=BIG):
    for msg, ok, x, y, key in zip(msgs, scan.accepted, scan.X, scan.y, scan.keys):
        if not ok:
            continue
        event = decode_event(msg.key(), msg.value(), dim=dim, max_bytes=max_bytes)
        assert isinstance(event, Insert)
        assert _bits(x) == _bits(event.x) and _bits([y]) == _bits([event.y])
        assert int(key) == record_key(event.id)


@SETTINGS
@given(st.lists(records(), min_size=1, max_size=10))
def test_accepted_records_agree_with_decode_event(batch):
    dim = batch[0][2]
    msgs, scan = _scan([(k, v) for k, v, _ in batch], dim)
    _assert_accepted_agree(msgs, scan, dim)


@SETTINGS
@given(base=records(), data=st.data())
def test_mutated_records_agree_with_decode_event(base, data):
    key, value, dim = base
    cut = data.draw(st.integers(0, len(value)))
    byte = data.draw(st.binary(min_size=0, max_size=2))
    mutated = value[:cut] + byte + value[cut + data.draw(st.integers(0, 2)):]
    msgs, scan = _scan([(key, mutated), (key, value)], dim)
    _assert_accepted_agree(msgs, scan, dim)


def _insert(rid="r-1", x=(0.5, -0.25), y=1, **extra):
    return rid.encode(), orjson.dumps({"op": "insert", "id": rid, "x": list(x), "y": y, **extra})


def test_common_records_are_accepted():
    rng = np.random.default_rng(3)
    pairs = [_insert(f"r-{i}", rng.normal(size=2).tolist(), int(rng.integers(0, 2))) for i in range(50)]
    pairs.append(_insert("r-ts", ts=1_700_000_000_000))
    pairs.append((b"r-ws", b' {\n "y" : -1 ,\t"x":[ 1 , 2.5e0 ], "id":"r-ws","op":"insert"}\r\n'))
    msgs, scan = _scan(pairs, dim=2)
    assert scan.accepted.all()
    _assert_accepted_agree(msgs, scan, dim=2)
    assert scan.X[-1].tolist() == [1.0, 2.5] and scan.y[-1] == -1.0


@pytest.mark.parametrize("key, value", [
    (b"r-1", orjson.dumps({"op": "delete", "id": "r-1"})),
    (b"r-1", None),  # tombstone
    (None, _insert()[1]),  # unkeyed
    (b"", _insert()[1]),  # an empty key routes nothing either
    (b"s-1", _insert("r" * 257)[1]),  # an id over 256 characters
    (b"s-1", _insert("")[1]),  # an empty id
    ("é".encode(), _insert("é")[1]),  # not ASCII: decode.py handles it
    (b'a"b', json.dumps({"op": "insert", "id": 'a"b', "x": [0.5, 1], "y": 1}).encode()),  # an escape
    (b"r-1", b'{"op":"insert","id":"r-1","x":[0.5,1],"y":1,"y":1}'),  # duplicate field
    (b"r-1", _insert(z=1)[1]),  # unknown field
    (b"r-1", _insert(ts=5.0)[1]),  # ts as a float
    (b"r-1", _insert(ts=-1)[1]),
    (b"r-1", _insert(x=(1.0,))[1]),  # wrong dimension
    (b"r-1", _insert(x=(1.0, True))[1]),
    (b"r-1", _insert(y=None)[1]),
    (b"r-1", _insert()[1] + b"x"),  # trailing bytes
    (b"r-1", _insert()[1][:-1]),  # truncated
    (b"r-1", b""),
])
def test_declined_records(key, value):
    _, scan = _scan([(key, value)], dim=2)
    assert scan.accepted.tolist() == [False]


def test_the_key_is_the_partitioning_key_and_the_id_is_hashed_from_the_value():
    """A key that differs from the id (e.g. the data subject) is accepted; the record key is the id's."""
    rows = [(b"subject-7", _insert("r-1")[1]), (b"r-2", _insert("r-2")[1]), (b"s" * 2000, _insert("r-3")[1]),
            (b"\xff\x00", _insert("r" * 256)[1]), (b"r-1", _insert("other")[1])]
    msgs, scan = _scan(rows, dim=2)
    assert scan.accepted.all()
    assert scan.keys.tolist() == [record_key(r) for r in ("r-1", "r-2", "r-3", "r" * 256, "other")]
    _assert_accepted_agree(msgs, scan, dim=2)


def test_max_bytes_counts_key_and_value():
    key, value = _insert()
    _, scan = _scan([(key, value)], dim=2, max_bytes=len(key) + len(value))
    assert scan.accepted.tolist() == [True]
    _, scan = _scan([(key, value)], dim=2, max_bytes=len(key) + len(value) - 1)
    assert scan.accepted.tolist() == [False]


def test_stretches_and_newest_timestamp():
    good, delete = _insert(), (b"r-1", orjson.dumps({"op": "delete", "id": "r-1"}))
    msgs, scan = _scan([good, good, delete, good, delete, delete], dim=2)
    assert scan.stretches() == [(0, 2, True), (2, 3, False), (3, 4, True), (4, 6, False)]
    assert scan.newest_ts(0, 2) == 1001 and scan.newest_ts(3, 4) == 1003
    assert scan.newest_ts_so_far().tolist() == [scan.newest_ts(0, j + 1) for j in range(6)]
    untimed = [Message(key=good[0], value=good[1], timestamp=(0, 5))]
    assert scan_batch(untimed, dim=2, max_bytes=BIG).newest_ts(0, 1) == 0  # no timestamp available
    assert scan_batch(untimed, dim=2, max_bytes=BIG).newest_ts_so_far().tolist() == [0]
    assert scan_batch([], dim=2, max_bytes=BIG).stretches() == []


def test_python_decoder_switch():
    assert scan_mod.compiled_decoder()
    with scan_mod.python_decoder():
        assert not scan_mod.compiled_decoder()
    assert scan_mod.compiled_decoder()


def test_a_record_decode_event_rejects_is_never_accepted():
    # Sanity for the differential tests: they would see a wrongly accepted dead letter.
    key, value = b"r-1", b'{"op":"insert","id":"r-1","x":[0.5,1e999],"y":1}'
    with pytest.raises(DeadLetter):
        decode_event(key, value, dim=2, max_bytes=BIG)
    assert _scan([(key, value)], dim=2)[1].accepted.tolist() == [False]
