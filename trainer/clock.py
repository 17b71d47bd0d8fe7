"""The run's clock: it hands the loop its epochs and batches and keeps every figure about time, so that the loop
reads no clock itself.

CUDA runs asynchronously: a host clock read without a synchronize measures how fast work was queued, not how fast
it ran. Every read here synchronises first, and happens only at the first batch, the end of warm-up, around an
epoch's partial last batch after warm-up, the timing-quality samples (MIN_INTERVALS a run at least), the first step
and epoch ends, unless config.breakdown asks for two a step.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator

import torch

from trainer.config import MAX_EPOCHS, WORKER_LOADERS, RunConfig
from trainer.progress import Position
from trainer.timing_quality import TimingMonitor, interval_steps


def synchronize(device: torch.device) -> None:
    """Wait for all queued device work; a no-op on the CPU, where every op already finished."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def clock(device: torch.device) -> float:
    """A host time stamp (seconds) taken after the device has finished everything queued so far."""
    synchronize(device)
    return time.perf_counter()


def steady_throughput(images_after_warmup: int, seconds_after_warmup: float) -> float | None:
    """Images per second after the warm-up steps, or None when nothing was left to measure."""
    if images_after_warmup <= 0 or seconds_after_warmup <= 0:
        return None
    return images_after_warmup / seconds_after_warmup


class RunClock:
    """The timed part of one run: the warm-up boundary (its steps are left out of the steady figures), an epoch's
    smaller last batch (a new shape: timed apart and left out too), the first step, waiting for data against
    computing (config.breakdown), the timing-quality samples, and whole epochs added until the steady window lasts
    config.min_steady_s."""

    def __init__(self, config: RunConfig, device: torch.device, steps_per_epoch: int):
        self._config, self._device = config, device
        self._sample_every = interval_steps(steps_per_epoch * config.epochs - config.warmup_steps, config.log_every)
        self._epoch = 0
        self.timing = TimingMonitor()  # throughput samples and CPU use after warm-up
        self.steps = self.images = 0
        self.epoch_times: list[float] = []
        self.t_start = self.t_end = 0.0
        self.t_warm: float | None = None
        self.images_at_warm = 0
        self.partial_s, self.partial_images = 0.0, 0  # partial batches after warm-up
        self.first_step_s: float | None = None
        self.first_partial_step: dict | None = None  # {"images", "s"}: the first partial batch after warm-up
        self.data_wait_s = self.compute_s = 0.0

    def epochs(self) -> Iterator[int]:
        """1, 2, ... config.epochs, then more while the steady window is shorter than config.min_steady_s."""
        self.t_start = epoch_start = clock(self._device)
        if self._config.warmup_steps == 0:
            self._warm_up_ends(self.t_start)
        while self._epoch < self._config.epochs or (
                self._epoch < MAX_EPOCHS and self._steady_s(epoch_start) < self._config.min_steady_s):
            self._epoch += 1
            yield self._epoch
            epoch_end = clock(self._device)
            self.epoch_times.append(epoch_end - epoch_start)
            epoch_start = epoch_end
        self.t_end = epoch_start
        self.timing.stop(self.t_end - self.partial_s, self.images - self.partial_images)

    def batches(self, source: Iterable) -> Iterator[tuple[Position, torch.Tensor, torch.Tensor]]:
        """Each batch of one pass over `source` with its position; the step's time is read, where a figure needs it,
        when the next batch is asked for (after the step and what the loop told the meters)."""
        breakdown = self._config.breakdown
        batches, step = iter(source), 0
        while True:
            asked = clock(self._device) if breakdown else 0.0
            batch = next(batches, None)
            if batch is None:
                return
            got = clock(self._device) if breakdown else 0.0
            images, labels = batch
            size = images.shape[0]
            # A smaller last batch is a new shape (cuDNN, a compiled model choose again): timed apart.
            partial = size < self._config.batch_size and self.t_warm is not None
            started = clock(self._device) if partial else 0.0
            step, self.steps, self.images = step + 1, self.steps + 1, self.images + size
            yield Position(self._epoch, step, self.steps), images, labels
            if partial:
                took = clock(self._device) - started
                self.partial_s, self.partial_images = self.partial_s + took, self.partial_images + size
                self.first_partial_step = self.first_partial_step or {"images": int(size), "s": took}
            if breakdown:
                self.compute_s += clock(self._device) - got
                self.data_wait_s += got - asked
            self._after_step()

    def _after_step(self) -> None:
        warmup = self._config.warmup_steps
        if self.steps == 1:  # one sync, in the warm-up: what the first step cost (compiling, cuDNN's choices)
            self.first_step_s = clock(self._device) - self.t_start
        if self.steps == warmup:
            self._warm_up_ends(clock(self._device))
        elif self.steps > warmup and (self.steps - warmup) % self._sample_every == 0:
            # On the steady clock: partial batches' time and images left out, as in the steady throughput.
            self.timing.mark(clock(self._device) - self.partial_s, self.images - self.partial_images)

    def _warm_up_ends(self, now: float) -> None:
        self.t_warm, self.images_at_warm = now, self.images
        self.timing.start(self.t_warm, self.images)

    def _steady_s(self, now: float) -> float:
        """Seconds of steady training up to `now`: after warm-up, partial batches left out (0 during warm-up)."""
        return 0.0 if self.t_warm is None else now - self.t_warm - self.partial_s

    def _steady_images_per_s(self) -> float | None:
        if self.t_warm is None:
            return None
        return steady_throughput(self.images - self.images_at_warm - self.partial_images, self._steady_s(self.t_end))

    @property
    def warnings(self) -> list[str]:
        if self._steady_images_per_s() is not None:
            return []
        return [f"all {self.steps} steps fell within the {self._config.warmup_steps} warm-up steps, so no steady "
                "throughput was measured: train longer or lower warmup_steps"]

    def fields(self, gpu_activity: dict | None) -> dict:
        """The run's time figures as RunResult fields; `gpu_activity` is what the GPU did in the timed window
        (`self.timing.window`), from the memory monitor's NVML samples."""
        config, total = self._config, self.t_end - self.t_start
        with_workers = config.loader in WORKER_LOADERS and config.num_workers > 0
        return dict(
            total_time_s=total, epoch_times_s=self.epoch_times, steady_images_per_s=self._steady_images_per_s(),
            total_steps=self.steps, train_images=self.images // len(self.epoch_times),
            images_per_s=self.images / total if total > 0 else None,
            first_step_s=self.first_step_s, first_partial_step=self.first_partial_step,
            data_wait_s=self.data_wait_s if config.breakdown else None,
            compute_s=self.compute_s if config.breakdown else None,
            worker_cpu_s=self.timing.worker_cpu_s if with_workers else None,
            timing_quality=self.timing.record(gpu_activity),
        )
