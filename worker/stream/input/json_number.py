"""The compiled reader of one JSON number, in the correctly rounded double orjson gives.

:func:`read_number` reads one number of the JSON grammar from a byte buffer and says
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

The helpers take raw pointers, not arrays (insert_kernel.py says why).
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba.cpython.unsafe.numbers import leading_zeros

from ...compiled.intrinsics import load8, mul64
from .pow10 import POW10_HI, POW10_LO, POW10_MAX, POW10_MIN

__all__ = ["is_digit", "read_number"]

# uint64 constants: numba would turn uint64-with-int64 arithmetic into float64
_U0, _U1, _U3, _U4, _U8, _U9, _U10, _U16, _U32, _U53, _U63 = (
    np.uint64(v) for v in (0, 1, 3, 4, 8, 9, 10, 16, 32, 53, 63))
_U10_8 = np.uint64(10**8)
# eight-digit SWAR constants (fast_float)
_HIGH_NIBBLES, _SIXES, _THREES, _ZEROS = (np.uint64(v) for v in (
    0xF0F0F0F0F0F0F0F0, 0x0606060606060606, 0x3333333333333333, 0x3030303030303030))
_BYTE_PAIRS, _MUL1, _MUL2 = (
    np.uint64(v) for v in (0x000000FF000000FF, 100 + (1000000 << 32), 1 + (10000 << 32)))
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
        value = (float(man) * _EXACT_POW10[exp10] if exp10 >= 0
                 else float(man) / _EXACT_POW10[-exp10])
        return (-value if neg else value), True
    return _eisel_lemire(man, exp10, neg)


@_helper
def _eisel_lemire(man, exp10, neg):
    """:func:`_to_double` for any man and exp10 (Go's ``eiselLemire64``)."""
    if exp10 < POW10_MIN or exp10 > POW10_MAX:
        return 0.0, False
    clz = np.int64(leading_zeros(man))
    man <<= np.uint64(clz)
    # floor(log2(10**exp10)) + bias + 64, as in Go
    exp2 = ((217706 * exp10) >> 16) + 64 + 1023 - clz
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
def is_digit(c):
    return _ZERO <= c <= _NINE


@_helper
def read_number(buf, p, end):
    """A JSON number at ``buf[p:end]`` (a pointer to bytes): (position after it, its double,
    certain). Not certain: not a JSON number there, or a
    value it will not vouch for (module doc)."""
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
