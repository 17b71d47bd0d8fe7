"""Synthetic CIFAR-shaped data: deterministic, prefix-stable, balanced and learnable."""

import numpy as np
import pytest

from trainer import synthetic
from trainer.errors import ConfigError
from trainer.loaders import load_split


def test_shape_dtype_and_names():
    split = load_split("synthetic", "unused", train=True, limit=50)

    assert split.images.shape == (50, 32, 32, 3) and split.images.dtype == np.uint8
    assert split.labels.shape == (50,) and split.labels.dtype == np.int64
    assert split.source == "synthetic"
    assert len(split.classes) == 10 and len(set(split.classes)) == 10
    assert split.labels.min() >= 0 and split.labels.max() <= 9


def test_same_seed_same_pixels_other_seed_other_pixels():
    first = synthetic.make_synthetic(train=True, limit=300, seed=3)
    again = synthetic.make_synthetic(train=True, limit=300, seed=3)
    other = synthetic.make_synthetic(train=True, limit=300, seed=4)

    np.testing.assert_array_equal(first.images, again.images)
    np.testing.assert_array_equal(first.labels, again.labels)
    assert not np.array_equal(first.images, other.images)


def test_train_and_test_come_from_different_streams():
    train = synthetic.make_synthetic(train=True, limit=100)
    test = synthetic.make_synthetic(train=False, limit=100)
    assert not np.array_equal(train.images, test.images)


@pytest.mark.parametrize("small", [1, 999, 1000, 1001])
def test_a_limit_is_a_prefix_of_a_longer_split(small):
    """Prefixes must agree across chunk boundaries (chunks hold 1000 images)."""
    longer = synthetic.make_synthetic(train=True, limit=2100, seed=1)
    prefix = synthetic.make_synthetic(train=True, limit=small, seed=1)

    np.testing.assert_array_equal(prefix.images, longer.images[:small])
    np.testing.assert_array_equal(prefix.labels, longer.labels[:small])


def test_full_split_sizes_and_exact_class_balance():
    test = synthetic.make_synthetic(train=False, limit=20_000)  # a limit beyond the split gives the whole split

    assert len(test) == synthetic.TEST_SIZE == 10_000 and synthetic.TRAIN_SIZE == 50_000
    # Every chunk holds each class equally often, so the whole split is exactly balanced.
    assert np.bincount(test.labels, minlength=10).tolist() == [1000] * 10


def test_pixels_use_the_whole_range_without_saturating():
    images = synthetic.make_synthetic(train=True, limit=1000).images

    assert images.min() == 0 and images.max() == 255
    assert 60 < images.mean() < 160
    saturated = np.mean((images == 0) | (images == 255))
    assert saturated < 0.05


def test_classes_are_told_apart_by_a_nearest_mean_classifier_on_raw_pixels():
    """A cheap learnability check (the engine's tests train the CNN): clearly above the 10% chance level."""
    train = synthetic.make_synthetic(train=True, limit=2000)
    test = synthetic.make_synthetic(train=False, limit=500)
    features = train.images.reshape(len(train), -1).astype(np.float32)
    means = np.stack([features[train.labels == c].mean(axis=0) for c in range(10)])
    queries = test.images.reshape(len(test), -1).astype(np.float32)
    distances = (queries**2).sum(1)[:, None] - 2 * queries @ means.T + (means**2).sum(1)[None, :]

    accuracy = np.mean(distances.argmin(axis=1) == test.labels)
    assert 0.25 < accuracy < 0.9  # learnable, but not solved by averaging pixels


def test_unknown_source_and_bad_limit_are_config_errors():
    with pytest.raises(ConfigError, match="synthetic"):
        load_split("imagenet", "./data", train=True)
    with pytest.raises(ConfigError, match="at least 1"):
        load_split("synthetic", "./data", train=True, limit=0)
