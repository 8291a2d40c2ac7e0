"""LLVM intrinsics the compiled readers share: raw pointers, unaligned loads, a 64x64-bit product.

Each is a few lines of IR that numba inlines into the kernels that call them
(worker/stream/input/insert_kernel.py, worker/formats/framed_kernel.py, the engine's kernels).
"""

from __future__ import annotations

from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

__all__ = ["data_pointer", "f32", "f64", "load8", "mul64"]


@intrinsic
def mul64(typingctx, a, b):
    """The 128-bit product of two uint64 as (high, low): one machine multiplication."""
    def codegen(context, builder, signature, args):
        wide = ir.IntType(128)
        product = builder.mul(builder.zext(args[0], wide), builder.zext(args[1], wide))
        high = builder.trunc(builder.lshr(product, ir.Constant(wide, 64)), ir.IntType(64))
        return context.make_tuple(builder, signature.return_type,
                                  (high, builder.trunc(product, ir.IntType(64))))

    return types.UniTuple(types.uint64, 2)(types.uint64, types.uint64), codegen



@intrinsic
def load8(typingctx, pointer, offset):
    """The eight bytes at ``pointer + offset`` as one little-endian uint64 (any alignment)."""
    def codegen(context, builder, signature, args):
        address = builder.gep(args[0], [args[1]])
        return builder.load(builder.bitcast(address, ir.IntType(64).as_pointer()), align=1)

    return types.uint64(pointer, offset), codegen



@intrinsic
def data_pointer(typingctx, array):
    """The raw pointer to an array's first element (valid while the array is alive)."""
    def codegen(context, builder, signature, args):
        return context.make_array(signature.args[0])(context, builder, args[0]).data

    return types.CPointer(array.dtype)(array), codegen



@intrinsic
def f64(typingctx, pointer, offset):
    """The little-endian double at byte ``pointer + offset`` (any alignment)."""
    def codegen(context, builder, signature, args):
        address = builder.gep(args[0], [args[1]])
        return builder.load(builder.bitcast(address, ir.DoubleType().as_pointer()), align=1)

    return types.float64(pointer, offset), codegen



@intrinsic
def f32(typingctx, pointer, offset):
    """The little-endian float at byte ``pointer + offset``, widened exactly to a double."""
    def codegen(context, builder, signature, args):
        address = builder.gep(args[0], [args[1]])
        value = builder.load(builder.bitcast(address, ir.FloatType().as_pointer()), align=1)
        return builder.fpext(value, ir.DoubleType())

    return types.float64(pointer, offset), codegen
