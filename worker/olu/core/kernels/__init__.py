"""The engine's compiled (numba) kernels, one module per job: :mod:`.ogd` (the OGD micro-batch
steps), :mod:`.merge` (index runs and tombstone sets), :mod:`.ingest` (``learn_many``'s checked
front), :mod:`.api` (what the estimators call, by name), :mod:`.warmup` (compile them all at
start-up). The toolkit they are written with (the decorator, intrinsics, lanes, BLAKE2b, sorted
keys) is the bottom layer :mod:`worker.compiled`.

Nothing is imported here: importing numba takes ~0.2 s, and the index imports :mod:`.merge` alone.
"""
