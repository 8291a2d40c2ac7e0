"""Compiled (numba) kernels, one module per job: :mod:`.jit` (numba set-up, the reference switch),
:mod:`.ogd` (the OGD micro-batch step), :mod:`.merge` (index runs), :mod:`.hashing` (record keys),
:mod:`.warmup` (compile them all at start-up).

Nothing is imported here: importing numba takes ~0.2 s, and the index imports :mod:`.merge` alone.
"""
