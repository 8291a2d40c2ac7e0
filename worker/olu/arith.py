"""One arithmetic for every result the engine promises bit for bit, on every CPU.

A reduction's value depends on the order of its additions. numpy's BLAS-backed products
(``x @ z``, ``np.dot``, ``np.linalg.norm``) take the order, and whether a multiply and an add are
fused, from the BLAS kernel the process picked for its CPU (OpenBLAS chooses among Prescott,
Haswell, Zen, SkylakeX, ... at load time), and numpy's own SIMD loops (``np.exp``, ``np.log``)
change with the CPU features they dispatch on. The compiled kernels (``kernels/ogd.py``) add in a
plain loop from 0.0, left to right, and never fuse (``fastmath=False``). So every reduction here
does exactly that, in pure numpy:

- an element-wise product or sum is correctly rounded whatever SIMD width computes it, so ``a * b``
  is the same on every CPU;
- ``np.add.accumulate`` is defined element by element (``out[i] = out[i-1] + in[i]``): a strict
  left-to-right sum whatever the CPU; its last entry plus 0.0 is the kernels' ``acc = 0.0;
  acc += p_i`` bit for bit (the 0.0 makes an all-negative-zero sum +0.0, as the loop does);
- square roots are correctly rounded everywhere (IEEE 754), and ``math.exp`` calls the same C
  library function the compiled kernels call.

Where no result is promised bit for bit (a subscriber's predictions, deletion-time solves whose
outcome is stored and adopted on replay) BLAS stays: see docs/worker.md 4.3.

>>> x, z = np.array([1e16, 1.0, -1e16]), np.array([1.0, 1.0, 1.0])
>>> dot(x, z)  # ((0 + 1e16) + 1) - 1e16: the 1 is lost, in this order, on every CPU
0.0
>>> sqnorm(np.array([3.0, 4.0])), norm(np.array([3.0, 4.0]))
(25.0, 5.0)
>>> X = np.array([[3.0, 4.0], [1.0, 2.0]])
>>> matvec(X, np.array([1.0, 1.0])).tolist(), rmatvec(X, np.array([1.0, 1.0])).tolist()
([7.0, 3.0], [4.0, 6.0])
>>> gram(X).tolist()
[[10.0, 14.0], [14.0, 20.0]]
"""

from __future__ import annotations

import math

import numpy as np


def dot(a: np.ndarray, b: np.ndarray) -> float:
    """sum_i a_i b_i, added left to right from 0.0 (the kernels' loop), as a Python float."""
    return float(np.add.accumulate(np.multiply(a, b))[-1]) + 0.0 if len(a) else 0.0


def sqnorm(a: np.ndarray) -> float:
    """||a||^2 = :func:`dot` (a, a)."""
    return dot(a, a)


def norm(a: np.ndarray) -> float:
    """||a||, the correctly rounded square root of :func:`sqnorm`."""
    return math.sqrt(sqnorm(a))


def matvec(X: np.ndarray, z: np.ndarray) -> np.ndarray:
    """``X @ z`` with each row's dot product added as :func:`dot` adds it: one pass per column, so a
    row's sum takes its terms left to right (``acc += X[:, i] * z[i]``)."""
    acc = np.zeros(X.shape[0])
    for i in range(X.shape[1]):
        acc += X[:, i] * z[i]
    return acc + 0.0


def rmatvec(X: np.ndarray, m: np.ndarray) -> np.ndarray:
    """``X.T @ m``: the rows ``m[r] X[r]`` summed in the fixed pairwise order of :func:`sum_rows`."""
    return sum_rows(X * m[:, None])


def gram(X: np.ndarray) -> np.ndarray:
    """``X.T @ X``: column j is :func:`rmatvec` (X, X[:, j]), so the matrix is symmetric bit for bit."""
    return np.stack([rmatvec(X, X[:, j]) for j in range(X.shape[1])], axis=1) if X.shape[1] else np.zeros((0, 0))


def sum_rows(P: np.ndarray) -> np.ndarray:
    """The sum of the rows of ``P`` (overwritten) in a fixed pairwise order: row i += row i + h while
    rows remain, an odd last row carried along. Only element-wise additions, each vectorised across a
    row: the order is the same on every CPU, at a few times BLAS's cost (a strict left-to-right sum
    of many rows, ``np.add.accumulate``, costs about 50 times BLAS's)."""
    n = P.shape[0]
    if n == 0:
        return np.zeros(P.shape[1:])
    while n > 1:
        h = n // 2
        P[:h] += P[h:2 * h]
        if n % 2:
            P[h] = P[2 * h]
            h += 1
        n = h
    return P[0] + 0.0


def row_sqnorms(X: np.ndarray) -> np.ndarray:
    """||x_r||^2 of every row, each added as :func:`sqnorm` adds it."""
    acc = np.zeros(X.shape[0])
    for i in range(X.shape[1]):
        acc += X[:, i] * X[:, i]
    return acc + 0.0


def exp(a: np.ndarray) -> np.ndarray:
    """``np.exp`` element-wise through the C library's ``exp`` (``math.exp``): numpy's own SIMD exp
    changes with the CPU features it dispatches on (AVX2, AVX-512), the C library's does not."""
    return np.fromiter(map(math.exp, a.tolist()), np.float64, len(a))

