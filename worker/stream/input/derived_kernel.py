"""The compiled reader's derived coordinates: bins, hashed crosses and random Fourier features.

After :func:`~.insert_kernel.parse_named_kernel` has written a record's field coordinates and
noted what derived blocks read of each field (a number before its clipping, a boolean's 0 or 1, a
category's slot, a hashed value's hash), :func:`derive_kernel` writes each block's coordinates
and then scales the vector onto the spec's bound. The arithmetic is worker/features/derived.py's
and transform.py's, operation for operation (the cos is portable.py's, written out here), so the
rows are the reference transform's bit for bit on every CPU (fastmath off: nothing reassociated
or fused; tests/olu/core/test_kernels.py reads the machine code). A Fourier phase outside
portable.cos's domain declines the record: the Python decoder then names the problem.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from ...compiled.jit import jit
from ...features import derived, portable
from .insert_kernel import scaled

__all__ = ["derive_kernel"]

_helper = numba.njit(nogil=True)

# worker/features/tables.py's block kinds and columns
_BINS, _CROSS = 0, 1
# derived.py's cross hash and portable.py's constants (uint64: numba would mix in float64)
_CROSS_OFFSET, _GOLDEN = np.uint64(derived.CROSS_OFFSET), np.uint64(derived.GOLDEN)
_MIX1, _MIX2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_U27, _U30, _U31, _U63, _U0 = (np.uint64(v) for v in (27, 30, 31, 63, 0))
_P1, _P2, _P3, _TWO_OVER_PI = portable._P1, portable._P2, portable._P3, portable._TWO_OVER_PI
_SIN = np.array(portable._SIN[::-1], np.float64)  # highest power first, as _poly runs
_COS = np.array(portable._COS[::-1], np.float64)
_MAX_PHASE = derived.MAX_PHASE


@_helper
def _poly(coefficients, x2):
    acc = 0.0
    for c in coefficients:
        acc = acc * x2 + c
    return acc


@_helper
def _cos_many(t, n):
    """portable.cos of ``t[:n]`` in place (|t| < 1e6), without branches: both polynomials for
    every element, the quadrant's picked by selects, so the loop runs in SIMD lanes. Each element
    takes portable.cos's operations in its order (round() is rint's ties-to-even): the same
    bits."""
    for c in range(n):
        x = t[c]
        k = np.rint(x * _TWO_OVER_PI)
        r = ((x - k * _P1) - k * _P2) - k * _P3
        r2 = r * r
        cos_part = _poly(_COS, r2)
        sin_part = r * _poly(_SIN, r2)
        quadrant = np.int64(k) & 3
        v = cos_part if (quadrant & 1) == 0 else sin_part
        t[c] = -v if quadrant == 1 or quadrant == 2 else v


@_helper
def _fmix(h):
    h = (h ^ (h >> _U30)) * _MIX1
    h = (h ^ (h >> _U27)) * _MIX2
    return h ^ (h >> _U31)


@_helper
def _bin_of(data, start, count, v):
    """bisect_right: how many of the ``count`` edges from ``data[start]`` are at or below v."""
    lo, hi = 0, count
    while lo < hi:
        mid = (lo + hi) // 2
        if v < data[start + mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo


@_helper
def _cross_token(values, tokens, r, f, bins_block, blocks, data):
    """A field's token in a cross: a numeric value's bin in its first bins block, else its token."""
    if bins_block < 0:
        return tokens[r, f]
    b = blocks[bins_block]
    return np.uint64(_bin_of(data, b[5], b[2], values[r, f]))


@_helper
def _fourier(X, r, slot, width, count, first, at, scale, block_fields, data, z, t):
    """A Fourier block's coordinates of row r (False: a phase outside cos's domain). Phase by
    phase over the components (w is stored field by field), so each loop runs in SIMD lanes;
    each component still adds b + w_1 u_1 + w_2 u_2 + ... in derived.py's order."""
    b_at = at + width * count
    for c in range(width):
        t[c] = data[b_at + c]
    for i in range(count):
        u, w_at = z[block_fields[first + i]], at + i * width
        for c in range(width):
            t[c] += data[w_at + c] * u
    inside = True
    for c in range(width):
        inside &= abs(t[c]) < _MAX_PHASE
    if not inside:
        return False
    _cos_many(t, width)
    for c in range(width):
        X[r, slot + c] = scale * t[c]
    return True


@_helper
def _derive_row(X, values, tokens, r, ints, floats, blocks, block_fields, block_bins, data,
                block_floats, z, phases):
    """The derived coordinates of row r; False when a Fourier phase leaves cos's domain. ``z``:
    scratch, each numeric field's coordinate before its weight (what Fourier features read)."""
    for f in range(ints.shape[0]):
        if ints[f, 0] <= 1:  # numeric (range or scale)
            z[f] = scaled(values[r, f], ints[f, 0], floats[f])[0]  # insert_kernel's
    for j in range(blocks.shape[0]):
        kind, slot, width, first, count, at, encoding = (blocks[j, 0], blocks[j, 1], blocks[j, 2],
                                                         blocks[j, 3], blocks[j, 4], blocks[j, 5],
                                                         blocks[j, 6])
        weight = block_floats[j, 0]
        if kind == _BINS:
            b = _bin_of(data, at, width, values[r, block_fields[first]])
            if encoding:
                step = block_floats[j, 1]
                for i in range(b):
                    X[r, slot + i] = step
            else:
                X[r, slot + b] = weight
        elif kind == _CROSS:
            h = _CROSS_OFFSET
            for i in range(count):
                t = _cross_token(values, tokens, r, block_fields[first + i],
                                 block_bins[first + i], blocks, data)
                h = _fmix((h ^ t) * _GOLDEN)
            X[r, slot + np.int64(h % np.uint64(width))] = weight if h >> _U63 == _U0 else -weight
        elif not _fourier(X, r, slot, width, count, first, at, block_floats[j, 1],
                          block_fields, data, z, phases):
            return False
    return True


@jit
def derive_kernel(X, values, tokens, accepted, ints, floats, blocks, block_fields, block_bins,
                  data, block_floats, bound):
    """Each accepted row's derived coordinates, then the row scaled onto ``bound`` (inf: none),
    the norm summed coordinate by coordinate as transform.py does; a row whose Fourier phase
    leaves cos's domain is declined (``accepted[r]`` cleared)."""
    dim = X.shape[1]
    z = np.zeros(ints.shape[0], np.float64)
    phases = np.zeros(max(1, np.max(blocks[:, 2])) if blocks.shape[0] else 1, np.float64)
    for r in range(X.shape[0]):
        if not accepted[r]:
            continue
        if not _derive_row(X, values, tokens, r, ints, floats, blocks, block_fields, block_bins,
                           data, block_floats, z, phases):
            accepted[r] = False
            continue
        if bound < np.inf:
            sq = 0.0
            for i in range(dim):
                sq += X[r, i] * X[r, i]
            norm = math.sqrt(sq)
            if norm > bound:
                factor = bound / norm
                for i in range(dim):
                    X[r, i] = X[r, i] * factor
