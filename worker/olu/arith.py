"""One arithmetic for every result the engine promises bit for bit, on every CPU.

A reduction's value depends on the order of its additions. numpy's BLAS-backed products
(``x @ z``, ``np.dot``, ``np.linalg.norm``) take the order, and whether a multiply and an add are
fused, from the BLAS kernel the process picked for its CPU (OpenBLAS chooses among Prescott,
Haswell, Zen, SkylakeX, ... at load time), and numpy's own SIMD loops (``np.exp``, ``np.log``)
change with the CPU features they dispatch on. So the engine defines its own order, and both the
compiled kernels (``worker/compiled/lanes.py``) and this pure-numpy reference follow it exactly:

- a sum over coordinates 0..d-1 runs in **eight lanes**: coordinate i < d - d % 8 goes to lane
  ``i % 8``, each lane adds its terms in order from 0.0; the lanes fold as
  ``((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))``; the last ``d % 8`` terms are then added
  one by one. Eight independent chains let the kernels add a vector of eight at a time (the chain
  of a left-to-right sum kept a wide model waiting on one addition after another) while every
  addition stays where the definition puts it;
- an element-wise product or sum is correctly rounded whatever SIMD width computes it, so ``a * b``
  is the same on every CPU, and nothing is fused (the kernels have no fast-math flags);
- ``np.add.accumulate`` along an axis is defined element by element (``out[i] = out[i-1] +
  in[i]``): a lane's strict in-order sum whatever the CPU (a first term of -0.0 can only change
  the sign of a zero, which the final ``+ 0.0`` of
  :func:`fold` settles as the kernels' 0.0 start does);
- square roots are correctly rounded everywhere (IEEE 754), and ``math.exp`` calls the same C
  library function the compiled kernels call.

Where no result is promised bit for bit (a subscriber's predictions, deletion-time solves whose
outcome is stored and adopted on replay) BLAS stays: see docs/worker.md 4.3.

>>> x, z = np.array([1e16, 1.0, -1e16]), np.array([1.0, 1.0, 1.0])
>>> dot(x, z)  # d < 8: no lane, ((0 + 1e16) + 1) - 1e16: the 1 is lost, on every CPU
0.0
>>> # lanes 0 and 4 cancel, lane 1 is kept
>>> dot(np.array([1e16, 1.0, 0, 0, -1e16, 0, 0, 0]), np.ones(8))
1.0
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

LANES = 8


def fold(lanes: np.ndarray) -> np.ndarray:
    """((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)) over the last axis, plus 0.0."""
    lane = [lanes[..., k] for k in range(LANES)]
    return ((lane[0] + lane[4]) + (lane[2] + lane[6])) + (
        (lane[1] + lane[5]) + (lane[3] + lane[7])) + 0.0


def _lane_sum(p: np.ndarray) -> float:
    """The engine's sum of the terms ``p`` (module docstring)."""
    full = len(p) - len(p) % LANES
    total = float(fold(np.add.accumulate(p[:full].reshape(-1, LANES), axis=0)[-1])) if full else 0.0
    for term in p[full:].tolist():
        total += term
    return total


def dot(a: np.ndarray, b: np.ndarray) -> float:
    """sum_i a_i b_i in the engine's order (the kernels' ``lane_dot``), as a Python float."""
    return _lane_sum(np.multiply(a, b))


def sqnorm(a: np.ndarray) -> float:
    """||a||^2 = :func:`dot` (a, a)."""
    return dot(a, a)


def norm(a: np.ndarray) -> float:
    """||a||, the correctly rounded square root of :func:`sqnorm`."""
    return math.sqrt(sqnorm(a))


def _row_sums(X: np.ndarray, other: np.ndarray) -> np.ndarray:
    """:func:`dot` of each row of ``X`` with ``other`` (a vector, or a matrix row by row): one pass
    per block of eight columns, the eight lanes side by side, then the tail's columns."""
    n, d = X.shape
    full = d - d % LANES
    lanes = np.zeros((n, LANES))
    for i in range(0, full, LANES):
        lanes += X[:, i:i + LANES] * other[..., i:i + LANES]
    acc = fold(lanes) if full else np.zeros(n)
    for i in range(full, d):
        acc += X[:, i] * other[..., i]
    return acc


def matvec(X: np.ndarray, z: np.ndarray) -> np.ndarray:
    """``X @ z`` with each row's dot product added as :func:`dot` adds it."""
    return _row_sums(X, z)


def rmatvec(X: np.ndarray, m: np.ndarray) -> np.ndarray:
    """``X.T @ m``: the rows ``m[r] X[r]`` summed in the
    fixed pairwise order of :func:`sum_rows`."""
    return sum_rows(X * m[:, None])


def gram(X: np.ndarray) -> np.ndarray:
    """``X.T @ X``: column j is :func:`rmatvec` (X, X[:, j]),
    so the matrix is symmetric bit for bit."""
    return np.stack([rmatvec(X, X[:, j]) for j in range(X.shape[1])],
                    axis=1) if X.shape[1] else np.zeros((0, 0))


def sum_rows(P: np.ndarray) -> np.ndarray:
    """The sum of the rows of ``P`` (overwritten) in a fixed pairwise order: row i += row i + h
    while rows remain, an odd last row carried along. Only element-wise additions, each vectorised
    across a row: the order is the same on every CPU, at a few times BLAS's cost (a strict
    left-to-right sum of many rows, ``np.add.accumulate``, costs about 50 times BLAS's)."""
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
    return _row_sums(X, X)


def exp(a: np.ndarray) -> np.ndarray:
    """``np.exp`` element-wise through the C library's ``exp`` (``math.exp``): numpy's own SIMD exp
    changes with the CPU features it dispatches on (AVX2, AVX-512), the C library's does not."""
    return np.fromiter(map(math.exp, a.tolist()), np.float64, len(a))

