"""A feature spec as flat arrays for the compiled JSON reader
(worker/stream/input/named_kernel.py).

:func:`spec_tables` lays the spec out as the kernel reads it: the field names' bytes, one integer
row and one float row per field, the vocabularies' bytes and an open-addressing table per
categorical field (keyed by :func:`~.transform.category_hash`, probed linearly, the bytes compared
on a hit). The arithmetic is transform.py's; these are only its constants.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .spec import FeatureSpec
from .transform import category_hash

__all__ = ["KIND_CODES", "SpecTables", "joined_text", "spec_tables"]

#: Kernel codes of the field kinds (numeric splits by where it clips).
NUMERIC_RANGE, NUMERIC_SCALE, BOOLEAN, CATEGORICAL, HASHED = range(5)
KIND_CODES = ("numeric-range", "numeric-scale", "boolean", "categorical", "hashed")
#: Columns of ``ints``: kind, first slot, width, optional, indicator, the fill's slot offset
#: (categorical, hashed), the vocabulary table's start and size (categorical) or buckets (hashed),
#: the field's first vocabulary entry, the fill's 64-bit hash (hashed; its bits as int64).
(I_KIND, I_SLOT, I_WIDTH, I_OPTIONAL, I_INDICATOR, I_FILL_SLOT, I_TABLE, I_TABLE_SIZE,
 I_VOCAB, I_FILL_HASH) = range(10)
#: Derived blocks (derived.py), one row of ``blocks`` each: kind, first slot, width (bins: the
#: edges; cross: buckets; fourier: components), where its fields start in ``block_fields`` and how
#: many, where its numbers start in ``block_data`` (bins: the edges; fourier: w field by field,
#: then b), the encoding (bins: 1 cumulative); ``block_floats``: the weight, and the step
#: (cumulative bins: weight / sqrt(edges)) or scale (fourier: weight sqrt(2 / components)).
BINS, CROSS, FOURIER = range(3)
B_KIND, B_SLOT, B_WIDTH, B_FIELDS, B_NFIELDS, B_DATA, B_ENCODING = range(7)
#: Columns of ``floats``: low, high, center, scale, weight, the fill (numeric value, boolean 0/1,
#: hashed sign).
F_LOW, F_HIGH, F_CENTER, F_SCALE, F_WEIGHT, F_FILL = range(6)


@dataclass(frozen=True)
class SpecTables:
    names: np.ndarray  # uint8: the field names' UTF-8 bytes, one after another
    name_offsets: np.ndarray  # int64 (fields + 1)
    ints: np.ndarray  # int64 (fields, 9)
    floats: np.ndarray  # float64 (fields, 6)
    # int64: vocabulary entry index or -1, every categorical field's table in turn
    table: np.ndarray
    vocab: np.ndarray  # uint8: every vocabulary value's bytes
    vocab_offsets: np.ndarray  # int64 (entries + 1)
    intercept: float
    bound: float  # inf: none declared
    dim: int
    blocks: np.ndarray  # int64 (blocks, 7): the derived blocks (B_* columns); (0, 7) for none
    block_fields: np.ndarray  # int64: each block's field indices, block after block
    # int64, beside block_fields: a numeric field's bins block (a cross reads its bin), else -1
    block_bins: np.ndarray
    block_data: np.ndarray  # float64: the bins' edges, the Fourier maps' w and b
    block_floats: np.ndarray  # float64 (blocks, 2): weight, and step or scale
    row_cap: int  # the most non-zeros a row can have (a sparse reader's room per row)


def joined_text(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    raw = [t.encode("utf-8", "surrogatepass") for t in texts]
    offsets = np.zeros(len(raw) + 1, np.int64)
    np.cumsum([len(b) for b in raw], out=offsets[1:])
    return np.frombuffer(b"".join(raw), np.uint8).copy(), offsets


def spec_tables(spec: FeatureSpec) -> SpecTables:
    """The kernel's arrays of ``spec``."""
    names, name_offsets = joined_text([f.name for f in spec.fields])
    ints = np.zeros((len(spec.fields), 10), np.int64)
    floats = np.zeros((len(spec.fields), 6), np.float64)
    tables: list[int] = []
    vocab: list[str] = []
    for k, f in enumerate(spec.fields):
        kind = {"numeric": NUMERIC_RANGE if f.scale_from_range else NUMERIC_SCALE,
                "boolean": BOOLEAN,
                "categorical": CATEGORICAL, "hashed": HASHED}[f.kind]
        ints[k, [I_KIND, I_SLOT, I_WIDTH, I_OPTIONAL,
                 I_INDICATOR]] = kind, f.slot, f.width, f.optional, f.indicator
        floats[k, [F_LOW, F_HIGH, F_CENTER, F_SCALE,
                   F_WEIGHT]] = f.low, f.high, f.center, f.scale, f.weight
        if f.optional and f.kind in ("numeric", "boolean"):
            floats[k, F_FILL] = float(f.fill)
        if kind == CATEGORICAL:
            size = 1 << max(2, math.ceil(math.log2(2 * len(f.vocabulary))))
            slots = [-1] * size
            for i, value in enumerate(f.vocabulary):
                at = category_hash(value.encode("utf-8", "surrogatepass")) & (size - 1)
                while slots[at] != -1:
                    at = (at + 1) & (size - 1)
                slots[at] = len(vocab) + i
            ints[k, [I_TABLE, I_TABLE_SIZE, I_VOCAB]] = len(tables), size, len(vocab)
            tables += slots
            vocab += f.vocabulary
            if f.optional:
                ints[k, I_FILL_SLOT] = f.index.get(f.fill, len(f.vocabulary))
        elif kind == HASHED:
            ints[k, I_TABLE_SIZE] = f.buckets
            if f.optional:
                h = category_hash(f.fill.encode("utf-8", "surrogatepass"))
                ints[k, I_FILL_SLOT] = h % f.buckets
                ints[k, I_FILL_HASH] = h - (1 << 64) if h >> 63 else h
                floats[k, F_FILL] = 1.0 if h >> 63 == 0 else -1.0
    vocab_bytes, vocab_offsets = joined_text(vocab)
    return SpecTables(names, name_offsets, ints, floats, np.array(tables or [-1], np.int64),
                      vocab_bytes,
                      vocab_offsets, spec.intercept, math.inf if spec.bound is None else spec.bound,
                      spec.dim, *_derived_tables(spec), _row_cap(spec))


def _row_cap(spec: FeatureSpec) -> int:
    """The most non-zeros a row can have: the intercept and at most two a field (its coordinate,
    its missing indicator), never more than the fields' coordinates (the derived blocks' come
    after them), and each block's most (one-hot bins and crosses: one; cumulative bins: every
    edge; Fourier: every component)."""
    field_dim = spec.dim - sum(d.width for d in spec.derived)
    cap = min(field_dim, 1 + 2 * len(spec.fields))
    for d in spec.derived:
        cap += d.width if d.kind == "fourier" or (d.kind == "bins"
                                                 and d.encoding == "cumulative") else 1
    return cap


def _derived_tables(spec: FeatureSpec) -> tuple:
    """``blocks``, ``block_fields``, ``block_bins``, ``block_data``, ``block_floats`` of the
    spec's derived blocks: their declared constants, the map's draws as derived.py made them."""
    index = {f.name: k for k, f in enumerate(spec.fields)}
    order = {id(d): j for j, d in enumerate(spec.derived)}
    blocks = np.zeros((len(spec.derived), 7), np.int64)
    block_floats = np.zeros((len(spec.derived), 2), np.float64)
    fields: list[int] = []
    bins: list[int] = []
    data: list[float] = []
    for j, d in enumerate(spec.derived):
        names = (d.field,) if d.kind == "bins" else d.fields
        blocks[j] = (_KINDS[d.kind], d.slot, d.width if d.kind != "bins" else len(d.edges),
                     len(fields), len(names), len(data),
                     d.kind == "bins" and d.encoding == "cumulative")
        fields += [index[n] for n in names]
        if d.kind == "cross":
            bins += [-1 if b is None else order[id(b)] for b in d.bins]
        else:
            bins += [-1] * len(names)
        if d.kind == "bins":
            data += d.edges
            step = d.weight / math.sqrt(len(d.edges)) if d.encoding == "cumulative" else 0.0
            block_floats[j] = d.weight, step
        elif d.kind == "fourier":
            data += [wj[i] for i in range(len(d.fields)) for wj in d.w] + list(d.b)  # by field
            block_floats[j] = d.weight, d.weight * math.sqrt(2.0 / d.components)
        else:
            block_floats[j] = d.weight, 0.0
    return (blocks, np.array(fields, np.int64), np.array(bins, np.int64),
            np.array(data, np.float64), block_floats)


_KINDS = {"bins": BINS, "cross": CROSS, "fourier": FOURIER}
