"""Sorted uint64 key arrays and the two-bit filter in front of them: the searches the index
(``worker/olu/core/kernels/merge.py``) and the OGD kernels (``ogd.py``) share.

The filter is a bit array of 2 ** k words; a key sets two bits of one word, chosen by Fibonacci
hashing (``k * 0x9E37...``: small test keys spread as well as random record keys do). A key whose
two bits are not both set is certainly absent, so most inserts skip the binary search.
"""

from __future__ import annotations

import numpy as np

from .jit import jit

FILTER_MIX = np.uint64(0x9E3779B97F4A7C15)
_U1, _U6, _U63 = np.uint64(1), np.uint64(6), np.uint64(63)


@jit
def lower_bound(keys, n, key):
    """The first position of the sorted ``keys[:n]`` whose key is not below ``key``."""
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) >> 1
        if keys[mid] < key:
            lo = mid + 1
        else:
            hi = mid
    return lo


@jit
def contains(sorted_keys, key):
    """``key`` is in the sorted uint64 array (binary search)."""
    lo = lower_bound(sorted_keys, sorted_keys.shape[0], key)
    return lo < sorted_keys.shape[0] and sorted_keys[lo] == key


@jit
def filter_shift(words):
    """64 - log2(len(words)): the shift that takes a mixed key
    to its word (len a power of two >= 2)."""
    bits = 0
    while (1 << bits) < words.shape[0]:
        bits += 1
    return np.uint64(64 - bits)


@jit
def filter_slot(k, shift):
    """(word, two-bit mask) of key ``k`` in a filter of 2 ** (64 - shift) words."""
    h = k * FILTER_MIX
    return h >> shift, (_U1 << (h & _U63)) | (_U1 << ((h >> _U6) & _U63))


@jit
def filter_passes(words, shift, k):
    """Both of ``k``'s bits are set: it may be present (absent for certain otherwise)."""
    word, mask = filter_slot(k, shift)
    return (words[word] & mask) == mask
