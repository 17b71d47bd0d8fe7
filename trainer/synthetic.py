"""CIFAR-shaped synthetic images: ten learnable classes, no download, the same pixels for the same seed.

Each class is a smooth pattern (stripes, a disc, a ring, ...) painted in a colour that leans towards the
class's own hue. Every image shifts its pattern, varies contrast, colours and brightness, and adds a
distracting blob and pixel noise, so a small CNN learns the classes quickly but not instantly.
Images are made in fixed-size chunks, each from its own random stream keyed by (seed, split, chunk), so
the first N images of a split are the same whatever N is asked for.
"""

from __future__ import annotations

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


def make_synthetic(train: bool, limit: int | None = None, seed: int = 0) -> ImageSplit:
    """The first `limit` images (all when None) of the synthetic train or test split."""
    size = TRAIN_SIZE if train else TEST_SIZE
    count = size if limit is None else min(limit, size)
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
