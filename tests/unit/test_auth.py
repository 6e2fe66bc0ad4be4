import os
import stat

import pytest

from cluster.shared.auth import AuthError, check_listen_policy, is_loopback_listen, read_token


def test_loopback_detection():
    assert is_loopback_listen("127.0.0.1:7470") and is_loopback_listen("localhost:1") and is_loopback_listen("[::1]:5")
    assert not is_loopback_listen("0.0.0.0:7470") and not is_loopback_listen("198.18.0.1:7470")
    assert not is_loopback_listen("myhost:7470")


def test_non_loopback_listen_needs_a_token():
    check_listen_policy("127.0.0.1:7470", None)
    check_listen_policy("0.0.0.0:7470", "x" * 32)
    with pytest.raises(AuthError, match=r"--listen 0.0.0.0:7470 is reachable beyond this machine"):
        check_listen_policy("0.0.0.0:7470", None)


def test_token_file_rules(tmp_path):
    short = tmp_path / "short"
    short.write_text("abc\n")
    with pytest.raises(AuthError, match="holds fewer than 16 characters"):
        read_token(str(short))
    good = tmp_path / "good"
    good.write_text("s3cr3t-" * 4 + "\n")
    os.chmod(good, 0o644)
    assert read_token(str(good)) == "s3cr3t-" * 4
    assert not os.stat(good).st_mode & (stat.S_IRWXG | stat.S_IRWXO)  # made private
    assert read_token(None) is None
