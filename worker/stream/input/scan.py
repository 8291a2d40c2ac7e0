"""Compiled fast path of the decoder: a whole fetched batch of common inserts in one call.

:func:`scan_batch` joins the batch's keys and values into two byte buffers and runs one numba
kernel over them. For each record the kernel either *accepts* it, writing its features, label and
record key (``record_key`` of its id, hashed from the value's bytes) straight into arrays, or
*declines* it. A declined record goes to the Python decoder (decode.py), which makes the decision
and names the reason; the kernel never rejects anything itself.

What is accepted is a strict subset of what :func:`decode.decode_event` accepts as an insert, with
the very same values:

- the value is ASCII JSON (no escapes, no control characters): ``{"op": "insert", "id": ...,
  "x": [...], "y": ..., "ts": ...}`` with ``ts`` optional, fields in any order, each once,
  JSON whitespace anywhere; ``id`` has 1 to 256 bytes; the key is not empty (it is the
  partitioning key and need not equal ``id``, docs/worker.md 3.1); key + value fit
  ``max_bytes``; ``x`` has exactly ``dim`` numbers (under OLU_SPARSE_INPUT, or is the sparse
  form ``{"indices": [...], "values": [...]}``, sparse_x_kernel.py); ``ts`` is a plain
  non-negative integer;
- every number is one insert_kernel.read_number is certain of: the double orjson reads, bit for bit
  (when it is not certain, the record is declined instead of approximated).

Anything else (a delete, a tombstone, unicode or escapes in the id, a dead letter, ...) is
declined, so correctness only needs "accepted => decode_event accepts it with these values"; a
differential test (tests/stream/test_scan.py) checks that on generated and adversarial records.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from itertools import chain

import numpy as np

from ...compiled import blake2b, jit
from ...features.spec import FeatureSpec
from ...features.tables import SpecTables, joined_text, spec_tables
from ...olu import SparseRows
from .derived_kernel import derive_kernel, sparse_rows_kernel
from .insert_kernel import parse_kernel, parse_sparse_kernel
from .named_kernel import parse_named_entries_kernel, parse_named_kernel

__all__ = ["NO_CLASSES", "BatchScan", "class_tables", "compiled_decoder", "joined",
           "kafka_stamps", "key_lengths", "python_decoder", "scan_batch"]


@dataclass(slots=True)
class BatchScan:
    """Per record of a batch: accepted by the fast path or not; arrays hold the accepted rows."""

    accepted: np.ndarray  # (n,) bool
    X: np.ndarray | SparseRows  # (n, dim) float64, or n sparse rows (a declined one empty)
    y: np.ndarray  # (n,) float64, or the class names (object) of a softmax over named classes
    keys: np.ndarray  # (n,) uint64, record_key of the id
    stamps: np.ndarray  # (n, 2) int64: the Kafka timestamp (type, ms) of each message
    # (n,) int64 under a feature spec: the fields clipped, a bit each
    clipped: np.ndarray | None = None

    def stretches(self):
        """(start, stop, accepted) for the maximal stretches of equal ``accepted``, in order."""
        n = len(self.accepted)
        if n == 0:
            return []
        cuts = [0, *(np.flatnonzero(self.accepted[1:] != self.accepted[:-1]) + 1).tolist(), n]
        first = bool(self.accepted[0])
        return [(cuts[k], cuts[k + 1], first ^ bool(k & 1)) for k in range(len(cuts) - 1)]

    def rows(self, start: int, stop: int) -> BatchScan:
        """Records ``start:stop`` (views)."""
        return BatchScan(self.accepted[start:stop], self.X[start:stop], self.y[start:stop],
                         self.keys[start:stop],
                         self.stamps[start:stop], None if self.clipped is None
                         else self.clipped[start:stop])

    def newest_ts(self, start: int, stop: int) -> int:
        """The largest available Kafka timestamp among records ``start:stop`` (0: none)."""
        kinds, ts = self.stamps[start:stop, 0], self.stamps[start:stop, 1]
        return int(ts[kinds != 0].max(initial=0))

    def newest_ts_so_far(self) -> np.ndarray:
        """:meth:`newest_ts` ``(0, j + 1)`` for every record j, in
        one pass (a batch split by deletes)."""
        kinds, ts = self.stamps[:, 0], self.stamps[:, 1]
        return np.maximum.accumulate(np.where(kinds != 0, np.maximum(ts, 0), 0))


def key_lengths(keys: list) -> np.ndarray:
    """The length of each key (a None or non-bytes key counts as empty, which the kernel never
    accepts: unkeyed records go to the Python decoder)."""
    try:
        return np.fromiter(map(len, keys), np.int64, len(keys))
    except TypeError:
        return np.fromiter((len(k) if isinstance(k, (bytes, bytearray)) else 0 for k in keys),
                           np.int64, len(keys))


def joined(parts: list) -> tuple[np.ndarray, np.ndarray]:
    """One buffer of all parts and the offsets of each (a None or non-bytes part counts as empty,
    which the kernel never accepts: tombstones go to the Python decoder)."""
    try:
        raw = b"".join(parts)
    except TypeError:
        parts = [p if isinstance(p, (bytes, bytearray)) else b"" for p in parts]
        raw = b"".join(parts)
    offsets = np.zeros(len(parts) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, parts), np.int64, len(parts)), out=offsets[1:])
    return np.frombuffer(raw, np.uint8), offsets


def scan_batch(messages: list, *, dim: int, max_bytes: int,
               features: FeatureSpec | None = None, keys: list | None = None,
               sparse: bool = False, classes: tuple | None = None) -> BatchScan:
    """Run the compiled fast path over ``messages`` (see the module doc); ``keys``: their keys,
    when the caller read them already; ``sparse``: the rows as :class:`SparseRows`
    (OLU_SPARSE_INPUT: a sparse ``x`` object's entries as given, an array's or a spec's vector's
    non-zeros, as decode.py's ``parse_sparse`` and ``from_dense`` give them); ``classes``: a
    softmax's named classes, each ``y`` one of them (``BatchScan.y`` then holds the names).

    >>> from confluent_kafka import Message
    >>> msgs = [Message(key=b"r-1", value=b'{"op":"insert","id":"r-1","x":[0.5,1],"y":1}'),
    ...         Message(key=b"r-1", value=None)]
    >>> scan = scan_batch(msgs, dim=2, max_bytes=4096)
    >>> scan.accepted.tolist(), scan.X[0].tolist(), float(scan.y[0]), scan.stretches()
    ([True, False], [0.5, 1.0], 1.0, [(0, 1, True), (1, 2, False)])
    """
    n = len(messages)
    # comprehensions, not map(methodcaller(...)): ~15 against ~50 ns per message
    vbuf, voff = joined([m.value() for m in messages])
    klen = key_lengths(keys if keys is not None else [m.key() for m in messages])
    y = np.empty(n, np.float64)
    keys = np.zeros(n, np.uint64)
    spans = np.empty((n, 2), np.int64)  # where each accepted record's id lies in vbuf
    accepted = np.zeros(n, np.bool_)
    clipped = None
    names = NO_CLASSES if classes is None else class_tables(classes)
    if features is None and sparse:  # x as {"indices", "values"}, or an array's non-zeros
        room = len(vbuf) // 2 + 2  # + 1: the kernel's branch-free writes go one past a row
        indptr = np.empty(n + 1, np.int64)
        indices, values = np.empty(room, np.int64), np.empty(room)
        parse_sparse_kernel(vbuf, voff, klen, dim, max_bytes, y, spans, accepted, indptr,
                            indices, values, *names)
        used = int(indptr[-1])
        X = SparseRows(indptr, indices[:used], values[:used])
    elif features is None:
        X = np.empty((n, dim), np.float64)
        parse_kernel(vbuf, voff, klen, dim, max_bytes, X, y, spans, accepted, 0, *names)
    else:  # named fields through the feature spec (worker/features)
        clipped = np.zeros(n, np.int64)
        X = _named_rows(features, vbuf, voff, klen, max_bytes, y, spans, clipped, accepted, sparse,
                        names)
    blake2b.blake2b64_spans(vbuf, spans, accepted, keys)
    if classes is not None:  # each accepted y is its class's position
        y = _NAMES[classes][np.where(accepted, y, 0.0).astype(np.int64)]
    return BatchScan(accepted, X, y, keys, kafka_stamps(messages), clipped)


def _named_rows(features: FeatureSpec, vbuf, voff, klen, max_bytes: int, y, spans, clipped,
                accepted, sparse: bool, names: tuple):
    """The rows of named-field inserts: the fields' coordinates, then the derived blocks' (dense:
    the whole vector a row; sparse: :func:`_sparse_named_rows`)."""
    t, n = tables_of(features), len(accepted)
    derived = len(t.blocks) > 0
    # what derived blocks read of each field (the kernel writes every field's, read or not)
    values = np.empty((n, len(t.ints)), np.float64)
    tokens = np.empty((n, len(t.ints)), np.uint64)
    tables = (t.ints, t.floats, t.blocks, t.block_fields, t.block_bins, t.block_data,
              t.block_floats, t.bound)
    if sparse:
        return _sparse_named_rows(t, tables, vbuf, voff, klen, max_bytes, y, spans, clipped,
                                  accepted, values, tokens, names)
    X = np.empty((n, t.dim), np.float64)
    parse_named_kernel(vbuf, voff, klen, max_bytes, t.names, t.name_offsets, t.ints, t.floats,
                       t.table, t.vocab, t.vocab_offsets, t.intercept,
                       np.inf if derived else t.bound, X, y, spans, clipped, accepted, values,
                       tokens, *names)
    if derived:  # the derived coordinates, then the bound over the whole vector
        derive_kernel(X, values, tokens, accepted, *tables, t.row_cap)
    return X


def _sparse_named_rows(t: SpecTables, tables: tuple, vbuf, voff, klen, max_bytes: int, y, spans,
                       clipped, accepted, values, tokens, names: tuple) -> SparseRows:
    """CSR rows of named-field inserts: each record's field coordinates as entries (O(fields) a
    record, however wide a hashed field), then every non-zero in coordinate order, derived ones
    included (derived_kernel.py)."""
    n, room = len(accepted), 1 + 2 * len(t.ints)  # the intercept; a field and its indicator
    counts = np.empty(n, np.int64)
    entry_index, entry_value = np.empty(n * room, np.int64), np.empty(n * room)
    parse_named_entries_kernel(vbuf, voff, klen, max_bytes, t.names, t.name_offsets, t.ints,
                               t.floats, t.table, t.vocab, t.vocab_offsets, t.intercept, y, spans,
                               clipped, accepted, values, tokens, *names, room, counts,
                               entry_index, entry_value)
    indptr = np.empty(n + 1, np.int64)
    cap = n * t.row_cap + 1  # + 1: the kernel's branch-free writes go one past a row
    indices, nonzeros = np.empty(cap, np.int64), np.empty(cap)
    sparse_rows_kernel(room, counts, entry_index, entry_value, values, tokens, accepted, *tables,
                       indptr, indices, nonzeros)
    used = int(indptr[-1])
    return SparseRows(indptr, indices[:used], nonzeros[:used])


_TABLES: dict[str, SpecTables] = {}
#: the readers' class tables when ``y`` is a number (no named classes)
NO_CLASSES = (np.zeros(1, np.uint8), np.zeros(1, np.int64))
_CLASSES: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
_NAMES: dict[tuple, np.ndarray] = {}


def class_tables(classes: tuple) -> tuple[np.ndarray, np.ndarray]:
    """The readers' table of named classes: their UTF-8 bytes joined, and the offsets (built
    once per class tuple, with the object array of the names a scan's ``y`` is taken from)."""
    found = _CLASSES.get(classes)
    if found is None:
        found = _CLASSES[classes] = joined_text(list(classes))  # the spec tables' form
        _NAMES[classes] = np.array(classes, dtype=object)
    return found


def tables_of(features: FeatureSpec) -> SpecTables:
    """The compiled reader's tables of a spec (built once per spec digest)."""
    found = _TABLES.get(features.digest)
    if found is None:
        found = _TABLES[features.digest] = spec_tables(features)
    return found


def kafka_stamps(messages: list) -> np.ndarray:
    """(n, 2) int64: each message's Kafka timestamp (type, ms)."""
    n = len(messages)
    return np.fromiter(chain.from_iterable([m.timestamp() for m in messages]), np.int64,
                       2 * n).reshape(n, 2)


_python_only = False


def compiled_decoder() -> bool:
    """Use this fast path? Not under ``OLU_REFERENCE_KERNEL=1`` / ``jit.reference()``, nor
    inside :func:`python_decoder`: then every record goes through decode.py."""
    return not (_python_only or jit.FORCE_REFERENCE)


@contextlib.contextmanager
def python_decoder():
    """Within the block the runner decodes every record in Python (for tests)."""
    global _python_only
    saved, _python_only = _python_only, True
    try:
        yield
    finally:
        _python_only = saved


def warm_up(features: FeatureSpec | None = None, sparse: bool = False) -> None:
    """Compile (or load from the numba cache) the kernel with the production types; with a feature
    spec its named-field reader too (a registry format's: framed_scan.warm_up_reader), the
    sparse one under ``sparse``."""
    from confluent_kafka import Message

    scan_batch([Message(key=b"r", value=b'{"op":"insert","id":"r","x":[0.5],"y":1}')], dim=1,
               max_bytes=64, sparse=sparse)
    if features is not None:
        scan_batch([Message(key=b"r", value=b'{"op":"insert","id":"r","y":1}')], dim=features.dim,
                   max_bytes=64, features=features, sparse=sparse)
