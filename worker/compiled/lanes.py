"""The engine's length-d reductions as explicit 8-lane vector loops (LLVM intrinsics numba inlines).

A sum added left to right is one chain of dependent additions: at d = 1,000 the OGD step waited on
~2,000 of them, and the compiler may not split the chain without changing the result. So the
engine's sums are *defined* in eight lanes (worker/olu/arith.py): coordinate i goes to lane
``i % 8``, each lane adds its terms in order from 0.0, and the lanes fold as
``((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))``. Written here as IR on ``<8 x double>``
vectors, that order is the IR's own: the back end splits the vector into the registers the CPU has
(two AVX2, one AVX-512, four SSE2) and adds each lane exactly as written. There are no fast-math
flags on any instruction, so nothing is reassociated or fused (``tests/olu/core/test_kernels.py``
checks the machine code for fused multiply-adds): the same bits on every CPU, at vector speed.

The last ``d % 8`` coordinates are copied into a zero-padded block and take one more vector step;
a padded term adds 0.0 to its lane, which changes nothing (a lane that starts at +0.0 is never
-0.0).
"""

from __future__ import annotations

from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

__all__ = ["LANES", "lane_axpy", "lane_dot", "lane_sqnorm", "lane_step"]

LANES = 8
_F64 = ir.DoubleType()
_VEC = ir.VectorType(_F64, LANES)
_I64 = ir.IntType(64)


def _vector_pointer(builder, pointer, index):
    """``&pointer[index]`` as a pointer to 8 doubles (loads and stores at a double's alignment)."""
    return builder.bitcast(builder.gep(pointer, [index]), _VEC.as_pointer())


def _fold(builder, acc):
    """((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)): halves, then halves again."""
    def half(vec, size, offset):
        return builder.shuffle_vector(vec, ir.Constant(vec.type, ir.Undefined), ir.Constant(
            ir.VectorType(ir.IntType(32), size), [offset + k for k in range(size)]))

    four = builder.fadd(half(acc, 4, 0), half(acc, 4, 4))
    two = builder.fadd(half(four, 2, 0), half(four, 2, 2))
    return builder.fadd(builder.extract_element(two, ir.Constant(ir.IntType(32), 0)),
                        builder.extract_element(two, ir.Constant(ir.IntType(32), 1)))


def _lane_loop(builder, n, reads, writes, term):
    """The engine's sum of ``term`` over coordinates 0..n-1 (module docstring).

    ``reads``: pointers to double arrays. ``term(values, wide)`` gets their values at a block of 8
    coordinates (``wide``: vectors, with scalars spread by ``_splat``) or at one tail coordinate
    (scalars) and returns (the term to add, the values to store into ``writes``, in order)."""
    fn = builder.function
    full = builder.and_(n, ir.Constant(_I64, -LANES))  # n - n % 8
    pre = builder.block
    head, body, fold = (fn.append_basic_block(name)
                        for name in ("lanes.head", "lanes.body", "lanes.fold"))
    builder.branch(head)
    builder.position_at_end(head)
    i, acc = builder.phi(_I64), builder.phi(_VEC)
    i.add_incoming(ir.Constant(_I64, 0), pre)
    acc.add_incoming(ir.Constant(_VEC, None), pre)
    builder.cbranch(builder.icmp_signed("<", i, full), body, fold)

    builder.position_at_end(body)
    terms, stores = term([builder.load(_vector_pointer(builder, p, i), align=8) for p in reads],
                         True)
    for pointer, value in zip(writes, stores):
        builder.store(value, _vector_pointer(builder, pointer, i), align=8)
    i.add_incoming(builder.add(i, ir.Constant(_I64, LANES)), builder.block)
    acc.add_incoming(builder.fadd(acc, terms), builder.block)
    builder.branch(head)

    # the last n % 8 coordinates, added one by one to the folded lanes
    builder.position_at_end(fold)
    folded = _fold(builder, acc)
    tail_head, tail_body, done = (fn.append_basic_block(name)
                                  for name in ("lanes.tail", "lanes.step", "lanes.done"))
    builder.branch(tail_head)
    builder.position_at_end(tail_head)
    k, total = builder.phi(_I64), builder.phi(_F64)
    k.add_incoming(full, fold)
    total.add_incoming(folded, fold)
    builder.cbranch(builder.icmp_signed("<", k, n), tail_body, done)

    builder.position_at_end(tail_body)
    value, stores = term([builder.load(builder.gep(p, [k])) for p in reads], False)
    for pointer, v in zip(writes, stores):
        builder.store(v, builder.gep(pointer, [k]))
    k.add_incoming(builder.add(k, ir.Constant(_I64, 1)), builder.block)
    total.add_incoming(builder.fadd(total, value), builder.block)
    builder.branch(tail_head)
    builder.position_at_end(done)
    return total


def _splat(builder, value, kind=_F64):
    """A scalar repeated in all 8 lanes."""
    vec_type = ir.VectorType(kind, LANES)
    vec = builder.insert_element(ir.Constant(vec_type, None), value, ir.Constant(ir.IntType(32), 0))
    return builder.shuffle_vector(vec, ir.Constant(vec_type, ir.Undefined),
                                  ir.Constant(ir.VectorType(ir.IntType(32), LANES), None))


_PTR = types.CPointer(types.float64)


def _at(builder, pointer, start):
    """``&pointer[start]``: each array is passed as (its data pointer, the first coordinate)."""
    return builder.gep(pointer, [start])


@intrinsic
def lane_dot(typingctx, x, x0, z, z0, n):
    """sum_i x[x0 + i] z[z0 + i] over i < n, in the lanes' order (arith.dot)."""
    def codegen(context, builder, signature, args):
        xp, zp = _at(builder, args[0], args[1]), _at(builder, args[2], args[3])
        return _lane_loop(builder, args[4], [xp, zp], [], lambda v,
                          wide: (builder.fmul(v[0], v[1]), []))

    return types.float64(_PTR, types.int64, _PTR, types.int64, types.int64), codegen


@intrinsic
def lane_sqnorm(typingctx, x, x0, n):
    """sum_i x[x0 + i]^2 over i < n, in the lanes' order (arith.sqnorm)."""
    def codegen(context, builder, signature, args):
        xp = _at(builder, args[0], args[1])
        return _lane_loop(builder, args[2], [xp], [], lambda v,
                          wide: (builder.fmul(v[0], v[0]), []))

    return types.float64(_PTR, types.int64, types.int64), codegen


@intrinsic
def lane_step(typingctx, z, x, x0, n, eta, s, lam):
    """The OGD update of ``z[:n]`` in place, z[i] <- z[i] - eta (s x[x0 + i] + lam z[i]), returning
    ||z||^2 of the result (the lanes' order): one pass over z and the row."""
    def codegen(context, builder, signature, args):
        zp, xp = args[0], _at(builder, args[1], args[2])
        wide_args = [_splat(builder, a) for a in args[4:7]]

        def term(v, wide):
            (zv, xv), (eta, s, lam) = v, wide_args if wide else args[4:7]
            new = builder.fsub(
                zv, builder.fmul(eta, builder.fadd(builder.fmul(s, xv), builder.fmul(lam, zv))))
            return builder.fmul(new, new), [new]

        return _lane_loop(builder, args[3], [zp, xp], [zp], term)

    return types.float64(_PTR, _PTR, types.int64, types.int64, types.float64, types.float64,
                         types.float64), codegen


@intrinsic
def lane_axpy(typingctx, z, x, x0, n, a):
    """z[i] <- z[i] + x[x0 + i] a for i < n, in place, returning ||z||^2 of the result (the lanes'
    order)."""
    def codegen(context, builder, signature, args):
        zp, xp = args[0], _at(builder, args[1], args[2])
        wide_a = _splat(builder, args[4])

        def term(v, wide):
            new = builder.fadd(v[0], builder.fmul(v[1], wide_a if wide else args[4]))
            return builder.fmul(new, new), [new]

        return _lane_loop(builder, args[3], [zp, xp], [zp], term)

    return types.float64(_PTR, _PTR, types.int64, types.int64, types.float64), codegen
