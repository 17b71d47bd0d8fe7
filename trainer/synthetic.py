"""CIFAR-shaped synthetic images: ten learnable classes, no download, the same pixels for the same seed.

Each class is a smooth pattern (stripes, a disc, a ring, ...) painted in a colour that leans towards the
class's own hue. Every image shifts its pattern, varies contrast, colours and brightness, and adds a
distracting blob and pixel noise, so a small CNN learns the classes quickly but not instantly.
Images are made in fixed-size chunks, each from its own random stream keyed by (seed, split, chunk), so
the first N images of a split are the same whatever N is asked for.

Generating all 60,000 images takes a few seconds. A caller that starts many runs on the same split (the GPU kit)
can generate it once with `prepare_synthetic(folder)` and give each run `data_root=folder`: a run then reads the
first N images from there, the same pixels it would have generated. A prepared file is named after this module's
source and numpy's version, so one written by another generator is never read.
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from functools import lru_cache
from pathlib import Path

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from trainer.images import ImageSplit

TRAIN_SIZE = 50_000
TEST_SIZE = 10_000
CLASSES = [
    "horizontal stripes",
    "vertical stripes",
    "diagonal stripes",
    "checkerboard",
    "disc",
    "ring",
    "cross",
    "square",
    "soft edge",
    "dots",
]
SIZE = 32
CHUNK = 1000  # images per random stream; a multiple of 10 so each chunk holds every class equally often
_SPLIT_STREAM = {True: 0, False: 1}  # train and test never share a random stream
_MAX_SHIFT = 8  # patterns are drawn on a larger canvas and cropped at a random offset up to this
_CANVAS = SIZE + 2 * _MAX_SHIFT
# How far each image's foreground colour leans towards its class's hue (1 = exactly the hue). Colour is the
# cue a CNN picks up first, shape the one it needs for the rest; these ranges set how quickly it learns.
_LEAN = (0.7, 1.0)
_NOISE = 0.1  # half-width of the uniform pixel noise, in [0, 1] pixel units
_CLASS_COLOURS = np.array(
    [
        [0.9, 0.2, 0.2],
        [0.2, 0.8, 0.2],
        [0.2, 0.3, 0.9],
        [0.9, 0.8, 0.1],
        [0.8, 0.2, 0.8],
        [0.1, 0.8, 0.8],
        [0.9, 0.5, 0.1],
        [0.5, 0.5, 0.5],
        [0.6, 0.9, 0.5],
        [0.4, 0.2, 0.6],
    ],
    dtype=np.float32,
)


def make_synthetic(train: bool, limit: int | None = None, seed: int = 0,
                   prepared_in: str | Path | None = None) -> ImageSplit:
    """The first `limit` images (all when None) of the synthetic train or test split: read from `prepared_in` where
    prepare_synthetic left enough of them there, else generated."""
    size = TRAIN_SIZE if train else TEST_SIZE
    count = size if limit is None else min(limit, size)
    prepared = read_prepared(prepared_in, train, count, seed) if prepared_in is not None else None
    if prepared is not None:
        return prepared
    return _generate(train, count, seed)


def prepare_synthetic(folder: str | Path, seed: int = 0, train_limit: int | None = None,
                      test_limit: int | None = None) -> list[Path]:
    """Generate the first `train_limit` and `test_limit` images (all when None) of both splits once into `folder`,
    for runs given `data_root=folder`; returns the files written."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for train, limit in ((True, train_limit), (False, test_limit)):
        split = make_synthetic(train, limit, seed)
        path = prepared_path(folder, train, seed)
        partial = path.with_name(path.name + ".partial")
        with open(partial, "wb") as handle:  # a file object: np.savez would add its own suffix to a name
            np.savez(handle, images=split.images, labels=split.labels)
        os.replace(partial, path)  # a prepare killed mid-write leaves no file a run could half-read
        written.append(path)
    return written


def prepared_path(folder: str | Path, train: bool, seed: int) -> Path:
    """Where prepare_synthetic keeps one split for this generator (its source and numpy's version)."""
    return Path(folder) / f"synthetic-{_generator_version()}-seed{seed}-{'train' if train else 'test'}.npz"


def read_prepared(folder: str | Path, train: bool, count: int, seed: int) -> ImageSplit | None:
    """The first `count` images of a prepared split in `folder`; None where there is none, it holds fewer, or it
    cannot be read (the caller then generates them)."""
    try:
        with np.load(prepared_path(folder, train, seed), allow_pickle=False) as saved:
            images, labels = saved["images"], saved["labels"]
    except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile):
        return None
    expected = images.dtype == np.uint8 and images.shape[1:] == (SIZE, SIZE, 3) and labels.dtype == np.int64
    if not expected or len(images) != len(labels) or len(labels) < count:
        return None
    return ImageSplit(images=np.ascontiguousarray(images[:count]), labels=np.ascontiguousarray(labels[:count]),
                      classes=list(CLASSES), source="synthetic")


@lru_cache(maxsize=1)
def _generator_version() -> str:
    """A short hash of this module's source and numpy's version: what decides the pixels of a seed."""
    source = Path(__file__).read_bytes() + np.__version__.encode()
    return hashlib.sha256(source).hexdigest()[:12]


def _generate(train: bool, count: int, seed: int) -> ImageSplit:
    """The first `count` images of a split, chunk by chunk."""
    templates = _class_templates()
    images = np.empty((count, SIZE, SIZE, 3), dtype=np.uint8)
    labels = np.empty(count, dtype=np.int64)
    for chunk, start in enumerate(range(0, count, CHUNK)):
        stop = min(start + CHUNK, count)
        rng = np.random.default_rng([seed, _SPLIT_STREAM[train], chunk])
        chunk_images, chunk_labels = _make_chunk(rng, templates)
        images[start:stop] = chunk_images[: stop - start]
        labels[start:stop] = chunk_labels[: stop - start]
    return ImageSplit(images=images, labels=labels, classes=list(CLASSES), source="synthetic")


def _class_templates() -> np.ndarray:
    """One smooth pattern per class on the canvas, float32 in [0, 1], shape (10, canvas, canvas)."""
    centre = (_CANVAS - 1) / 2
    y, x = np.mgrid[0:_CANVAS, 0:_CANVAS].astype(np.float32) - centre
    r = np.hypot(x, y)
    wave = lambda t, period: 0.5 + 0.5 * np.cos(2 * np.pi * t / period)  # noqa: E731
    edge = lambda t: 1 / (1 + np.exp(-t))  # noqa: E731 - a soft step keeps every pattern smooth
    patterns = [
        wave(y, 8),
        wave(x, 8),
        wave((x + y) / np.sqrt(2), 8),
        0.5 + 0.5 * np.cos(2 * np.pi * x / 12) * np.cos(2 * np.pi * y / 12),
        edge(9 - r),
        np.exp(-(((r - 10) / 2) ** 2)),
        np.maximum(np.exp(-((x / 2.5) ** 2)), np.exp(-((y / 2.5) ** 2))) * edge(13 - r),
        edge(8 - np.maximum(np.abs(x), np.abs(y))),
        edge(x / 3),
        (wave(x, 8) * wave(y, 8)) ** 2,
    ]
    return np.stack(patterns).astype(np.float32)


def _make_chunk(rng: np.random.Generator, templates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CHUNK images (HWC uint8), every class equally often in shuffled order: pattern, colours, blob, noise."""
    n = CHUNK
    uniform = lambda low, high, shape: rng.uniform(low, high, size=shape).astype(np.float32)  # noqa: E731
    labels = rng.permutation(np.arange(n) % len(CLASSES))
    dy = rng.integers(0, 2 * _MAX_SHIFT + 1, size=n)
    dx = rng.integers(0, 2 * _MAX_SHIFT + 1, size=n)
    mask = sliding_window_view(templates, (SIZE, SIZE), axis=(1, 2))[labels, dy, dx]
    mask *= uniform(0.7, 1.0, (n, 1, 1))  # contrast

    # Painted channel-first, where numpy's inner loops are long; turned into HWC at the end.
    lean = uniform(*_LEAN, (n, 1))
    foreground = lean * _CLASS_COLOURS[labels] + (1 - lean) * uniform(0, 1, (n, 3))
    background = uniform(0, 0.6, (n, 3))
    image = background[:, :, None, None] + mask[:, None] * (foreground - background)[:, :, None, None]

    # A blob of a random colour somewhere, so no single pixel region identifies the class.
    rows = np.arange(SIZE, dtype=np.float32)
    by, bx = uniform(0, SIZE, (2, n, 1, 1))
    radius = uniform(2, 6, (n, 1, 1))
    blob = np.exp(-(((rows[None, :, None] - by) ** 2 + (rows[None, None, :] - bx) ** 2) / (2 * radius**2)))
    blob *= uniform(0.2, 0.6, (n, 1, 1))
    image += blob[:, None] * (uniform(0, 1, (n, 3, 1, 1)) - image)

    image *= uniform(0.8, 1.2, (n, 1, 1, 1))  # brightness
    # Uniform pixel noise from raw random bytes: far cheaper than normal samples, and as good here.
    noise = np.frombuffer(rng.bytes(image.size), dtype=np.uint8).reshape(image.shape)
    image += (noise.astype(np.float32) - 127.5) * (_NOISE / 127.5)
    pixels = (np.clip(image, 0, 1) * 255 + 0.5).astype(np.uint8)
    return pixels.transpose(0, 2, 3, 1), labels
