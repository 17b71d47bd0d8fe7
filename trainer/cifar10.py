"""Reads CIFAR-10 from its own python-pickle files, downloading them with torchvision when absent.

The layout is `<data_root>/cifar-10-batches-py/` with `data_batch_1..5`, `test_batch` and `batches.meta`,
the folder torchvision's CIFAR10 (and so the lab) creates. Each batch is a pickled dict with bytes keys:
b"data" is a uint8 (N, 3072) array holding the red, green and blue 32x32 planes of each image one after
another, b"labels" a list of class indices; batches.meta holds b"label_names".
"""

from __future__ import annotations

import pickle
import tarfile
from pathlib import Path

import numpy as np
from torchvision.datasets import CIFAR10
from torchvision.datasets import utils as tv_utils

from trainer.errors import DatasetError
from trainer.images import ImageSplit

FOLDER = CIFAR10.base_folder
TRAIN_FILES = tuple(name for name, _md5 in CIFAR10.train_list)
TEST_FILES = tuple(name for name, _md5 in CIFAR10.test_list)
META_FILE = CIFAR10.meta["filename"]
ALL_FILES = (*TRAIN_FILES, *TEST_FILES, META_FILE)
NUM_CLASSES = 10
IMAGE_SHAPE = (3, 32, 32)  # how one row of b"data" is laid out: channel planes, then rows, then columns
SYNTHETIC_HINT = "or use the synthetic data source (--data synthetic)"

# A CIFAR-10 batch is a dict of numpy arrays, lists and bytes; nothing else may be unpickled from it.
_ALLOWED_GLOBALS = {
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "scalar"),
    ("_codecs", "encode"),  # how protocol 2 spells bytes objects
}


def batches_folder(data_root: str | Path) -> Path:
    return Path(data_root) / FOLDER


def cifar10_available(data_root: str | Path) -> bool:
    """True when every batch file exists (no reading, no network)."""
    folder = batches_folder(data_root)
    return all((folder / name).is_file() for name in ALL_FILES)


def read_cifar10(data_root: str | Path, train: bool, limit: int | None = None, download: bool = True) -> ImageSplit:
    """The first `limit` images of the train or test split; downloads only when the folder is missing."""
    folder = batches_folder(data_root)
    if not folder.exists():
        if not download:
            raise DatasetError(f"CIFAR-10 is not in {folder}: put the dataset there {SYNTHETIC_HINT}")
        _download(data_root)
    _check_complete(folder)

    classes = _read_label_names(folder / META_FILE)
    images, labels = [], []
    for name in TRAIN_FILES if train else TEST_FILES:
        batch_images, batch_labels = _read_batch(folder / name)
        images.append(batch_images)
        labels.append(batch_labels)
        # Batches are read in order, so a limit is a prefix and needs only the first files.
        if limit is not None and sum(len(b) for b in labels) >= limit:
            break
    return ImageSplit(images=_prefix(images, limit), labels=_prefix(labels, limit), classes=classes, source="cifar10")


def _prefix(arrays: list[np.ndarray], limit: int | None) -> np.ndarray:
    joined = np.concatenate(arrays)
    # A copy, so that a small subset does not keep a whole 10,000-image batch alive through a view.
    return joined if limit is None else joined[:limit].copy()


def _download(data_root: str | Path) -> None:
    try:
        tv_utils.download_and_extract_archive(
            CIFAR10.url, str(data_root), filename=CIFAR10.filename, md5=CIFAR10.tgz_md5
        )
    except (OSError, RuntimeError, tarfile.TarError) as exc:
        reason = _first_line(exc)
        raise DatasetError(
            f"CIFAR-10 is not in {batches_folder(data_root)} and could not be downloaded "
            f"(no network? {reason}): put the dataset there {SYNTHETIC_HINT}"
        ) from exc


def _check_complete(folder: Path) -> None:
    missing = [name for name in ALL_FILES if not (folder / name).is_file()]
    if missing:
        raise DatasetError(
            f"CIFAR-10 in {folder} is incomplete ({', '.join(missing)} missing): delete the folder "
            f"so that it is downloaded again, {SYNTHETIC_HINT}"
        )


def _read_label_names(path: Path) -> list[str]:
    meta = _unpickle(path)
    names = meta.get(b"label_names")
    if not isinstance(names, list) or len(names) != NUM_CLASSES or not all(isinstance(n, bytes) for n in names):
        raise _damaged(path, f"b'label_names' should be a list of {NUM_CLASSES} names")
    return [n.decode("utf-8", errors="replace") for n in names]


def _read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One batch file as uint8 (N, 32, 32, 3) images and int64 labels, after checking its structure."""
    batch = _unpickle(path)
    data, raw_labels = batch.get(b"data"), batch.get(b"labels")
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2:
        raise _damaged(path, "b'data' should be a uint8 array of shape (N, 3072)")
    if data.shape[1] != int(np.prod(IMAGE_SHAPE)):
        raise _damaged(path, f"each image has {data.shape[1]} values instead of 3072")
    try:
        labels = np.asarray(raw_labels, dtype=np.int64)
    except (TypeError, ValueError):
        raise _damaged(path, "b'labels' should be a list of class numbers") from None
    if labels.shape != (len(data),):
        raise _damaged(path, f"{len(data)} images but {labels.size} labels")
    if labels.size and (labels.min() < 0 or labels.max() >= NUM_CLASSES):
        raise _damaged(path, f"labels outside 0..{NUM_CLASSES - 1}")
    images = data.reshape(-1, *IMAGE_SHAPE).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(images), labels


def _unpickle(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            content = _BatchUnpickler(f, encoding="bytes").load()
    except Exception as exc:  # a damaged pickle can fail in many ways; each means the same to a learner
        raise _damaged(path, _first_line(exc)) from exc
    if not isinstance(content, dict):
        raise _damaged(path, "it does not hold a dict")
    return content


class _BatchUnpickler(pickle.Unpickler):
    """Refuses any global a CIFAR-10 batch does not need, so a tampered file cannot run code."""

    def find_class(self, module: str, name: str):
        if (module, name) not in _ALLOWED_GLOBALS:
            raise pickle.UnpicklingError(f"it holds an unexpected object {module}.{name}")
        return super().find_class(module, name)


def _damaged(path: Path, why: str) -> DatasetError:
    return DatasetError(
        f"CIFAR-10 file {path} is damaged ({why}): delete {path.parent} so that it is downloaded again, "
        f"{SYNTHETIC_HINT}"
    )


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:160] if lines else type(exc).__name__
