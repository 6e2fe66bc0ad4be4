"""A daemon's HOST:PORT (cluster/shared/listen.py): the forms gRPC binds are taken as they are, every other
one is one line naming the flag and a form that works (issue 30, Measured 5: each read "the address is in
use"), and a failed bind says why."""

import errno

import pytest

from cluster.shared.listen import bind_failure, check_listen
from tfdist.errors import UserError


@pytest.mark.parametrize("listen,expected", [
    ("127.0.0.1:7470", ("127.0.0.1", 7470)), ("0.0.0.0:0", ("0.0.0.0", 0)), ("[::1]:7470", ("::1", 7470)),
    ("[::]:0", ("::", 0)), ("localhost:7470", ("localhost", 7470)),
])
def test_what_grpc_binds_is_taken(listen, expected):
    assert check_listen("--listen", listen) == expected


@pytest.mark.parametrize("listen,said", [
    (":7474", "--listen ':7474' names no host: give 127.0.0.1:7474 (this machine only) or 0.0.0.0:7474"),
    ("127.1:7475", "--listen '127.1:7475': 127.1 is not an IPv4 address written in full"),
    ("::1:7470", "--listen '::1:7470': an IPv6 address goes in brackets before its port: give e.g. [::1]:7470"),
    ("7478", "--listen '7478' is not HOST:PORT with a port from 0 to 65535 (got '7478')"),
    ("127.0.0.1:65536", "--listen '127.0.0.1:65536' is not HOST:PORT with a port from 0 to 65535 (got '65536')"),
    ("no-such-host.invalid:7470", "--listen 'no-such-host.invalid:7470': the host name 'no-such-host.invalid' does "
                                  "not resolve"),
])
def test_every_other_form_is_one_line_with_a_form_that_works(listen, said):
    with pytest.raises(UserError) as refused:
        check_listen("--listen", listen)
    assert str(refused.value).startswith(said) and "\n" not in str(refused.value)


def test_a_failed_bind_says_why():
    def said(code):
        return str(bind_failure("--listen", "10.1.2.3:80", OSError(code, "x")))

    assert "is not an address of this machine" in said(errno.EADDRNOTAVAIL)
    assert "ports below 1024 need root" in said(errno.EACCES)
    assert "the address is in use" in said(errno.EADDRINUSE) and "the address is in use" in str(
        bind_failure("--listen", "127.0.0.1:7470", None))
