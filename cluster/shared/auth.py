"""Shared-token authentication for every RPC, and the loopback-only default.

The token travels in the `authorization` metadata (`Bearer <token>`), is
read from a file (never argv, never logged) and compared in constant time.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import stat

import grpc

from tfdist.errors import UserError

METADATA_KEY = "authorization"


class AuthError(UserError, ValueError):
    pass


def read_token(path: str | None) -> str | None:
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    except OSError as e:
        raise AuthError(f"cannot read token file {path}: {e.strerror}") from None
    if len(token) < 16:
        raise AuthError(f"token file {path} holds fewer than 16 characters; write a long random token, e.g. "
                        "`python -c 'import secrets; print(secrets.token_hex(32))' > FILE`")
    mode = os.stat(path).st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        os.chmod(path, mode & ~(stat.S_IRWXG | stat.S_IRWXO))  # nobody else should read it
    return token


def is_loopback_listen(address: str) -> bool:
    host = address.rsplit(":", 1)[0].strip("[]")
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name or "0.0.0.0"-like wildcard: treat as reachable from outside


def check_listen_policy(address: str, token: str | None) -> None:
    if not is_loopback_listen(address) and token is None:
        raise AuthError(f"--listen {address} is reachable beyond this machine: anyone who can reach it could "
                        "start processes on your nodes. Give --token-file FILE (agents and clients use the same "
                        "file), or listen on 127.0.0.1")


class TokenInterceptor(grpc.ServerInterceptor):
    def __init__(self, token: str):
        self._expected = f"Bearer {token}".encode()

        def deny(request, context):
            context.abort(grpc.StatusCode.UNAUTHENTICATED,
                          "missing or wrong token: pass --token-file (or set TFDIST_TOKEN_FILE) with the "
                          "coordinator's token")

        self._deny = grpc.unary_unary_rpc_method_handler(deny)

    def intercept_service(self, continuation, handler_call_details):
        presented = dict(handler_call_details.invocation_metadata or ()).get(METADATA_KEY, "")
        if hmac.compare_digest(presented.encode(), self._expected):
            return continuation(handler_call_details)
        return self._deny


def call_credentials_metadata(token: str | None) -> tuple:
    return ((METADATA_KEY, f"Bearer {token}"),) if token else ()
