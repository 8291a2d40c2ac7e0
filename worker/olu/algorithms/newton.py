"""Second-order active OLU for ridge: exact ERM re-solve at each
deletion ([P0] Alg. 3, docs/algorithms.md 7).

[P0] Algorithm 3 is only a sketch (no theorem, a sign error, an undefined constant M;
docs/algorithms.md 7). For the squared loss the Hessian does not depend on the iterate, so one
Newton step on the retained objective lands exactly on its minimiser, and the retained Hessian can
be kept as a running d x d sum (docs/algorithms.md 7.2).
:class:`RidgeNewton` (``"active-newton"``) does that.

What happens
------------
OGD runs as in every model. Besides the retained examples (needed to subtract a record's x x^T
when only its id arrives) it keeps the sufficient statistics of the retained set,
A = sum x x^T, b = sum y x and the count n. On the deletion of an applied record it removes the
record's terms and rows, then moves the iterate to

    z = argmin_{z in K} (1/n) sum_{retained} [ (1/2)(x.z - y)^2 + (lam/2)||z||^2 ]
      = argmin_{z in K} (1/2) z^T (A/n + lam I) z - (b/n)^T z

(the unconstrained solution (A/n + lam I)^{-1} b/n when it lies in K, otherwise the exact
ball-constrained minimiser, found on the eigenbasis by a one-dimensional search for the Lagrange
multiplier; never a mere rescaling, which would not be the minimiser over K). OGD continues from
there. No noise is added: outcome ``exact``, no budget, no order restriction.

Target: ERM rather than the OGD trajectory
-----------------------------------------
Re-creating the OGD iterate of a retrain (what :class:`~worker.olu.algorithms.retrain.Retrain` does)
costs O(t) sequential steps. The ERM minimiser of the retained losses is the point the OGD iterate
tracks and the comparator z_i* of the OLU regret (docs/guarantee.md 2.5, restricted to the data seen
so far), and it costs O(d^3) from the statistics. For privacy either target is fine; what matters is
the property below.

Why no noise is needed (soundness)
----------------------------------
The OLU reference process (docs/guarantee.md 2.2) runs *the same algorithm* on the masked stream,
with the same public deletion times. Right after deletion i the real state is E(R_i), where R_i is
the retained multiset (every applied example not among u[1..i]) and E is a deterministic map; the
reference, which never saw u[1..i], holds the same multiset at tau[i] and applies the same E, so
both states are **equal**, and every later output of interval i is the same deterministic map
(OGD on the same future examples) of it: D_alpha = 0 <= alpha eps for every interval, which is
at least as private as the passive calibration. (For interval i, records deleted later, u[i+1..],
do differ before tau[i]; that does not matter, because interval i's outputs start at E(R_i).)

This needs E(R_i) to be a function of the multiset *bit for bit*. A float running sum fails that:
fl(fl(S + x x^T) - x x^T) != S in general, and the rounding residue depends on the deleted x. We
therefore keep A and b **exactly**, as integers: each feature is quantised to the public grid
R 2^-31 (q = rint(x 2^31/R), |q| <= 2^31; labels on Y 2^-31), so every product q_j q_k fits in
int64, and the sums are kept as two int64 limbs (hi 2^31 + lo with 0 <= lo < 2^31, canonical).
Integer addition is exact, associative and commutative: after a removal the limbs are identical to
those of a run that never saw the record, in any order (tests check this, and that the state after
deletions equals a fresh model fed the masked stream and re-solved at the same times). The
quantisation only perturbs the *target* (relative error ~2^-32 in A and b); OGD itself uses the
raw features.
"""

from __future__ import annotations

import numpy as np

from ..core.base import Deletion, OnlineUnlearner
from ..core.examples import ExampleStore
from ..core.replay import load_store, record_outcome, store_arrays
from ..exceptions import InvalidState

_BITS = 31
_LO_MASK = (1 << _BITS) - 1
_HALF = 16  # split of a quantised value: q = h 2^16 + l with 0 <= l < 2^16
_CHUNK = 1 << 20  # rows per exact product: 2^20 products of magnitude <= 2^32 sum below 2^53


def quantise(values: np.ndarray, bound: float) -> np.ndarray:
    """rint(v 2^31 / bound), clipped to +-2^31: integers on
    the public fixed-point grid (as float64).

    >>> quantise(np.array([1.0, -0.5, 1e-12]), 1.0).tolist()
    [2147483648.0, -1073741824.0, 0.0]
    """
    q = np.rint(np.asarray(values, np.float64) * (float(1 << _BITS) / bound))
    return np.clip(q, -float(1 << _BITS), float(1 << _BITS), out=q)


class ExactSums:
    """An integer matrix/vector sum kept exactly as two canonical int64 limbs (hi 2^31 + lo).

    Inputs are integer-valued float64 arrays with entries within +-2^31 (see :func:`quantise`).

    >>> s = ExactSums((2,))
    >>> q = np.array([[3.0, -2.0**31], [2.0**31, 5.0]])
    >>> s.add_cross(q, q[:, :1]); s.add_cross(q[:1], q[:1, :1], sign=-1)
    >>> s.value().tolist() == [(2**31) ** 2, 5 * 2**31]
    True
    """

    def __init__(self, shape):
        self.hi = np.zeros(shape, np.int64)
        self.lo = np.zeros(shape, np.int64)

    def _add(self, part: np.ndarray, shift: int) -> None:
        # part 2^shift (0 <= shift < 31) = (part >> (31 - shift)) 2^31 + (part & mask) 2^shift
        self.hi += part >> (_BITS - shift)
        self.lo += (part & ((1 << (_BITS - shift)) - 1)) << shift

    def _normalise(self) -> None:
        self.hi += self.lo >> _BITS  # canonical: 0 <= lo < 2^31
        self.lo &= _LO_MASK

    def add_cross(self, Q1: np.ndarray, Q2: np.ndarray, sign: int = 1) -> None:
        """Add sign * Q1^T Q2 exactly (Q2 a single column for a vector sum)."""
        vector = self.hi.ndim == 1
        if len(Q1) == 1:  # one row: the int64 products (|q q'| <= 2^62) are exact as they are
            p = np.outer(Q1[0].astype(np.int64), Q2[0].astype(np.int64))
            p = p[:, 0] if vector else p
            self._add(-p if sign < 0 else p, 0)
            self._normalise()
            return
        for start in range(0, len(Q1), _CHUNK):
            a, b = Q1[start:start + _CHUNK], Q2[start:start + _CHUNK]
            # 16-bit halves q = h 2^16 + l (exact in float64): every product is an integer below
            # 2^32 in magnitude and every partial sum of a chunk below 2^53, so BLAS sums them
            # exactly, in whatever order it likes.
            ah = np.floor(a * (1.0 / (1 << _HALF)))
            al = a - ah * float(1 << _HALF)
            bh = np.floor(b * (1.0 / (1 << _HALF)))
            bl = b - bh * float(1 << _HALF)
            hh = (ah.T @ bh).astype(np.int64)
            mid = (ah.T @ bl).astype(np.int64) + (al.T @ bh).astype(np.int64)
            ll = (al.T @ bl).astype(np.int64)
            if vector:
                hh, mid, ll = hh[:, 0], mid[:, 0], ll[:, 0]
            if sign < 0:
                hh, mid, ll = -hh, -mid, -ll
            self.hi += 2 * hh  # hh 2^32 = (2 hh) 2^31
            self._add(mid, _HALF)
            self._add(ll, 0)
            self._normalise()

    def value(self):
        """The exact integers (Python ints, object array): for tests."""
        return self.hi.astype(object) * (1 << _BITS) + self.lo.astype(object)

    def as_float(self) -> np.ndarray:
        return self.hi.astype(np.float64) * float(1 << _BITS) + self.lo.astype(np.float64)


def ball_constrained_quadratic_min(H: np.ndarray, c: np.ndarray, radius: float) -> np.ndarray:
    """argmin_{||z|| <= radius} (1/2) z^T H z - c^T z for symmetric positive definite H.

    >>> ball_constrained_quadratic_min(np.diag([1.0, 4.0]), np.array([1.0, 4.0]), 10.0).tolist()
    [1.0, 1.0]
    >>> z = ball_constrained_quadratic_min(np.diag([1.0, 4.0]), np.array([10.0, 0.0]), 2.0)
    >>> [round(v, 12) for v in z.tolist()]
    [2.0, 0.0]
    """
    evals, V = np.linalg.eigh(H)
    cq = V.T @ c
    w = cq / evals
    if float(np.linalg.norm(w)) <= radius:
        return V @ w
    # KKT: z(nu) = (H + nu I)^{-1} c with ||z(nu)|| = radius, nu > 0; the norm decreases in nu.
    lo, hi = 0.0, float(np.linalg.norm(cq)) / radius
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if not lo < mid < hi:
            break
        if float(np.linalg.norm(cq / (evals + mid))) > radius:
            lo = mid
        else:
            hi = mid
    z = V @ (cq / (evals + hi))
    n = float(np.linalg.norm(z))
    return z if n <= radius else z * (radius / n)


class RidgeNewton(OnlineUnlearner):
    """Ridge OGD that re-solves the retained ERM exactly at each deletion (no noise needed).

    >>> m = RidgeNewton(dim=2, loss="ridge", l2=0.1, radius=5.0)
    >>> _ = m.learn_many(["a", "b", "c"], [[0.6, 0.8], [0.8, -0.6], [1.0, 0.0]], [0.5, -0.5, 1.0])
    >>> d = m.unlearn_one("b")
    >>> d.outcome, d.sigma, m.accountant.deletions, m.retained
    ('exact', 0.0, 0, 2)
    >>> H = np.outer([.6, .8], [.6, .8]) / 2 + np.outer([1, 0], [1, 0]) / 2 + 0.1 * np.eye(2)
    >>> g = (0.5 * np.array([.6, .8]) + np.array([1.0, 0.0])) / 2
    >>> bool(np.allclose(m.z, np.linalg.solve(H, g), atol=1e-8))
    True
    """

    algorithm = "active-newton"
    example_params = {"loss": "ridge"}
    keeps_examples = True
    portable_deletions = False  # the deletion's solve is LAPACK's eigh (learning is exact integers)
    losses = ("ridge",)
    loss_refusal = (
        "its deletion is one exact Newton step from sums it keeps exactly, which needs the "
        "quadratic loss (a Hessian that does not depend on the iterate)")

    def __init__(self, dim: int, **kwargs):
        super().__init__(dim, **kwargs)
        self.examples = ExampleStore(dim)
        self.gram = ExactSums((dim, dim))
        self.moment = ExactSums((dim,))
        self.retained = 0
        self.counters["refits"] = 0

    # --------------------------------------------------------------- statistics
    def _quantised(self, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return quantise(X, self.features.bound), quantise(y, self.loss.label_bound)[:, None]

    def _account(self, X: np.ndarray, y: np.ndarray, sign: int) -> None:
        Q, qy = self._quantised(np.atleast_2d(X), np.atleast_1d(y))
        self.gram.add_cross(Q, Q, sign)
        self.moment.add_cross(Q, qy, sign)
        self.retained += sign * len(Q)

    def statistics(self) -> tuple[np.ndarray, np.ndarray, int]:
        """(A, b, n) of the retained set in real units (from the exact integer sums)."""
        R, Y, s = self.features.bound, self.loss.label_bound, float(1 << _BITS)
        A = self.gram.as_float() * ((R / s) * (R / s))
        b = self.moment.as_float() * ((R / s) * (Y / s))
        return A, b, self.retained

    def erm(self) -> np.ndarray:
        """The minimiser over K of the retained regularised average loss (0 with no data)."""
        A, b, n = self.statistics()
        if n <= 0:
            return np.zeros(self.dim)
        H = A / n + self.loss.lam * np.eye(self.dim)
        return ball_constrained_quadratic_min(0.5 * (H + H.T), b / n, self.ball.radius)

    def refit(self) -> None:
        """Move the iterate to :meth:`erm` (what each deletion
        does; deterministic in the retained data).

        Public so that a reference process (a model that never saw the deleted records) can be
        re-solved at the same deletion times; calling it elsewhere is a public schedule change.
        """
        self.z = self.erm()
        self.counters["refits"] += 1

    # ----------------------------------------------------------------- learning
    def _after_learn(self, key: int, step: int, x: np.ndarray, y: float) -> None:
        self.examples.append(key, step, x, y)
        self._account(x[None, :], np.array([y]), +1)

    def _after_learn_batch(self, keys, steps, X, y) -> None:
        self.examples.extend(keys, steps, X, y)
        self._account(np.asarray(X, np.float64), np.asarray(y, np.float64), +1)

    # --------------------------------------------------------------- unlearning
    def _delete(self, key: int, steps: list[int]) -> Deletion:
        rows = [self.examples.row_of_step(u) for u in steps if self.examples.has_step(u)]
        if rows:
            X = np.array([r[0] for r in rows])
            y = np.array([r[1] for r in rows])
            self._account(X, y, -1)
            X.fill(0.0)
            y.fill(0.0)
        self.examples.remove_steps(steps)  # invariant 6: the raw rows are zeroed
        self.refit()
        record_outcome(self, "exact", steps, order="any", retained=self.retained)
        return Deletion("exact", self.accountant.deletions, 0.0, 0.0, tuple(steps))

    # -------------------------------------------------------------------- state
    def _export_arrays(self) -> dict[str, np.ndarray]:
        return {**store_arrays(self.examples), "gram_hi": self.gram.hi.copy(),
                "gram_lo": self.gram.lo.copy(),
                "moment_hi": self.moment.hi.copy(), "moment_lo": self.moment.lo.copy()}

    def _export_extra(self) -> dict:
        return {"retained": self.retained}

    def _import(self, meta: dict, arrays: dict) -> None:
        self.examples = load_store(self, arrays)
        applied = self.index.live_steps()
        if not np.array_equal(applied, self.examples.steps):
            raise InvalidState("retained examples do not match the applied-record index")
        d = self.dim
        for name, shape, target in (("gram", (d, d), self.gram), ("moment", (d,), self.moment)):
            hi, lo = np.asarray(arrays[name + "_hi"]), np.asarray(arrays[name + "_lo"])
            if (hi.shape != shape or lo.shape != shape or hi.dtype != np.int64
                or lo.dtype != np.int64):
                raise InvalidState(f"{name} statistics must be int64 arrays of shape {shape}")
            if np.any(lo < 0) or np.any(lo > _LO_MASK):
                raise InvalidState(f"{name} statistics are not in canonical form")
            target.hi, target.lo = hi.copy(), lo.copy()
        self.retained = int(meta["extra"]["retained"])
        if self.retained != len(self.examples):
            raise InvalidState("retained count does not match the retained examples")
