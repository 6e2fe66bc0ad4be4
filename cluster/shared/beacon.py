"""Liveness beacons: the datagrams that tell the coordinator an agent is alive, and that tell an agent
it has new work. Pure: encoding, decoding and checking; the sockets are in cluster/agent/beacon.py and
cluster/coordinator/beacons.py.

Why datagrams: a held gRPC call costs the coordinator about 22 KiB and a TLS connection about 74 KiB
(benchmarks/coordinator_scale.py --liveness measures both), and a unary heartbeat about 0.65 ms of its
CPU; 10,000 agents proving they are alive every 1.5 s would take 0.7 GiB or 4 cores. A beacon costs a
dictionary entry and a few microseconds.

A datagram is

    MAGIC (4) | kind (1) | counter (8) | version (8) | name length (2) | name (UTF-8) | tag (16)

where `tag` is the first 16 bytes of HMAC-SHA256(key, everything before it). The key is the agent's
own for one registration: 32 random bytes the coordinator hands it over the authenticated gRPC channel
(RegisterResponse.beacon_key) and keeps in memory only, so a beacon from an earlier registration, or
from before a coordinator restart, proves nothing. `counter` grows with each datagram of a sender:
a receiver takes only counters above the last it took (a replayed datagram proves nothing either).

- BEACON (agent -> coordinator): `version` is the version of the agent's work it last received.
- POKE (coordinator -> agent): the agent's work moved to `version`: heartbeat now. The coordinator pokes
  when the work changes and again on any beacon that carries an older version (a lost poke costs one
  beacon interval, not a heartbeat interval).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import secrets
import struct

from cluster.shared.limits import MAX_AGENT_NAME_CHARS

MAGIC = b"TFB1"
BEACON = b"B"
POKE = b"P"
KEY_BYTES = 32
TAG_BYTES = 16
MAX_NAME_BYTES = 4 * MAX_AGENT_NAME_CHARS  # UTF-8
_HEAD = struct.Struct("!4s1sQQH")  # magic, kind, counter, version, name length
MAX_DATAGRAM = _HEAD.size + MAX_NAME_BYTES + TAG_BYTES


@dataclasses.dataclass(frozen=True)
class Datagram:
    kind: bytes  # BEACON or POKE
    name: str  # the agent's name (a beacon's sender, a poke's addressee)
    counter: int
    version: int
    signed: bytes  # the bytes the tag covers
    tag: bytes


def new_key() -> bytes:
    return secrets.token_bytes(KEY_BYTES)


def encode(kind: bytes, name: str, counter: int, version: int, key: bytes) -> bytes:
    raw_name = name.encode()  # a registered name: within MAX_AGENT_NAME_CHARS (request_checks)
    signed = _HEAD.pack(MAGIC, kind, counter, version, len(raw_name)) + raw_name
    return signed + _tag(key, signed)


def decode(data: bytes) -> Datagram | None:
    """The datagram's fields, unchecked; None for anything that is not a whole beacon or poke."""
    if len(data) < _HEAD.size + TAG_BYTES or len(data) > MAX_DATAGRAM:
        return None
    magic, kind, counter, version, name_len = _HEAD.unpack_from(data)
    if magic != MAGIC or kind not in (BEACON, POKE) or len(data) != _HEAD.size + name_len + TAG_BYTES:
        return None
    try:
        name = data[_HEAD.size:_HEAD.size + name_len].decode()
    except UnicodeDecodeError:
        return None
    return Datagram(kind, name, counter, version, data[:-TAG_BYTES], data[-TAG_BYTES:])


def authentic(datagram: Datagram, key: bytes) -> bool:
    return hmac.compare_digest(_tag(key, datagram.signed), datagram.tag)


def _tag(key: bytes, signed: bytes) -> bytes:
    return hmac.new(key, signed, hashlib.sha256).digest()[:TAG_BYTES]


def interval(lost_after: float) -> float:
    """How often an agent beacons: four chances within `lost_after`, so that one or two lost datagrams
    do not lose a node."""
    return lost_after / 4
