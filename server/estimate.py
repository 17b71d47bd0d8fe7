"""How long a run will take before it starts: from this server's own past runs, else from a coarse table."""

from __future__ import annotations

import math
import statistics

from server.history import HistoryStore, RunTiming
from server.records import JobSpec
from trainer.capabilities import DeviceFacts, mode_support
from trainer.config import FAILURE_PRECISIONS, MAX_EPOCHS, WORKER_LOADERS, RunConfig
from trainer.environment import cpu_flags, cpu_has_amx

TRAIN_SPLIT_IMAGES = 50_000  # CIFAR-10 and the synthetic stand-in have the same split sizes
RECENT_RUNS = 20  # past runs a history estimate looks at, newest first

# Coarse training throughput (images/s) of the lab's CNN at width 1, data already on the device. Only a starting
# point for a server with no history yet: real hardware can differ several times over.
# "cpu-amx": a 2-core AMX Xeon at batch 256 with the trainer's tuned malloc (bench/results, and 45 images/s for
# amp-fp16 from `python -m trainer run`). "cpu": a 2-core AVX2-only EPYC at batch 64 (bench/README.md, "Timing
# quality"), where bf16 is emulated and amp-fp16 gave 13 images/s with other processes on 72% of the cores.
# "cpu-bf16": a 2-core EPYC with AVX-512 bf16 and no AMX, quiet, `python -m trainer run` with resident data at batch
# 256 (2026-12-06).
# CUDA figures are rough guesses for a recent GPU.
COARSE_IMAGES_PER_S = {
    "cpu-amx": {"fp32": 2800.0, "amp-bf16": 3900.0, "amp-fp16": 45.0},
    "cpu-bf16": {"fp32": 2100.0, "amp-bf16": 3200.0, "amp-fp16": 68.0},
    "cpu": {"fp32": 1000.0, "amp-bf16": 63.0, "amp-fp16": 13.0},
    "cuda": {"fp32": 100_000.0, "tf32": 120_000.0, "amp-fp16": 150_000.0, "amp-bf16": 150_000.0},
}
# The GPU the coarse "cuda" row stands for: a recent one, with TF32 and native bf16.
COARSE_GPU = DeviceFacts("cuda", "8.0", native_bf16=True)
# How the cost per image grows with the width multiplier: small widths are bound by memory traffic (about
# linear), large ones by arithmetic (towards quadratic); a GPU has room to spare at these sizes.
WIDTH_EXPONENT = {"cpu": 1.5, "cuda": 1.0}
# Seconds per image the lab's DataLoader spends (PIL decode + ToTensor); on a CPU it shares the cores with
# training, on a GPU server its workers overlap with training and cap the throughput instead.
COARSE_DATALOADER_S_PER_IMAGE = {"cpu": 1 / 5000, "cuda": 1 / 5000}
# Per-step cost that small batches cannot hide (Python, kernel launches, optimizer), in seconds.
COARSE_STEP_OVERHEAD_S = {"cpu": 0.002, "cuda": 0.001}
# Process start, imports, loading the data, warm-up and the accuracy check, in seconds.
COARSE_FIXED_S = {"cpu": 8.0, "cuda": 15.0}


def planned_images(config: RunConfig) -> int:
    """Training images per epoch that `config` will see."""
    return min(config.subset, TRAIN_SPLIT_IMAGES) if config.subset else TRAIN_SPLIT_IMAGES


def run_estimate(config: RunConfig, store: HistoryStore | None, device_type: str) -> tuple[float | None, bool]:
    """Seconds one run should take, start-up and evaluation included (None if nothing is known), and whether they
    come from this server's own past runs (else from the coarse table)."""
    measured = _from_history(config, store, device_type) if store is not None else None
    if measured is not None:
        return measured, True
    return coarse_run_seconds(config, device_type), False


def estimate_run_seconds(config: RunConfig, store: HistoryStore | None, device_type: str) -> float | None:
    """Seconds one run should take, start-up and evaluation included; None if nothing is known."""
    return run_estimate(config, store, device_type)[0]


def job_estimate(spec: JobSpec, store: HistoryStore | None, device_type: str) -> tuple[float | None, bool]:
    """Seconds for all runs of a job (a sweep's largest-batch search not included; None if any is unknown), and
    whether every run's came from this server's own past runs."""
    estimates = [run_estimate(run, store, device_type) for run in spec.runs]
    seconds = [estimate for estimate, _ in estimates]
    return (None if None in seconds else sum(seconds)), all(measured for _, measured in estimates)


def estimate_job_seconds(spec: JobSpec, store: HistoryStore | None, device_type: str) -> float | None:
    """Seconds for all runs of a job (a sweep's largest-batch search not included); None if any is unknown."""
    return job_estimate(spec, store, device_type)[0]


def coarse_run_seconds(config: RunConfig, device_type: str) -> float | None:
    """A coarse guess from the built-in table (right to within a few times, not better); None if not listed."""
    peak = COARSE_IMAGES_PER_S.get(_coarse_row(device_type), {}).get(coarse_column(config.precision, device_type))
    if peak is None:
        return None
    per_image_s = config.width ** WIDTH_EXPONENT[device_type] / peak
    if config.loader in WORKER_LOADERS:
        loading_s = COARSE_DATALOADER_S_PER_IMAGE[device_type]
        per_image_s = per_image_s + loading_s if device_type == "cpu" else max(per_image_s, loading_s)
    images = planned_images(config)
    steps = -(-images // config.batch_size)
    per_epoch_s = images * per_image_s + steps * COARSE_STEP_OVERHEAD_S[device_type]
    return trained_epochs(config, per_epoch_s) * per_epoch_s + COARSE_FIXED_S[device_type]


def coarse_column(precision: str, device_type: str) -> str:
    """The coarse table's column that stands for `precision` on `device_type`. A mode that computes exactly as
    another there reads that one's figure (trainer.capabilities decides: fp32-default is fp32 on a CPU, which has no
    TF32); on the recent GPU of the "cuda" row fp32-default runs the convolutions, nearly all of this CNN's work, in
    TF32 as PyTorch's defaults do, so it reads the tf32 figure where the row has one."""
    facts = COARSE_GPU if device_type == "cuda" else DeviceFacts(device_type)
    # The deliberate failures compute as amp-fp16 does, less one safeguard: estimated as it (till the history has them).
    precision = "amp-fp16" if precision in FAILURE_PRECISIONS else precision
    column = mode_support(facts).same_as.get(precision, precision)
    if column == "fp32-default":
        column = "tf32" if "tf32" in COARSE_IMAGES_PER_S.get(_coarse_row(device_type), {}) else "fp32"
    return column


def _coarse_row(device_type: str) -> str:
    """Which row of the coarse table fits this machine: a CPU's bf16 speed hangs on its AMX units."""
    if device_type != "cpu":
        return device_type
    return "cpu-amx" if cpu_has_amx() else "cpu-bf16" if "avx512_bf16" in cpu_flags() else "cpu"


def trained_epochs(config: RunConfig, per_epoch_s: float) -> int:
    """Epochs the run will train: config.epochs, or more where config.min_steady_s asks for a longer steady window
    (the loop adds whole epochs until the time after warm-up reaches it; sweep points ask for 1.5 s)."""
    if config.min_steady_s <= 0 or per_epoch_s <= 0:
        return config.epochs
    steps = max(1, -(-planned_images(config) // config.batch_size))
    warmup_s = per_epoch_s * min(config.warmup_steps, steps) / steps
    return min(MAX_EPOCHS, max(config.epochs, math.ceil((config.min_steady_s + warmup_s) / per_epoch_s)))


def _from_history(config: RunConfig, store: HistoryStore, device_type: str) -> float | None:
    """Seconds for `config` from the median steady throughput and fixed overhead of similar past runs on this kind
    of device (same mode, loader and width); None when this server has none."""
    timings = store.run_timings(device_type, config.precision, config.loader, config.width, limit=RECENT_RUNS)
    timings = [t for t in timings if t.steady_images_per_s and t.epochs > 0 and t.train_images > 0]
    similar = [t for t in timings if 0.5 <= t.batch_size / config.batch_size <= 2.0]
    timings = similar or timings
    if not timings:
        return None
    images_per_s = statistics.median(t.steady_images_per_s for t in timings)
    fixed = [_fixed_seconds(t) for t in timings if t.wall_s is not None]
    fixed_s = statistics.median(fixed) if fixed else COARSE_FIXED_S.get(device_type, 20.0)
    per_epoch_s = planned_images(config) / images_per_s
    return trained_epochs(config, per_epoch_s) * per_epoch_s + fixed_s


def _fixed_seconds(timing: RunTiming) -> float:
    """What a run cost beyond its steady training: start-up, data loading, warm-up and evaluation."""
    steady_s = timing.epochs * timing.train_images / timing.steady_images_per_s
    return max(0.0, timing.wall_s - steady_s)
