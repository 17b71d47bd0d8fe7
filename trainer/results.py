"""Results of runs, their JSON form, and the lab's fp32-vs-AMP comparison computed from two of them."""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field
from typing import Sequence

from trainer.config import RunConfig, from_known_fields

# The figures the lab itself reports for its GPU (5 epochs, batch 256); shown beside ours as a reference only.
LAB_REFERENCE = {
    "source": "the lab's own example figures (a Tensor Core GPU, 5 epochs, batch 256)",
    "fp32_time_s": 75.0,
    "amp_time_s": 48.0,
    "fp32_peak_memory_bytes": int(1.8e9),
    "amp_peak_memory_bytes": int(1.1e9),
    # How the lab's scripts ran (lab/fp32_baseline.py, lab/amp_training.py): fp32 as PyTorch defaults it, amp-fp16
    # with its GradScaler, the DataLoader, the whole split.
    "settings": {"baseline": "fp32-default", "candidate": "amp-fp16", "epochs": 5, "batch_size": 256,
                 "data": "cifar10", "loader": "lab", "subset": None, "width": 1, "num_workers": 4},
}

# Labels of the memory figures, so that every page and table names them the same way.
MEMORY_LABELS = {
    "torch_max_allocated": "peak allocated by PyTorch tensors (torch.cuda.max_memory_allocated), resident data "
    "left out",
    "torch_max_reserved": "peak reserved by PyTorch's caching allocator (torch.cuda.max_memory_reserved), "
    "resident data left out",
    "nvml_process_used": "peak GPU memory of this run's process as nvidia-smi lists it, CUDA context included "
    "(pynvml, sampled)",
    "nvml_device_used": "peak memory in use on the whole GPU, every process's, as nvidia-smi reports it "
    "(pynvml, sampled)",
    "process_rss_growth": "peak growth of the process's resident memory during training (CPU)",
}


@dataclass
class RunResult:
    """Everything measured in one run, with the config and environment that produced it."""

    config: RunConfig
    environment: dict
    total_time_s: float  # first batch to end of last, warm-up included (as the lab measures)
    epoch_times_s: list[float]
    steady_images_per_s: float | None  # after the first `warmup_steps` steps
    peak_memory: dict[str, int]  # label (see MEMORY_LABELS) -> bytes
    loss_history: list[dict]  # {"step", "epoch", "loss"}: mean loss over the last `log_every` steps
    test_accuracy: float | None  # top-1 on the test split, evaluated in the run's precision
    skipped_steps: int = 0  # optimizer steps skipped by the GradScaler (inf/NaN gradients)
    warnings: list[str] = field(default_factory=list)
    status: str = "ok"
    warmup_steps: int = 0
    total_steps: int = 0
    train_images: int = 0
    images_per_s: float | None = None  # over the whole run, warm-up included
    epoch_losses: list[float] = field(default_factory=list)
    loss_scale_history: list[dict] = field(default_factory=list)  # {"step", "scale"} after each update
    skipped_step_numbers: list[int] = field(default_factory=list)
    data_wait_s: float | None = None  # only with config.breakdown
    compute_s: float | None = None  # only with config.breakdown
    started_at: str = ""  # ISO time, UTC
    resident_data_bytes: int = 0  # the resident loader's images and labels on the device; not in peak_memory
    # {"verdict": "steady" | "noisy", "cv", "reasons", ...} (trainer/timing_quality.py); None: not measured
    timing_quality: dict | None = None
    worker_cpu_s: float | None = None  # DataLoader workers' CPU seconds over the timed window (None: no workers)
    # Only with config.track_updates (trainer/meters.py's UpdateTracker): per flush {"step", "zero_grad_share",
    # "stalled_update_share"}, and the run's counts {"steps", "gradients", "zero", "moving", "stalled"}.
    update_history: list[dict] = field(default_factory=list)
    update_counts: dict | None = None
    device_peaks: dict | None = None  # with config.measure_peaks: trainer.peaks.DevicePeaks as a dict
    profile: dict | None = None  # with config.profile_steps: trainer.profile.StepProfile as a dict
    first_step_s: float | None = None  # the first step alone (compiling, with config.compile_mode; cuDNN's choices)
    # The first smaller last batch of an epoch after warm-up: its images and its step's time. A new shape, so with
    # config.compile_mode it is compiled again there (and cuDNN chooses again); None where every batch was full.
    first_partial_step: dict | None = None  # {"images": int, "s": float}

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "RunResult":
        """A stored result (a file, the history, a run's process): keys this version does not know are left out."""
        return from_known_fields(cls, {**data, "config": RunConfig.from_dict(data.get("config") or {}, stored=True)})

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_json(cls, text: str) -> "RunResult":
        return cls.from_dict(json.loads(text))

    @property
    def precision(self) -> str:
        return self.config.precision

    @property
    def zero_grad_share(self) -> float | None:
        """Of every gradient element of every step, the share that was exactly zero (None: not tracked)."""
        counts = self.update_counts
        return counts["zero"] / counts["gradients"] if counts and counts["gradients"] else None

    @property
    def stalled_update_share(self) -> float | None:
        """Of the weights with a nonzero gradient in the steps taken, the share the step left unchanged."""
        counts = self.update_counts
        return counts["stalled"] / counts["moving"] if counts and counts["moving"] else None

    @property
    def data_wait_share(self) -> float | None:
        """Share of the timed training spent waiting for batches; None where the run did not time it."""
        if self.data_wait_s is None or self.compute_s is None:
            return None
        return wait_share(self.data_wait_s, self.compute_s)


def wait_share(data_wait_s: float, compute_s: float) -> float:
    """Waiting for data over waiting plus computing (0 for no time at all)."""
    total = data_wait_s + compute_s
    return data_wait_s / total if total > 0 else 0.0


@dataclass
class Comparison:
    """The lab's "Analyzing the Results" table for a baseline and a candidate run."""

    baseline_precision: str
    candidate_precision: str
    speedup: float  # baseline time / candidate time
    time_saved_pct: float  # positive = candidate faster
    throughput_speedup: float | None  # steady images/s, candidate / baseline
    memory_reduction_pct: dict[str, float]  # per memory label present in both; positive = less memory
    accuracy_delta: float | None  # candidate - baseline, in accuracy points (0..1 scale)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Comparison":
        return from_known_fields(cls, data)


def compare(baseline: RunResult, candidate: RunResult) -> Comparison:
    """Speedup, time saved, memory saved per figure and accuracy change of `candidate` over `baseline`."""
    speedup = baseline.total_time_s / candidate.total_time_s if candidate.total_time_s > 0 else float("inf")
    time_saved = 0.0
    if baseline.total_time_s > 0:
        time_saved = 100.0 * (baseline.total_time_s - candidate.total_time_s) / baseline.total_time_s
    throughput = None
    if baseline.steady_images_per_s and candidate.steady_images_per_s:
        throughput = candidate.steady_images_per_s / baseline.steady_images_per_s
    memory = {
        label: 100.0 * (base - candidate.peak_memory[label]) / base
        for label, base in baseline.peak_memory.items()
        if label in candidate.peak_memory and base > 0
    }
    accuracy = None
    if baseline.test_accuracy is not None and candidate.test_accuracy is not None:
        accuracy = candidate.test_accuracy - baseline.test_accuracy
    return Comparison(baseline.precision, candidate.precision, speedup, time_saved, throughput, memory, accuracy)


@dataclass
class SpeedupInterval:
    """The speedup (baseline time / candidate time) over pairs of runs made alternately: its median and range.

    One pair has no range: low and high are then None, and `describe()` says that the spread is unknown."""

    median: float
    low: float | None
    high: float | None
    pairs: int

    @property
    def known(self) -> bool:
        return self.pairs >= 2

    @property
    def middle_words(self) -> str:
        """Which pair's speedup heads the comparison, in plain words: the middle one of an odd number of pairs; of an
        even number, the lower of the two middle ones (not their mean: a speedup one pair really measured)."""
        if self.pairs % 2:
            return f"the middle of {self.pairs}"
        return "the lower of 2" if self.pairs == 2 else f"the lower of the middle two of {self.pairs}"

    @property
    def straddles_one(self) -> bool:
        """The pairs disagree on which mode was faster."""
        return self.known and self.low < 1.0 < self.high

    def describe(self) -> str:
        if not self.known:
            return (f"{self.median:.2f}x from one pair of runs: its spread is unknown (repeat the comparison, "
                    "e.g. compare --repeats 3, to measure it)")
        return (f"{self.median:.2f}x, {self.middle_words} alternating pairs (range {self.low:.2f}x to "
                f"{self.high:.2f}x)")

    def to_dict(self) -> dict:
        return {**asdict(self), "note": None if self.known else "one pair of runs: the interval is unknown"}

    @classmethod
    def from_dict(cls, data: dict) -> "SpeedupInterval":
        return from_known_fields(cls, data)


def split_pairs(results: Sequence[RunResult]) -> tuple[list[RunResult], list[RunResult]]:
    """A comparison's runs in the order they ran (fp32, AMP, fp32, AMP, ...) as baselines and candidates; the
    baseline is the first run's precision."""
    if not results:
        return [], []
    first = results[0].precision
    baselines = [r for r in results if r.precision == first]
    candidates = [r for r in results if r.precision != first]
    if not candidates:  # the same mode twice: alternate by position
        baselines, candidates = list(results[0::2]), list(results[1::2])
    pairs = min(len(baselines), len(candidates))
    return baselines[:pairs], candidates[:pairs]


def speedup_interval(baselines: Sequence[RunResult], candidates: Sequence[RunResult]) -> SpeedupInterval | None:
    """Median, lowest and highest speedup over the pairs (baselines[i], candidates[i]); None without a pair."""
    speedups = [compare(b, c).speedup for b, c in zip(baselines, candidates)]
    if not speedups:
        return None
    if len(speedups) == 1:
        return SpeedupInterval(speedups[0], None, None, 1)
    # The lower middle for an even count: the median is then one pair's own speedup (see median_pair).
    return SpeedupInterval(statistics.median_low(speedups), min(speedups), max(speedups), len(speedups))


def median_pair(baselines: Sequence[RunResult], candidates: Sequence[RunResult]) -> tuple[RunResult, RunResult]:
    """The pair whose speedup is the median one (the lower middle for an even count): the table's two runs."""
    ranked = sorted(zip(baselines, candidates), key=lambda pair: compare(*pair).speedup)
    return ranked[(len(ranked) - 1) // 2]
