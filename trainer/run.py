"""One run from its config to its result: set-up, the timed epochs (trainer/loop.py), the accuracy check, then the
after-training probes, each a measurement that changes nothing the run measured."""

from __future__ import annotations

import gc
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

import numpy as np
import torch
from torch import nn

from trainer import host_malloc
from trainer.capabilities import resolve_device
from trainer.clock import RunClock
from trainer.config import WORKER_LOADERS, RunConfig
from trainer.cpu_share import apply_share, format_cores, loader_workers
from trainer.environment import capture_environment
from trainer.errors import OutOfMemoryError, UnsupportedModeError, is_out_of_memory
from trainer.images import ImageSplit
from trainer.loaders import BatchSource, load_split, make_loader
from trainer.loop import StepParts, evaluate, train_epochs
from trainer.memory import MemoryMonitor, device_memory_summary
from trainer.meters import LossMeter, Meters, ScaleTracker, SyncEveryStep, UpdateTracker
from trainer.model import build_model
from trainer.peaks import cached_peaks
from trainer.precision import PrecisionPolicy
from trainer.profile import profile_training
from trainer.progress import Progress, Reporter
from trainer.results import RunResult


def run_training(config: RunConfig, on_progress: Callable[[Progress], None] | None = None,
                 should_cancel: Callable[[], bool] | None = None) -> RunResult:
    """Train and evaluate one run as `config` says, measuring time, memory, loss and accuracy.

    Raises ConfigError / UnsupportedModeError / DatasetError / OutOfMemoryError / CancelledError.
    """
    config.validate()
    device = resolve_device(config.device)
    policy = PrecisionPolicy.resolve(config.precision, device, config.loss_scale_init,
                                     config.loss_scale_growth_interval)
    policy.apply_backend_flags(config.cudnn_benchmark)
    if device.type == "cpu" and config.tune_host_malloc and config.loader != "lab":  # the lab ran glibc's defaults
        host_malloc.tune_for_training()
    reporter = Reporter(on_progress, should_cancel, config.epochs, config.batch_size)
    reporter.phase("starting")
    _seed_everything(config.seed)
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    reporter.phase("loading data")
    train_split = load_split(config.data, config.data_root, train=True, limit=config.subset, seed=config.seed)
    test_split = load_split(config.data, config.data_root, train=False, limit=config.test_subset, seed=config.seed)
    try:
        setup, result = _measured_run(config, device, policy, train_split, test_split, reporter)
    except (RuntimeError, MemoryError) as error:
        if not is_out_of_memory(error):
            raise
        memory_now = device_memory_summary(device)
    else:
        result.started_at = started_at
        result.warnings.extend(_capped_subsets(config, len(train_split), len(test_split)))
        for probe in PROBES:
            _run_probe(probe, config, setup, result)
        reporter.phase("done", epoch=config.epochs, global_step=result.total_steps, total_steps=result.total_steps)
        return result
    raise _out_of_memory(config, device, memory_now)  # outside the handler: the failed run's tensors are free now


@dataclass
class Setup:
    """A run's pieces before its first step: what the step works on, the batches, and what to say of them."""

    device: torch.device
    parts: StepParts
    train_batches: BatchSource
    test_batches: BatchSource
    meters: Meters
    environment: dict = field(default_factory=dict)  # added to capture_environment's record
    warnings: list[str] = field(default_factory=list)

    @property
    def resident_bytes(self) -> int:
        """The resident split: the same size in every mode, so left out of the training figures, reported alone."""
        return self.train_batches.device_bytes + self.test_batches.device_bytes


def _set_up(config: RunConfig, device, policy: PrecisionPolicy, train_split: ImageSplit,
            test_split: ImageSplit) -> Setup:
    cores = apply_share()  # a job's child on a server of several GPUs: its share of the cores (trainer/cpu_share.py)
    workers = loader_workers(config.num_workers, cores)
    options = dict(num_workers=workers, seed=config.seed, channels_last=config.channels_last)
    train_batches = make_loader(train_split, config.loader, config.batch_size, device, shuffle=True, **options)
    test_batches = make_loader(test_split, config.loader, config.batch_size, device, shuffle=False, **options)
    model = policy.prepare_model(build_model(config.width, device, channels_last=config.channels_last,
                                             seed=config.seed))
    optimizer = torch.optim.SGD(model.parameters(), lr=config.optimizer_lr, momentum=config.momentum)
    if config.compile_mode:
        if config.compile_mode == "reduce-overhead" and device.type != "cuda":
            raise UnsupportedModeError("compile_mode reduce-overhead records CUDA graphs: it needs a CUDA GPU")
        model = torch.compile(model, mode=config.compile_mode)  # compiled at the first step, inside the warm-up
    scaler = policy.make_scaler()
    scales = ScaleTracker(scaler, optimizer)
    updates = UpdateTracker(model.parameters(), config.track_updates, scales)
    parts = StepParts(model, optimizer, nn.CrossEntropyLoss(), policy, scaler, config.loss_factor,
                      updates if config.track_updates else None)
    others = [scales, updates] + ([SyncEveryStep()] if config.loader == "lab" else [])
    setup = Setup(device, parts, train_batches, test_batches, Meters(LossMeter(device), others, config.log_every))
    setup.environment = {"cpu_cores": None if cores is None else format_cores(cores),
                         "loader_workers": workers if config.loader in WORKER_LOADERS else 0}
    if workers != config.num_workers and config.loader in WORKER_LOADERS:
        setup.warnings.append(f"{workers} DataLoader worker{'s' if workers != 1 else ''}, not the "
                              f"{config.num_workers} asked for: this job's share of the server's cores is "
                              f"{len(cores)} ({format_cores(cores)}), one GPU's")
    if device.type == "cpu" and (not config.tune_host_malloc or config.loader == "lab") and host_malloc.state().tuned:
        setup.warnings.append("the default malloc was asked for, but an earlier run in this process had already "
                              "tuned it: run in a fresh process to time the default")
    return setup


def _measured_run(config: RunConfig, device, policy: PrecisionPolicy, train_split: ImageSplit,
                  test_split: ImageSplit, reporter: Reporter) -> tuple[Setup, RunResult]:
    setup = _set_up(config, device, policy, train_split, test_split)
    clock = RunClock(config, device, len(setup.train_batches))
    reporter.start_training(len(setup.train_batches))
    memory = MemoryMonitor(device, setup.resident_bytes).start()
    try:
        train_epochs(setup.parts, setup.train_batches, clock, setup.meters, reporter)
        reporter.evaluating()
        accuracy = evaluate(setup.parts.model, setup.test_batches, policy, on_batch=reporter.evaluating)
    finally:
        peaks = memory.stop()
    return setup, RunResult(
        config=replace(config), environment={**capture_environment(device), **setup.environment},
        peak_memory=peaks, test_accuracy=accuracy, warmup_steps=config.warmup_steps,
        resident_data_bytes=setup.resident_bytes,
        warnings=[*policy.warnings, *memory.warnings, *setup.warnings, *clock.warnings],
        **clock.fields(memory.gpu_activity(clock.timing.window)), **setup.meters.fields(),
    )


def _profile(config: RunConfig, setup: Setup) -> dict | None:
    if not config.profile_steps:
        return None
    return {"profile": profile_training(setup.parts, setup.train_batches, config.profile_steps, config.batch_size,
                                        setup.device).to_dict()}


def _device_peaks(config: RunConfig, setup: Setup) -> dict | None:
    return {"device_peaks": cached_peaks(setup.device, config.peaks_cache).to_dict()} if config.measure_peaks else None


# After the timed training, the memory peaks and the accuracy check, in this order: each probe returns the RunResult
# fields it fills (None: the run did not ask for it). A probe that fails is a warning on the run, never its loss.
PROBES = (("a profile of the step", _profile), ("this device's peak rates", _device_peaks))


def _run_probe(probe, config: RunConfig, setup: Setup, result: RunResult) -> None:
    name, measure = probe
    try:
        found = measure(config, setup)
    except Exception as error:  # noqa: BLE001 (any failure; the training's figures stand without it)
        result.warnings.append(f"{name} could not be measured after training ({type(error).__name__}: {error}); "
                               "the run's own figures are unaffected")
        return
    for result_field, value in (found or {}).items():
        setattr(result, result_field, value)


def _out_of_memory(config: RunConfig, device, memory_now: str) -> OutOfMemoryError:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    where = "GPU memory" if device.type == "cuda" else "host memory"
    return OutOfMemoryError(f"batch size {config.batch_size} does not fit in {where} in {config.precision} mode "
                            f"({memory_now}): try a batch size of {max(1, config.batch_size // 2)}")


def _capped_subsets(config: RunConfig, train_images: int, test_images: int) -> list[str]:
    """Say so when a subset asked for more images than its split holds (the whole split was used instead)."""
    capped = []
    if config.subset is not None and config.subset > train_images:
        capped.append(f"a subset of {config.subset:,} training images was asked for, but the training split has "
                      f"{train_images:,}: the run trained on all {train_images:,}")
    if config.test_subset is not None and config.test_subset > test_images:
        capped.append(f"a test subset of {config.test_subset:,} images was asked for, but the test split has "
                      f"{test_images:,}: the accuracy check used all {test_images:,}")
    return capped


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
