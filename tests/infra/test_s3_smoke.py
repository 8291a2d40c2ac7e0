"""The S3 semantics the snapshot store relies on, checked against a real server via obstore."""

from __future__ import annotations

from pathlib import Path

import obstore
import pytest
from obstore.exceptions import AlreadyExistsError, PreconditionError

from worker.devtools.s3_local import SeaweedS3


def test_create_only_put_refuses_to_overwrite(s3_store):
    first = obstore.put(s3_store, "snap/000000000042.json", b"original", mode="create")
    assert first["e_tag"]
    with pytest.raises(AlreadyExistsError):
        obstore.put(s3_store, "snap/000000000042.json", b"impostor", mode="create")
    assert obstore.get(s3_store, "snap/000000000042.json").bytes() == b"original"


def test_etag_conditional_overwrite(s3_store):
    v1 = obstore.put(s3_store, "LATEST", b"v1")
    v2 = obstore.put(s3_store, "LATEST", b"v2", mode={"e_tag": v1["e_tag"]})
    assert v2["e_tag"] and v2["e_tag"] != v1["e_tag"]
    assert obstore.get(s3_store, "LATEST").bytes() == b"v2"
    with pytest.raises(PreconditionError):  # v1's ETag is stale now
        obstore.put(s3_store, "LATEST", b"v3", mode={"e_tag": v1["e_tag"]})
    assert obstore.get(s3_store, "LATEST").bytes() == b"v2"
    assert obstore.head(s3_store, "LATEST")["e_tag"] == v2["e_tag"]


def test_list_by_prefix_and_delete(s3_store):
    keys = [f"g/t/0/{o:012d}.snap" for o in (5, 17, 230)]
    for k in keys:
        obstore.put(s3_store, k, k.encode(), mode="create")
    obstore.put(s3_store, "g/t/1/000000000001.snap", b"other partition")

    listed = sorted(m["path"] for m in obstore.list(s3_store, "g/t/0/").collect())
    assert listed == keys
    assert {m["size"] for m in obstore.list(s3_store, "g/t/0/").collect()} == {len(keys[0])}

    obstore.delete(s3_store, keys[0])
    with pytest.raises(FileNotFoundError):
        obstore.get(s3_store, keys[0])
    assert sorted(m["path"] for m in obstore.list(s3_store, "g/t/0/").collect()) == keys[1:]


def _listening_addresses(pid: int) -> list[tuple[str, int]]:
    """(ip, port) of every TCP socket in LISTEN state owned by ``pid`` (Linux /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().as_posix()
        except OSError:  # fd closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table, width in (("tcp", 8), ("tcp6", 32)):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # 0A = TCP_LISTEN
                continue
            hex_ip, hex_port = local.split(":")
            assert len(hex_ip) == width
            # /proc prints the address as 32-bit words in host (little-endian) order.
            words = [bytes.fromhex(hex_ip[i:i + 8])[::-1] for i in range(0, width, 8)]
            raw = b"".join(words)
            ip = ".".join(map(str, raw)) if width == 8 else raw.hex()
            found.append((ip, int(hex_port, 16)))
    return found


def test_weed_listens_on_loopback_only(s3_server):
    if not isinstance(s3_server, SeaweedS3):
        pytest.skip("external S3 server: not ours to inspect")
    if not Path(f"/proc/{s3_server.pid}/net/tcp").exists():
        pytest.skip("needs Linux /proc")
    addrs = _listening_addresses(s3_server.pid)
    assert (("127.0.0.1", s3_server.port)) in addrs
    assert {ip for ip, _ in addrs} == {"127.0.0.1"}, addrs
