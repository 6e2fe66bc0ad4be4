"""The first administrator's credential on Kubernetes, without a shell in the coordinator's pod: the coordinator
keeps an admin credential in the Secret `tfdist-admin` of its namespace (made at its first start, made again
when the one there no longer holds: expired, or revoked by name). Whoever may read Secrets in that namespace
(its administrators, as RBAC already decides) reads it with kubectl and then issues, lists and revokes users'
credentials over the coordinator's API (`tfdist credentials --user NAME`). It is issued through the
coordinator's credential book (listed; issued after any revocation of its name) and made anew a week before it
expires. No job's pod may mount it (options.py refuses it in --allow-secret)."""

from __future__ import annotations

import base64
import json
import logging
import time
from typing import Callable

from cluster.engines.kubernetes.offers import MANAGED_BY, TFDIST
from cluster.shared.credentials import Credential, Principal
from tfdist.errors import UserError

log = logging.getLogger("tfdist.kubernetes")

SECRET = "tfdist-admin"
RENEW_BEFORE = 7 * 86_400  # seconds before its expiry that the credential in the Secret is made anew
ADMIN = "kubernetes-admin"  # the credential's name: `tfdist credentials --revoke admin:kubernetes-admin`
KEY = "credential.json"


def manifest(credential: Credential, namespace: str) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": SECRET, "namespace": namespace, "labels": {MANAGED_BY: TFDIST}},
            "data": {KEY: base64.b64encode(credential.to_json().encode()).decode()}}


def held_token(secret: dict | None) -> str:
    """The token of the credential in the Secret ("" when there is none, or it is not one)."""
    try:
        text = base64.b64decode(((secret or {}).get("data") or {})[KEY]).decode()
        return str(json.loads(text)["token"])
    except (KeyError, ValueError, TypeError):
        return ""


def ensure(api, namespace: str, issue: Callable[[], Credential], verify: Callable[[str], Principal | None],
           now: float | None = None) -> bool:
    """Makes the Secret hold a credential that holds, for RENEW_BEFORE at least; True when it was (re)made."""
    existing = api.get("Secret", SECRET)
    token = held_token(existing)
    held = verify(token) if token else None
    if held is not None and held.expires - (time.time() if now is None else now) > RENEW_BEFORE:
        return False
    if existing is not None:
        api.delete("Secret", [SECRET])
    api.create(manifest(issue(), namespace))
    return True


class AdminSecret:
    """`ensure`, looked at again every CHECK_EVERY seconds (from the engine's rounds); said in the log."""

    CHECK_EVERY = 600.0

    def __init__(self, api, namespace: str, issue: Callable[[], Credential], verify: Callable[[str], Principal | None]):
        self._api, self.namespace, self._issue, self._verify = api, namespace, issue, verify
        self._next = 0.0

    def check(self) -> None:
        if time.monotonic() < self._next:
            return
        self._next = time.monotonic() + self.CHECK_EVERY
        try:
            if ensure(self._api, self.namespace, self._issue, self._verify):
                log.info("kubernetes: an admin credential is in Secret %s/%s (kubectl -n %s get secret %s)",
                         self.namespace, SECRET, self.namespace, SECRET)
        except UserError as e:  # the API refused or cannot be reached: the next look tries again
            log.warning("kubernetes: no admin credential in Secret %s: %s", SECRET, e)
