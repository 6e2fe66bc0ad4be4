"""The first administrator's credential on Kubernetes, without a shell in the coordinator's pod: the coordinator
keeps an admin credential in the Secret `tfdist-admin` of its namespace (made at its first start, made again
when the one there no longer holds: expired, or revoked by name). Whoever may read Secrets in that namespace
(its administrators, as RBAC already decides) reads it with kubectl and then issues, lists and revokes users'
credentials over the coordinator's API (`tfdist credentials --user NAME`). No job's pod may mount it
(options.py refuses it in --allow-secret)."""

from __future__ import annotations

import base64
import json
from typing import Callable

from cluster.engines.kubernetes.offers import MANAGED_BY, TFDIST
from cluster.shared.credentials import Credential, Principal

SECRET = "tfdist-admin"
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


def ensure(api, namespace: str, issue: Callable[[], Credential], verify: Callable[[str], Principal | None]) -> bool:
    """Makes the Secret hold a credential that holds; True when it was (re)made."""
    existing = api.get("Secret", SECRET)
    token = held_token(existing)
    if token and verify(token) is not None:
        return False
    if existing is not None:
        api.delete("Secret", [SECRET])
    api.create(manifest(issue(), namespace))
    return True
