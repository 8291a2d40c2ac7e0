"""Which records the model learned under each data subject: forget a person by key.

A data-subject request names the subject (the Kafka key), not the records. Each learned record
leaves one pair here, (subject key, record key): both 64-bit hashes (``record_key`` of the key's
text, and of the record id), 16 bytes a record and never a raw key or id (the state holds no
personal identifier). Forgetting subject s is one request for every record key paired with s,
looked up by a scan of the pairs (a vectorised compare over 8 bytes a record: ~0.5 ms at a million
records; a subject request is rare beside the inserts that pay for the map at every step).

The pairs are appended in learning order, so their layout is a function of the stream only and a
replay rebuilds it exactly. Full chunks of :data:`CHUNK` pairs are frozen and exported as shared
groups (the state store writes each once, as it does the applied index's runs); only the open
chunk goes into every snapshot. A deleted record's pair stays: a later request for its subject
finds it tombstoned (a duplicate) and charges nothing for it.

>>> subjects = SubjectIndex(chunk=2)
>>> subjects.add(np.array([7, 9, 7], np.uint64), np.array([101, 102, 103], np.uint64))
>>> subjects.records(7).tolist(), subjects.records(4).tolist(), len(subjects)
([101, 103], [], 3)
>>> arrays, shared = subjects.export()
>>> sorted(arrays), sorted(shared)
(['subject_records_open', 'subjects_open'], ['subjects_chunk0'])
>>> SubjectIndex.load(arrays, shared, chunk=2).records(7).tolist()
[101, 103]
"""

from __future__ import annotations

import re

import numpy as np

from .runs import frozen

__all__ = ["CHUNK", "SubjectIndex", "first_seen"]

CHUNK = 1 << 16  # pairs in a chunk before it is frozen (1 MB)
_FIRST = 1 << 10  # the open chunk's first capacity, doubled up to CHUNK: small models stay small
_CHUNK_GROUP = re.compile(r"subjects_chunk(\d+)")


def first_seen(keys: np.ndarray) -> np.ndarray:
    """``keys`` without repeats, each where it first occurs (a record learned twice, or by two
    models, is named once)."""
    if len(keys) < 2:
        return keys
    _, first = np.unique(keys, return_index=True)
    return keys[np.sort(first)]


class SubjectIndex:
    """subject key -> the record keys learned under it, 16 bytes a record."""

    def __init__(self, *, chunk: int = CHUNK):
        self.chunk = chunk
        self._frozen: list[tuple[np.ndarray, np.ndarray]] = []  # (subjects, records), full
        self._subjects = np.zeros(min(_FIRST, chunk), np.uint64)  # the open chunk: its first _n
        self._records = np.zeros(min(_FIRST, chunk), np.uint64)
        self._n = 0

    def __len__(self) -> int:
        return len(self._frozen) * self.chunk + self._n

    @property
    def nbytes(self) -> int:
        """Bytes the pairs take (frozen chunks and the open one's capacity)."""
        return len(self._frozen) * self.chunk * 16 + len(self._subjects) * 16

    def add(self, subjects: np.ndarray, records: np.ndarray) -> None:
        """Pair each of ``records`` (record keys, learning order) with its row's subject key."""
        subjects = np.asarray(subjects, np.uint64)
        records = np.asarray(records, np.uint64)
        at, total = 0, len(records)
        while at < total:
            if self._n + (total - at) > len(self._subjects) < self.chunk:
                self._grow(self._n + total - at)
            take = min(total - at, self.chunk - self._n)
            self._subjects[self._n:self._n + take] = subjects[at:at + take]
            self._records[self._n:self._n + take] = records[at:at + take]
            self._n += take
            at += take
            if self._n == self.chunk:
                self._frozen.append((frozen(self._subjects), frozen(self._records)))
                self._subjects = np.zeros(min(_FIRST, self.chunk), np.uint64)
                self._records = np.zeros(min(_FIRST, self.chunk), np.uint64)
                self._n = 0

    def _grow(self, wanted: int) -> None:
        """Double the open chunk's capacity until it holds ``wanted`` pairs (at most CHUNK)."""
        size = len(self._subjects)
        while size < min(wanted, self.chunk):
            size *= 2
        size = min(size, self.chunk)
        for name in ("_subjects", "_records"):
            grown = np.zeros(size, np.uint64)
            grown[:self._n] = getattr(self, name)[:self._n]
            setattr(self, name, grown)

    def records(self, subject: int) -> np.ndarray:
        """The distinct record keys learned under ``subject``, in the order first learned."""
        key = np.uint64(subject)
        found = [records[subjects == key] for subjects, records in self._frozen]
        found.append(self._records[:self._n][self._subjects[:self._n] == key])
        return first_seen(np.concatenate(found))

    def export(self) -> tuple[dict[str, np.ndarray], dict[str, dict[str, np.ndarray]]]:
        """(the open chunk's arrays, the frozen chunks as shared groups ``subjects_chunk{i}``)."""
        arrays = {"subjects_open": self._subjects[:self._n].copy(),
                  "subject_records_open": self._records[:self._n].copy()}
        shared = {f"subjects_chunk{i}": {"subjects": s, "records": r}
                  for i, (s, r) in enumerate(self._frozen)}
        return arrays, shared

    @classmethod
    def load(cls, arrays: dict, shared: dict | None, *, chunk: int = CHUNK) -> SubjectIndex:
        """Inverse of :meth:`export`; ValueError if a chunk is not whole or the arrays disagree."""
        index = cls(chunk=chunk)
        groups = {int(m.group(1)): group for name, group in (shared or {}).items()
                  if (m := _CHUNK_GROUP.fullmatch(name))}
        if sorted(groups) != list(range(len(groups))):
            raise ValueError(f"subject chunks {sorted(groups)} are not numbered 0 to n - 1")
        for i in range(len(groups)):
            s, r = (np.asarray(groups[i][name], np.uint64) for name in ("subjects", "records"))
            if s.shape != (chunk,) or r.shape != (chunk,):
                raise ValueError(f"subject chunk {i} holds {s.shape} and {r.shape} pairs, "
                                 f"expected {chunk}")
            index._frozen.append((frozen(s), frozen(r)))
        s, r = (np.asarray(arrays[name], np.uint64)
                for name in ("subjects_open", "subject_records_open"))
        if s.shape != r.shape or s.ndim != 1 or len(s) >= chunk:
            raise ValueError(f"open subject chunk holds {s.shape} and {r.shape} pairs (< {chunk})")
        index._grow(len(s))
        index._subjects[:len(s)], index._records[:len(r)] = s, r
        index._n = len(s)
        return index
