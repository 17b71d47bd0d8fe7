"""The two batch sources: same values, right shapes and types, shuffling and memory format."""

import numpy as np
import pytest
import torch

from trainer.errors import ConfigError
from trainer.images import ImageSplit
from trainer.loaders import load_split, make_loader

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def split() -> ImageSplit:
    return load_split("synthetic", "unused", train=True, limit=100, seed=5)


def every_pixel_value() -> ImageSplit:
    """Four images that hold each of the 256 uint8 values in every channel."""
    values = np.arange(256, dtype=np.uint8).reshape(1, 16, 16, 1)
    images = np.tile(values, (4, 2, 2, 3))
    return ImageSplit(images, np.arange(4, dtype=np.int64), [str(i) for i in range(10)], "synthetic")


def _collect(source) -> tuple[torch.Tensor, torch.Tensor]:
    batches = list(source)
    return torch.cat([images for images, _ in batches]), torch.cat([labels for _, labels in batches])


def test_both_loaders_give_identical_normalised_values(split):
    lab = make_loader(split, "dataloader", 32, CPU, shuffle=False, num_workers=0)
    resident = make_loader(split, "resident", 32, CPU, shuffle=False)
    lab_images, lab_labels = _collect(lab)
    resident_images, resident_labels = _collect(resident)

    # Bitwise equality, not closeness: both paths do the same float32 divide, subtract and divide.
    assert torch.equal(lab_images, resident_images)
    assert torch.equal(lab_labels, resident_labels)
    assert lab_images.min() == -1 and lab_images.max() == 1


def test_every_pixel_value_is_divided_as_the_lab_divides_it():
    pixels = every_pixel_value()
    lab, _ = _collect(make_loader(pixels, "dataloader", 4, CPU, shuffle=False, num_workers=0))
    resident, _ = _collect(make_loader(pixels, "resident", 4, CPU, shuffle=False))
    assert torch.equal(lab, resident)
    # Why the division must be a true one (CUDA makes a scalar divisor a reciprocal multiply): that differs.
    x = torch.arange(256, dtype=torch.float32)
    assert not torch.equal(x / 255, x * (1 / 255))


def test_values_are_the_lab_normalisation_of_the_uint8_pixels(split):
    images, labels = _collect(make_loader(split, "resident", 64, CPU, shuffle=False))
    expected = (torch.from_numpy(split.images).permute(0, 3, 1, 2).double() / 255 - 0.5) / 0.5

    assert torch.allclose(images.double(), expected, atol=1e-6)
    assert labels.tolist() == split.labels.tolist()


@pytest.mark.parametrize("kind", ["dataloader", "resident"])
def test_shapes_dtypes_and_length_keep_the_partial_last_batch(split, kind):
    source = make_loader(split, kind, 32, CPU, shuffle=True, num_workers=0)
    batches = list(source)

    assert len(source) == len(batches) == 4 and source.num_images == 100
    assert [len(labels) for _, labels in batches] == [32, 32, 32, 4]
    images, labels = batches[0]
    assert images.shape == (32, 3, 32, 32) and images.dtype == torch.float32
    assert labels.dtype == torch.int64 and images.device == labels.device == CPU


@pytest.mark.parametrize("kind", ["dataloader", "resident"])
def test_each_epoch_is_a_new_order_of_the_same_images(split, kind):
    source = make_loader(split, kind, 25, CPU, shuffle=True, num_workers=0, seed=1)
    first_images, first_labels = _collect(source)
    second_images, second_labels = _collect(source)

    assert not torch.equal(first_labels, second_labels)
    assert sorted(first_labels.tolist()) == sorted(second_labels.tolist()) == sorted(split.labels.tolist())
    # The same set of images too: sort both epochs by a per-image fingerprint and compare.
    order = lambda x: x[torch.argsort(x.flatten(1).sum(1))]  # noqa: E731
    assert torch.equal(order(first_images), order(second_images))


@pytest.mark.parametrize("kind", ["dataloader", "resident"])
def test_the_seed_fixes_the_shuffle(split, kind):
    orders = [_collect(make_loader(split, kind, 50, CPU, shuffle=True, num_workers=0, seed=s))[1] for s in (7, 7, 8)]
    assert torch.equal(orders[0], orders[1]) and not torch.equal(orders[0], orders[2])


@pytest.mark.parametrize("kind", ["dataloader", "resident"])
@pytest.mark.parametrize("shuffle", [False, True])
def test_channels_last_batches(split, kind, shuffle):
    source = make_loader(split, kind, 16, CPU, shuffle=shuffle, num_workers=0, channels_last=True)
    images, _ = next(iter(source))

    assert images.is_contiguous(memory_format=torch.channels_last)
    assert not images.is_contiguous()


def test_dataloader_with_worker_processes_matches(split):
    """The lab's default uses worker processes; they must not change the values or the order."""
    with_workers = make_loader(split, "dataloader", 40, CPU, shuffle=False, num_workers=2)
    images, labels = _collect(with_workers)
    reference, _ = _collect(make_loader(split, "resident", 40, CPU, shuffle=False))

    assert torch.equal(images, reference) and labels.tolist() == split.labels.tolist()
    assert torch.equal(_collect(with_workers)[0], images)  # a second epoch with the persistent workers


def test_unknown_kind_and_bad_batch_size_are_config_errors(split):
    with pytest.raises(ConfigError, match="dataloader, resident"):
        make_loader(split, "tfrecord", 32, CPU, shuffle=False)
    with pytest.raises(ConfigError, match="batch size"):
        make_loader(split, "resident", 0, CPU, shuffle=False)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_every_pixel_value_matches_on_cuda():
    pixels = every_pixel_value()
    lab, _ = _collect(make_loader(pixels, "dataloader", 4, CPU, shuffle=False, num_workers=0))
    resident, _ = _collect(make_loader(pixels, "resident", 4, torch.device("cuda"), shuffle=False))
    assert torch.equal(lab, resident.cpu())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_both_loaders_match_on_cuda(split):
    cuda = torch.device("cuda")
    lab = make_loader(split, "dataloader", 32, cuda, shuffle=False, num_workers=0)
    resident = make_loader(split, "resident", 32, cuda, shuffle=False)
    lab_images, _ = _collect(lab)
    resident_images, resident_labels = _collect(resident)

    assert lab.loader.pin_memory and resident_images.is_cuda and resident_labels.is_cuda
    assert torch.equal(lab_images, resident_images)
    np.testing.assert_array_equal(resident_labels.cpu().numpy(), split.labels)


def test_the_labs_harness_forks_its_workers_each_epoch_pins_nothing_and_copies_synchronously():
    split = load_split("synthetic", "unused", train=True, limit=64)
    ours = make_loader(split, "dataloader", 32, CPU, shuffle=True, num_workers=2)
    lab = make_loader(split, "lab", 32, CPU, shuffle=True, num_workers=2)
    assert ours.loader.persistent_workers and not lab.loader.persistent_workers
    assert lab.kind == "lab" and not lab.loader.pin_memory and not lab.non_blocking
    # The same images in the same order: only the harness differs.
    for (a, la), (b, lb) in zip(make_loader(split, "dataloader", 32, CPU, shuffle=False, num_workers=0),
                                make_loader(split, "lab", 32, CPU, shuffle=False, num_workers=0)):
        assert torch.equal(a, b) and torch.equal(la, lb)
