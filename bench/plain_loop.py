"""The lab's training loop written plainly, with no instrumentation: the yardstick for the trainer's overhead.

Only the model, the loss, the optimizer, autocast and the scaler; no progress callbacks, no loss history, no
memory sampling. Batches come from the same loaders as the trainer so that only the loop differs.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import torch
from torch import nn

from trainer import host_malloc
from trainer.images import ImageSplit
from trainer.loaders import make_loader
from trainer.model import SimpleCNN
from trainer.precision import set_tf32

# mode -> (autocast dtype or None, GradScaler enabled); the scaler matters only for fp16's narrow range.
PLAIN_MODES = {
    "fp32": (None, False),
    "amp-bf16": (torch.bfloat16, False),
    "amp-fp16": (torch.float16, True),
}


@dataclass
class PlainResult:
    """Timings of one plain run; the steady figures leave out the first `warmup_steps` steps."""

    precision: str
    loader: str
    channels_last: bool
    tuned_malloc: bool  # whether this process ran with trainer.host_malloc's thresholds
    batch_size: int
    epochs: int
    total_steps: int
    warmup_steps: int
    steady_steps: int
    steady_images: int
    steady_time_s: float
    ms_per_step: float | None  # steady_time_s / steady_steps
    images_per_s: float | None  # steady_images / steady_time_s
    total_time_s: float  # first batch requested to end of last step, warm-up included (as the lab times it)
    final_loss: float

    def to_dict(self) -> dict:
        return asdict(self)


def _synchronize(device: torch.device) -> None:
    # CUDA kernels run asynchronously: wait for them before reading the host clock.
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_plain(
    split: ImageSplit,
    *,
    precision: str,
    loader: str,
    batch_size: int,
    device: torch.device,
    epochs: int,
    warmup_steps: int,
    channels_last: bool = False,
    num_workers: int = 4,
    seed: int = 0,
    tune_malloc: bool = False,
) -> PlainResult:
    """Train the lab's SimpleCNN on `split` with SGD 0.01/0.9 and return its timings."""
    if precision not in PLAIN_MODES:
        raise ValueError(f"unknown precision {precision!r}: choose one of {', '.join(PLAIN_MODES)}")
    autocast_dtype, use_scaler = PLAIN_MODES[precision]
    if tune_malloc:
        host_malloc.tune_for_training()  # the same process setting the trainer uses on the CPU
    if device.type == "cuda":
        # fp32 means strict fp32 here, as the trainer's fp32 does (the lab's script as written leaves cuDNN's TF32
        # on: on an Ampere-or-newer GPU the GPU kit's fp32-default row is that baseline). The trainer's switch
        # setter uses whichever TF32 API this torch has (the allow_tf32 flags are deprecated from 2.9).
        set_tf32(False)

    torch.manual_seed(seed)
    model = SimpleCNN().to(device)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scaler = torch.amp.GradScaler(device.type, enabled=use_scaler)
    batches = make_loader(
        split, loader, batch_size, device, shuffle=True, num_workers=num_workers, seed=seed,
        channels_last=channels_last,
    )

    step = 0
    steady_images = 0
    loss = torch.zeros(())
    _synchronize(device)
    start = time.perf_counter()
    steady_start = start if warmup_steps == 0 else None
    for _ in range(epochs):
        for images, labels in batches:
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(device.type, dtype=autocast_dtype or torch.float32, enabled=autocast_dtype is not None):
                loss = criterion(model(images), labels)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            step += 1
            if step > warmup_steps:
                steady_images += labels.shape[0]
            elif step == warmup_steps:
                _synchronize(device)
                steady_start = time.perf_counter()
    _synchronize(device)
    end = time.perf_counter()

    steady_steps = max(0, step - warmup_steps)
    steady_time = end - steady_start if steady_start is not None else 0.0
    has_steady = steady_steps > 0 and steady_time > 0
    return PlainResult(
        precision=precision,
        loader=loader,
        channels_last=channels_last,
        tuned_malloc=host_malloc.state().tuned,
        batch_size=batch_size,
        epochs=epochs,
        total_steps=step,
        warmup_steps=warmup_steps,
        steady_steps=steady_steps,
        steady_images=steady_images,
        steady_time_s=steady_time,
        ms_per_step=1000.0 * steady_time / steady_steps if has_steady else None,
        images_per_s=steady_images / steady_time if has_steady else None,
        total_time_s=end - start,
        final_loss=float(loss.detach()),
    )
