"""The training loop: one step function for every precision mode, and a measured run around it."""

from __future__ import annotations

import gc
import random
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Callable

import numpy as np
import torch
from torch import nn
from torch.profiler import record_function

from trainer import host_malloc
from trainer.capabilities import resolve_device
from trainer.config import MAX_EPOCHS, RunConfig
from trainer.cpu_share import apply_share, format_cores, loader_workers
from trainer.datasets import load_split
from trainer.environment import capture_environment
from trainer.errors import CancelledError, OutOfMemoryError, UnsupportedModeError, is_out_of_memory
from trainer.images import ImageSplit
from trainer.loaders import make_loader
from trainer.measure import (
    LossMeter,
    MemoryMonitor,
    ScaleTracker,
    UpdateTracker,
    clock,
    device_memory_summary,
    steady_throughput,
)
from trainer.model import build_model
from trainer.peaks import cached_peaks
from trainer.precision import PrecisionPolicy
from trainer.profile import DATA_SPAN, profile_window
from trainer.progress import Progress
from trainer.results import RunResult
from trainer.timing_quality import TimingMonitor, interval_steps

PROGRESS_INTERVAL_S = 0.25  # at most ~4 progress reports a second between log points


def train_step(model, images, labels, optimizer, criterion, policy: PrecisionPolicy, scaler, loss_factor: float = 1.0,
               updates: UpdateTracker | None = None, step: int = 0) -> torch.Tensor:
    """One optimisation step, the same code for every mode: the policy's autocast and scaler are no-ops
    where the mode does not need them. `loss_factor` (RunConfig.loss_factor) multiplies the loss before the backward
    pass; `updates` counts what step number `step` did to the weights. Returns the detached loss, unmultiplied (no
    sync)."""
    optimizer.zero_grad(set_to_none=True)
    with policy.autocast():
        outputs = model(images)
        loss = criterion(outputs, labels)
    # Backward runs outside autocast: each op's backward reuses the dtype its forward chose.
    scaler.scale(loss if loss_factor == 1.0 else loss * loss_factor).backward()
    if updates is not None:
        updates.before_step()
    scaler.step(optimizer)  # skips the update when fp16 gradients overflowed (syncs when the scaler is on)
    if updates is not None:
        updates.after_step(step)
    scaler.update()
    return loss.detach()


def evaluate(model, batches, policy: PrecisionPolicy, *, on_batch: Callable[[int], None] | None = None) -> float:
    """Top-1 accuracy (0..1) over `batches`, computed in the run's precision; `on_batch(i)` after each batch."""
    was_training = model.training
    model.eval()
    correct, total = None, 0
    with torch.inference_mode(), policy.autocast():
        for index, (images, labels) in enumerate(batches, start=1):
            hits = (model(images).argmax(dim=1) == labels).sum()
            correct = hits if correct is None else correct + hits
            total += labels.shape[0]
            if on_batch is not None:
                on_batch(index)
    model.train(was_training)
    if total == 0:
        raise ValueError("evaluate() got no batches")
    return correct.item() / total


def run_training(
    config: RunConfig,
    on_progress: Callable[[Progress], None] | None = None,
    should_cancel: Callable[[], bool] | None = None,
) -> RunResult:
    """Train and evaluate one run as `config` says, measuring time, memory, loss and accuracy.

    Raises ConfigError / UnsupportedModeError / DatasetError / OutOfMemoryError / CancelledError.
    """
    config.validate()
    device = resolve_device(config.device)
    policy = PrecisionPolicy.resolve(config.precision, device, config.loss_scale_init,
                                     config.loss_scale_growth_interval)
    policy.apply_backend_flags(config.cudnn_benchmark)
    if device.type == "cpu" and config.tune_host_malloc:
        host_malloc.tune_for_training()
    reporter = _Reporter(on_progress, config.epochs, config.batch_size)
    reporter.emit("starting")
    _seed_everything(config.seed)
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")

    reporter.emit("loading data")
    train_split = load_split(config.data, config.data_root, train=True, limit=config.subset, seed=config.seed)
    test_split = load_split(config.data, config.data_root, train=False, limit=config.test_subset, seed=config.seed)

    memory_at_failure = None
    try:
        result = _measured_run(config, device, policy, train_split, test_split, reporter, should_cancel)
    except (RuntimeError, MemoryError) as error:
        if not is_out_of_memory(error):
            raise
        memory_at_failure = device_memory_summary(device)
    if memory_at_failure is not None:
        # The failed run's tensors were only reachable from the traceback, which is gone now.
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        where = "GPU memory" if device.type == "cuda" else "host memory"
        raise OutOfMemoryError(
            f"batch size {config.batch_size} does not fit in {where} in {config.precision} mode "
            f"({memory_at_failure}): try a batch size of {max(1, config.batch_size // 2)}"
        )
    result.started_at = started_at
    result.warnings.extend(_capped_subsets(config, len(train_split), len(test_split)))
    reporter.emit("done", epoch=config.epochs, global_step=result.total_steps, total_steps=result.total_steps)
    return result


def _capped_subsets(config: RunConfig, train_images: int, test_images: int) -> list[str]:
    """Say so when a subset asked for more images than its split holds (the whole split was used instead)."""
    capped = []
    if config.subset is not None and config.subset > train_images:
        capped.append(
            f"a subset of {config.subset:,} training images was asked for, but the training split has "
            f"{train_images:,}: the run trained on all {train_images:,}"
        )
    if config.test_subset is not None and config.test_subset > test_images:
        capped.append(
            f"a test subset of {config.test_subset:,} images was asked for, but the test split has "
            f"{test_images:,}: the accuracy check used all {test_images:,}"
        )
    return capped


@dataclass
class _Timeline:
    """What the training epochs recorded, before it becomes a RunResult."""

    t_start: float = 0.0
    t_warm: float | None = None
    t_end: float = 0.0
    images: int = 0
    images_at_warm: int = 0
    steps: int = 0
    epoch_times: list[float] = field(default_factory=list)
    epoch_losses: list[float] = field(default_factory=list)
    loss_history: list[dict] = field(default_factory=list)
    scale: ScaleTracker | None = None  # loss-scale history and skipped steps (empty without a scaler)
    updates: UpdateTracker | None = None  # zero gradients and rounded-away updates (config.track_updates only)
    data_wait_s: float = 0.0
    compute_s: float = 0.0
    partial_s: float = 0.0  # partial batches after warm-up: their time and images are left out of steady
    partial_images: int = 0
    first_step_s: float | None = None
    first_partial_step: dict | None = None  # {"images", "s"}: the first partial batch after warm-up (a new shape)
    timing: TimingMonitor = field(default_factory=TimingMonitor)  # throughput samples and CPU use after warm-up


def _measured_run(config, device, policy, train_split: ImageSplit, test_split: ImageSplit, reporter, should_cancel):
    cores = apply_share()  # a job's child on a server of several GPUs: its share of the cores (trainer/cpu_share.py)
    workers = loader_workers(config.num_workers, cores)
    loader_options = dict(num_workers=workers, seed=config.seed, channels_last=config.channels_last)
    train_batches = make_loader(train_split, config.loader, config.batch_size, device, shuffle=True, **loader_options)
    test_batches = make_loader(test_split, config.loader, config.batch_size, device, shuffle=False, **loader_options)
    model = policy.prepare_model(build_model(config.width, device, channels_last=config.channels_last,
                                             seed=config.seed))
    optimizer = torch.optim.SGD(model.parameters(), lr=config.optimizer_lr, momentum=config.momentum)
    if config.compile_mode:
        if config.compile_mode == "reduce-overhead" and device.type != "cuda":
            raise UnsupportedModeError("compile_mode reduce-overhead records CUDA graphs: it needs a CUDA GPU")
        model = torch.compile(model, mode=config.compile_mode)  # compiled at the first step, inside the warm-up
    criterion = nn.CrossEntropyLoss()
    scaler = policy.make_scaler()

    # The resident split is the same size in every mode: left out of the training figures, reported on its own.
    resident_bytes = train_batches.device_bytes + test_batches.device_bytes
    memory = MemoryMonitor(device, resident_bytes).start()
    try:
        timeline = _train_epochs(
            config, device, policy, model, optimizer, criterion, scaler, train_batches, reporter, should_cancel
        )
        reporter.emit("evaluating", epoch=config.epochs, global_step=timeline.steps)

        def after_eval_batch(index: int) -> None:
            _check_cancel(should_cancel)
            reporter.maybe("evaluating", epoch=config.epochs, global_step=timeline.steps)

        accuracy = evaluate(model, test_batches, policy, on_batch=after_eval_batch)
    finally:
        peaks = memory.stop()
    result = _to_result(config, device, policy, timeline, peaks, memory.warnings, accuracy)
    result.timing_quality = timeline.timing.record(memory.gpu_activity(timeline.timing.window))
    result.resident_data_bytes = resident_bytes
    result.environment["cpu_cores"] = None if cores is None else format_cores(cores)
    result.environment["loader_workers"] = workers if config.loader == "dataloader" else 0
    if workers != config.num_workers and config.loader == "dataloader":
        result.warnings.append(f"{workers} DataLoader worker{'s' if workers != 1 else ''}, not the "
                               f"{config.num_workers} asked for: this job's "
                               f"share of the server's cores is {len(cores)} ({format_cores(cores)}), one GPU's")
    if config.profile_steps:  # after the timed window and the accuracy check: it changes neither
        result.profile = _profile(config, device, policy, model, optimizer, criterion, scaler, train_batches)
    if config.measure_peaks:  # after the timed window and the memory peaks: they measure training alone
        result.device_peaks = cached_peaks(device, config.peaks_cache).to_dict()
    return result


def _profile(config, device, policy, model, optimizer, criterion, scaler, batches) -> dict:
    """config.profile_steps more full-size steps under the profiler, each fetching its batch in the data span."""
    model.train()
    source = {"batches": iter(batches)}

    def next_full_batch():
        while True:
            try:
                images, labels = next(source["batches"])
            except StopIteration:
                source["batches"] = iter(batches)  # an epoch boundary inside the window: a new pass over the data
                continue
            if images.shape[0] == config.batch_size:  # a smaller last batch is another shape: not a steady step
                return images, labels

    def run_step() -> None:
        with record_function(DATA_SPAN):
            images, labels = next_full_batch()
        train_step(model, images, labels, optimizer, criterion, policy, scaler, config.loss_factor, None, 0)

    return profile_window(config.profile_steps, run_step, device).to_dict()


def _train_epochs(config, device, policy, model, optimizer, criterion, scaler, batches, reporter, should_cancel):
    """The timed part. Clock reads (each after a device sync) happen only at the first batch, the end of
    warm-up, around an epoch's last, partial batch, log points, timing-quality samples (MIN_INTERVALS a run at
    least), epoch ends and the end, unless config.breakdown asks for two per step. With config.min_steady_s, whole
    epochs are added until the steady window is that long."""
    tl = _Timeline(scale=ScaleTracker(scaler), updates=UpdateTracker(model.parameters(), config.track_updates))
    reporter.start_training(len(batches))
    sample_every = interval_steps(len(batches) * config.epochs - config.warmup_steps, config.log_every)
    # One device-side add per step (a launch-bound GPU step feels each extra kernel): the window's sum; the epoch's
    # mean is kept on the host from the window's at each log point, where the loop syncs anyway.
    window = LossMeter(device)
    model.train()
    tl.t_start = epoch_start = clock(device)
    if config.warmup_steps == 0:
        tl.t_warm = tl.t_start
        tl.timing.start(tl.t_start, 0)
    epoch = 0
    while epoch < config.epochs or (epoch < MAX_EPOCHS and _steady_s(tl, epoch_start) < config.min_steady_s):
        epoch += 1
        window.reset()  # like the lab, each epoch starts a fresh running loss
        epoch_loss_sum = 0.0
        step = 0
        batch_iter = iter(batches)
        while True:
            t_ask = clock(device) if config.breakdown else 0.0
            try:
                images, labels = next(batch_iter)
            except StopIteration:
                break
            _check_cancel(should_cancel)
            t_got = clock(device) if config.breakdown else 0.0
            # A smaller last batch is a new shape (cuDNN selects algorithms for it): timed apart, left out of steady.
            partial = images.shape[0] < config.batch_size and tl.t_warm is not None
            t_partial = clock(device) if partial else 0.0
            loss = train_step(model, images, labels, optimizer, criterion, policy, scaler, config.loss_factor,
                              tl.updates if config.track_updates else None, tl.steps + 1)
            if partial:
                took = clock(device) - t_partial
                tl.partial_s += took
                tl.partial_images += images.shape[0]
                if tl.first_partial_step is None:
                    tl.first_partial_step = {"images": int(images.shape[0]), "s": took}
            if config.breakdown:
                tl.compute_s += clock(device) - t_got
                tl.data_wait_s += t_got - t_ask
            step += 1
            tl.steps += 1
            if tl.steps == 1:  # one sync, in the warm-up: what the first step cost (compiling, cuDNN's choices)
                tl.first_step_s = clock(device) - tl.t_start
            tl.images += images.shape[0]
            window.add(loss)
            tl.scale.after_update(tl.steps)
            if tl.steps == config.warmup_steps:
                tl.t_warm, tl.images_at_warm = clock(device), tl.images
                tl.timing.start(tl.t_warm, tl.images)
            elif tl.steps > config.warmup_steps and (tl.steps - config.warmup_steps) % sample_every == 0:
                # On the steady clock: partial batches' time and images left out, as in steady_images_per_s.
                tl.timing.mark(clock(device) - tl.partial_s, tl.images - tl.partial_images)
            if step % config.log_every == 0:
                logged = window.count
                mean = window.mean_and_reset()  # .item() syncs here
                epoch_loss_sum += mean * logged
                _flush_trackers(tl)
                tl.loss_history.append({"step": tl.steps, "epoch": epoch, "loss": mean})
                reporter.emit("training", epoch=epoch, step=step, global_step=tl.steps, loss=mean)
            else:
                reporter.maybe("training", epoch=epoch, step=step, global_step=tl.steps)
        epoch_end = clock(device)
        tl.epoch_times.append(epoch_end - epoch_start)
        if window.count:  # the steps since the last log point
            rest = window.count
            epoch_loss_sum += window.mean_and_reset() * rest
        tl.epoch_losses.append(epoch_loss_sum / step if step else float("nan"))
        _flush_trackers(tl)
        epoch_start = epoch_end
        reporter.emit("training", epoch=epoch, step=step, global_step=tl.steps)
    tl.t_end = epoch_start
    tl.timing.stop(tl.t_end - tl.partial_s, tl.images - tl.partial_images)
    return tl


def _flush_trackers(tl: _Timeline) -> None:
    tl.scale.flush()
    tl.updates.flush(set(tl.scale.skipped))  # the scales first: a skipped step's unchanged weights are no loss


def _to_result(config, device, policy, tl: _Timeline, peaks, memory_warnings, accuracy) -> RunResult:
    warnings = list(policy.warnings) + list(memory_warnings)
    if device.type == "cpu" and not config.tune_host_malloc and host_malloc.state().tuned:
        warnings.append(
            "the default malloc was asked for, but an earlier run in this process had already tuned it: "
            "run in a fresh process to time the default"
        )
    steady = None
    if tl.t_warm is not None:
        steady = steady_throughput(tl.images - tl.images_at_warm - tl.partial_images, _steady_s(tl, tl.t_end))
    if steady is None:
        warnings.append(
            f"all {tl.steps} steps fell within the {config.warmup_steps} warm-up steps, so no steady "
            "throughput was measured: train longer or lower warmup_steps"
        )
    total = tl.t_end - tl.t_start
    return RunResult(
        config=replace(config),
        environment=capture_environment(device),
        total_time_s=total,
        epoch_times_s=tl.epoch_times,
        steady_images_per_s=steady,
        peak_memory=peaks,
        loss_history=tl.loss_history,
        test_accuracy=accuracy,
        skipped_steps=len(tl.scale.skipped),
        warnings=warnings,
        warmup_steps=config.warmup_steps,
        total_steps=tl.steps,
        train_images=tl.images // len(tl.epoch_times),
        images_per_s=tl.images / total if total > 0 else None,
        epoch_losses=tl.epoch_losses,
        loss_scale_history=tl.scale.history,
        skipped_step_numbers=tl.scale.skipped,
        first_step_s=tl.first_step_s,
        first_partial_step=tl.first_partial_step,
        data_wait_s=tl.data_wait_s if config.breakdown else None,
        compute_s=tl.compute_s if config.breakdown else None,
        worker_cpu_s=tl.timing.worker_cpu_s if config.loader == "dataloader" and config.num_workers > 0 else None,
        update_history=tl.updates.history,
        update_counts=dict(tl.updates.counts) if config.track_updates else None,
    )


def _steady_s(tl: _Timeline, now: float) -> float:
    """Seconds of steady training up to `now`: after warm-up, partial batches left out (0 during warm-up)."""
    return 0.0 if tl.t_warm is None else now - tl.t_warm - tl.partial_s


def _check_cancel(should_cancel: Callable[[], bool] | None) -> None:
    if should_cancel is not None and should_cancel():
        raise CancelledError("the run was cancelled before it finished")


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class _Reporter:
    """Turns loop events into Progress reports: always at log points and phase changes, otherwise at most
    every PROGRESS_INTERVAL_S (host clock only, so a report never forces a device sync)."""

    def __init__(self, callback: Callable[[Progress], None] | None, epochs: int, batch_size: int):
        self._callback = callback
        self._epochs = epochs
        self._images_per_step = batch_size  # an estimate: the last batch of an epoch may be smaller
        self._steps_per_epoch = 0
        self._t_created = self._t_last = time.perf_counter()
        self._t_train = None

    def start_training(self, steps_per_epoch: int) -> None:
        self._steps_per_epoch = steps_per_epoch
        self._t_train = time.perf_counter()

    def maybe(self, phase: str, **fields) -> None:
        if self._callback is not None and time.perf_counter() - self._t_last >= PROGRESS_INTERVAL_S:
            self.emit(phase, **fields)

    def emit(self, phase: str, *, epoch: int = 0, step: int = 0, global_step: int = 0, loss=None, **extra) -> None:
        if self._callback is None:
            return
        now = self._t_last = time.perf_counter()
        total_steps = extra.get("total_steps", self._steps_per_epoch * self._epochs)
        rate = eta = None
        if self._t_train is not None and global_step and now > self._t_train:
            steps_per_s = global_step / (now - self._t_train)
            rate = steps_per_s * self._images_per_step
            eta = max(0.0, (total_steps - global_step) / steps_per_s) if phase == "training" else None
        self._callback(
            Progress(
                phase=phase,
                epoch=epoch,
                epochs=self._epochs,
                step=step,
                steps_per_epoch=self._steps_per_epoch,
                global_step=global_step,
                total_steps=total_steps,
                loss=loss,
                images_per_s=rate,
                eta_s=eta,
                elapsed_s=now - self._t_created,
            )
        )
