"""A fetched batch in one decoded form: runs of inserts, and between them deletes and dead letters.

The runner (worker/stream/partition.py) keeps ordering, durability and releases; which decoder
reads the records is chosen here, once per batch:

- the compiled scan (scan.py) takes every common JSON insert of the batch in one call, into
  columns over the whole batch; the records it declines (deletes, framed records, anything
  unusual, dead letters) are decoded in Python (decode.py, framed.py), each delete's ids hashed
  in one call (keys.py);
- the Python decoder (under ``OLU_REFERENCE_KERNEL=1`` or :func:`.scan.python_decoder`, and for
  class names as labels when the classes are not given) decodes runs of inserts with
  :func:`.decode.decode_inserts` and the rest one by one.

Registry-framed records arrive prepared (framed.py, before the runner): the compiled readers'
columns come with the batch (framed_scan.py), and the records they declined are JSON events by now,
or carry their verdict. Decoding is pure, so decoding the whole batch before applying any of
it changes nothing but the cost.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...features.spec import FeatureSpec
from ..exceptions import DeadLetter
from .decode import Delete, Insert, InsertRun, decode_inserts
from .framed import decode_message
from .keys import delete_keys, partitioning_keys
from .scan import BatchScan, compiled_decoder, scan_batch

__all__ = ["DecodedBatch", "decode_batch", "names_labels"]


def names_labels(loss) -> bool:
    """Do inserts name their label (a softmax over string classes), rather than give a number?"""
    return getattr(loss, "named", False)


@dataclass
class DecodedBatch:
    """``messages`` decoded, in offset order.

    ``stretches``: (start, stop, accepted) covering the batch; an accepted stretch is a run of
    valid inserts, :meth:`run` decoded; the other positions are in ``events`` (a
    :class:`Delete`, a rare :class:`Insert` the run declined, or the :class:`DeadLetter` saying
    why the record has no event), each delete's record keys in ``keys``. ``scan``: the compiled
    scan's columns over the whole batch (None under the Python decoder). ``subjects``: each
    message's partitioning key, when asked for. ``last_candidate``: the last position that may
    be a delete (its deletion releases for the batch's deletions, docs/worker.md 3.4).
    """

    messages: list
    stretches: list[tuple[int, int, bool]]
    runs: dict[int, InsertRun]  # the Python decoder's, by start (empty with the compiled scan)
    events: dict[int, Insert | Delete | DeadLetter]
    keys: dict[int, list[int]]
    scan: BatchScan | None
    subjects: np.ndarray | None
    last_candidate: int

    def count_clipped(self, fields: int) -> np.ndarray | None:
        """Per spec field, how many of the batch's decoded inserts
        had their value clipped (None: none)."""
        parts = [
            np.array([e.clipped for e in self.events.values() if isinstance(e, Insert)], np.int64)]
        if self.scan is not None and self.scan.clipped is not None:
            parts.append(self.scan.clipped[self.scan.accepted])
        parts += [r.clipped for r in self.runs.values() if r.clipped is not None]
        masks = np.concatenate(parts)
        if not masks.any():
            return None
        return np.array([np.count_nonzero(masks & np.left_shift(np.int64(1), k))
                         for k in range(fields)], np.int64)

    def run(self, start: int, stop: int) -> InsertRun:
        """The accepted stretch ``start:stop`` as one run: the Python decoder's, or a view of the
        compiled scan's columns (made only here: a batch whose stretches are learned from checked
        rows never needs it, and the newest timestamp costs a few us a stretch)."""
        if self.scan is None:
            return self.runs[start]
        scan = self.scan
        return InsertRun(stop, None, scan.X[start:stop], scan.y[start:stop],
                         scan.newest_ts(start, stop),
                         scan.keys[start:stop])


def decode_batch(messages: list, *, dim: int, max_bytes: int, subjects: bool = False,
                 features: FeatureSpec | None = None, sparse: bool = False,
                 labels: bool = False, classes: tuple | None = None) -> DecodedBatch:
    """The batch's one decoded form (module doc); ``subjects``: also each message's partitioning
    key; ``features``: inserts carry named fields, turned into vectors by this spec
    (worker/features); ``sparse``: runs of inserts as sparse rows (OLU_SPARSE_INPUT: CSR rows of
    the whole batch from the compiled scan); ``labels``: an insert's ``y`` is a class name
    (softmax with string classes), the runs' ``y`` an object array of them: the compiled scan
    reads them given the ``classes`` (a name none of them is goes to the Python decoder, whose
    insert the model refuses)."""
    raw_keys = [m.key() for m in messages] if subjects else None  # read once: scan and subjects
    found = partitioning_keys(messages, raw_keys) if subjects else None
    # a framed batch the compiled readers read (framed_scan.py; their labels are numbers)
    prepared = getattr(messages, "scan", None)
    # the Python decoder: class names the compiled readers are not given, or no compiled reader
    if labels and (classes is None or prepared is not None) or (
            prepared is None and not compiled_decoder()):
        return _python(messages, dim, max_bytes, found, features, sparse, labels)
    return _scanned(messages, dim, max_bytes, found, prepared, features, raw_keys, sparse,
                    classes if labels else None)


def decoded_event(msg, dim: int, max_bytes: int, features=None, sparse: bool = False,
                  labels: bool = False) -> Insert | Delete | DeadLetter:
    """The message's event, or the :class:`DeadLetter` saying why it has none."""
    try:
        return decode_message(msg, dim=dim, max_bytes=max_bytes, features=features, sparse=sparse,
                              labels=labels)
    except DeadLetter as dead:
        return dead


def _scanned(messages: list, dim: int, max_bytes: int, subjects, scan: BatchScan | None,
             features, keys: list | None = None, sparse: bool = False,
             classes: tuple | None = None) -> DecodedBatch:
    scan = scan if scan is not None else scan_batch(messages, dim=dim, max_bytes=max_bytes,
                                                    features=features, keys=keys, sparse=sparse,
                                                    classes=classes)
    stretches = scan.stretches()
    known = getattr(messages, "events", {})  # deletes a framed reader decoded already
    labels = classes is not None
    events = {j: known.get(j) or decoded_event(messages[j], dim, max_bytes, features, sparse,
                                               labels)
              for start, stop, accepted in stretches if not accepted for j in range(start, stop)}
    last = max((stop - 1 for _, stop, accepted in stretches if not accepted), default=-1)
    return DecodedBatch(messages, stretches, {}, events, delete_keys(events), scan, subjects, last)


def _python(messages: list, dim: int, max_bytes: int, subjects, features, sparse: bool = False,
            labels: bool = False) -> DecodedBatch:
    stretches, runs, events = [], {}, {}
    i, n = 0, len(messages)
    while i < n:
        run = decode_inserts(messages, i, dim=dim, max_bytes=max_bytes, stop=n, features=features,
                             sparse=sparse,
                             labels=labels)
        if run is not None and run.end > i:
            stretches.append((i, run.end, True))
            runs[i] = run
            i = run.end
            continue
        # not an insert: a delete or a dead letter
        events[i] = decoded_event(messages[i], dim, max_bytes, features, sparse, labels)
        stretches.append((i, i + 1, False))
        i += 1
    # this decoder knows a record's kind only once it reached it: any message may be a delete
    return DecodedBatch(messages, stretches, runs, events, delete_keys(events), None, subjects,
                        n - 1)
