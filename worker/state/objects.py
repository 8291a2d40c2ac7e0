"""Judging a stored object against the one a writer is about to create at the same key: whose it
is (misplaced, from a newer build) and whether its arrays are bit-identical to ours."""

from __future__ import annotations

import numpy as np

from .codec import FORMAT_VERSION, MAGIC


def misplaced(stored_envelope, envelope: dict) -> str | None:
    """Why a readable object cannot belong at the key ``envelope`` describes, or None.

    None also for an envelope in another layout version (a newer build's object is not ours to
    judge: a conflict) and for one that matches (then the content decides).
    """
    if not isinstance(stored_envelope, dict):
        return "no snapshot envelope in the header"
    if stored_envelope.get("layout") != envelope["layout"]:
        return None
    wrong = [f"{k}={stored_envelope.get(k)!r} (expected {v!r})" for k, v in envelope.items()
             if stored_envelope.get(k) != v]
    return "foreign snapshot: " + ", ".join(wrong) if wrong else None


def newer_format(blob: bytes) -> bool:
    """A snapshot header this build does not know (e.g. written by a newer build in a rollout)."""
    return (len(blob) > len(MAGIC) and bytes(blob[:len(MAGIC)]) == MAGIC
            and blob[len(MAGIC)] != FORMAT_VERSION)


def same_arrays(ours: dict, stored: dict) -> bool:
    """Bit-exact equality (NaN payloads and -0.0 included) as the codec would store ``ours``."""
    if set(ours) != set(stored):
        return False
    for name, theirs in stored.items():
        mine = np.asarray(ours[name])
        if (mine.shape != theirs.shape or mine.dtype != theirs.dtype
            or mine.tobytes() != theirs.tobytes()):
            return False
    return True
