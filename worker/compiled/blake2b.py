"""BLAKE2b-64 of byte strings, compiled: the record key of an id's UTF-8 bytes, bit-identical to
``hashlib.blake2b(raw, digest_size=8)`` read little-endian
(``worker.olu.core.record_keys.record_key``, which tests compare it with).

Strings of up to one block (128 bytes) are hashed four at a time, one per lane of 256-bit vectors
(:func:`_hash_lanes`, written in LLVM IR: numba does not vectorise the rounds by itself), about
70 to 100 ns a string against ~190 ns one at a time and ~600 ns for ``record_key`` in a Python
loop. The lanes' state starts from constants in registers: written lane by lane into memory and
read back as vectors, it cost ~20 ns a string more (the wide loads wait for the narrow stores).
Longer strings take the scalar compression, block by block.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .jit import inline, jit

# BLAKE2b (RFC 7693) with an 8-byte digest and no key, i.e. hashlib.blake2b(raw, digest_size=8),
# read little-endian: the same 64-bit value as record_keys.record_key (tests compare them).
_IV = np.array([
    0x6A09E667F3BCC908, 0xBB67AE8584CAA73B, 0x3C6EF372FE94F82B, 0xA54FF53A5F1D36F1,
    0x510E527FADE682D1, 0x9B05688C2B3E6C1F, 0x1F83D9ABFB41BD6B, 0x5BE0CD19137E2179,
], dtype=np.uint64)
_SIGMA = np.array([
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
    [14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3],
    [11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4],
    [7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8],
    [9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13],
    [2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9],
    [12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11],
    [13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10],
    [6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5],
    [10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0],
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
    [14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3],
], dtype=np.int64)
_PARAM0 = np.uint64(0x01010008)  # depth 1, fanout 1, key length 0, digest length 8
_U8, _U16, _U24, _U32, _U40, _U63, _U64 = (np.uint64(v) for v in (8, 16, 24, 32, 40, 63, 64))


@inline
def _rotr(x, n):
    return (x >> n) | (x << (_U64 - n))


@inline
def _mix(a, b, c, d, x, y):
    a = a + b + x
    d = _rotr(d ^ a, _U32)
    c = c + d
    b = _rotr(b ^ c, _U24)
    a = a + b + y
    d = _rotr(d ^ a, _U16)
    c = c + d
    b = _rotr(b ^ c, _U63)
    return a, b, c, d


@jit
def _compress(h, m, counter, last):
    """One BLAKE2b compression of block ``m`` into ``h`` (ids over one block only: shorter ones take
    the lanes; written out round by round this ran ~1.5x faster but took ~15 s more to compile)."""
    v0, v1, v2, v3, v4, v5, v6, v7 = h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]
    v8, v9, v10, v11 = _IV[0], _IV[1], _IV[2], _IV[3]
    v12 = _IV[4] ^ counter  # the high 64 bits of the byte counter are 0 here
    v13 = _IV[5]
    v14 = ~_IV[6] if last else _IV[6]
    v15 = _IV[7]
    for r in range(12):
        s = _SIGMA[r]
        v0, v4, v8, v12 = _mix(v0, v4, v8, v12, m[s[0]], m[s[1]])
        v1, v5, v9, v13 = _mix(v1, v5, v9, v13, m[s[2]], m[s[3]])
        v2, v6, v10, v14 = _mix(v2, v6, v10, v14, m[s[4]], m[s[5]])
        v3, v7, v11, v15 = _mix(v3, v7, v11, v15, m[s[6]], m[s[7]])
        v0, v5, v10, v15 = _mix(v0, v5, v10, v15, m[s[8]], m[s[9]])
        v1, v6, v11, v12 = _mix(v1, v6, v11, v12, m[s[10]], m[s[11]])
        v2, v7, v8, v13 = _mix(v2, v7, v8, v13, m[s[12]], m[s[13]])
        v3, v4, v9, v14 = _mix(v3, v4, v9, v14, m[s[14]], m[s[15]])
    h[0] ^= v0 ^ v8
    h[1] ^= v1 ^ v9
    h[2] ^= v2 ^ v10
    h[3] ^= v3 ^ v11
    h[4] ^= v4 ^ v12
    h[5] ^= v5 ^ v13
    h[6] ^= v6 ^ v14
    h[7] ^= v7 ^ v15


@jit
def blake2b64(buf, begin, length, h, m):
    """Key of the byte string buf[begin:begin + length] (``record_key``'s value); h and m are
    scratch arrays of 8 and 16 uint64."""
    for i in range(8):
        h[i] = _IV[i]
    h[0] ^= _PARAM0
    pos = 0
    while True:
        block = min(128, length - pos)
        for i in range(16):
            m[i] = 0
        for i in range(block):
            m[i >> 3] |= np.uint64(buf[begin + pos + i]) << np.uint64((i & 7) * 8)
        pos += block
        _compress(h, m, np.uint64(pos), pos == length)
        if pos == length:
            break
    return h[0] if h[0] != 0 else np.uint64(1)  # record_key's "or 1": 0 marks a free slot


LANES = 4  # ids hashed side by side: one 256-bit vector of uint64 per state word
_BLOCK = 128
_G = ((0, 4, 8, 12), (1, 5, 9, 13), (2, 6, 10, 14), (3, 7, 11, 15),
      (0, 5, 10, 15), (1, 6, 11, 12), (2, 7, 8, 13), (3, 4, 9, 14))


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


@intrinsic
def _hash_lanes(typingctx, m, lengths, keys):
    """BLAKE2b-64 of LANES one-block ids at once: ``m`` (uint64[16 * LANES]) holds their message
    words, word i of lane l at ``i * LANES + l``; ``lengths`` (int64[LANES]) their byte counts;
    ``keys`` (uint64[LANES]) gets each lane's 64-bit digest (before record_key's "or 1").

    The state starts from constants in vector registers (every lane's IV but the byte counter) and
    only the digests go back to memory. One round in IR, looped over: the state stays in vector
    registers (phi nodes) and each round picks its message words through _SIGMA from ``m``.
    Written out whole, the 12 rounds ran a little faster but took LLVM ~2 s to optimise in every
    kernel that calls them."""
    sig = types.void(m, lengths, keys)

    def codegen(context, builder, signature, args):
        i32, i64 = ir.IntType(32), ir.IntType(64)
        vec = ir.VectorType(i64, LANES)

        def pointer(k):
            data = context.make_array(signature.args[k])(context, builder, args[k]).data
            return builder.bitcast(data, vec.as_pointer())

        mptr, lptr, kptr = pointer(0), pointer(1), pointer(2)

        def splat(value):
            return ir.Constant(vec, [ir.Constant(i64, _signed(int(value)))] * LANES)

        table_type = ir.ArrayType(i32, 12 * 16)
        table = cgutils.add_global_variable(builder.module, table_type, "blake2b_sigma_lanes")
        table.linkage = "internal"
        table.global_constant = True
        table.initializer = ir.Constant(table_type,
                                        [ir.Constant(i32, int(s)) for s in _SIGMA.ravel()])
        fshr = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vec, [vec, vec, vec]),
                                              f"llvm.fshr.v{LANES}i64")

        def rotr(x, n):
            return builder.call(fshr, [x, x, splat(n)])

        iv = [int(x) for x in _IV]
        h0 = iv[0] ^ int(_PARAM0)
        v0 = ([splat(h0)] + [splat(x) for x in iv[1:]] + [splat(x) for x in iv[:4]]
              + [builder.xor(splat(iv[4]), builder.load(lptr, align=8)),  # the byte counter
                 splat(iv[5]), splat(~iv[6] & (2**64 - 1)), splat(iv[7])])  # the last block
        entry = builder.block
        loop = builder.append_basic_block("blake2b_round")
        done = builder.append_basic_block("blake2b_done")
        builder.branch(loop)
        builder.position_at_end(loop)
        r = builder.phi(i64)
        r.add_incoming(ir.Constant(i64, 0), entry)
        phis = [builder.phi(vec) for _ in range(16)]
        for p, x in zip(phis, v0):
            p.add_incoming(x, entry)
        vs = list(phis)

        def word(k):  # m[_SIGMA[r][k]]
            slot = builder.add(builder.mul(r, ir.Constant(i64, 16)), ir.Constant(i64, k))
            index = builder.load(builder.gep(table, [ir.Constant(i64, 0), slot]))
            return builder.load(builder.gep(mptr, [builder.sext(index, i64)]), align=8)

        for k, (a, b, c, d) in enumerate(_G):  # _mix, on vectors
            va = builder.add(builder.add(vs[a], vs[b]), word(2 * k))
            vd = rotr(builder.xor(vs[d], va), 32)
            vc = builder.add(vs[c], vd)
            vb = rotr(builder.xor(vs[b], vc), 24)
            va = builder.add(builder.add(va, vb), word(2 * k + 1))
            vd = rotr(builder.xor(vd, va), 16)
            vc = builder.add(vc, vd)
            vs[a], vs[b], vs[c], vs[d] = va, rotr(builder.xor(vb, vc), 63), vc, vd
        following = builder.add(r, ir.Constant(i64, 1))
        tail = builder.block
        r.add_incoming(following, tail)
        for p, x in zip(phis, vs):
            p.add_incoming(x, tail)
        builder.cbranch(builder.icmp_unsigned("<", following, ir.Constant(i64, 12)), loop, done)
        builder.position_at_end(done)
        # h0 ^ v0 ^ v8
        builder.store(builder.xor(splat(h0), builder.xor(vs[0], vs[8])), kptr, align=8)
        return context.get_dummy_value()

    return sig, codegen


@inline
def _load_lane(m, lengths, lane, buf, begin, length):
    """Put the one-block id buf[begin:begin + length] (1 <= length <= 128) in lane ``lane``."""
    for i in range(16):
        m[i * LANES + lane] = 0
    for i in range(length):
        m[(i >> 3) * LANES + lane] |= np.uint64(buf[begin + i]) << np.uint64((i & 7) * 8)
    lengths[lane] = length


@jit
def _flush_lanes(m, lengths, digests, filled, rows, out):
    _hash_lanes(m, lengths, digests)
    for lane in range(filled):
        key = digests[lane]
        out[rows[lane]] = key if key != 0 else np.uint64(1)  # record_key's "or 1"


@jit
def hash_ranges(buf, starts, ends, selected, out):
    """``out[k]`` = key of ``buf[starts[k]:ends[k]]`` for every k with ``selected[k]`` (an empty
    ``selected``: every k); one-block ids four at a time, longer ones alone."""
    m = np.empty(16 * LANES, np.uint64)
    lengths = np.zeros(LANES, np.int64)
    digests = np.empty(LANES, np.uint64)
    h = np.empty(8, np.uint64)
    hm = np.empty(16, np.uint64)
    rows = np.empty(LANES, np.int64)
    every = selected.shape[0] == 0
    filled = 0
    for k in range(starts.shape[0]):
        if not every and not selected[k]:
            continue
        length = ends[k] - starts[k]
        if length > _BLOCK:
            out[k] = blake2b64(buf, starts[k], length, h, hm)
            continue
        _load_lane(m, lengths, filled, buf, starts[k], length)
        rows[filled] = k
        filled += 1
        if filled == LANES:
            _flush_lanes(m, lengths, digests, filled, rows, out)
            filled = 0
    if filled:
        _flush_lanes(m, lengths, digests, filled, rows, out)


EVERY = np.zeros(0, np.bool_)


@jit
def blake2b64_many(buf, offsets):
    """Keys of the byte strings buf[offsets[k]:offsets[k+1]] (same value as ``record_key``)."""
    out = np.empty(offsets.shape[0] - 1, np.uint64)
    hash_ranges(buf, offsets[:-1], offsets[1:], EVERY, out)
    return out


@jit
def blake2b64_spans(buf, spans, selected, out):
    """``out[k]`` = key of ``buf[spans[k, 0]:spans[k, 1]]``
    for every selected k (others untouched)."""
    if selected.shape[0]:
        hash_ranges(buf, spans[:, 0], spans[:, 1], selected, out)
