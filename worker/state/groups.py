"""Delta groups: several deletions' deltas in one object, and the two layouts of their arrays.

A group's header is ``{"kind": "delta-group", "deltas": [member header + "offset", ...]}``. Its
arrays are laid out one of two ways, told apart by the envelope's layout version:

* ``GROUP_LAYOUT_VERSION`` (2): each member's arrays under their own names, ``d{j}.{name}``.
* ``STACKED_GROUP_LAYOUT_VERSION`` (3): when every member has the same array names and, per
  name, the same dtype and shape -- the normal case, one post-noise ``z`` per deletion -- each
  name once, the members' arrays stacked along a new first axis: ``all.{name}`` of shape
  ``(members, *shape)``.

Why stacked: the delta writer is a background thread under the same GIL as the worker's loop,
and the codec's work is per array (dtype checks, a contiguous copy, ``tobytes``, an entry in the
JSON header). One array per member made that work grow with the group; stacked, a group of 1,024
deltas costs the codec one array per name, and the writer's own work per member is building its
header entry, a shape check and one copy of its bytes (into the stacked array). Groups whose
members differ (a rotation's ``z_standby`` appearing or going mid-group) keep layout 2. Both
layouts are read; older builds wrote only layout 2.
"""

from __future__ import annotations

import numpy as np

from .exceptions import CorruptSnapshot

GROUP_KIND = "delta-group"  # header kind of a delta object holding several deletions' deltas
# Delta groups carry their own layout versions: a build from before group commit (or before
# stacking) refuses one as an unknown layout (a delta it cannot read stops the partition)
# instead of misreading it.
GROUP_LAYOUT_VERSION = 2
STACKED_GROUP_LAYOUT_VERSION = 3
GROUP_LAYOUTS = (GROUP_LAYOUT_VERSION, STACKED_GROUP_LAYOUT_VERSION)
_STACKED = "all."


def pack_group(deltas: list[tuple[int, dict, dict]]) -> tuple[dict, dict, int]:
    """(header, arrays, layout version) of one object holding ``deltas`` [(offset, header, arrays)].

    >>> header, arrays, layout = pack_group(
    ...     [(5, {"t": 1}, {"z": np.zeros(2)}), (7, {"t": 2}, {"z": np.ones(2)})])
    >>> header["deltas"], {k: a.tolist() for k, a in arrays.items()}, layout
    ([{'t': 1, 'offset': 5}, {'t': 2, 'offset': 7}], {'all.z': [[0.0, 0.0], [1.0, 1.0]]}, 3)
    """
    header = {"kind": GROUP_KIND, "deltas": [{**h, "offset": off} for off, h, _ in deltas]}
    stacked = _stack([arrays for _, _, arrays in deltas])
    if stacked is not None:
        return header, stacked, STACKED_GROUP_LAYOUT_VERSION
    arrays = {f"d{j}.{name}": a for j, (_, _, arrs) in enumerate(deltas) for name,
              a in arrs.items()}
    return header, arrays, GROUP_LAYOUT_VERSION


def _stack(members: list[dict]) -> dict | None:
    """{"all.{name}": the members' arrays stacked}, or None unless every member has the same
    names and, per name, the same dtype and shape."""
    names = members[0].keys()
    if not all(m.keys() == names for m in members):
        return None
    out = {}
    for name, first in members[0].items():
        column = [m[name] for m in members]
        if any(type(a) is not np.ndarray or a.shape != first.shape for a in column):
            return None
        try:  # casting="no": any dtype (or byte order) unlike the first member's raises
            if first.ndim:
                out[_STACKED + name] = np.concatenate(column, dtype=first.dtype,
                                                      casting="no").reshape(
                    len(column), *first.shape)
            else:  # 0-d arrays cannot be concatenated
                out[_STACKED + name] = np.stack(column, dtype=first.dtype, casting="no")
        except TypeError:
            return None
    return out


def unpack_group(first: int, layout: int, header: dict,
                 arrays: dict) -> list[tuple[int, dict, dict]]:
    """[(offset, header, arrays)] of one delta object: itself, or the members of a group in either
    layout. Raises :class:`CorruptSnapshot` if the group is malformed. The caller has checked
    that the layout and the header's kind agree (a group layout iff kind ``delta-group``)."""
    if layout not in GROUP_LAYOUTS:
        return [(first, header, arrays)]
    members = header.get("deltas")
    if not isinstance(members, list) or not members or not all(
            isinstance(m, dict) and type(m.get("offset")) is int for m in members):
        raise CorruptSnapshot("malformed delta group")
    offsets = [m["offset"] for m in members]
    if offsets[0] != first or offsets != sorted(set(offsets)):
        raise CorruptSnapshot(f"delta group offsets {offsets} do not start at {first} and increase")
    split: list[dict] = [{} for _ in members]
    if layout == STACKED_GROUP_LAYOUT_VERSION:
        for name, stacked in arrays.items():
            if not name.startswith(_STACKED):
                raise CorruptSnapshot(
                    f"array {name!r} of a stacked delta group is not named all.<name>")
            if stacked.ndim == 0 or stacked.shape[0] != len(members):
                raise CorruptSnapshot(
                    f"stacked array {name!r} has shape {stacked.shape}, not one row per each of "
                    f"the group's {len(members)} deltas")
            for j, entry in enumerate(split):
                # a C-contiguous view (0-d stays an array)
                entry[name[len(_STACKED):]] = stacked[j, ...]
        return list(zip(offsets, members, split))
    for name, array in arrays.items():
        index, dot, rest = name.partition(".")
        if not (dot and index[:1] == "d" and index[1:].isdigit() and int(index[1:]) < len(members)):
            raise CorruptSnapshot(f"array {name!r} belongs to no delta of the group")
        split[int(index[1:])][rest] = array
    return list(zip(offsets, members, split))
