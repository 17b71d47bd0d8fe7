"""The images a run trains and tests on, whichever source they come from."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainer.config import DATA_SOURCES
from trainer.errors import ConfigError

# The lab's Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)): maps [0, 1] pixels to [-1, 1].
MEAN = (0.5, 0.5, 0.5)
STD = (0.5, 0.5, 0.5)


@dataclass
class ImageSplit:
    """One split (train or test) held as uint8 HWC images, the layout CIFAR-10's pickles decode to."""

    images: np.ndarray  # uint8, (N, 32, 32, 3)
    labels: np.ndarray  # int64, (N,)
    classes: list[str]
    source: str  # cifar10 | synthetic

    def __len__(self) -> int:
        return len(self.labels)


def load_split(
    source: str,
    data_root: str,
    train: bool,
    limit: int | None = None,
    seed: int = 0,
    download: bool = True,
) -> ImageSplit:
    """The first `limit` images (all when None) of one split; raises DatasetError for missing or damaged data.

    `data_root` and `download` matter only for cifar10, `seed` only for synthetic data.
    """
    # Imported here because both readers build ImageSplit from this module.
    from trainer import cifar10, synthetic

    if source not in DATA_SOURCES:
        raise ConfigError(f"unknown data {source!r}: choose one of {', '.join(DATA_SOURCES)}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ConfigError(f"the image limit must be a whole number of at least 1, got {limit!r}")
    if source == "cifar10":
        return cifar10.read_cifar10(data_root, train, limit=limit, download=download)
    return synthetic.make_synthetic(train, limit=limit, seed=seed)


def cifar10_available(data_root: str) -> bool:
    """True when every CIFAR-10 batch file is under `data_root` (a cheap check: no reading, no network)."""
    from trainer import cifar10

    return cifar10.cifar10_available(data_root)
