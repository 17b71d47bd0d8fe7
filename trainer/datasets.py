"""The images a run trains and tests on, whichever source they come from: the one door to the data sources."""

from __future__ import annotations

from trainer import cifar10, synthetic
from trainer.config import DATA_SOURCES
from trainer.errors import ConfigError
from trainer.images import ImageSplit


def load_split(
    source: str,
    data_root: str,
    train: bool,
    limit: int | None = None,
    seed: int = 0,
    download: bool = True,
) -> ImageSplit:
    """The first `limit` images (all when None) of one split; raises DatasetError for missing or damaged data.

    `download` matters only for cifar10, `seed` only for synthetic data. For synthetic data `data_root` may hold a
    split prepared once (trainer.synthetic.prepare_synthetic): the same pixels, read instead of generated.
    """
    if source not in DATA_SOURCES:
        raise ConfigError(f"unknown data {source!r}: choose one of {', '.join(DATA_SOURCES)}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ConfigError(f"the image limit must be a whole number of at least 1, got {limit!r}")
    if source == "cifar10":
        return cifar10.read_cifar10(data_root, train, limit=limit, download=download)
    return synthetic.make_synthetic(train, limit=limit, seed=seed, prepared_in=data_root)


def cifar10_available(data_root: str) -> bool:
    """True when every CIFAR-10 batch file is under `data_root` (a cheap check: no reading, no network)."""
    return cifar10.cifar10_available(data_root)
