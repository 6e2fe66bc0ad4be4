"""`tfdist credentials DIR --monitor NAME --prometheus OUT`: the two files a Prometheus scrape job reads
(authorization.credentials_file, tls_config.ca_file), private, and a token the coordinator accepts."""

import os
import stat

from cluster.shared.credentials import Authority, Principal
from tests.conftest import run_cli


def test_prometheus_files_are_a_monitor_token_and_the_ca(tmp_path, marker):
    creds, out = tmp_path / "creds", tmp_path / "prom"
    made = run_cli(["credentials", str(creds), "--monitor", "prometheus", "--prometheus", str(out)], marker, timeout=60)
    assert made.returncode == 0, made.stderr
    token, ca = out / "prometheus.token", out / "ca.pem"
    assert f"authorization.credentials_file: {token}; tls_config.ca_file: {ca}" in made.stdout
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o700
    for path in (token, ca):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    authority = Authority.load(str(creds))
    assert authority.verify(token.read_text()) == Principal("monitor", "prometheus")
    assert ca.read_bytes() == authority.ca_pem


def test_prometheus_files_need_a_monitor(tmp_path, marker):
    refused = run_cli(["credentials", str(tmp_path / "creds"), "--user", "alice", "--prometheus", str(tmp_path / "p")],
                      marker, timeout=60)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1] == (
        "tfdist credentials: --prometheus DIR writes a monitor credential's token and CA for Prometheus: name it "
        "with --monitor NAME")
    assert not (tmp_path / "p").exists()
