"""tfdist/private_files.py (issue 16, Must 5): private directories (created 0700, or a directory that is not
this user's own and closed refused in one line naming it and its owner, never repaired), files opened without
following symlinks and created 0600, atomic private writes, the daemon's umask and the user's. Real files, and
user nobody (setpriv) as the other local user."""

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap

import pytest

from tfdist.errors import UnsafePathError
from tfdist.private_files import check_private_dir, open_private, private_dir, read_private, write_private
from tests.other_user import NOBODY, NOBODY_UID



def as_nobody(*argv):
    subprocess.run([*NOBODY, *argv], check=True, timeout=30)


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def one_line(error: pytest.ExceptionInfo) -> str:
    text = str(error.value)
    assert "\n" not in text, text
    return text


@pytest.fixture
def shared():
    """A /tmp-like directory every user may write to (sticky), reachable by nobody (tmp_path is not)."""
    path = tempfile.mkdtemp(prefix="tfdist-test-shared-")
    os.chmod(path, 0o1777)
    yield path
    shutil.rmtree(path)


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


# ---------------------------------------------------------------- directories
@pytest.mark.parametrize("umask", [0o000, 0o022, 0o277])
def test_a_fresh_dir_is_0700_whatever_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        path = private_dir(str(tmp_path / "made" / "private"))
    finally:
        os.umask(old)
    assert mode(path) == 0o700 and os.lstat(path).st_uid == os.geteuid()
    assert private_dir(path) == path  # ours and closed: used as it is


def test_an_own_dir_open_to_others_is_refused_and_left_as_it_is(tmp_path):
    """An existing directory is never repaired: while it was 0755 (or 0777) others could read or fill it."""
    for open_mode in (0o755, 0o770, 0o1777):
        path = tmp_path / f"open{open_mode:o}"
        path.mkdir()
        os.chmod(path, open_mode)
        with pytest.raises(UnsafePathError) as refused:
            private_dir(str(path))
        assert one_line(refused) == (f"{path} is open to other users (mode {open_mode:04o}, owner root (uid 0)); "
                                     f"`chmod 700 {path}` or remove it")
        assert mode(path) == open_mode


def test_a_dir_another_user_made_first_is_refused_naming_them(shared):
    theirs = os.path.join(shared, "theirs")
    as_nobody("mkdir", "-m", "700", theirs)
    with pytest.raises(UnsafePathError) as refused:
        private_dir(theirs)
    assert one_line(refused).startswith(f"{theirs} belongs to nobody (uid 65534), not to you (root (uid 0)): "
                                        "another user made it first")
    with pytest.raises(UnsafePathError, match="belongs to nobody"):
        check_private_dir(theirs)
    assert os.listdir(theirs) == []


def test_a_symlink_at_the_dir_is_refused_even_to_a_private_dir_of_ours(shared, tmp_path):
    ours = private_dir(str(tmp_path / "ours"))
    link = os.path.join(shared, "link")
    as_nobody("ln", "-s", ours, link)
    with pytest.raises(UnsafePathError) as refused:
        private_dir(link)
    assert one_line(refused).startswith(f"{link} is a symlink (made by nobody (uid 65534))")
    file_in_place = os.path.join(shared, "file")
    as_nobody("touch", file_in_place)
    with pytest.raises(UnsafePathError, match=f"{file_in_place} is not a directory \\(made by nobody"):
        private_dir(file_in_place)


def test_nothing_is_made_in_a_parent_another_user_could_swap_it_in(shared, tmp_path):
    """A TMPDIR that is another user's directory, or everyone's without the sticky bit: they could rename
    the checked directory away and put theirs in its place."""
    nobodys = os.path.join(shared, "nobodys")
    as_nobody("mkdir", "-m", "755", nobodys)
    with pytest.raises(UnsafePathError) as refused:
        private_dir(os.path.join(nobodys, "tfdist-agent-0"))
    assert one_line(refused).startswith(f"{nobodys} (where tfdist keeps tfdist-agent-0) belongs to nobody (uid 65534)")
    assert os.listdir(nobodys) == []
    everyones = tmp_path / "everyones"
    everyones.mkdir()
    os.chmod(everyones, 0o777)
    with pytest.raises(UnsafePathError, match="is writable by every user without the sticky bit \\(mode 0777\\)"):
        private_dir(str(everyones / "state"))
    assert os.listdir(everyones) == []
    os.chmod(everyones, 0o1777)  # like /tmp
    assert mode(private_dir(str(everyones / "state"))) == 0o700


def test_a_missing_dir_is_one_line(tmp_path):
    with pytest.raises(UnsafePathError, match=f"^{tmp_path}/none does not exist$"):
        check_private_dir(str(tmp_path / "none"))


# ---------------------------------------------------------------- files
def test_open_private_creates_0600_and_never_follows_a_symlink(tmp_path):
    old = os.umask(0)
    try:
        fd = open_private(str(tmp_path / "new"), os.O_WRONLY | os.O_CREAT)
    finally:
        os.umask(old)
    os.close(fd)
    assert mode(tmp_path / "new") == 0o600
    target = tmp_path / "target"
    os.symlink(target, tmp_path / "planted")
    with pytest.raises(UnsafePathError, match="planted is a symlink \\(made by root"):
        open_private(str(tmp_path / "planted"), os.O_RDWR | os.O_CREAT)
    assert not target.exists()  # nothing created where the link pointed


def test_open_private_refuses_what_is_not_our_own_regular_file(shared):
    fifo = os.path.join(shared, "fifo")
    as_nobody("mkfifo", "-m", "666", fifo)
    for flags in (os.O_RDONLY, os.O_WRONLY):  # neither blocks waiting for the other end
        with pytest.raises(UnsafePathError, match="fifo is not a regular file \\(made by nobody"):
            open_private(fifo, flags)
    theirs = os.path.join(shared, "theirs")
    as_nobody("sh", "-c", f"umask 0; echo keep > {theirs}")
    with pytest.raises(UnsafePathError, match="theirs belongs to nobody \\(uid 65534\\), not to you"):
        open_private(theirs, os.O_WRONLY | os.O_TRUNC)
    assert open(theirs).read() == "keep\n"  # O_TRUNC comes after the checks
    os.close(open_private(theirs))  # reading is allowed: the caller decides what to trust


def test_open_private_refuses_to_write_a_file_with_another_name(tmp_path):
    precious = tmp_path / "precious"
    precious.write_text("keep")
    os.link(precious, tmp_path / "alias")  # what a hard link in a shared directory would be
    with pytest.raises(UnsafePathError, match="alias has 2 names"):
        open_private(str(tmp_path / "alias"), os.O_WRONLY | os.O_TRUNC)
    assert precious.read_text() == "keep"


def test_write_private_replaces_a_planted_symlink_and_leaves_its_target(tmp_path, umask_022):
    secret = tmp_path / "secret"
    secret.write_text("precious")
    os.chmod(secret, 0o600)
    directory = private_dir(str(tmp_path / "d"))
    path = os.path.join(directory, "state.json")
    os.symlink(secret, path)
    write_private(path, b"{}")
    assert secret.read_text() == "precious"
    assert not os.path.islink(path) and read_private(path) == b"{}" and mode(path) == 0o600
    write_private(path, b"{\"a\": 1}")  # replaced again: no temp file left beside it
    assert os.listdir(directory) == ["state.json"] and read_private(path) == b"{\"a\": 1}"


def test_read_private_is_bounded_and_does_not_follow_symlinks(tmp_path):
    big = tmp_path / "big"
    big.write_bytes(b"x" * 101)
    with pytest.raises(UnsafePathError, match="is larger than 100 bytes"):
        read_private(str(big), 100)
    assert read_private(str(big), 101) == b"x" * 101
    os.symlink(big, tmp_path / "link")
    with pytest.raises(UnsafePathError, match="link is a symlink"):
        read_private(str(tmp_path / "link"))


# ---------------------------------------------------------------- umask
UMASKS = textwrap.dedent("""
    import os, subprocess, sys
    from tfdist.private_files import daemon_umask, original_umask
    print(oct(daemon_umask()), oct(original_umask()))
    print(oct(os.umask(0o077)))  # the daemon's own
    child = subprocess.run([sys.executable, "-c", "from tfdist.private_files import original_umask; "
                            "print(oct(original_umask()))"], capture_output=True, text=True, check=True)
    print(child.stdout.strip())  # a daemon started by a daemon still knows the user's
""")


def test_a_daemon_runs_with_umask_077_and_remembers_the_users(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TFDIST_USER_UMASK"}
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, "-c", UMASKS], umask=0o027, env=env, capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    assert out == ["0o27", "0o27", "0o77", "0o27"]


# ---------------------------------------------------------------- a kubelet's volume (issue 45, Measured 1)
def test_a_key_of_a_kubelet_laid_out_volume_is_read_through_its_links(tmp_path):
    from tests.volume_layout import lay_out
    from tfdist.private_files import read_mounted

    volume = str(tmp_path / "vol")
    lay_out(volume, {"credential.json": b"{}"}, mode=0o440)
    assert os.path.islink(os.path.join(volume, "credential.json"))
    assert read_mounted(os.path.join(volume, "credential.json")) == b"{}"
    with pytest.raises(UnsafePathError):  # what every read but this one still does
        read_private(os.path.join(volume, "credential.json"))


def test_a_plain_file_reads_as_before_and_a_missing_one_is_not_found(tmp_path):
    from tfdist.private_files import read_mounted

    (tmp_path / "plain.json").write_bytes(b"x")
    assert read_mounted(str(tmp_path / "plain.json")) == b"x"
    os.chown(tmp_path / "plain.json", NOBODY_UID, NOBODY_UID)  # another user's plain file: refused too
    with pytest.raises(UnsafePathError, match="belongs to nobody"):
        read_mounted(str(tmp_path / "plain.json"))
    with pytest.raises(FileNotFoundError):
        read_mounted(str(tmp_path / "absent.json"))
    os.symlink("..data/absent.json", tmp_path / "dangling.json")
    with pytest.raises(FileNotFoundError):
        read_mounted(str(tmp_path / "dangling.json"))


@pytest.mark.parametrize("target", ["/etc/hostname", "../outside/credential.json", "..data/../../outside/credential.json",
                                    "sub/../../outside/credential.json"])
def test_a_link_that_leaves_the_volume_is_refused_in_one_line(tmp_path, target):
    from tfdist.private_files import read_mounted

    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "credential.json").write_bytes(b"{}")
    volume = tmp_path / "vol"
    volume.mkdir()
    (volume / "sub").mkdir()
    os.symlink(target, volume / "credential.json")
    with pytest.raises(UnsafePathError) as error:
        read_mounted(str(volume / "credential.json"))
    assert "outside" in one_line(error) and "remove it" in one_line(error)


def test_another_users_file_or_link_in_the_volume_is_refused(tmp_path):
    from tests.volume_layout import lay_out
    from tfdist.private_files import read_mounted

    volume = str(tmp_path / "vol")
    folder = lay_out(volume, {"credential.json": b"{}"})
    os.chown(os.path.join(folder, "credential.json"), NOBODY_UID, NOBODY_UID)
    with pytest.raises(UnsafePathError) as error:
        read_mounted(os.path.join(volume, "credential.json"))
    assert "nobody" in one_line(error)
    other = str(tmp_path / "other")
    lay_out(other, {"credential.json": b"{}"})
    os.lchown(os.path.join(other, "..data"), NOBODY_UID, NOBODY_UID)  # a link another user made
    with pytest.raises(UnsafePathError) as error:
        read_mounted(os.path.join(other, "credential.json"))
    assert "..data" in one_line(error) and "nobody" in one_line(error)


def test_a_link_loop_in_the_volume_ends_in_one_line(tmp_path):
    from tfdist.private_files import read_mounted

    os.symlink("b", tmp_path / "a")
    os.symlink("a", tmp_path / "b")
    with pytest.raises(UnsafePathError):
        read_mounted(str(tmp_path / "a"))


def test_another_user_reads_its_credential_from_a_volume_root_laid_out_for_its_group(shared, other_user_python):
    """A pod's non-root user (fsGroup) reads the key the kubelet (root) laid out: mode 0440, group fsGroup."""
    from tests.volume_layout import lay_out

    volume = os.path.join(shared, "vol")
    lay_out(volume, {"credential.json": b'{"kind": "user", "name": "alice", "token": "t"}'}, mode=0o440,
            gid=NOBODY_UID)
    script = ("from cluster.shared.credentials import Credential; import sys; "
              "print(Credential.load(sys.argv[1]).name)")
    out = subprocess.run([*other_user_python.argv("-c", script), os.path.join(volume, "credential.json")],
                         capture_output=True, text=True, timeout=60, env=other_user_python.env())
    assert out.returncode == 0 and out.stdout.strip() == "alice", out.stderr[-2000:]
