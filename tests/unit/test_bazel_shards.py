"""The unit tier's Bazel shards (tests/bazel_pytest.py): every file in exactly one shard, and Bazel told the
sharding protocol is understood (else it would run every file in every shard)."""

from tests.bazel_pytest import shard

FILES = [f"tests/unit/test_{name}.py" for name in ("b", "a", "d", "c", "e")]


def test_the_shards_split_the_files_between_them(tmp_path):
    status = tmp_path / "status"
    shares = [shard(FILES, {"TEST_TOTAL_SHARDS": "3", "TEST_SHARD_INDEX": str(i), "TEST_SHARD_STATUS_FILE": str(status)})
              for i in range(3)]
    assert sorted(f for share in shares for f in share) == sorted(FILES)
    assert all(share for share in shares) and status.exists()


def test_an_unsharded_target_runs_every_file():
    assert shard(FILES, {}) == FILES and shard(FILES, {"TEST_TOTAL_SHARDS": "1", "TEST_SHARD_INDEX": "0"}) == FILES
