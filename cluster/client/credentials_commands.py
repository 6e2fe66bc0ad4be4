"""`tfdist credentials ...`: a cluster's credentials.

Without DIR, a running coordinator issues, lists and revokes them for an admin credential, over its API (no
shell on the coordinator's host, no copy of its secret): each credential asked for is written here as one
0600 file. With DIR, on the coordinator's host: DIR becomes the cluster's credentials directory the first time
(a CA, the coordinator's certificate, the secret credentials are signed with; or a site's own certificates),
and every --node/--user/--admin/--monitor asked for is written as one 0600 credential file; running it again
on the same DIR issues more under the same authority. Every credential expires (--days).
"""

from __future__ import annotations

import os

from cluster.client.usage import UsageError
from cluster.shared.credentials import Authority, CredentialError, check_days, check_name
from tfdist.private_files import private_dir, write_private


def _read_pem(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read(1 << 16)
    except OSError as e:
        raise UsageError(f"tfdist credentials: cannot read {what} {path}: {e.strerror}") from None
    if b"-----BEGIN" not in data:
        raise UsageError(f"tfdist credentials: {what} {path} is not a PEM file")
    return data


def _authority(args) -> tuple[Authority, bool]:
    site = (args.site_cert, args.site_key, args.site_ca)
    if any(site) and not all(site):
        raise UsageError("tfdist credentials: --site-cert, --site-key and --site-ca go together")
    authority, made = Authority.load_or_create(args.dir, hosts=args.host)
    if all(site):
        authority = authority.with_site_tls(_read_pem(args.site_cert, "--site-cert"),
                                            _read_pem(args.site_key, "--site-key"), _read_pem(args.site_ca, "--site-ca"))
        authority.save(args.dir)
    elif args.host and not made:
        raise UsageError(f"tfdist credentials: {args.dir} already holds a certificate; --host only applies to a new "
                         "directory (start a new one to change the coordinator's names)")
    return authority, made


def make_credentials(args) -> int:
    wanted = [(kind, name) for kind in ("node", "user", "admin", "monitor") for name in getattr(args, kind)]
    if args.days is not None:
        try:
            check_days(args.days)
        except CredentialError as e:
            raise UsageError(f"tfdist credentials: --days: {e}") from None
    if not args.dir:
        from cluster.client.credentials_api import ask_coordinator

        return ask_coordinator(args, wanted)
    if args.list or args.revoke:
        raise UsageError("tfdist credentials: --list and --revoke ask a running coordinator (its book of revoked "
                         "names is its own): drop DIR and give --coordinator HOST:PORT with an admin --credentials FILE")
    try:
        for kind, name in wanted:
            check_name(kind, name)
        if getattr(args, "prometheus", None) and not args.monitor:
            raise UsageError("tfdist credentials: --prometheus DIR writes a monitor credential's token and CA for "
                             "Prometheus: name it with --monitor NAME")
        if args.output and len(wanted) != 1:
            raise UsageError(f"tfdist credentials: -o FILE takes exactly one --node/--user/--admin/--monitor, got "
                             f"{len(wanted)}")
        authority, made = _authority(args)
    except CredentialError as e:
        raise UsageError(f"tfdist credentials: {e}") from None
    if made:
        print(f"made the cluster's CA, the coordinator's certificate and secret in {args.dir}: "
              f"tfdist coordinator --credentials-dir {args.dir}")
    issued = os.path.join(args.dir, "issued")
    for kind, name in wanted:
        credential = authority.issue(kind, name, args.coordinator or "", args.insecure_plaintext, args.days)
        path = args.output or os.path.join(private_dir(issued), f"{kind}-{name}.json")
        credential.save(path)
        print(f"{kind} {name}: {path}")
        if kind == "monitor" and args.prometheus:  # the two files a Prometheus scrape job reads
            directory = private_dir(args.prometheus)
            token, ca = os.path.join(directory, f"{name}.token"), os.path.join(directory, "ca.pem")
            write_private(token, credential.token.encode())
            write_private(ca, credential.ca_pem.encode())
            print(f"  for Prometheus: authorization.credentials_file: {token}; tls_config.ca_file: {ca} "
                  "(docs/observability.md)")
    if not wanted and not made:
        print(f"{args.dir} is already a credentials directory; name --node/--user/--admin/--monitor to issue")
    return 0
