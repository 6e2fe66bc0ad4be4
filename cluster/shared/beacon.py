"""Liveness beacons: the datagrams that tell the coordinator an agent is alive, and that tell an agent
it has new work. Pure: encoding, decoding and checking; the sockets are in cluster/agent/beacon.py and
cluster/engines/agents/beacons.py.

Why datagrams: a unary heartbeat costs the coordinator about 0.65 ms of CPU, so 10,000 agents proving
they are alive three times within --lost-after (6 s) would take 3 cores; a held call per agent (a stream,
a long poll) costs it about 22 KiB each even on gRPC's asyncio server, 220 MiB for 10,000. A beacon costs
a dictionary entry and a few microseconds (docs/benchmarks.md, "Liveness at 10,000 agents").

A datagram is

    MAGIC (4) | kind (1) | counter (8) | version (8) | nonce (16) | name length (2) | name (UTF-8) | tag (16)

where `tag` is the first 16 bytes of HMAC-SHA256(key, everything before it). The key is the agent's
own for one registration, handed to it over the authenticated gRPC channel (RegisterResponse.beacon_key)
with the registration's random `nonce`: key = HMAC-SHA256(the coordinator's beacon secret, name, nonce)
(`registration_key`). The coordinator keeps only its secret, derived from the cluster's CA key, so a
restarted coordinator still knows a beacon from an agent registered before (no heartbeat storm, no
node lost while they re-attach); while it runs, a beacon under an earlier registration of the agent
proves nothing. `counter` grows with each datagram of a sender: a receiver takes only counters above
the last it took (a replayed datagram proves nothing either).

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
NONCE_BYTES = 16
_HEAD = struct.Struct("!4s1sQQ16sH")  # magic, kind, counter, version, nonce, name length
MAX_DATAGRAM = _HEAD.size + MAX_NAME_BYTES + TAG_BYTES


@dataclasses.dataclass(frozen=True)
class Datagram:
    kind: bytes  # BEACON or POKE
    name: str  # the agent's name (a beacon's sender, a poke's addressee)
    counter: int
    version: int
    nonce: bytes  # the registration's
    signed: bytes  # the bytes the tag covers
    tag: bytes


def new_key() -> bytes:
    return secrets.token_bytes(KEY_BYTES)


def new_nonce() -> bytes:
    return secrets.token_bytes(NONCE_BYTES)


def registration_key(secret: bytes, name: str, nonce: bytes) -> bytes:
    """The beacon key of `name`'s registration `nonce`, from the coordinator's `secret`."""
    return hmac.new(secret, b"tfdist beacon key\0" + nonce + name.encode(), hashlib.sha256).digest()


def encode(kind: bytes, name: str, counter: int, version: int, key: bytes, nonce: bytes = bytes(NONCE_BYTES)) -> bytes:
    raw_name = name.encode()  # a registered name: within MAX_AGENT_NAME_CHARS (request_checks)
    signed = _HEAD.pack(MAGIC, kind, counter, version, nonce, len(raw_name)) + raw_name
    return signed + _tag(key, signed)


def decode(data: bytes) -> Datagram | None:
    """The datagram's fields, unchecked; None for anything that is not a whole beacon or poke."""
    if len(data) < _HEAD.size + TAG_BYTES or len(data) > MAX_DATAGRAM:
        return None
    magic, kind, counter, version, nonce, name_len = _HEAD.unpack_from(data)
    if magic != MAGIC or kind not in (BEACON, POKE) or len(data) != _HEAD.size + name_len + TAG_BYTES:
        return None
    try:
        name = data[_HEAD.size:_HEAD.size + name_len].decode()
    except UnicodeDecodeError:
        return None
    return Datagram(kind, name, counter, version, nonce, data[:-TAG_BYTES], data[-TAG_BYTES:])


def authentic(datagram: Datagram, key: bytes) -> bool:
    return hmac.compare_digest(_tag(key, datagram.signed), datagram.tag)


def _tag(key: bytes, signed: bytes) -> bytes:
    return hmac.new(key, signed, hashlib.sha256).digest()[:TAG_BYTES]


def interval(lost_after: float) -> float:
    """How often an agent beacons: four chances within `lost_after`, so that one or two lost datagrams
    do not lose a node."""
    return lost_after / 4
