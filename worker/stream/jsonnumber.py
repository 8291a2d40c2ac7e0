"""A JSON number, read from bytes inside compiled code, as the correctly rounded double.

That is the value orjson gives (and Python's ``float()`` of the text), so the compiled decoder
(scan.py) and the Python one (decode.py) agree bit for bit. :func:`read_number` reads one number
of the JSON grammar at a position of a byte buffer (a raw pointer, see scan.py) and says whether it
is *certain* of the value; when it is not, the caller declines the record and orjson decides.

- Clinger's fast path first: a mantissa below 2**53 and a power of ten up to 22 are both exact
  doubles, so one IEEE multiplication or division rounds correctly.
- Otherwise Eisel-Lemire (Lemire, "Number parsing at a gigabyte per second", 2021), in the form of
  Go's ``strconv.eiselLemire64``: a 64x128-bit product with a truncated power of ten, giving up on
  the rare products it cannot settle (exact half-way cases among them).
- Not certain, by design: more than 19 significant digits, results that would be subnormal or
  overflow, and integers (no fraction, no exponent) of 19 digits or more, which orjson reads as an
  int whose range depends on the sign. An integer is otherwise read like orjson's int followed by
  ``float()``: ``-0`` is +0.0.
"""

from __future__ import annotations

import math

import numba
import numpy as np

__all__ = ["POW10_HI", "POW10_LO", "is_digit", "read_number"]

_POW10_MIN, _POW10_MAX = -348, 347


def _powers_of_ten() -> tuple[np.ndarray, np.ndarray]:
    """128-bit mantissas of 10^e, e in [-348, 347], normalised (top bit set) and rounded down."""
    lo, hi = [], []
    for e in range(_POW10_MIN, _POW10_MAX + 1):
        if e >= 0:
            v = 10**e
            bits = v.bit_length()
            m = v << (128 - bits) if bits <= 128 else v >> (bits - 128)
        else:
            v = 10**-e
            m = (1 << (127 + v.bit_length())) // v
        assert 1 << 127 <= m < 1 << 128
        lo.append(m & (2**64 - 1))
        hi.append(m >> 64)
    return np.array(lo, np.uint64), np.array(hi, np.uint64)


POW10_LO, POW10_HI = _powers_of_ten()

# uint64 constants: numba would turn uint64-with-int64 arithmetic into float64
(_U0, _U1, _U2, _U3, _U4, _U8, _U9, _U10, _U16, _U32, _U48, _U53, _U56, _U60, _U62,
 _U63) = (np.uint64(v) for v in (0, 1, 2, 3, 4, 8, 9, 10, 16, 32, 48, 53, 56, 60, 62, 63))
_LOW32 = np.uint64(0xFFFFFFFF)
_LOW9 = np.uint64(0x1FF)
_EXACT_INT = np.uint64(1 << 53)
_EXACT_POW10 = np.array([10.0**k for k in range(23)])  # exact doubles
_POW2 = np.array([math.ldexp(1.0, e - 1075) for e in range(0x7FF)])  # 2**(biased exponent - 1075)
_MINUS, _PLUS, _DOT, _ZERO, _NINE, _E, _LOWER_E = 45, 43, 46, 48, 57, 69, 101

# Plain compiled functions on scalars and a raw pointer (LLVM inlines them into the kernel).
_helper = numba.njit(nogil=True)


@_helper
def _mul64(a, b):
    """The 128-bit product of two uint64 as (high, low)."""
    a0, a1 = a & _LOW32, a >> _U32
    b0, b1 = b & _LOW32, b >> _U32
    p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    mid = (p00 >> _U32) + (p01 & _LOW32) + (p10 & _LOW32)
    return p11 + (p01 >> _U32) + (p10 >> _U32) + (mid >> _U32), (mid << _U32) | (p00 & _LOW32)


@_helper
def _leading_zeros(x):
    n = 0
    if x >> _U32 == _U0:
        x <<= _U32
        n += 32
    if x >> _U48 == _U0:
        x <<= _U16
        n += 16
    if x >> _U56 == _U0:
        x <<= _U8
        n += 8
    if x >> _U60 == _U0:
        x <<= _U4
        n += 4
    if x >> _U62 == _U0:
        x <<= _U2
        n += 2
    if x >> _U63 == _U0:
        n += 1
    return n


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
    if exp10 < _POW10_MIN or exp10 > _POW10_MAX:
        return 0.0, False
    clz = _leading_zeros(man)
    man <<= np.uint64(clz)
    exp2 = ((217706 * exp10) >> 16) + 64 + 1023 - clz  # floor(log2(10**exp10)) + bias + 64, as in Go
    i = exp10 - _POW10_MIN
    x_hi, x_lo = _mul64(man, POW10_HI[i])
    if x_hi & _LOW9 == _LOW9 and x_lo + man < man:  # the truncated power's error may reach x_hi
        y_hi, y_lo = _mul64(man, POW10_LO[i])
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
def is_digit(c):
    return _ZERO <= c <= _NINE


@_helper
def read_number(buf, p, end):
    """A JSON number at ``buf[p:end]`` (a pointer to bytes): (position after it, its double,
    certain). Not certain: not a JSON number there, or a value it will not vouch for (module doc)."""
    neg = p < end and buf[p] == _MINUS
    if neg:
        p += 1
    if p >= end or not is_digit(buf[p]):
        return p, 0.0, False
    man, digits, exp10 = _U0, 0, 0
    if buf[p] == _ZERO:
        p += 1
        if p < end and is_digit(buf[p]):  # a leading zero
            return p, 0.0, False
    else:
        while p < end and is_digit(buf[p]):
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
        while p < end and is_digit(buf[p]):
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
        while p < end and is_digit(buf[p]):
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
