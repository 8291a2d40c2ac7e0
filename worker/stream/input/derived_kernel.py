"""The compiled reader's derived coordinates: bins, hashed crosses and random Fourier features.

After :func:`~.named_kernel.parse_named_kernel` has written a record's field coordinates (or
``parse_named_entries_kernel`` their entries) and
noted what derived blocks read of each field (a number before its clipping, a boolean's 0 or 1, a
category's slot, a hashed value's hash), :func:`derive_kernel` writes each block's coordinates
and then scales the vector onto the spec's bound; :func:`sparse_rows_kernel` writes the same
rows' non-zeros as CSR (OLU_SPARSE_INPUT: thousands of coordinates a row, a few hundred
non-zero). The arithmetic is worker/features/derived.py's and transform.py's, operation for
operation (the cos is portable.py's, written out here), so the
rows are the reference transform's bit for bit on every CPU (fastmath off: nothing reassociated
or fused; tests/olu/core/test_kernels.py reads the machine code). A Fourier phase outside
portable.cos's domain declines the record: the Python decoder then names the problem.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from ...compiled.intrinsics import data_pointer
from ...compiled.jit import jit
from ...features import derived, portable
from .named_kernel import scaled

__all__ = ["derive_kernel", "sparse_rows_kernel"]

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
    """bisect_right: how many of the ``count`` edges from ``data[start]`` are at or below v.
    Branch-free (each halving picks by a select): a value's bin is data, and a branch on it
    mispredicts half the time."""
    lo, n = 0, count
    while n > 0:
        half = n // 2
        right = not v < data[start + lo + half]
        lo = lo + half + 1 if right else lo
        n = n - half - 1 if right else half
    return lo


@_helper
def _cross_token(tokens, r, f, bins_block, bin_of_block):
    """A field's token in a cross: a numeric value's bin in its first bins block (found by that
    block earlier in the row: a spec declares the bins before the crosses that read them), else
    its token. Both read, one picked: a branch here mispredicts (2.6x slower crosses)."""
    binned = np.uint64(bin_of_block[max(bins_block, 0)])
    return tokens[r, f] if bins_block < 0 else binned


@_helper
def _fourier(slot, width, count, first, at, scale, block_fields, data, z, t, p, out_i, out_v):
    """A Fourier block's coordinates, emitted from ``p``: the position after them (-1: a phase
    outside cos's domain). Phase by phase over the components (w is stored field by field), so
    each loop runs in SIMD lanes; each component still adds b + w_1 u_1 + w_2 u_2 + ... in
    derived.py's order. Raw pointers: through the arrays, LLVM reloads each one's data pointer
    after every store and the loops stay scalar (2.5x slower)."""
    tp, dp = data_pointer(t), data_pointer(data)
    ip, vp = data_pointer(out_i), data_pointer(out_v)
    b_at = at + width * count
    for c in range(width):
        tp[c] = dp[b_at + c]
    for i in range(count):
        u, w_at = z[block_fields[first + i]], at + i * width
        for c in range(width):
            tp[c] += dp[w_at + c] * u
    inside = True
    for c in range(width):
        inside &= abs(tp[c]) < _MAX_PHASE
    if not inside:
        return -1
    _cos_many(t, width)
    for c in range(width):
        ip[p + c] = slot + c
        vp[p + c] = scale * tp[c]
    return p + width


@_helper
def _derive_row(values, tokens, r, ints, floats, blocks, block_fields, block_bins, data,
                block_floats, z, phases, bin_of_block, p, out_i, out_v):
    """Emit row r's derived coordinates (index, value), in slot order, into ``out_i``/``out_v``
    from ``p``: the position after them, or -1 when a Fourier phase leaves cos's domain. Scratch:
    ``z``, each numeric field's coordinate before its weight (what Fourier features read);
    ``bin_of_block``, each bins block's bin of the row."""
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
            bin_of_block[j] = b
            if encoding:
                step = block_floats[j, 1]
                for i in range(b):
                    out_i[p], out_v[p] = slot + i, step
                    p += 1
            else:
                out_i[p], out_v[p] = slot + b, weight
                p += 1
        elif kind == _CROSS:
            h = _CROSS_OFFSET
            for i in range(count):
                t = _cross_token(tokens, r, block_fields[first + i], block_bins[first + i],
                                 bin_of_block)
                h = _fmix((h ^ t) * _GOLDEN)
            out_i[p] = slot + np.int64(h % np.uint64(width))
            out_v[p] = weight if h >> _U63 == _U0 else -weight
            p += 1
        else:
            p = _fourier(slot, width, count, first, at, block_floats[j, 1], block_fields, data,
                         z, phases, p, out_i, out_v)
            if p < 0:
                return -1
    return p


@_helper
def _scratch(ints, blocks, row_cap):
    """The per-row buffers: field coordinates, Fourier phases, bins, a row's emitted entries."""
    z = np.zeros(ints.shape[0], np.float64)
    phases = np.zeros(max(1, np.max(blocks[:, 2])) if blocks.shape[0] else 1, np.float64)
    bin_of_block = np.zeros(blocks.shape[0], np.int64)
    return z, phases, bin_of_block, np.zeros(row_cap, np.int64), np.zeros(row_cap, np.float64)


@jit
def derive_kernel(X, values, tokens, accepted, ints, floats, blocks, block_fields, block_bins,
                  data, block_floats, bound, row_cap):
    """Each accepted row's derived coordinates, then the row scaled onto ``bound`` (inf: none),
    the norm summed coordinate by coordinate as transform.py does; a row whose Fourier phase
    leaves cos's domain is declined (``accepted[r]`` cleared)."""
    dim = X.shape[1]
    z, phases, bin_of_block, out_i, out_v = _scratch(ints, blocks, row_cap)
    for r in range(X.shape[0]):
        if not accepted[r]:
            continue
        end = _derive_row(values, tokens, r, ints, floats, blocks, block_fields, block_bins,
                          data, block_floats, z, phases, bin_of_block, 0, out_i, out_v)
        if end < 0:
            accepted[r] = False
            continue
        for k in range(end):
            X[r, out_i[k]] = out_v[k]
        if bound < np.inf:
            sq = 0.0
            for i in range(dim):
                sq += X[r, i] * X[r, i]
            norm = math.sqrt(sq)
            if norm > bound:
                factor = bound / norm
                for i in range(dim):
                    X[r, i] = X[r, i] * factor


@jit
def sparse_rows_kernel(room, counts, entry_index, entry_value, values, tokens, accepted, ints,
                       floats, blocks, block_fields, block_bins, data, block_floats, bound, indptr,
                       out_i, out_v):
    """:func:`derive_kernel` writing CSR rows: row r's non-zeros, in coordinate order, are
    ``out_i/out_v[indptr[r]:indptr[r + 1]]`` (a declined row has none). The fields' coordinates
    come as named_kernel.parse_named_entries_kernel wrote them (``counts[r]`` entries from
    ``r * room``, unsorted), the derived ones follow. The same values as the dense row's
    non-zeros (SparseRows.from_dense of it, a -0.0 a zero): its squared norm summed in
    coordinate order, zeros adding nothing."""
    z, phases, bin_of_block, _, _ = _scratch(ints, blocks, 1)
    p = 0
    indptr[0] = 0
    for r in range(accepted.shape[0]):
        start = p
        if accepted[r]:
            # the fields' entries in coordinate order: an insertion sort (a handful, each
            # coordinate once, mostly in the spec's order already)
            for k in range(r * room, r * room + counts[r]):
                i, v = entry_index[k], entry_value[k]
                j = p
                while j > start and out_i[j - 1] > i:
                    out_i[j], out_v[j] = out_i[j - 1], out_v[j - 1]
                    j -= 1
                out_i[j], out_v[j] = i, v
                p += 1
            p = _derive_row(values, tokens, r, ints, floats, blocks, block_fields, block_bins,
                            data, block_floats, z, phases, bin_of_block, p, out_i, out_v)
            if p < 0:
                accepted[r] = False
                p = start
            else:
                p = _bounded(out_v, out_i, start, p, bound)
        indptr[r + 1] = p


@_helper
def _bounded(out_v, out_i, start, stop, bound):
    """Entries ``start:stop`` scaled onto ``bound`` when over it, then the zeros left out: the
    position after the row."""
    if bound < np.inf:
        sq = 0.0
        for k in range(start, stop):
            sq += out_v[k] * out_v[k]
        norm = math.sqrt(sq)
        if norm > bound:
            factor = bound / norm
            for k in range(start, stop):
                out_v[k] = out_v[k] * factor
    ip, vp = data_pointer(out_i), data_pointer(out_v)
    p = start
    for k in range(start, stop):  # branch-free: a zero is written over by the next entry
        v = vp[k]
        ip[p], vp[p] = ip[k], v
        p += v != 0.0
    return p
