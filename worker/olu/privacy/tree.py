"""Tree-based aggregation (the binary mechanism): continual release of noisy prefix sums.

docs/algorithms.md 11.3 (paper Algorithm 5, in the O(m d) streaming form of Chan-Shi-Song described
in docs/algorithms.md 11.3). Record t closes exactly one dyadic block, the node at level
``level_closed_at(t)``; that node gets fresh Gaussian noise once, and the prefix sum at t adds the
``popcount(t)`` live nodes picked by the bits of t. So each record enters at most ``m = ceil(log2 n)
+ 1`` noisy nodes over the horizon n, and at most
  ``record_levels(t) = floor(log2 t) + 1`` of them by time t
(record 1 attains it; docs/accounting.md 5.2).

What the tree keeps, and the privacy invariants (docs/worker.md 4)
---------------------------------------------------------------------
The mechanism needs two things across events: the exact sums of the open blocks (a new node is
the exact sum of the blocks it merges plus fresh noise, never a sum of noisy nodes), and the noisy
values of the live nodes (already-released prefix sums are made of them). Their difference is the
noise of at most m nodes, so the binary mechanism's continuation state always determines the
noise of its live nodes. A restart must also reproduce every node that a published release used:
re-drawing one would hand out a second, independent noisy view of the same block sum, which is
what invariant 2 forbids for deletions and what docs/algorithms.md 11.6 forbids here ("replaying a
record with fresh noise would spend budget twice").

So the noise of node ``c`` (the node closed by record c) is a pure function of a secret 128-bit
key drawn once from the model's noise generator (OS entropy in production) and of (stream, c):
:class:`NodeNoise`. The consequences:

- noise vectors are never stored, logged or released: each one exists only inside :meth:`add`
  (and inside :meth:`TreeAggregator.restore`, which re-forms the live nodes bit-exactly);
- a snapshot holds the exact open-block sums and the key, never a noise vector or a noisy node;
- replaying events from a snapshot re-forms the same nodes bit for bit (invariant 3), so a crash
  never yields a second noisy view of a node and a re-published release is byte-identical.

The key is as sensitive as the exact sums it sits next to: both live only in worker memory and in
the (trusted) snapshot store, like the other algorithms' internal state.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..exceptions import ConfigError, InvalidState
from .analysis.checks import count, real

__all__ = ["NodeNoise", "TreeAggregator", "level_closed_at", "record_levels", "tree_levels"]

_KEY_BITS = 128


def tree_levels(horizon: int) -> int:
    """m = ceil(log2 n) + 1, the number of tree levels for horizon n (docs/algorithms.md 11.3).

    >>> tree_levels(1), tree_levels(2), tree_levels(10_000), tree_levels(2**20)
    (1, 2, 15, 21)
    """
    count("horizon", horizon, minimum=1, error=ConfigError)
    return (horizon - 1).bit_length() + 1  # exact ceil(log2 n) + 1, no float log


def record_levels(t: int) -> int:
    """k(t) = floor(log2 t) + 1: the most released nodes any one record is in by time t (0 at t=0).

    >>> [record_levels(t) for t in (0, 1, 10, 100, 1000, 10_000)]
    [0, 1, 4, 7, 10, 14]
    """
    return int(t).bit_length()


def level_closed_at(t: int) -> int:
    """Level of the node that record t closes: the number of trailing zero bits of t (t >= 1).

    >>> [level_closed_at(t) for t in (1, 2, 3, 4, 12)]
    [0, 1, 0, 2, 2]
    """
    return (t & -t).bit_length() - 1


class NodeNoise:
    """N(0, sigma^2 I_dim) for each tree node, reproducible from a secret key.

    Node ``c`` of stream ``s`` draws from a Philox stream whose counter's high words are (c, s),
    so distinct nodes never share random bits. Philox is a counter-based generator (Salmon et al.
    2011): a node's noise does not depend on how many other nodes were drawn before it.

    >>> a = NodeNoise(key=12345, sigma=2.0, dim=3)
    >>> bool(np.array_equal(a(7), NodeNoise(12345, 2.0, 3)(7))), bool(np.array_equal(a(7), a(8)))
    (True, False)
    """

    def __init__(self, key: int, sigma: float, dim: int, stream: int = 0):
        if not (isinstance(key, int) and 0 <= key < 1 << _KEY_BITS):
            raise ConfigError(f"noise key must be an integer in [0, 2**{_KEY_BITS})")
        real("sigma", sigma, lo=0.0, error=ConfigError)
        self._key, self.sigma, self.dim, self.stream = key, float(sigma), dim, int(stream)

    @staticmethod
    def new_key(rng: np.random.Generator) -> int:
        """A fresh 128-bit key from ``rng`` (the model's noise
        generator: OS entropy in production)."""
        return int.from_bytes(rng.bytes(_KEY_BITS // 8), "little")

    def __call__(self, node: int) -> np.ndarray:
        counter = np.array([0, 0, node, self.stream], dtype=np.uint64)
        gen = np.random.Generator(np.random.Philox(key=self._key, counter=counter))
        return self.sigma * gen.standard_normal(self.dim)

    def __repr__(self) -> str:  # never show the key
        return f"NodeNoise(sigma={self.sigma!r}, dim={self.dim}, stream={self.stream})"


class TreeAggregator:
    """Streaming binary mechanism over d-dimensional terms: ``add(z)`` returns the noisy prefix sum.

    ``noise(c)`` gives the noise vector of the node closed by record c (None: no noise, the sums
    are exact). Memory: two (m, d) arrays.

    >>> tree = TreeAggregator(dim=2, horizon=8)
    >>> [tree.add(np.array([float(i), 1.0])).tolist() for i in (1, 2, 3)]
    [[1.0, 1.0], [3.0, 2.0], [6.0, 3.0]]
    >>> tree.t, tree.nodes_in_prefix
    (3, 2)
    """

    def __init__(self, dim: int, horizon: int, noise: Callable[[int], np.ndarray] | None = None):
        self.levels = tree_levels(horizon)
        self.dim, self.horizon, self._noise = dim, horizon, noise
        self.t = 0
        self._exact = np.zeros((self.levels, dim))  # exact sums of the open (live) blocks
        self._noisy = np.zeros((self.levels, dim))  # live nodes: exact block sum + its noise

    @property
    def nodes_in_prefix(self) -> int:
        """popcount(t): noisy nodes the current prefix sum is made of."""
        return int(self.t).bit_count()

    def add(self, z: np.ndarray) -> np.ndarray:
        """Append the term of record t+1; return the noisy prefix sum of records 1..t+1."""
        if self.t >= self.horizon:
            raise OverflowError(f"the tree's horizon of {self.horizon} records is used up")
        t = self.t + 1
        i = level_closed_at(t)
        # Merge the lower blocks into the new level-i block; they are no longer live.
        block = np.asarray(z, dtype=np.float64) + self._exact[:i].sum(axis=0)
        self._exact[:i] = 0.0
        self._noisy[:i] = 0.0
        self._exact[i] = block
        self._noisy[i] = self._node(i, t)
        self.t = t
        return self.prefix()

    def prefix(self) -> np.ndarray:
        """The current noisy prefix sum: the live nodes, lowest level first (a fixed order)."""
        out = np.zeros(self.dim)
        for j in range(self.levels):
            if (self.t >> j) & 1:
                out = out + self._noisy[j]
        return out

    def _node(self, level: int, closed_at: int) -> np.ndarray:
        if self._noise is None:
            return self._exact[level].copy()
        return self._exact[level] + self._noise(closed_at)  # the noise vector dies with this frame

    # ------------------------------------------------------------------ state
    def exact_sums(self) -> np.ndarray:
        """The exact open-block sums (m, d): with ``t`` and the noise source, the whole state."""
        return self._exact.copy()

    @classmethod
    def restore(cls, dim: int, horizon: int, noise, t: int, exact: np.ndarray) -> TreeAggregator:
        """Rebuild from ``t`` and :meth:`exact_sums`; the live nodes are re-formed bit-exactly."""
        tree = cls(dim, horizon, noise)
        exact = np.asarray(exact, dtype=np.float64)
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t <= horizon:
            raise InvalidState(f"tree step {t!r} is outside [0, {horizon}]")
        if exact.shape != (tree.levels, dim) or not np.all(np.isfinite(exact)):
            raise InvalidState(
                f"tree sums have shape {exact.shape}, expected ({tree.levels}, {dim}) and finite")
        dead = [j for j in range(tree.levels) if not (t >> j) & 1 and np.any(exact[j] != 0.0)]
        if dead:
            raise InvalidState(f"tree holds sums at levels {dead} that step {t} has closed")
        tree.t = t
        tree._exact = exact.copy()
        for j in range(tree.levels):
            if (t >> j) & 1:
                # node j was closed at t with bits < j cleared
                tree._noisy[j] = tree._node(j, (t >> j) << j)
        return tree
