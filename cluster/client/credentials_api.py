"""`tfdist credentials` without DIR: an administrator asks a running coordinator to issue, list or revoke
credentials (its IssueCredential, ListCredentials and RevokeCredential calls; an admin credential's alone)."""

from __future__ import annotations

import dataclasses
import datetime
import json
import os

from cluster.client.usage import COORDINATOR_ENV, UsageError
from cluster.shared.auth import find_credential, is_loopback_listen
from cluster.shared.credentials import Credential, CredentialError


def ask_coordinator(args, wanted: list[tuple[str, str]]) -> int:
    from cluster.shared.rpc import Client

    revoke = [_kind_and_name(ref) for ref in args.revoke]
    if not wanted and not revoke and not args.list:
        raise UsageError("tfdist credentials: name what to do: --user/--admin/--monitor/--node NAME to issue, --list, "
                         "or --revoke KIND:NAME (or give DIR to make credentials on the coordinator's host)")
    if args.output and len(wanted) != 1:
        raise UsageError(f"tfdist credentials: -o FILE takes exactly one --node/--user/--admin/--monitor, got "
                         f"{len(wanted)}")
    if args.site_cert or args.site_key or args.site_ca or args.host or args.prometheus:
        raise UsageError("tfdist credentials: --site-cert/--site-key/--site-ca, --host and --prometheus make files on "
                         "the coordinator's host: give DIR")
    paths = [args.output or f"{kind}-{name}.json" for kind, name in wanted]
    for path in paths:  # before anything is issued: nothing is overwritten, nothing issued in vain
        if os.path.lexists(path):
            raise UsageError(f"tfdist credentials: {path} exists; move it away or name another file with -o FILE")
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
            raise UsageError(f"tfdist credentials: cannot write {path}: {folder} is not a folder of yours to write in")
    address, admin = find_credential(args.coordinator or os.environ.get(COORDINATOR_ENV), args.credentials)
    client = Client(address, admin)
    try:
        for (kind, name), path in zip(wanted, paths):
            credential = Credential.from_json(client.issue_credential(kind, name, args.days or 0.0), "the coordinator's answer")
            if _names_no_way_in(credential.coordinator) and not _names_no_way_in(address):  # a wildcard listen:
                credential = dataclasses.replace(credential, coordinator=address)  # where the admin reached it
            credential.save(path)
            print(f"{kind} {name}: {path} (expires {_when(_expiry(credential))}; names the coordinator "
                  f"{credential.coordinator})")
        for kind, name in revoke:
            answer = client.revoke_credential(kind, name)
            print(f"revoked {kind} {name}: every credential of that name issued until {_when(answer.revoked_at)} is "
                  f"refused ({answer.revoked} issued here)")
        if args.list:
            _print_listing(client.list_credentials(), args.json)
    finally:
        client.close()
    return 0


def _names_no_way_in(address: str) -> bool:
    """No address, or loopback: of no use to a credential's holder on another machine."""
    return not address or is_loopback_listen(address)


def _kind_and_name(ref: str) -> tuple[str, str]:
    kind, colon, name = ref.partition(":")
    if not colon or kind not in ("user", "admin", "monitor", "node") or not name:
        raise UsageError(f"tfdist credentials: --revoke {ref!r}: give KIND:NAME, KIND one of user, admin, monitor, "
                         "node (e.g. --revoke user:alice)")
    return kind, name


def _expiry(credential: Credential) -> float:
    parts = credential.token.split(":")
    try:
        return float(parts[4])
    except (IndexError, ValueError):
        raise CredentialError("the coordinator answered a credential without an expiry") from None


def _when(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _print_listing(listing, as_json: bool) -> None:
    """The table, or docs/json.md's `tfdist credentials --list --json`."""
    issued = [{"kind": i.kind, "name": i.name, "issued_at": i.issued_at, "expires_at": i.expires_at,
               "issued_by": i.issued_by or None, "revoked": i.revoked} for i in listing.issued]
    revoked = [{"kind": r.kind, "name": r.name, "revoked_at": r.revoked_at} for r in listing.revoked]
    if as_json:
        print(json.dumps({"issued": issued, "revoked": revoked}, indent=1))
        return
    print(f"{'KIND':8} {'NAME':24} {'ISSUED':21} {'EXPIRES':21} {'BY':24} REVOKED")
    for i in issued:
        print(f"{i['kind']:8} {i['name']:24} {_when(i['issued_at']):21} {_when(i['expires_at']):21} "
              f"{i['issued_by'] or 'the coordinator':24} {'yes' if i['revoked'] else ''}")
    for r in revoked:
        print(f"revoked: {r['kind']} {r['name']}, every credential issued until {_when(r['revoked_at'])}")
