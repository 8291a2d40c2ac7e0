"""The package's compiled-code toolkit, its bottom layer: what every numba kernel is written with.

:mod:`.jit` (the decorator, the disk cache, the switch to the pure-numpy reference),
:mod:`.cache` (the cache stamp over every compiled source, so kernels and their helpers may live in
several modules), :mod:`.intrinsics` (raw pointers, unaligned loads, a 64x64-bit product),
:mod:`.lanes` (eight-lane sums in one fixed order, the same bits on every CPU), :mod:`.blake2b`
(record keys of byte strings), :mod:`.sorted_keys` (searches and the two-bit filter).

It imports nothing of the package: the engine (:mod:`worker.olu`), the stream's readers and the
registry formats build their kernels on it. Nothing is imported here (numba takes ~0.2 s).
"""
