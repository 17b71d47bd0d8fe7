"""Shared fixtures: tiny datasets written in the real on-disk formats."""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

PEAKS_CACHE_VAR = "AMP_LAB_PEAKS_CACHE"


@pytest.fixture(autouse=True, scope="session")
def one_peaks_cache_for_the_session(tmp_path_factory):
    """Every server the tests start measures this machine's peaks (trainer/peaks.py, about 16 s on 2 cores) into
    one file shared by the whole session, as a class server keeps them: measured once, then read."""
    previous = os.environ.get(PEAKS_CACHE_VAR)
    os.environ[PEAKS_CACHE_VAR] = str(tmp_path_factory.mktemp("peaks") / "device-peaks.json")
    yield os.environ[PEAKS_CACHE_VAR]
    if previous is None:
        os.environ.pop(PEAKS_CACHE_VAR)
    else:
        os.environ[PEAKS_CACHE_VAR] = previous


CIFAR10_LABEL_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


@dataclass
class TinyCifar10:
    """A CIFAR-10 folder under `root` and the images written into it, for comparison."""

    root: Path
    folder: Path
    classes: list[str]  # as written to batches.meta
    train_images: np.ndarray  # uint8 (N, 32, 32, 3), data_batch_1..5 in order
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray


def write_cifar10(root: Path, per_batch: int = 6, test_size: int = 5, seed: int = 0) -> TinyCifar10:
    """Write data_batch_1..5, test_batch and batches.meta exactly as CIFAR-10's python release lays them out."""
    rng = np.random.default_rng(seed)
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)

    def write_batch(name: str, label: bytes, count: int) -> tuple[np.ndarray, np.ndarray]:
        images = rng.integers(0, 256, size=(count, 32, 32, 3), dtype=np.uint8)
        labels = rng.integers(0, 10, size=count)
        batch = {
            b"batch_label": label,
            b"labels": [int(x) for x in labels],
            # Each row: the 1024 red values, then green, then blue, each plane row by row.
            b"data": images.transpose(0, 3, 1, 2).reshape(count, 3072),
            b"filenames": [f"image_{i}.png".encode() for i in range(count)],
        }
        with open(folder / name, "wb") as f:
            pickle.dump(batch, f, protocol=2)
        return images, labels

    train = [write_batch(f"data_batch_{i}", f"training batch {i} of 5".encode(), per_batch) for i in range(1, 6)]
    test_images, test_labels = write_batch("test_batch", b"testing batch 1 of 1", test_size)
    meta = {b"num_cases_per_batch": per_batch, b"label_names": [n.encode() for n in CIFAR10_LABEL_NAMES],
            b"num_vis": 3072}
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump(meta, f, protocol=2)
    return TinyCifar10(
        root=root,
        folder=folder,
        classes=list(CIFAR10_LABEL_NAMES),
        train_images=np.concatenate([images for images, _ in train]),
        train_labels=np.concatenate([labels for _, labels in train]),
        test_images=test_images,
        test_labels=test_labels,
    )


@pytest.fixture
def tiny_cifar10(tmp_path: Path) -> TinyCifar10:
    """A complete CIFAR-10 folder with 6 images per training batch (30 in all) and 5 test images."""
    return write_cifar10(tmp_path / "data")


@pytest.fixture
def cifar10_writer():
    """write_cifar10 itself, for tests that need other sizes or a folder written later."""
    return write_cifar10


@pytest.fixture
def no_download(monkeypatch: pytest.MonkeyPatch) -> list:
    """Make torchvision's download fail as it does offline; the returned list records each attempt."""
    from urllib.error import URLError

    from torchvision.datasets import utils

    attempts = []

    def offline(url, *args, **kwargs):
        attempts.append(url)
        raise URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(utils, "download_and_extract_archive", offline)
    return attempts
