"""The fields every compiled reader takes the same way: ``op``, ``id``, ``ts``, and which is which.

insert_kernel.py and named_kernel.py walk an insert's object field by field; :func:`field_bit`
names a field as a bit of the record's mask, :func:`op_id_ts` reads the three fields both parse
alike, and :func:`label` the ``y`` (a number, or a class name of a softmax over named classes).
The helpers take raw pointers, not arrays (insert_kernel.py says why).
"""

from __future__ import annotations

import numba

from .decode import MAX_ID_CHARS
from .json_lex import string_end
from .json_number import is_digit, read_number

__all__ = ["ID", "OP", "REQUIRED", "TS", "X", "Y", "field_bit", "label", "op_id_ts"]

_QUOTE, _ZERO = 34, 48
_helper = numba.njit(nogil=True)

# fields, as bits of a mask
OP, ID, X, Y, TS = 1, 2, 4, 8, 16
REQUIRED = OP | ID | X | Y


@_helper
def field_bit(buf, p, stop):
    """The bit of the field name ``buf[p:stop]``, 0 for any other name."""
    size = stop - p
    if size == 1:
        return X if buf[p] == 120 else (Y if buf[p] == 121 else 0)
    if size == 2:
        a, b = buf[p], buf[p + 1]
        if a == 111 and b == 112:
            return OP
        if a == 105 and b == 100:
            return ID
        if a == 116 and b == 115:
            return TS
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
def op_id_ts(buf, p, end, field, spans, r):
    """Past the value of ``op`` (must be "insert"), ``id`` (its place into ``spans``) or ``ts`` (a
    plain non-negative integer of at most 18 digits); -1 when it is not one the fast path takes."""
    if field == TS:
        first = p
        while p < end and is_digit(buf[p]):
            p += 1
        return -1 if p == first or p - first > 18 or (buf[first] == _ZERO and p - first > 1) else p
    if buf[p] != _QUOTE:
        return -1
    stop = string_end(buf, p + 1, end)
    if stop < 0 or (field == OP and not _is_insert(buf, p + 1, stop)):
        return -1
    if field == ID:
        if stop == p + 1 or stop - (p + 1) > MAX_ID_CHARS:  # ASCII: bytes are characters
            return -1
        spans[2 * r], spans[2 * r + 1] = p + 1, stop
    return stop + 1


@_helper
def label(buf, p, end, classes, class_offsets, n_classes, y_out, r):
    """Past ``y`` at ``p``, its value in ``y_out[r]``: a number, or with ``n_classes`` named classes
    (their UTF-8 bytes ``classes[class_offsets[k]:class_offsets[k + 1]]``) a plain ASCII string
    equal to one of them, its position k. -1 when it is neither (the Python decoder decides)."""
    if n_classes == 0:
        p, value, ok = read_number(buf, p, end)
        y_out[r] = value
        return p if ok else -1
    if buf[p] != _QUOTE:
        return -1
    stop = string_end(buf, p + 1, end)
    if stop < 0:
        return -1
    size = stop - (p + 1)
    for k in range(n_classes):
        at = class_offsets[k]
        if class_offsets[k + 1] - at != size:
            continue
        same = True
        for i in range(size):
            same &= buf[p + 1 + i] == classes[at + i]
        if same:
            y_out[r] = k
            return stop + 1
    return -1
