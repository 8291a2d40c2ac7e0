"""Schema Registry framed batches through the compiled
readers: the common insert straight into columns.

:func:`prepare_framed` is the compiled counterpart of :func:`worker.formats.input.transcode` for a
fetched batch. It reads each value's schema id from its framing (in bulk), gets each distinct
id's plan once (worker/formats/plans.py: the registry is asked only for an id not seen before),
and runs the format's reader over the records of each planned id:

- Avro and Protobuf: worker/formats/framed_kernel.py, from the binary value;
- JSON Schema: the JSON scan's parser (insert_kernel.py) after the 5 framing bytes, then the
  schema's checks on the columns (worker/formats/jsonschema_plan.py).

A binary reader makes each record an insert (into the columns), a delete of one id (a
:class:`~.decode.Delete`, as the generic path would decode it) or declines it; the JSON Schema
reader takes inserts only. The declined ones (tombstones, requests naming several ids, records of
a schema without a plan, anything unusual) take the generic path, transcoding to the JSON event,
and the JSON scan then takes the inserts among them into the same columns; the rest are decoded
one by one by the runner, with the verdicts of the generic path. One more check before accepting:
the record's JSON form, which the generic path measures, must surely fit ``max_bytes`` with its
key (a bound: 6 bytes an id character, 25 a number, 100 for the rest; a record near the limit is
declined and the generic path measures it).

The result is a :class:`FramedBatch`: the messages (declined ones transcoded, so a dead letter
still carries the original bytes) with the columns the runner learns from (scan.py's
:class:`~.scan.BatchScan`). Where the registry cannot be asked, the batch stops before the first
record that needs it, as with ``transcode``.
"""

from __future__ import annotations

import sys

import numpy as np

from ...compiled import blake2b
from ...formats.exceptions import RegistryUnavailable
from ...formats.framed_kernel import DECLINED, DELETE, INSERT, avro_kernel, protobuf_kernel
from ...formats.input import transcode
from ...formats.jsonschema_plan import JsonSchemaPlan
from ...formats.plans import AvroPlan, ProtobufPlan
from .decode import Delete
from .insert_kernel import parse_kernel
from .scan import NO_CLASSES, BatchScan, joined, kafka_stamps, key_lengths, scan_batch

__all__ = ["FramedBatch", "prepare_framed"]

FRAMING = 5
#: Bytes of the JSON form besides the id and the numbers
#: ({"op":"insert","id":...,"x":[...],"y":...,"ts":...}).
_JSON_OVERHEAD = 100
_JSON_PER_NUMBER = 25  # the longest double orjson writes is 24 characters, plus a comma
LITTLE_ENDIAN = sys.byteorder == "little"


class FramedBatch(list):
    """Prepared messages (the generic path's :class:`~worker.formats.input.Transcoded` where the
    compiled readers declined) with ``scan``, their columns, and ``events``, the deletes of one id
    the readers decoded ({position: Delete})."""

    def __init__(self, messages, scan: BatchScan, events: dict):
        super().__init__(messages)
        self.scan, self.events = scan, events

    def tail(self, start: int) -> FramedBatch:
        """Messages ``start:`` with their columns (a re-fetch
        drops what the state already holds)."""
        return FramedBatch(self[start:], self.scan.rows(start, len(self)),
                           {j - start: e for j, e in self.events.items() if j >= start})


def schema_ids(vbuf: np.ndarray, voff: np.ndarray) -> np.ndarray:
    """The schema id of each framed value (magic byte 0 and 4 more bytes), -1 for the others."""
    starts, sizes = voff[:-1], np.diff(voff)
    framed = sizes >= FRAMING
    at = np.where(framed, starts, 0)
    if len(vbuf) < FRAMING:
        return np.full(len(starts), -1, np.int64)
    framed &= vbuf[np.minimum(at, len(vbuf) - 1)] == 0
    at = np.where(framed, at, 0)
    ids = np.zeros(len(starts), np.int64)
    for k in range(1, FRAMING):
        ids = (ids << 8) | vbuf[at + k].astype(np.int64)
    return np.where(framed, ids, -1)


def prepare_framed(plans, messages: list, *, dim: int, max_bytes: int, features=None):
    """``(batch, stop, error)`` as ``transcode``'s, the batch a :class:`FramedBatch` (module doc);
    ``features``: the feature spec the transcoded inserts' named fields go through."""
    n = len(messages)
    vbuf, voff = joined([m.value() for m in messages])
    klen = key_lengths([m.key() for m in messages])
    X, y = np.zeros((n, dim), np.float64), np.zeros(n, np.float64)
    spans, kinds = np.zeros((n, 2), np.int64), np.zeros(n, np.int8)
    stop, error = _read(plans, vbuf, voff, klen, dim, max_bytes, X, y, spans, kinds)
    cut = n if stop is None else stop
    kinds[cut:] = DECLINED
    id_chars = spans[:, 1] - spans[:, 0]
    kinds[klen + _JSON_OVERHEAD + 6 * id_chars + _JSON_PER_NUMBER * (
        dim + 2) > max_bytes] = DECLINED
    accepted = kinds == INSERT
    keys = np.zeros(n, np.uint64)
    blake2b.blake2b64_spans(vbuf, spans, accepted, keys)
    raw = vbuf.data
    events = {j: Delete((bytes(raw[a:b]).decode("ascii"),))
              for j, a, b in zip(np.flatnonzero(kinds == DELETE).tolist(),
                                 *spans[kinds == DELETE].T.tolist())}

    declined = np.flatnonzero(kinds[:cut] == DECLINED)
    generic, stop_at, later_error = transcode(plans.decoder, [messages[j] for j in declined])
    if stop_at is not None:  # the registry was needed for a record the readers declined
        cut, error = int(declined[stop_at]), later_error
        declined, generic = declined[:stop_at], generic[:stop_at]
        events = {j: e for j, e in events.items() if j < cut}
    out = messages[:cut]
    for j, msg in zip(declined.tolist(), generic):
        out[j] = msg
    if len(generic):  # the generic path's inserts into the same columns, by the JSON scan
        again = scan_batch(generic, dim=dim, max_bytes=max_bytes, features=features)
        accepted[declined] = again.accepted
        X[declined], y[declined], keys[declined] = again.X, again.y, again.keys
    scan = BatchScan(accepted[:cut], X[:cut], y[:cut], keys[:cut], kafka_stamps(out))
    return FramedBatch(out, scan, events), (None if cut == n
                                            else cut), (None if cut == n else error)


def _read(plans, vbuf, voff, klen, dim, max_bytes, X, y, spans, kinds):
    """Run each planned schema's reader; ``(stop, error)`` where the registry could not be asked."""
    ids = schema_ids(vbuf, voff)
    distinct, first = np.unique(ids, return_index=True)
    order = np.argsort(first)
    json_schema = plans.decoder.format == "json-schema"
    if json_schema:  # one parse for every schema id: what the schema asks is checked after
        scanned = np.zeros(len(ids), np.bool_)
        parse_kernel(vbuf, voff, klen, dim, max_bytes, X, y, spans, scanned, FRAMING, *NO_CLASSES)
    slots = np.full(len(ids), -1, np.int64)
    for slot, k in enumerate(order.tolist()):
        schema_id = int(distinct[k])
        if schema_id < 0:
            continue
        try:
            plan = plans.plan(schema_id)
        except RegistryUnavailable as exc:
            return int(first[k]), exc
        if plan is None or not LITTLE_ENDIAN and not json_schema:
            continue
        mine = ids == schema_id
        if isinstance(plan, JsonSchemaPlan):
            rows = np.flatnonzero(mine & scanned)
            kinds[rows] = np.where(plan.valid(X[rows], y[rows], spans[rows, 1] - spans[rows, 0]),
                                   INSERT, DECLINED)
            continue
        slots[mine] = slot
        if isinstance(plan, AvroPlan):
            avro_kernel(vbuf, voff, klen, slots, slot, plan.table, plan.named, dim, max_bytes, X, y,
                        spans, kinds)
        elif isinstance(plan, ProtobufPlan):
            protobuf_kernel(vbuf, voff, klen, slots, slot, plan.table, plan.defaults,
                            plan.op_default, dim,
                            max_bytes, X, y, spans, kinds)
    return None, None


def warm_up_reader(fmt: str) -> None:
    """Compile (or load from the numba cache) the binary reader of ``fmt`` on the event schema."""
    from ...formats.avro_plan import avro_plan
    from ...formats.events import EVENT_AVRO_SCHEMA
    from ...formats.mapping import FieldMapping
    from ...formats.protobuf import event_class
    from ...formats.protobuf_plan import protobuf_plan

    one = np.zeros(1, np.int64)
    args = (np.zeros(8, np.uint8), np.array([0, 8], np.int64), one + 1, one, 0)
    out = (np.zeros((1, 1)), np.zeros(1), np.zeros((1, 2), np.int64), np.zeros(1, np.int8))
    if fmt == "avro":
        table, _ = avro_plan(EVENT_AVRO_SCHEMA, FieldMapping(complete=True), dim=1)
        avro_kernel(*args, table, False, 1, 64, *out)
    else:
        table, defaults, op_default, _ = protobuf_plan(
            event_class().DESCRIPTOR, FieldMapping(complete=True), dim=1)
        protobuf_kernel(*args, table, defaults, op_default, 1, 64, *out)
