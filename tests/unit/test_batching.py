import pytest

from tfdist.batching import BatchSizeError, split_batch


@pytest.mark.parametrize("gbs,slots,local,per_replica,per_worker,dropped", [
    (64, 2, 1, 32, 32, 0),
    (100, 3, 1, 33, 33, 1),
    (10, 4, 1, 2, 2, 2),
    (64, 8, 4, 8, 32, 0),
    (7, 7, 1, 1, 1, 0),
    (5, 1, 1, 5, 5, 0),
])
def test_split(gbs, slots, local, per_replica, per_worker, dropped):
    s = split_batch(gbs, slots, local)
    assert (s.per_replica, s.per_worker, s.dropped) == (per_replica, per_worker, dropped)
    assert s.effective_global == gbs - dropped


def test_remainder_warning_names_the_dropped_samples():
    assert split_batch(64, 2).remainder_warning() is None
    assert split_batch(100, 3).remainder_warning() == (
        "global_batch_size=100 is not divisible by 3 slots: per-replica batch size is 33, the remainder of "
        "1 sample(s) per step is dropped (effective global batch size 99). Use a multiple of 3 to keep every sample.")


def test_too_small_global_batch_is_refused_with_the_fix():
    with pytest.raises(BatchSizeError) as err:
        split_batch(3, 4)
    assert str(err.value) == ("hyperparameters.global_batch_size=3 is smaller than the 4 slots: every replica "
                              "needs at least one sample. Use a global_batch_size of at least 4, or fewer slots.")


def test_bad_slot_counts():
    with pytest.raises(BatchSizeError):
        split_batch(8, 0)
    with pytest.raises(BatchSizeError):
        split_batch(8, 2, 3)
