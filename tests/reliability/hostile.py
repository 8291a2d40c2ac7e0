"""Hostile input records for the reliability tests, and the oracle that says what must become of
each one.

Every builder takes a ``random.Random`` (a seeded one for the real-broker batch, Hypothesis's
``st.randoms()`` for the property tests, so both draw from the same families) and the id pool
shared by the batch (small, so ids repeat: duplicate inserts, deletes before inserts, deletes of
ids never seen). A builder returns ``(key, value, family)``.

:func:`expected_outcomes` is the oracle: a fresh engine of the same settings, fed the records in
offset order through the public decoder and ``learn_one`` / ``unlearn_request``, says for each record
whether it is applied, skipped (its id was deleted first), a delete (JSON or tombstone), or a dead
letter with which reason. Whether an insert is applied or skipped, and why a record is refused,
does not depend on the deletion noise, so the oracle's noise may differ from the worker's.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass, field

import orjson

from worker.olu import ALGORITHMS
from worker.olu.exceptions import InvalidExample
from worker.stream.exceptions import DeadLetter
from worker.stream.input.decode import Delete, Insert, decode_event

DIM = 4
_ALPHABETS = ["abcxyz-_0123456789", "éüßñç", "日本語中文", "😀🙈🦄", "\u0301\u200b\u00a0\ufeff", "\x00\x01\x7f"]


def _id(rnd: random.Random) -> str:
    alphabet = rnd.choice(_ALPHABETS)
    return "".join(rnd.choice(alphabet) for _ in range(rnd.randint(1, 12)))


def pool_id(rnd: random.Random, pool: list[str]) -> str:
    """An id from the pool (so ids repeat), now and then a new one added to it."""
    if not pool or rnd.random() < 0.3:
        pool.append(_id(rnd))
    return rnd.choice(pool)


def _x(rnd: random.Random, dim: int = DIM) -> list[float]:
    """Features inside the unit ball (the default feature bound)."""
    x = [rnd.uniform(-1, 1) for _ in range(dim)]
    norm = sum(v * v for v in x) ** 0.5
    return [v * 0.9 / max(norm, 1e-12) for v in x]


def _json(obj) -> bytes:
    """Compact JSON; the standard library writes what orjson refuses (integers over 64 bits)."""
    try:
        return orjson.dumps(obj)
    except TypeError:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def valid_insert(rnd, pool):
    rid = pool_id(rnd, pool)
    return rid.encode(), _json({"op": "insert", "id": rid, "x": _x(rnd), "y": rnd.choice([0, 1, -1])}), "insert"


def valid_delete(rnd, pool):
    rid = pool_id(rnd, pool)
    if rnd.random() < 0.5:
        return rid.encode(), None, "tombstone"
    if rnd.random() < 0.3:  # a request naming several records (ids repeat across requests)
        ids = list(dict.fromkeys(pool_id(rnd, pool) for _ in range(rnd.randint(1, 6))))
        return rid.encode(), _json({"op": "delete", "ids": ids}), "delete"
    return rid.encode(), _json({"op": "delete", "id": rid}), "delete"


def bad_requests(rnd, pool):
    """Deletes whose ``ids`` is malformed: empty, not an array, a repeat, both fields, a bad item."""
    ids = list(dict.fromkeys(pool_id(rnd, pool) for _ in range(rnd.randint(1, 4))))
    choice = rnd.randrange(6)
    if choice == 0:
        record = {"op": "delete", "ids": []}
    elif choice == 1:
        record = {"op": "delete", "ids": rnd.choice([ids[0], 7, None, {"0": ids[0]}, True])}
    elif choice == 2:
        record = {"op": "delete", "ids": ids + [rnd.choice(ids)]}
    elif choice == 3:
        record = {"op": "delete", "id": ids[0], "ids": ids}
    elif choice == 4:
        record = {"op": "delete", "ids": ids + [rnd.choice(["", "r" * 257, 42, None, [ids[0]]])]}
    else:
        record = {"op": "delete", "ids": [f"r-{i}" for i in range(10_001)]}  # too many, and oversized here
    return ids[0].encode(), _json(record), "bad requests"


def random_bytes(rnd, pool):
    key = rnd.choice([None, pool_id(rnd, pool).encode(), rnd.randbytes(rnd.randint(0, 40))])
    return key, rnd.randbytes(rnd.randint(0, 300)), "random bytes"


def non_finite(rnd, pool):
    """NaN, infinities and overflowing numbers as JSON text (orjson would never write them)."""
    rid = pool_id(rnd, pool)
    token = rnd.choice(["NaN", "Infinity", "-Infinity", "1e999", "-1e400", "1" + "0" * 400, "nan", "inf"])
    xs = [repr(v) for v in _x(rnd)]
    where = rnd.choice(["x", "y"])
    if where == "x":
        xs[rnd.randrange(DIM)] = token
    y = token if where == "y" else "1"
    value = f'{{"op":"insert","id":{orjson.dumps(rid).decode()},"x":[{",".join(xs)}],"y":{y}}}'.encode()
    return rid.encode(), value, "non-finite"


def huge_array(rnd, pool):
    rid = pool_id(rnd, pool)
    n = rnd.choice([DIM + 1, 1000, 20_000, 70_000])
    return rid.encode(), _json({"op": "insert", "id": rid, "x": [0.0] * n, "y": 1}), "huge array"


def deep_nesting(rnd, pool):
    rid = pool_id(rnd, pool)
    depth = rnd.choice([3, 200, 1023, 1025, 5000])
    opener, closer = rnd.choice([("[", "]"), ('{"a":', "}")])
    deep = opener * depth + "1" + closer * depth
    where = rnd.choice(["x", "y", "id", "extra", "top"])
    rid_json = orjson.dumps(rid).decode()
    value = {
        "x": f'{{"op":"insert","id":{rid_json},"x":{deep},"y":1}}',
        "y": f'{{"op":"insert","id":{rid_json},"x":[0,0,0,0],"y":{deep}}}',
        "id": f'{{"op":"delete","id":{deep}}}',
        "extra": f'{{"op":"delete","id":{rid_json},"more":{deep}}}',
        "top": deep,
    }[where]
    return rid.encode(), value.encode(), "deep nesting"


_ODD_VALUES = [None, True, False, 0, -1, 2**63, 2**64 + 1, 1.5, -0.0, "", "1", "insert", [], [1], {}, {"a": 1},
               [[0.1, 0.2, 0.3, 0.4]], [None] * DIM, [True] * DIM, ["0.1"] * DIM]


def wrong_types(rnd, pool):
    """A record with one field replaced by a value of another type (or removed, or added)."""
    rid = pool_id(rnd, pool)
    record = {"op": "insert", "id": rid, "x": _x(rnd), "y": 1}
    if rnd.random() < 0.3:
        record = {"op": "delete", "id": rid}
    name = rnd.choice(sorted(record) + ["ts", "extra"])
    action = rnd.random()
    if action < 0.15:
        record.pop(name, None)
    else:
        record[name] = rnd.choice(_ODD_VALUES + [rnd.randint(-5, 5), _id(rnd)])
    key = rid.encode() if rnd.random() < 0.9 else rnd.choice([None, b"", _id(rnd).encode()])
    return key, _json(record), "wrong types"


def odd_ids(rnd, pool):
    """Empty, over-long, non-NFC, lone-surrogate and key-mismatched ids."""
    choice = rnd.randrange(7)
    base = {"op": "insert", "x": _x(rnd), "y": 1} if rnd.random() < 0.5 else {"op": "delete"}
    if choice == 0:
        return b"", _json({**base, "id": ""}), "empty id"
    if choice == 1:
        rid = "r" * rnd.choice([256, 257, 5000])
        return rid.encode(), _json({**base, "id": rid}), "long id"
    if choice == 2:  # same text, other Unicode normalisation in the key: valid, the key is only a key
        return "e\u0301".encode(), _json({**base, "id": "\u00e9"}), "unnormalised id"
    if choice == 3:  # a lone surrogate cannot be UTF-8 encoded; as JSON text it is an escape
        return b"\xed\xa0\x80", b'{"op":"delete","id":"\\ud800"}', "surrogate id"
    if choice == 4:
        return b"\xff\xfe", None, "non-UTF-8 tombstone key"
    if choice == 5:
        return None, None, "tombstone without key"
    rid = pool_id(rnd, pool)
    if rnd.random() < 0.5:  # a key other than the id (a subject's key): valid
        return (rid + "-other").encode(), _json({**base, "id": rid}), "subject key"
    return rnd.choice([None, b""]), _json({**base, "id": rid}), "no key"


def duplicate_fields(rnd, pool):
    """Repeated JSON keys: the parser keeps one; the record must still be judged consistently."""
    rid, other = pool_id(rnd, pool), pool_id(rnd, pool)
    x = orjson.dumps(_x(rnd)).decode()
    value = (f'{{"op":"delete","op":"insert","id":{orjson.dumps(other).decode()},'
             f'"id":{orjson.dumps(rid).decode()},"x":{x},"y":1,"y":0}}')
    return rid.encode(), value.encode(), "duplicate fields"


def engine_refusals(rnd, pool):
    """Well-formed records the engine refuses: feature norm over the bound, labels it cannot use."""
    rid = pool_id(rnd, pool)
    if rnd.random() < 0.5:
        x = [rnd.choice([1.0, 5.0, 1e300, -1e-300]) for _ in range(DIM)]
        return rid.encode(), _json({"op": "insert", "id": rid, "x": x, "y": 1}), "norm exceeded"
    return rid.encode(), _json({"op": "insert", "id": rid, "x": _x(rnd), "y": rnd.choice([2, 0.5, -3, 1e300])}), \
        "bad label"


def oversized(rnd, pool, limit: int = 16_384):
    rid = pool_id(rnd, pool)
    pad = rnd.choice([limit, limit * 2, limit * 4])
    record = {"op": "insert", "id": rid, "x": _x(rnd), "y": 1}
    if rnd.random() < 0.5:
        return rid.encode(), _json(record) + b" " * pad, "oversized"
    return rid.encode(), _json({**record, "note": "n" * pad}), "oversized"


def framing(rnd, pool):
    """Valid records wrapped in bytes a parser may or may not tolerate."""
    rid = pool_id(rnd, pool)
    body = _json({"op": "insert", "id": rid, "x": _x(rnd), "y": 0})
    wrapped = rnd.choice([b"\xef\xbb\xbf" + body, body + b"\x00", b" \n\t" + body + b"\r\n", body + body,
                          body[:-1], b"", b"null", b"[]", b'"insert"', body.replace(b'"', b"'")])
    return rid.encode(), wrapped, "framing"


BUILDERS = {
    "insert": valid_insert, "delete": valid_delete, "random bytes": random_bytes, "non-finite": non_finite,
    "huge array": huge_array, "deep nesting": deep_nesting, "wrong types": wrong_types, "odd ids": odd_ids,
    "duplicate fields": duplicate_fields, "bad requests": bad_requests, "engine refusals": engine_refusals, "oversized": oversized,
    "framing": framing,
}


def hostile_batch(rnd: random.Random, n: int, *, valid_share: float = 0.5, families=None) -> list[tuple]:
    """``n`` records: about ``valid_share`` valid inserts and deletes, the rest hostile."""
    pool: list[str] = []
    hostile = list(families or (f for f in BUILDERS if f not in ("insert", "delete")))
    out = []
    for _ in range(n):
        if rnd.random() < valid_share:
            family = "insert" if rnd.random() < 0.75 else "delete"
        else:
            family = rnd.choice(hostile)
        out.append(BUILDERS[family](rnd, pool))
    return out


# --------------------------------------------------------------------------- the oracle

@dataclass
class Expected:
    """What must become of each record of one partition (by offset)."""

    applied: int = 0
    skipped: int = 0
    deletes: int = 0
    tombstones: int = 0
    dead: dict[int, str] = field(default_factory=dict)  # offset -> reason

    @property
    def reasons(self) -> Counter:
        return Counter(self.dead.values())


def new_engine(settings):
    return ALGORITHMS[settings.algorithm](**settings.model_kwargs())


def expected_outcomes(settings, records) -> Expected:
    """``records``: ``(offset, key, value)`` of one partition in offset order."""
    model = new_engine(settings)
    out = Expected()
    for offset, key, value in records:
        try:
            event = decode_event(key, value, dim=settings.dim, max_bytes=settings.max_record_bytes)
        except DeadLetter as dead:
            out.dead[offset] = dead.reason
            continue
        if isinstance(event, Insert):
            try:
                applied = model.learn_one(event.id, event.x, event.y)
            except InvalidExample as bad:
                out.dead[offset] = bad.reason
                continue
            out.applied += applied
            out.skipped += not applied
        else:
            assert isinstance(event, Delete)
            model.unlearn_request(list(event.ids))
            out.deletes += 1
            out.tombstones += event.tombstone
    return out
