"""The images a run trains and tests on: a split from its source (the one door to CIFAR-10 and the synthetic
images), and two ways to feed it to the model, the lab's DataLoader pipeline and a device-resident tensor.

Both yield (images, labels) on the training device: float32 NCHW images normalised with MEAN/STD and
int64 labels, and both give exactly the same values for the same image.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms

from trainer import cifar10, synthetic
from trainer.config import DATA_SOURCES, LOADERS, WORKER_LOADERS
from trainer.errors import ConfigError
from trainer.images import MEAN, STD, ImageSplit

Batch = tuple[torch.Tensor, torch.Tensor]


def load_split(source: str, data_root: str, train: bool, limit: int | None = None, seed: int = 0,
               download: bool = True) -> ImageSplit:
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


class BatchSource:
    """An epoch's worth of batches each time it is iterated; len() is the number of batches per epoch."""

    kind: str = ""
    device_bytes: int = 0  # what the source holds on the device between batches

    def __init__(self, num_images: int, batch_size: int, device: torch.device, channels_last: bool):
        self.num_images = num_images
        self.batch_size = batch_size
        self.device = device
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format

    def __len__(self) -> int:
        # The last, partial batch is kept, as a DataLoader does by default.
        return math.ceil(self.num_images / self.batch_size)

    def __iter__(self) -> Iterator[Batch]:
        raise NotImplementedError


def make_loader(
    split: ImageSplit,
    kind: str,
    batch_size: int,
    device: torch.device,
    *,
    shuffle: bool,
    num_workers: int = 4,
    seed: int = 0,
    channels_last: bool = False,
) -> BatchSource:
    """A batch source of `kind` (dataloader | resident); the seed fixes the shuffle order of every epoch."""
    if kind not in LOADERS:
        raise ConfigError(f"unknown loader {kind!r}: choose one of {', '.join(LOADERS)}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError(f"batch size must be a whole number of at least 1, got {batch_size!r}")
    device = torch.device(device)
    if kind in WORKER_LOADERS:
        return DataLoaderBatches(split, batch_size, device, shuffle, num_workers, seed, channels_last,
                                 as_the_lab=kind == "lab")
    return ResidentBatches(split, batch_size, device, shuffle, seed, channels_last)


class UInt8ImageDataset(Dataset):
    """The lab's view of a split: each item a PIL image through ToTensor and Normalize, and its label."""

    def __init__(self, images: np.ndarray, labels: np.ndarray):
        self.images = images
        self.labels = labels
        self.transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize(MEAN, STD)])

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.transform(Image.fromarray(self.images[index])), int(self.labels[index])


class DataLoaderBatches(BatchSource):
    """The lab's pipeline: per-image PIL decoding and transforms in worker processes, then a copy to the device. As
    this app runs it, the workers stay between epochs and the copies overlap the step (pinned memory); `as_the_lab`
    runs it as the lab's script does: workers forked anew each epoch, pageable memory, copies that wait."""

    kind = "dataloader"

    def __init__(self, split: ImageSplit, batch_size: int, device: torch.device, shuffle: bool,
                 num_workers: int, seed: int, channels_last: bool, as_the_lab: bool = False):
        super().__init__(len(split), batch_size, device, channels_last)
        self.kind = "lab" if as_the_lab else "dataloader"
        self.non_blocking = not as_the_lab and device.type == "cuda"
        self.loader = DataLoader(
            UInt8ImageDataset(split.images, split.labels),
            batch_size=batch_size,
            shuffle=shuffle,
            num_workers=num_workers,
            pin_memory=self.non_blocking,  # page-locked host memory makes the copy asynchronous
            persistent_workers=num_workers > 0 and not as_the_lab,  # keep workers between epochs, or fork anew
            generator=torch.Generator().manual_seed(seed),
        )

    def __iter__(self) -> Iterator[Batch]:
        for images, labels in self.loader:
            yield (
                images.to(self.device, non_blocking=self.non_blocking, memory_format=self.memory_format),
                labels.to(self.device, non_blocking=self.non_blocking),
            )


class ResidentBatches(BatchSource):
    """The whole split normalised once into one device tensor; an epoch is slices of a fresh permutation."""

    kind = "resident"

    def __init__(self, split: ImageSplit, batch_size: int, device: torch.device, shuffle: bool, seed: int,
                 channels_last: bool):
        super().__init__(len(split), batch_size, device, channels_last)
        self.shuffle = shuffle
        self.generator = torch.Generator().manual_seed(seed)
        self.images = _normalise(torch.from_numpy(split.images).to(device), self.memory_format)
        self.labels = torch.from_numpy(split.labels).to(device=device, dtype=torch.int64)
        self.device_bytes = self.images.nbytes + self.labels.nbytes

    def __iter__(self) -> Iterator[Batch]:
        if not self.shuffle:
            for start in range(0, self.num_images, self.batch_size):
                stop = start + self.batch_size
                yield self.images[start:stop], self.labels[start:stop]
            return
        order = torch.randperm(self.num_images, generator=self.generator).to(self.device)
        for start in range(0, self.num_images, self.batch_size):
            index = order[start : start + self.batch_size]
            # Indexing usually keeps channels_last already; the contiguous call is then free.
            yield self.images[index].contiguous(memory_format=self.memory_format), self.labels[index]


def _normalise(images_nhwc: torch.Tensor, memory_format: torch.memory_format) -> torch.Tensor:
    """uint8 NHWC -> normalised float32 NCHW with the same operations ToTensor and Normalize use."""
    n, height, width, channels = images_nhwc.shape
    images = torch.empty((n, channels, height, width), dtype=torch.float32, device=images_nhwc.device,
                         memory_format=memory_format)
    images.copy_(images_nhwc.permute(0, 3, 1, 2))  # one float32 buffer, converted and laid out in one pass
    # Divide (not multiply by 1/255) and then subtract and divide, in float32 like the transforms do,
    # so every value is rounded exactly as the DataLoader pipeline rounds it and the two match bit for bit.
    # The divisor is a device tensor: CUDA turns division by a Python scalar into a multiply by its reciprocal.
    images.div_(torch.full((1,), 255.0, dtype=torch.float32, device=images.device))
    mean = torch.tensor(MEAN, dtype=torch.float32, device=images.device).view(1, 3, 1, 1)
    std = torch.tensor(STD, dtype=torch.float32, device=images.device).view(1, 3, 1, 1)
    return images.sub_(mean).div_(std)
