"""``python -m tests.reliability.noise_tap run``: the worker's command line with test taps, so a
test can see the secrets a run must never leak and every byte it persisted.

Set ``OLU_TEST_NOISE_TAP`` to a directory (``OLU_TEST_*`` is reserved for tests, so the worker's
settings loader ignores it). The tap writes, inside the worker process:

* ``secrets.jsonl``: one line per deletion that drew noise, ``{"noise": hex, "pre_noise": hex}``
  (little-endian float64 bytes of the noise vector and of the pre-noise iterate it was added to);
* ``puts/<n>.bin``: every object the worker wrote to the object store, even ones deleted later
  (garbage collection, purges), so a secret that was persisted for a moment is still caught.

Nothing of this runs in production: the taps wrap the engine and obstore from outside.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
from pathlib import Path

import numpy as np
import obstore
import orjson

from worker.olu.core.base import OnlineUnlearner

TAP_ENV = "OLU_TEST_NOISE_TAP"


def install(directory: Path) -> None:
    puts = directory / "puts"
    puts.mkdir(parents=True, exist_ok=True)
    secrets = open(directory / "secrets.jsonl", "ab", buffering=0)
    lock = threading.Lock()  # snapshots are written from the writer thread
    counter = itertools.count()
    drawn: dict[int, np.ndarray] = {}  # id(model) -> the noise vector its current deletion drew

    real_noise = OnlineUnlearner._noise
    real_release = OnlineUnlearner._release_with_noise
    real_put = obstore.put

    def noise(self, sigma):
        vector = real_noise(self, sigma)
        if not self._replaying:
            drawn[id(self)] = np.array(vector, np.float64)
        return vector

    def release_with_noise(self, z_hat, shift, steps, **extra):
        pre_noise = np.array(z_hat, np.float64)  # the caller may reuse the array
        drawn.pop(id(self), None)
        result = real_release(self, z_hat, shift, steps, **extra)
        vector = drawn.pop(id(self), None)
        if vector is not None:
            line = {"noise": vector.astype("<f8").tobytes().hex(), "pre_noise": pre_noise.astype("<f8").tobytes().hex()}
            secrets.write(orjson.dumps(line) + b"\n")
        return result

    def put(store, path, data, *args, **kwargs):
        with lock:
            (puts / f"{next(counter):06d}.bin").write_bytes(bytes(data))
        return real_put(store, path, data, *args, **kwargs)

    OnlineUnlearner._noise = noise
    OnlineUnlearner._release_with_noise = release_with_noise
    obstore.put = put


def read_secrets(directory: Path) -> list[dict[str, np.ndarray]]:
    out = []
    for line in (directory / "secrets.jsonl").read_bytes().splitlines():
        entry = orjson.loads(line)
        out.append({k: np.frombuffer(bytes.fromhex(v), "<f8") for k, v in entry.items()})
    return out


def persisted(directory: Path) -> list[bytes]:
    return [path.read_bytes() for path in sorted((directory / "puts").glob("*.bin"))]


if __name__ == "__main__":
    install(Path(os.environ[TAP_ENV]))
    from worker.cli import main

    sys.exit(main(sys.argv[1:]))
