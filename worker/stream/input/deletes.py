"""Decode a delete: its records (``id``, ``ids``) or its subject, and its request id (decode.py's
module doc, steps 1, 5, 6 and 8, names every check and its reason code)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..exceptions import DeadLetter
from .fields import MAX_ID_CHARS, MISSING, check_id, check_key, check_ts, type_name

__all__ = ["MAX_REQUEST_IDS", "Delete", "decode_delete", "decode_tombstone"]

#: The most record ids one delete event (one deletion request) may name in ``ids``.
MAX_REQUEST_IDS = 10_000

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")  # the request id's schema pattern excludes them
_STRINGS = {str}
_DELETE_FIELDS = ("op", "id", "ids", "subject", "request_id", "ts")


@dataclass(slots=True)
class Delete:
    """One deletion request: the records ``ids`` (one for ``id`` and tombstones), distinct; or
    (``ids`` empty) every record learned under ``subject``, the record's key. ``request_id``: the
    producer's name for the request (None: the worker derives one from the record's position)."""

    ids: tuple[str, ...]
    tombstone: bool = False
    subject: str | None = field(default=None, repr=False)
    request_id: str | None = field(default=None, repr=False)


def decode_tombstone(key, max_bytes: int) -> Delete:
    if key is None:
        raise DeadLetter("missing_id",
                         "tombstone (null value) without a key: no record id to delete")
    if len(key) > max_bytes:
        raise DeadLetter("oversized", f"tombstone key is {len(key)} bytes, more than {max_bytes}")
    try:
        record_id = bytes(key).decode("utf-8")
    except UnicodeDecodeError as bad:
        raise DeadLetter("bad_id", f"tombstone key is not valid UTF-8 (byte {bad.start})") from None
    if not 0 < len(record_id) <= MAX_ID_CHARS:
        raise DeadLetter("bad_id", f"tombstone key has {len(record_id)} characters, expected 1 to "
                                   f"{MAX_ID_CHARS}")
    return Delete((record_id,), True)


def _bad_request_id(ids: list) -> DeadLetter:
    for i, rid in enumerate(ids):
        if type(rid) is not str:
            return DeadLetter("bad_id", f"ids[{i}] is a {type_name(rid)}, expected a string")
        if not 0 < len(rid) <= MAX_ID_CHARS:
            return DeadLetter("bad_id",
                              f"ids[{i}] has {len(rid)} characters, expected 1 to {MAX_ID_CHARS}")
    return DeadLetter("bad_id", "ids holds a bad id")  # pragma: no cover (caller checked)


def _delete_ids(obj: dict) -> tuple[str, ...]:
    """The record ids a delete names: ``id`` or ``ids`` (module doc, step 5)."""
    ids = obj.get("ids", MISSING)
    if ids is MISSING:
        if "id" not in obj:
            raise DeadLetter("missing_id", "no 'id' or 'ids' field")
        return (check_id(obj),)
    if "id" in obj:
        raise DeadLetter("id_and_ids",
                         "both 'id' and 'ids': a delete names its records in one of them")
    if type(ids) is not list or not ids:
        if type(ids) is not list:
            raise DeadLetter("bad_ids",
                             f"'ids' is a {type_name(ids)}, expected an array of record ids")
        raise DeadLetter("bad_ids", "'ids' is empty")
    n = len(ids)
    if n > MAX_REQUEST_IDS:
        raise DeadLetter("too_many_ids",
                         f"'ids' has {n} items, at most {MAX_REQUEST_IDS} per delete")
    if set(map(type, ids)) != _STRINGS or not 0 < min(
            map(len, ids)) <= max(map(len, ids)) <= MAX_ID_CHARS:
        raise _bad_request_id(ids)
    unique = set(ids)
    if len(unique) != n:
        seen: set[str] = set()
        first = next(i for i, rid in enumerate(ids) if rid in seen or seen.add(rid))
        raise DeadLetter("duplicate_ids",
                         f"'ids' names {n - len(unique)} record id(s) more than once (the first "
                         f"repeat is ids[{first}])")
    return tuple(ids)


def decode_delete(key, obj: dict) -> Delete:
    """A delete's body: its records (``id``, ``ids``) or its ``subject``, and its ``request_id``
    (module doc, steps 5, 6 and 9)."""
    subject = obj.get("subject", MISSING)
    if subject is MISSING:
        ids = _delete_ids(obj)
        check_key(key)
        subject = None
    else:
        if "id" in obj or "ids" in obj:
            raise DeadLetter("subject_and_ids", "both 'subject' and 'id'/'ids': a delete names a "
                                                "subject or its records, not both")
        check_key(key)
        _check_subject(subject, key)
        ids = ()
    request_id = obj.get("request_id", MISSING)
    known = 2
    if request_id is MISSING:
        request_id = None
    else:
        _check_request_id(request_id)
        known = 3
    if len(obj) != known:
        check_ts(obj, _DELETE_FIELDS, known)
    return Delete(ids, False, subject, request_id)


def _check_subject(subject, key) -> None:
    """``subject`` must be the record's key (as text): the key routed the subject's inserts, so
    the partition this delete reached holds every record of the subject and no other does."""
    if type(subject) is not str or not subject:
        what = "an empty string" if subject == "" else f"a {type_name(subject)}"
        raise DeadLetter("bad_subject", f"'subject' is {what}, expected the record's key as text")
    try:
        same = bytes(key).decode("utf-8") == subject
    except UnicodeDecodeError:
        same = False
    if not same:
        raise DeadLetter("key_mismatch", "'subject' differs from the record's key: forget a "
                                         "subject with a delete keyed by the subject, so it lands "
                                         "in the partition that holds its records")


def _check_request_id(request_id) -> None:
    if type(request_id) is not str:
        raise DeadLetter("bad_request_id",
                         f"'request_id' is a {type_name(request_id)}, expected a string")
    if not 0 < len(request_id) <= MAX_ID_CHARS or _CONTROL.search(request_id):
        raise DeadLetter("bad_request_id",
                         f"'request_id' has {len(request_id)} characters, expected 1 to "
                         f"{MAX_ID_CHARS} and no control character")
