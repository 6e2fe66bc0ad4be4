"""Issue 16, Measured 9: every bad CLI or config input is ONE line naming the bad value, exit 2 (125 for `tfdist
launch`, whose other codes are its job's: docs/launch.md), no traceback and no hang. Each row runs the real `tfdist` CLI as a process with a hard timeout (a hang fails the row).

Before these limits the rows were: tracebacks (--priority 1e20, max_restarts 1e12 `ValueError: Value out of
range`, Latin-1 or binary config `UnicodeDecodeError`, YAML nested 20,000 deep `RecursionError`); hangs
(--config /dev/zero read until `MemoryError`, --slots 1e20 a traceback in the embedded agent and a process that
never exits, the same in slots_per_trial, a YAML alias bomb, a FIFO as --config, agent --slots 2^40 whose main
thread died, --slots 2^31-1 freezing a coordinator); accepted but wrong (--startup-timeout nan/inf, an
environment value with a NUL byte failing the job with 127, --subnet not-a-cidr failing every submit); and
`agent --name ''` running under another name than the one asked for.
"""

import os
import re

import pytest

from tests.agent_core import AgentsServer
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
from cluster.shared.rpc import Client
from tests.conftest import run_cli

pytestmark = pytest.mark.timeout(240)

RUN = ["--", "python", "-c", "pass"]
ALIAS_BOMB = "hyperparameters:\n  a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"  {name}: &{name} [{', '.join([f'*{prev}'] * 10)}]\n" for prev, name in zip("abcdefgh", "bcdefghi"))


def _deep(tmp_path):
    (tmp_path / "c.yaml").write_text("hyperparameters: {a: " + "[" * 20_000 + "]" * 20_000 + "}\n")


def _fifo(tmp_path):
    os.mkfifo(tmp_path / "c.yaml")


# (id, argv, the config file's content (text, bytes, or a function making it in tmp_path), what the line names)
CASES = [
    ("priority-huge", ["launch", "--priority", "99999999999999999999", *RUN], None,
     "--priority: must be between -1,000,000 and 1,000,000, got 99999999999999999999"),
    ("max-restarts-huge", ["launch", "--config", "c.yaml", *RUN], "max_restarts: 1000000000000\n",
     "c.yaml: max_restarts: must be at most 1,000, got 1000000000000"),
    ("latin1-config", ["launch", "--config", "c.yaml", *RUN], "name: caf\xe9\n".encode("latin-1"),
     "c.yaml: is not UTF-8 text (byte 0xe9 at offset 9)"),
    ("binary-config", ["launch", "--config", "c.yaml", *RUN], b"\x8a\x00\xff\x13" * 50,
     "c.yaml: is not UTF-8 text (byte 0x8a at offset 0)"),
    ("yaml-20000-deep", ["launch", "--config", "c.yaml", *RUN], _deep, "c.yaml: line 1: nested deeper than 64 levels"),
    ("config-dev-zero", ["launch", "--config", "/dev/zero", *RUN], None,
     "/dev/zero: is a character device, not a config file"),
    ("config-fifo", ["launch", "--config", "c.yaml", *RUN], _fifo, "c.yaml: is a FIFO (named pipe), not a config file"),
    ("config-too-large", ["launch", "--config", "c.yaml", *RUN], "#" * (2 << 20), "c.yaml: is larger than 1,024 KiB"),
    ("slots-huge", ["launch", "--slots", "99999999999999999999", *RUN], None,
     "--slots: must be at most 65,536, got 99999999999999999999"),
    ("slots-per-trial-huge", ["launch", "--config", "c.yaml", *RUN],
     "resources: {slots_per_trial: 99999999999999999999}\n",
     "c.yaml: resources.slots_per_trial: must be at most 65,536, got 99999999999999999999"),
    ("yaml-alias-bomb", ["launch", "--config", "c.yaml", *RUN], ALIAS_BOMB,
     "the document expands (aliases included) to more than 4,194,304 nodes and characters"),
    ("hyperparameters-many", ["launch", "--config", "c.yaml", *RUN], ALIAS_BOMB.split("  e:")[0],
     "c.yaml: hyperparameters: have more than 10,000 keys, values and items"),
    ("yaml-recursive-alias", ["launch", "--config", "c.yaml", *RUN], "hyperparameters:\n  a: &a [*a]\n",
     "c.yaml: line 2: alias *a refers to a node that contains it"),
    ("agent-empty-name", ["agent", "--name", "", "--coordinator", "127.0.0.1:1"], None, "tfdist agent: --name is empty"),
    ("agent-slots-2^40", ["agent", "--slots", "1099511627776", "--coordinator", "127.0.0.1:1"], None,
     "tfdist agent: --slots must be at most 65,536, got 1099511627776"),
    ("startup-timeout-nan", ["launch", "--startup-timeout", "nan", *RUN], None,
     "--startup-timeout: expected a finite number of seconds, got nan"),
    ("startup-timeout-inf", ["launch", "--startup-timeout", "inf", *RUN], None,
     "--startup-timeout: expected a finite number of seconds, got inf"),
    ("startup-timeout-years", ["launch", "--startup-timeout", "1e9", *RUN], None,
     "--startup-timeout: must be at most 604800 seconds (7 days), got 1e+09"),
    ("env-nul-byte", ["launch", "--config", "c.yaml", *RUN], 'environment:\n  variables:\n    API_KEY: "x\\0y"\n',
     "c.yaml: environment.variables.API_KEY: contains a NUL byte"),
    ("entrypoint-nul-byte", ["launch", "--config", "c.yaml"], 'entrypoint: ["python", "a\\0b"]\n',
     "c.yaml: entrypoint[1]: contains a NUL byte"),
    ("name-escape", ["launch", "--config", "c.yaml", *RUN], 'name: "a\\e[31mred"\n',
     "c.yaml: name: contains a control character"),
    ("yaml-huge-number", ["launch", "--config", "c.yaml", *RUN], "max_restarts: " + "9" * 5000 + "\n",
     "c.yaml: line 1: a number of 5,000 digits"),
    ("subnet-not-a-cidr", ["coordinator", "--subnet", "not-a-cidr", "--state-dir", "state"], None,
     "--subnet: expected a network such as 10.0.0.0/24, got 'not-a-cidr'"),
    ("logs-rank-huge", ["logs", "1", "--rank", "99999999999"], None, "--rank: must be between -1 and"),
]


def refused(args) -> int:
    """A refused command line's code: tfdist's own failure for `tfdist launch` (125), a usage error else."""
    return 125 if args[0] == "launch" else 2


def one_line(result, code: int = 2) -> str:
    """The row's assertions shared by every case: exit `code`, one line on stderr with tfdist's prefix, no
    traceback anywhere."""
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    assert result.returncode == code, (result.returncode, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and result.stderr.endswith("\n"), result.stderr
    assert re.match(r"tfdist( \w+)?: ", lines[0]), lines[0]
    return lines[0]


@pytest.mark.parametrize("args,config,names", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_every_bad_input_is_one_line(tmp_path, marker, args, config, names):
    if callable(config):
        config(tmp_path)
    elif isinstance(config, bytes):
        (tmp_path / "c.yaml").write_bytes(config)
    elif config is not None:
        (tmp_path / "c.yaml").write_text(config)
    line = one_line(run_cli(args, marker, timeout=60, cwd=str(tmp_path)), refused(args))
    assert names in line


@pytest.fixture
def coordinator(tmp_path):
    server = AgentsServer(str(tmp_path / "state"), "127.0.0.1:0").start()
    node = Client(server.address, server.issue("node", "n1"))
    node.call(node.agents.Register, pb.RegisterRequest(agent=pb.AgentInfo(
        name="n1", slots=8, addresses=[pb.Address(ip="127.0.0.1", prefix_len=8)])))
    yield server, server.issue("user", "alice").save(str(tmp_path / "alice.json"))
    node.close()
    server.stop(grace=0)


@pytest.mark.parametrize("args,names", [
    (["launch", "--detach", "--slots", "2147483647", *RUN], "--slots: must be at most 65,536, got 2147483647"),
    (["job", "99999999999999999999"], "job_id: job number '99999999999999999999' has more than 18 digits"),
    (["cancel", "\u00b2"], "job_id: '\u00b2' is not a job id"),
], ids=["slots-2^31-detach", "job-number-huge", "job-id-superscript"])
def test_against_a_coordinator_one_line_and_it_still_answers(tmp_path, marker, coordinator, args, names):
    """Measured 5: `--slots 2147483647 --detach` froze the coordinator for minutes (achievable_sizes looped
    up to the slots under its lock); the client refuses it (tests/unit/test_limits.py sends it over the
    wire). Measured 10: a 20-digit job number reached SQLite (`OverflowError`, INTERNAL); `²` passed
    isdigit() and failed int()."""
    server, credential = coordinator
    client = ["--coordinator", server.address, "--credentials", credential]
    assert names in one_line(run_cli([args[0], *client, *args[1:]], marker, timeout=60, cwd=str(tmp_path)),
                             refused(args))
    listed = run_cli(["agents", *client], marker, timeout=60)
    assert listed.returncode == 0 and "n1" in listed.stdout, listed.stderr


def test_a_port_in_use_is_one_line(tmp_path, marker, coordinator):
    """Measured 6: a port in use was a traceback (`RuntimeError: Failed to bind to address ...`), with
    gRPC's own line beside it."""
    server, _ = coordinator
    line = one_line(run_cli(["coordinator", "--listen", server.address, "--state-dir", str(tmp_path / "other")],
                            marker, timeout=60, cwd=str(tmp_path)))
    assert line == (f"tfdist: error: cannot listen on {server.address}: the address is in use (another "
                    "coordinator?); choose another --listen HOST:PORT, or stop what listens there")


def test_an_address_of_another_machine_is_one_line_saying_so(tmp_path, marker):
    """Issue 30, Measured 5: every failed bind read "the address is in use"."""
    line = one_line(run_cli(["coordinator", "--listen", "192.0.2.1:7477", "--state-dir", str(tmp_path / "state")],
                            marker, timeout=60, cwd=str(tmp_path)))  # TEST-NET-1: never this machine's
    assert line == ("tfdist: error: cannot listen on 192.0.2.1:7477: it is not an address of this machine; choose "
                    "another --listen HOST:PORT, e.g. 127.0.0.1:7477 (this machine only) or 0.0.0.0:7477 (every "
                    "interface)")
