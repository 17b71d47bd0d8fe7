"""The images of one split as every data source delivers them, and the lab's normalisation of them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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
