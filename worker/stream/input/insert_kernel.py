"""The compiled parser of the common insert record: JSON bytes to features, label and acceptance.

Used by scan.py (see there for what is accepted and why a record is only ever accepted or
declined). Two parts:

**Numbers.** :func:`read_number` reads one number of the JSON grammar from a byte buffer and says
whether it is *certain* of its value, which is then the correctly rounded double: the value orjson
gives (and Python's ``float()`` of the text), so the compiled and the Python decoder agree bit for
bit. When it is not certain, the caller declines the record and orjson decides.

- Clinger's fast path first: a mantissa below 2**53 and a power of ten up to 22 are both exact
  doubles, so one IEEE multiplication or division rounds correctly.
- Otherwise Eisel-Lemire (Lemire, "Number parsing at a gigabyte per second", 2021), in the form of
  Go's ``strconv.eiselLemire64``: a 64x128-bit product with a truncated power of ten, giving up on
  the rare products it cannot settle (exact half-way cases among them).
- Eight fraction digits at a time where they are there (fast_float's SWAR), as digit-by-digit
  parsing is one long chain of dependent multiplications.
- Not certain, by design: more than 19 significant digits, results that would be subnormal or
  overflow, and integers (no fraction, no exponent) of 19 digits or more, which orjson reads as an
  int whose range depends on the sign. An integer is otherwise read like orjson's int followed by
  ``float()``: ``-0`` is +0.0.

**Records.** :func:`parse_kernel` walks the object of each record (fields in any order, each once,
JSON whitespace anywhere) and notes where its id lies in the value buffer (the caller hashes the id
from there: the Kafka key is the partitioning key and need not equal the id). :func:`parse_named_kernel`
does it for named fields under a feature spec, in worker/features/transform.py's arithmetic.

The helpers take raw pointers, not arrays: numba counts references to an array argument around every call of
a helper (the parser has many exits), and that cost more than the parsing.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba.cpython.unsafe.numbers import leading_zeros

from ...compiled.intrinsics import data_pointer, load8, mul64
from ...compiled.jit import jit
from .decode import MAX_ID_CHARS
from .pow10 import POW10_HI, POW10_LO, POW10_MAX, POW10_MIN

__all__ = ["POW10_HI", "POW10_LO", "parse_kernel", "parse_named_kernel", "read_number"]

# uint64 constants: numba would turn uint64-with-int64 arithmetic into float64
_U0, _U1, _U3, _U4, _U8, _U9, _U10, _U16, _U32, _U53, _U63 = (
    np.uint64(v) for v in (0, 1, 3, 4, 8, 9, 10, 16, 32, 53, 63))
_U10_8 = np.uint64(10**8)
# eight-digit SWAR constants (fast_float)
_HIGH_NIBBLES, _SIXES, _THREES, _ZEROS = (np.uint64(v) for v in (
    0xF0F0F0F0F0F0F0F0, 0x0606060606060606, 0x3333333333333333, 0x3030303030303030))
_BYTE_PAIRS, _MUL1, _MUL2 = (np.uint64(v) for v in (0x000000FF000000FF, 100 + (1000000 << 32), 1 + (10000 << 32)))
_LOW9 = np.uint64(0x1FF)
_EXACT_INT = np.uint64(1 << 53)
_EXACT_POW10 = np.array([10.0**k for k in range(23)])  # exact doubles
_POW2 = np.array([math.ldexp(1.0, e - 1075) for e in range(0x7FF)])  # 2**(biased exponent - 1075)
_MINUS, _PLUS, _DOT, _ZERO, _NINE, _E, _LOWER_E = 45, 43, 46, 48, 57, 69, 101

# Helpers: plain compiled functions on scalars and raw pointers (LLVM inlines them).
_helper = numba.njit(nogil=True)


@_helper
def _eight_digits(chunk):
    """Are all eight bytes of ``chunk`` ASCII digits? (SWAR, as in fast_float.)"""
    return (chunk & _HIGH_NIBBLES | ((chunk + _SIXES) & _HIGH_NIBBLES) >> _U4) == _THREES


@_helper
def _eight_digit_value(chunk):
    """The number written by eight ASCII digits, first digit in the lowest byte (fast_float's
    parse_eight_digits_unrolled: three multiplications instead of eight steps)."""
    chunk -= _ZEROS
    chunk = chunk * _U10 + (chunk >> _U8)
    return ((chunk & _BYTE_PAIRS) * _MUL1 + ((chunk >> _U16) & _BYTE_PAIRS) * _MUL2) >> _U32


@_helper
def _to_double(man, exp10, neg):
    """The double nearest to (-1)**neg * man * 10**exp10 (man: uint64 > 0), and whether it is
    certain ((0.0, False) also for results that would be subnormal or infinite)."""
    if man <= _EXACT_INT and -22 <= exp10 <= 22:
        # Clinger's fast path: both operands exact, so one IEEE operation rounds correctly.
        # (Eisel-Lemire cannot settle exactly representable results of negative powers, like 1.0.)
        value = float(man) * _EXACT_POW10[exp10] if exp10 >= 0 else float(man) / _EXACT_POW10[-exp10]
        return (-value if neg else value), True
    return _eisel_lemire(man, exp10, neg)


@_helper
def _eisel_lemire(man, exp10, neg):
    """:func:`_to_double` for any man and exp10 (Go's ``eiselLemire64``)."""
    if exp10 < POW10_MIN or exp10 > POW10_MAX:
        return 0.0, False
    clz = np.int64(leading_zeros(man))
    man <<= np.uint64(clz)
    exp2 = ((217706 * exp10) >> 16) + 64 + 1023 - clz  # floor(log2(10**exp10)) + bias + 64, as in Go
    i = exp10 - POW10_MIN
    x_hi, x_lo = mul64(man, POW10_HI[i])
    if x_hi & _LOW9 == _LOW9 and x_lo + man < man:  # the truncated power's error may reach x_hi
        y_hi, y_lo = mul64(man, POW10_LO[i])
        merged_hi, merged_lo = x_hi, x_lo + y_hi
        if merged_lo < x_lo:
            merged_hi += _U1
        if merged_hi & _LOW9 == _LOW9 and merged_lo + _U1 == _U0 and y_lo + man < man:
            return 0.0, False
        x_hi, x_lo = merged_hi, merged_lo
    msb = x_hi >> _U63
    mantissa = x_hi >> (msb + _U9)
    exp2 -= 1 - np.int64(msb)
    if x_lo == _U0 and x_hi & _LOW9 == _U0 and mantissa & _U3 == _U1:  # exactly half-way: undecided
        return 0.0, False
    mantissa += mantissa & _U1
    mantissa >>= _U1
    if mantissa >> _U53 > _U0:
        mantissa >>= _U1
        exp2 += 1
    if exp2 <= 0 or exp2 >= 0x7FF:
        return 0.0, False
    value = float(mantissa) * _POW2[exp2]  # exact: mantissa < 2**53 and the result is normal
    return (-value if neg else value), True


@_helper
def _is_digit(c):
    return _ZERO <= c <= _NINE


@_helper
def read_number(buf, p, end):
    """A JSON number at ``buf[p:end]`` (a pointer to bytes): (position after it, its double,
    certain). Not certain: not a JSON number there, or a value it will not vouch for (module doc)."""
    neg = p < end and buf[p] == _MINUS
    if neg:
        p += 1
    if p >= end or not _is_digit(buf[p]):
        return p, 0.0, False
    man, digits, exp10 = _U0, 0, 0
    if buf[p] == _ZERO:
        p += 1
        if p < end and _is_digit(buf[p]):  # a leading zero
            return p, 0.0, False
    else:
        while p < end and _is_digit(buf[p]):
            if digits == 19:
                return p, 0.0, False
            man = man * _U10 + np.uint64(buf[p] - _ZERO)
            digits += 1
            p += 1
    integer = True
    if p < end and buf[p] == _DOT:
        integer = False
        p += 1
        first = p
        while p < end and _is_digit(buf[p]):
            if man != _U0 and digits <= 11 and p + 8 <= end:  # eight digits at once, if they are
                chunk = load8(buf, p)
                if _eight_digits(chunk):
                    man = man * _U10_8 + _eight_digit_value(chunk)
                    digits += 8
                    exp10 -= 8
                    p += 8
                    continue
            if man != _U0 or buf[p] != _ZERO:  # leading zeros of a fraction are not significant
                if digits == 19:
                    return p, 0.0, False
                man = man * _U10 + np.uint64(buf[p] - _ZERO)
                digits += 1
            exp10 -= 1
            p += 1
        if p == first:
            return p, 0.0, False
    if p < end and (buf[p] == _LOWER_E or buf[p] == _E):
        integer = False
        p += 1
        exp_neg = p < end and buf[p] == _MINUS
        if p < end and (buf[p] == _MINUS or buf[p] == _PLUS):
            p += 1
        first, e = p, 0
        while p < end and _is_digit(buf[p]):
            if e < 100_000:
                e = e * 10 + (buf[p] - _ZERO)
            p += 1
        if p == first:
            return p, 0.0, False
        exp10 += -e if exp_neg else e
    if integer:
        if digits > 18:  # beyond int64 orjson's reading differs by sign; let it decide
            return p, 0.0, False
        if man == _U0:
            return p, 0.0, True  # float(int("-0")) is +0.0
    elif man == _U0:
        return p, (-0.0 if neg else 0.0), True
    value, ok = _to_double(man, exp10, neg)
    return p, value, ok


# bytes of the grammar
_QUOTE, _BACKSLASH, _COMMA, _COLON = 34, 92, 44, 58
_LBRACE, _RBRACE, _LBRACKET, _RBRACKET = 123, 125, 91, 93

# fields, as bits of a mask
_OP, _ID, _X, _Y, _TS = 1, 2, 4, 8, 16
_REQUIRED = _OP | _ID | _X | _Y


@_helper
def _skip_ws(buf, p, end):
    while p < end and (buf[p] == 32 or buf[p] == 10 or buf[p] == 13 or buf[p] == 9):
        p += 1
    return p


@_helper
def _separator(buf, p, end):
    """The next byte after whitespace and the position after it; 0 at the end of the record."""
    p = _skip_ws(buf, p, end)
    if p >= end:
        return end, 0
    return p + 1, buf[p]


@_helper
def _string_end(buf, p, end):
    """Index of the closing quote of a plain ASCII string starting at ``buf[p]``, else -1."""
    while p < end:
        c = buf[p]
        if c == _QUOTE:
            return p
        if c == _BACKSLASH or c < 32 or c >= 128:
            return -1
        p += 1
    return -1


@_helper
def _field(buf, p, stop):
    """The bit of the field name ``buf[p:stop]``, 0 for any other name."""
    size = stop - p
    if size == 1:
        return _X if buf[p] == 120 else (_Y if buf[p] == 121 else 0)
    if size == 2:
        a, b = buf[p], buf[p + 1]
        if a == 111 and b == 112:
            return _OP
        if a == 105 and b == 100:
            return _ID
        if a == 116 and b == 115:
            return _TS
    return 0


@_helper
def _is_insert(buf, p, stop):
    word = (105, 110, 115, 101, 114, 116)  # "insert"
    if stop - p != 6:
        return False
    for k in range(6):
        if buf[p + k] != word[k]:
            return False
    return True


@_helper
def _op_id_ts(buf, p, end, field, spans, r):
    """Past the value of ``op`` (must be "insert"), ``id`` (its place into ``spans``) or ``ts`` (a
    plain non-negative integer of at most 18 digits); -1 when it is not one the fast path takes."""
    if field == _TS:
        first = p
        while p < end and _is_digit(buf[p]):
            p += 1
        return -1 if p == first or p - first > 18 or (buf[first] == _ZERO and p - first > 1) else p
    if buf[p] != _QUOTE:
        return -1
    stop = _string_end(buf, p + 1, end)
    if stop < 0 or (field == _OP and not _is_insert(buf, p + 1, stop)):
        return -1
    if field == _ID:
        if stop == p + 1 or stop - (p + 1) > MAX_ID_CHARS:  # ASCII: bytes are characters
            return -1
        spans[2 * r], spans[2 * r + 1] = p + 1, stop
    return stop + 1


@_helper
def _insert(buf, p, end, klen, dim, max_bytes, X, y_out, spans, r):
    """Accept record r (value ``buf[p:end]``, a key of ``klen`` bytes) as a common insert? Its id is
    then ``buf[spans[2r]:spans[2r + 1]]``."""
    if klen == 0 or klen + (end - p) > max_bytes:  # no key (or an empty one): decode.py names it
        return False
    p = _skip_ws(buf, p, end)
    if p >= end or buf[p] != _LBRACE:
        return False
    p += 1
    seen = 0
    while True:
        p = _skip_ws(buf, p, end)
        if p >= end or buf[p] != _QUOTE:
            return False
        stop = _string_end(buf, p + 1, end)
        if stop < 0:
            return False
        field = _field(buf, p + 1, stop)
        if field == 0 or seen & field:
            return False
        seen |= field
        p = _skip_ws(buf, stop + 1, end)
        if p >= end or buf[p] != _COLON:
            return False
        p = _skip_ws(buf, p + 1, end)
        if p >= end:
            return False
        if field == _OP or field == _ID or field == _TS:
            p = _op_id_ts(buf, p, end, field, spans, r)
            if p < 0:
                return False
        elif field == _X:
            if buf[p] != _LBRACKET:
                return False
            p += 1
            count = 0
            while True:
                p = _skip_ws(buf, p, end)
                p, value, ok = read_number(buf, p, end)
                if not ok:
                    return False
                if count < dim:
                    X[r * dim + count] = value
                count += 1
                p, c = _separator(buf, p, end)
                if c == _RBRACKET:
                    break
                if c != _COMMA:
                    return False
            if count != dim:
                return False
        else:
            p, value, ok = read_number(buf, p, end)
            if not ok:
                return False
            y_out[r] = value
        p, c = _separator(buf, p, end)
        if c == _RBRACE:
            break
        if c != _COMMA:
            return False
    return seen & _REQUIRED == _REQUIRED and _skip_ws(buf, p, end) == end


# ------------------------------------------------------- named fields (worker/features: the spec)
_K_RANGE, _K_SCALE, _K_BOOL, _K_CAT = 0, 1, 2, 3  # worker/features/tables.py's kind codes (4: hashed)
_FNV_OFFSET, _FNV_PRIME = np.uint64(0xCBF29CE484222325), np.uint64(0x100000001B3)
_MIX1, _MIX2, _U27, _U30, _U31 = (np.uint64(v) for v in (0xBF58476D1CE4E5B9, 0x94D049BB133111EB, 27, 30, 31))
_NULL, _TRUE, _FALSE = (110, 117, 108, 108), (116, 114, 117, 101), (102, 97, 108, 115, 101)


@_helper
def _category_hash(buf, p, stop):
    """worker.features.transform.category_hash of ``buf[p:stop]``."""
    h = _FNV_OFFSET
    for i in range(p, stop):
        h = (h ^ np.uint64(buf[i])) * _FNV_PRIME
    h = (h ^ (h >> _U30)) * _MIX1
    h = (h ^ (h >> _U27)) * _MIX2
    return h ^ (h >> _U31)


@_helper
def _same(buf, p, size, other, start):  # buf[p:p + size] == other[start:start + size]
    for i in range(size):
        if buf[p + i] != other[start + i]:
            return False
    return True


@_helper
def _literal(buf, p, end, word):
    """The position after ``word`` at ``p``, or -1."""
    for i in range(len(word)):
        if p + i >= end or buf[p + i] != word[i]:
            return -1
    return p + len(word)


@_helper
def _spec_field(buf, p, stop, names, offsets):
    """The spec field named ``buf[p:stop]``, or -1."""
    for k in range(offsets.shape[0] - 1):
        if offsets[k + 1] - offsets[k] == stop - p and _same(buf, p, stop - p, names, offsets[k]):
            return k
    return -1


@_helper
def _vocabulary_slot(buf, p, stop, row, table, vocab, vocab_offsets):
    """The slot of the category ``buf[p:stop]`` in its field (the "other" slot when not listed)."""
    size, first, count = row[7], row[8], row[2] - 1 - row[4]
    at = np.int64(_category_hash(buf, p, stop) & np.uint64(size - 1))
    while True:
        g = table[row[6] + at]
        if g < 0:
            return count
        a = vocab_offsets[g]
        if vocab_offsets[g + 1] - a == stop - p and _same(buf, p, stop - p, vocab, a):
            return g - first
        at = (at + 1) & (size - 1)


@_helper
def _scaled(v, kind, par):
    """A numeric field's coordinate (before the weight) and whether its value was clipped."""
    clipped = False
    if kind == _K_RANGE:
        if v < par[0]:
            v, clipped = par[0], True
        elif v > par[1]:
            v, clipped = par[1], True
        return (v - par[2]) / par[3], clipped
    z = (v - par[2]) / par[3]
    if z < par[0]:
        z, clipped = par[0], True
    elif z > par[1]:
        z, clipped = par[1], True
    return z, clipped


@_helper
def _named_value(buf, p, end, row, par, table, vocab, vocab_offsets, x, base):
    """Parse the value of a spec field at ``p`` into its coordinates: (position after it, 1 when set,
    0 when null, -1 when not certain; clipped)."""
    kind, slot = row[0], base + row[1]
    if buf[p] == 110:  # null: missing
        q = _literal(buf, p, end, _NULL)
        return q, (0 if q >= 0 else -1), False
    if kind <= _K_SCALE:
        q, value, ok = read_number(buf, p, end)
        if not ok:
            return q, -1, False
        z, clipped = _scaled(value, kind, par)
        x[slot] = z * par[4]
        return q, 1, clipped
    if kind == _K_BOOL:
        q = _literal(buf, p, end, _TRUE)
        if q >= 0:
            x[slot] = par[4]
            return q, 1, False
        q = _literal(buf, p, end, _FALSE)
        return q, (1 if q >= 0 else -1), False
    if buf[p] != _QUOTE:
        return p, -1, False
    stop = _string_end(buf, p + 1, end)
    if stop < 0:
        return p, -1, False
    if kind == _K_CAT:
        x[slot + _vocabulary_slot(buf, p + 1, stop, row, table, vocab, vocab_offsets)] = par[4]
    else:
        h = _category_hash(buf, p + 1, stop)
        x[slot + np.int64(h % np.uint64(row[7]))] = par[4] if h >> _U63 == _U0 else -par[4]
    return stop + 1, 1, False


@_helper
def _skip_value(buf, p, end):
    """Past a value of a field the spec does not name (flat values only), or -1."""
    c = buf[p]
    if c == _QUOTE:
        stop = _string_end(buf, p + 1, end)
        return stop + 1 if stop >= 0 else -1
    if c == 110:
        return _literal(buf, p, end, _NULL)
    if c == 116:
        return _literal(buf, p, end, _TRUE)
    if c == 102:
        return _literal(buf, p, end, _FALSE)
    q, _, ok = read_number(buf, p, end)
    return q if ok else -1


@_helper
def _named_insert(buf, p, end, klen, max_bytes, names, name_offsets, ints, floats, table, vocab, vocab_offsets,
                  intercept, bound, dim, x, y_out, spans, r):
    """As :func:`_insert` for an insert whose features are the spec's named fields: (accepted, the
    mask of the fields clipped). Fields the spec does not name are skipped; ``x`` is declined."""
    if klen == 0 or klen + (end - p) > max_bytes:
        return False, 0
    base = r * dim
    for i in range(dim):
        x[base + i] = 0.0
    if intercept != 0.0:
        x[base] = intercept
    p = _skip_ws(buf, p, end)
    if p >= end or buf[p] != _LBRACE:
        return False, 0
    p += 1
    seen, present, valued, clipped = 0, np.int64(0), np.int64(0), np.int64(0)
    while True:
        p = _skip_ws(buf, p, end)
        if p >= end or buf[p] != _QUOTE:
            return False, 0
        stop = _string_end(buf, p + 1, end)
        if stop < 0:
            return False, 0
        field = _field(buf, p + 1, stop)
        k = -1 if field else _spec_field(buf, p + 1, stop, names, name_offsets)
        p = _skip_ws(buf, stop + 1, end)
        if p >= end or buf[p] != _COLON:
            return False, 0
        p = _skip_ws(buf, p + 1, end)
        if p >= end or field == _X or seen & field:
            return False, 0
        seen |= field
        if field == _OP or field == _ID or field == _TS:
            p = _op_id_ts(buf, p, end, field, spans, r)
            if p < 0:
                return False, 0
        elif field == _Y:
            p, value, ok = read_number(buf, p, end)
            if not ok:
                return False, 0
            y_out[r] = value
        elif k >= 0:
            bit = np.int64(1) << k
            if present & bit:
                return False, 0
            present |= bit
            p, state, clip = _named_value(buf, p, end, ints[k], floats[k], table, vocab, vocab_offsets, x, base)
            if state < 0:
                return False, 0
            if state:
                valued |= bit
            if clip:
                clipped |= bit
        else:
            p = _skip_value(buf, p, end)
            if p < 0:
                return False, 0
        p, c = _separator(buf, p, end)
        if c == _RBRACE:
            break
        if c != _COMMA:
            return False, 0
    if seen & (_OP | _ID | _Y) != _OP | _ID | _Y or _skip_ws(buf, p, end) != end:
        return False, 0
    for k in range(ints.shape[0]):  # the missing fields: their fill, or the Python decoder names them
        row, par = ints[k], floats[k]
        if not valued & (np.int64(1) << k) and not row[3]:
            return False, 0
        if valued & (np.int64(1) << k):
            continue
        slot = base + row[1]
        if row[4]:
            x[slot + row[2] - 1] = 1.0
        if row[0] <= _K_SCALE:
            z, clip = _scaled(par[5], row[0], par)
            x[slot] = z * par[4]
            if clip:
                clipped |= np.int64(1) << k
        elif row[0] == _K_BOOL:
            x[slot] = par[4] if par[5] != 0.0 else 0.0
        else:
            x[slot + row[5]] = par[4] if row[0] == _K_CAT else par[5] * par[4]
    if bound < np.inf:
        sq = 0.0
        for i in range(dim):
            sq += x[base + i] * x[base + i]
        norm = math.sqrt(sq)
        if norm > bound:
            factor = bound / norm
            for i in range(dim):
                x[base + i] = x[base + i] * factor
    return True, clipped


@jit
def parse_kernel(vbuf, voff, klen, dim, max_bytes, X, y_out, spans, accepted, framing=0):
    """Fill ``accepted[r]`` for every record, and for accepted ones its row of ``X``, ``y_out[r]`` and
    its id's place ``vbuf[spans[r, 0]:spans[r, 1]]`` (value r is ``vbuf[voff[r]:voff[r + 1]]``, its
    key ``klen[r]`` bytes long; the JSON text starts ``framing`` bytes in, after a Schema Registry
    framing, which counts towards ``max_bytes``)."""
    v, x, y, s = data_pointer(vbuf), data_pointer(X), data_pointer(y_out), data_pointer(spans)
    for r in range(accepted.shape[0]):
        start = voff[r] + framing
        accepted[r] = start <= voff[r + 1] and _insert(v, start, voff[r + 1], klen[r], dim, max_bytes - framing,
                                                       x, y, s, r)


@jit
def parse_named_kernel(vbuf, voff, klen, max_bytes, names, name_offsets, ints, floats, table, vocab, vocab_offsets,
                       intercept, bound, X, y_out, spans, clipped, accepted):
    """:func:`parse_kernel` for inserts of named fields under a feature spec (its tables:
    worker/features/tables.py): ``clipped[r]``, the mask of the fields whose value was clipped."""
    v, x, y, s = data_pointer(vbuf), data_pointer(X), data_pointer(y_out), data_pointer(spans)
    dim = X.shape[1]
    for r in range(accepted.shape[0]):
        accepted[r], clipped[r] = _named_insert(v, voff[r], voff[r + 1], klen[r], max_bytes, names, name_offsets, ints,
                                                floats, table, vocab, vocab_offsets, intercept, bound, dim, x, y, s, r)
