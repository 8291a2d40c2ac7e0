"""A plan's sample may forget a subject by key, as the worker does: the request names every record
the subject gave before it (worker/planning/sample.py)."""

from __future__ import annotations

from worker.olu import PassiveOLU
from worker.planning.sample import sample_from_records


def _insert(rid: str) -> dict:
    return {"op": "insert", "id": rid, "x": [0.1, 0.2], "y": 1}


def test_a_subject_delete_is_a_request_for_the_subjects_records_so_far():
    records = [("1", b"u-1", _insert("a")), ("2", b"u-2", _insert("b")), ("3", b"u-1", _insert("c")),
               ("4", b"u-1", {"op": "delete", "subject": "u-1"}), ("5", b"u-1", _insert("d")),
               ("6", b"nobody", {"op": "delete", "subject": "nobody"})]
    sample = sample_from_records(records, PassiveOLU(dim=2), "test")
    assert sample.requests == ((3, ("a", "c")),)  # the unknown subject asks nothing of the model
    assert sample.ids == ["a", "b", "c", "d"]
