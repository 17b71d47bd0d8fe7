"""The CIFAR-10 reader on tiny files written in CIFAR-10's own pickle layout; never touches the network."""

import pickle

import numpy as np
import pytest

from trainer.cifar10 import cifar10_available, read_cifar10
from trainer.errors import DatasetError
from trainer.loaders import load_split


def test_reads_train_and_test_splits_as_hwc_uint8(tiny_cifar10, no_download):
    train = load_split("cifar10", str(tiny_cifar10.root), train=True)
    test = load_split("cifar10", str(tiny_cifar10.root), train=False)

    assert train.images.dtype == np.uint8 and train.images.shape == (30, 32, 32, 3)
    assert train.labels.dtype == np.int64
    np.testing.assert_array_equal(train.images, tiny_cifar10.train_images)
    np.testing.assert_array_equal(train.labels, tiny_cifar10.train_labels)
    np.testing.assert_array_equal(test.images, tiny_cifar10.test_images)
    np.testing.assert_array_equal(test.labels, tiny_cifar10.test_labels)
    assert train.source == test.source == "cifar10"
    assert no_download == []


def test_pixel_planes_become_channels(tmp_path, cifar10_writer):
    """Row layout: 1024 red values, then green, then blue; pixel (0, 1) of image 0 must come out as RGB."""
    tiny = cifar10_writer(tmp_path, per_batch=2, test_size=1)
    with open(tiny.folder / "data_batch_1", "rb") as f:
        data = pickle.load(f, encoding="bytes")[b"data"]
    images = read_cifar10(tmp_path, train=True, limit=1).images

    assert list(images[0, 0, 1]) == [data[0, 1], data[0, 1024 + 1], data[0, 2048 + 1]]


def test_label_names_come_from_batches_meta(tiny_cifar10):
    assert load_split("cifar10", str(tiny_cifar10.root), train=True).classes == tiny_cifar10.classes


@pytest.mark.parametrize("limit", [1, 6, 7, 29, 30, 1000])
def test_limit_is_a_prefix_of_the_split(tiny_cifar10, limit):
    split = load_split("cifar10", str(tiny_cifar10.root), train=True, limit=limit)

    expected = min(limit, 30)
    np.testing.assert_array_equal(split.images, tiny_cifar10.train_images[:expected])
    np.testing.assert_array_equal(split.labels, tiny_cifar10.train_labels[:expected])


def test_available_only_when_every_file_is_there(tiny_cifar10, tmp_path):
    assert cifar10_available(str(tiny_cifar10.root))
    assert not cifar10_available(str(tmp_path / "empty"))
    (tiny_cifar10.folder / "test_batch").unlink()
    assert not cifar10_available(str(tiny_cifar10.root))


def test_missing_dataset_offline_is_one_clear_line(tmp_path, no_download):
    root = tmp_path / "nowhere"
    with pytest.raises(DatasetError) as caught:
        load_split("cifar10", str(root), train=True)

    message = str(caught.value)
    assert "\n" not in message
    assert str(root / "cifar-10-batches-py") in message
    assert "could not be downloaded" in message and "--data synthetic" in message
    assert len(no_download) == 1 and no_download[0].startswith("https://")


def test_a_download_that_fails_its_checksum_is_reported_too(tmp_path, monkeypatch):
    from torchvision.datasets import utils

    def corrupted(url, root, **kwargs):
        raise RuntimeError("File not found or corrupted.")

    monkeypatch.setattr(utils, "download_and_extract_archive", corrupted)
    with pytest.raises(DatasetError, match="could not be downloaded .*File not found or corrupted"):
        load_split("cifar10", str(tmp_path), train=True)


def test_missing_dataset_without_download_never_tries_the_network(tmp_path, no_download):
    with pytest.raises(DatasetError, match="synthetic"):
        load_split("cifar10", str(tmp_path), train=False, download=False)
    assert no_download == []


def test_download_fills_the_folder_then_the_files_are_read(tmp_path, monkeypatch, cifar10_writer):
    """A successful download (simulated by writing the files) is followed by a normal read."""
    from torchvision.datasets import utils

    monkeypatch.setattr(utils, "download_and_extract_archive", lambda url, root, **kw: cifar10_writer(tmp_path))
    assert len(load_split("cifar10", str(tmp_path), train=False)) == 5


def test_partial_dataset_names_the_missing_file(tiny_cifar10, no_download):
    (tiny_cifar10.folder / "data_batch_3").unlink()
    with pytest.raises(DatasetError) as caught:
        load_split("cifar10", str(tiny_cifar10.root), train=True, limit=1)

    message = str(caught.value)
    assert "data_batch_3" in message and "incomplete" in message and "\n" not in message
    assert no_download == []


def test_truncated_file_is_reported_as_damaged(tiny_cifar10):
    path = tiny_cifar10.folder / "data_batch_1"
    path.write_bytes(path.read_bytes()[:500])
    with pytest.raises(DatasetError) as caught:
        load_split("cifar10", str(tiny_cifar10.root), train=True)

    message = str(caught.value)
    assert str(path) in message and "damaged" in message and "\n" not in message


def _rewrite(path, change):
    with open(path, "rb") as f:
        content = pickle.load(f, encoding="bytes")
    change(content)
    with open(path, "wb") as f:
        pickle.dump(content, f, protocol=2)


@pytest.mark.parametrize(
    "change, why",
    [
        (lambda b: b.pop(b"data"), "b'data'"),
        (lambda b: b.update({b"data": b[b"data"][:, :3000]}), "3000 values"),
        (lambda b: b.update({b"data": b[b"data"].astype(np.float32)}), "uint8"),
        (lambda b: b.update({b"labels": b[b"labels"][:-1]}), "labels"),
        (lambda b: b.update({b"labels": [10] * len(b[b"labels"])}), "outside 0..9"),
        (lambda b: b.update({b"labels": None}), "labels"),
    ],
)
def test_wrong_structure_is_reported_with_the_file(tiny_cifar10, change, why):
    path = tiny_cifar10.folder / "test_batch"
    _rewrite(path, change)
    with pytest.raises(DatasetError, match="damaged") as caught:
        load_split("cifar10", str(tiny_cifar10.root), train=False)
    assert str(path) in str(caught.value) and why in str(caught.value)


def test_broken_label_names_are_reported(tiny_cifar10):
    _rewrite(tiny_cifar10.folder / "batches.meta", lambda m: m.update({b"label_names": [b"cat"]}))
    with pytest.raises(DatasetError, match="batches.meta"):
        load_split("cifar10", str(tiny_cifar10.root), train=True)


def test_a_pickle_that_would_run_code_is_refused(tiny_cifar10):
    class Exploit:
        def __reduce__(self):
            # exec, not print: once Ray is imported (other tests in this process), print is Ray's own function.
            return (exec, ("raise SystemExit('this must never run')",))

    with open(tiny_cifar10.folder / "test_batch", "wb") as f:
        pickle.dump({b"data": Exploit()}, f)
    with pytest.raises(DatasetError, match="unexpected object builtins.exec"):
        load_split("cifar10", str(tiny_cifar10.root), train=False)
