"""The settings of one training run, validated in one place."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import TypeVar

from trainer.errors import ConfigError, UnsupportedModeError

T = TypeVar("T")

# fp32 is strict fp32 (TF32 off); fp32-default leaves the TF32 switches as PyTorch sets them, as the lab's script does.
PRECISIONS = ("fp32", "fp32-default", "tf32", "amp-fp16", "amp-bf16")
AMP_PRECISIONS = ("amp-fp16", "amp-bf16")
# Deliberate failures, for the lesson that shows what AMP's safeguards prevent (pages/safeguards.py): amp-fp16 without
# its GradScaler, and pure fp16 (the whole model, its weights and optimizer state in fp16: no fp32 master weights).
# The trainer runs them when asked by name; the class server admits them only in that lesson's jobs.
FAILURE_PRECISIONS = ("amp-fp16-unscaled", "fp16-true")
SAFEGUARD_FAILURES = {"no-scaler": "amp-fp16-unscaled", "no-master-weights": "fp16-true"}  # safeguard -> its failure
TRAINING_PRECISIONS = PRECISIONS + FAILURE_PRECISIONS
FAILURE_NOTES = {
    "amp-fp16-unscaled": "amp-fp16-unscaled is a deliberate failure: fp16 autocast without the GradScaler, so small "
                         "gradients underflow to zero in the backward pass",
    "fp16-true": "fp16-true is a deliberate failure: the whole model, its weights and momentum in fp16 with no fp32 "
                 "master copy, so updates smaller than half a weight's fp16 spacing round away",
}
DATA_SOURCES = ("cifar10", "synthetic")
# dataloader: the lab's pipeline as this app runs it (workers kept between epochs, pinned memory, copies that overlap
# the step); resident: the whole split on the device; lab: the lab's own harness (workers forked anew each epoch, no
# pinned memory, synchronous copies, loss.item() every step, the C library's default malloc on a CPU).
LOADERS = ("dataloader", "resident", "lab")
WORKER_LOADERS = ("dataloader", "lab")  # the loaders whose batches come from DataLoader worker processes
WIDTHS = (1, 2, 4, 8)
DEVICES = ("auto", "cpu", "cuda")
# torch.compile's modes the trainer offers ("": eager); "reduce-overhead" adds CUDA graphs, so it needs a GPU.
COMPILE_MODES = ("", "default", "reduce-overhead")

# Hard ceilings that keep a typo from hanging the machine; an instructor's limits are stricter.
MAX_EPOCHS = 1000
MAX_BATCH_SIZE = 65536
MAX_MIN_STEADY_S = 60
DEFAULT_LOSS_SCALE = 2.0**16  # GradScaler's own defaults: start at 65536, grow after 2000 good steps in a row
DEFAULT_GROWTH_INTERVAL = 2000
MAX_LOSS_SCALE = 2.0**32
MAX_LOSS_SHRINK_LOG2 = 24
# Settings that add a measurement after a run's timed training and change nothing in it: two runs that differ in
# these alone trained alike (a sweep's points, a comparison's pair).
AFTER_TRAINING = ("measure_peaks", "peaks_cache", "profile_steps")
MAX_PROFILE_STEPS = 200  # a profile is a short window: the profiler keeps every operator of every step in memory


def from_known_fields(cls: type[T], data: Mapping) -> T:
    """`cls(**data)` with only the keys that are fields of the dataclass `cls`: a record read back from JSON (a
    result, a stored job) keeps working across versions, whether it is older or newer than this code."""
    known = {f.name for f in fields(cls)}
    return cls(**{key: value for key, value in data.items() if key in known})


def check_precision(precision: object, refused: Mapping[str, str] | None = None) -> None:
    """The one check of a precision mode: ConfigError unless the trainer knows it, and UnsupportedModeError (with the
    reason) where `refused` (a device's, trainer.capabilities.ModeSupport.refused) refuses it.

    A run's precision is checked at three places: the server's door (with the device's refusals), the run's own
    process when it starts training (RunConfig.validate), and the precision policy there (with its device's). The
    deliberate failures (FAILURE_PRECISIONS) are known here; the server's door decides where they may run."""
    if precision not in TRAINING_PRECISIONS:
        raise ConfigError(f"unknown precision {precision!r}: choose one of {', '.join(PRECISIONS)}")
    if refused and precision in refused:
        raise UnsupportedModeError(refused[precision])


@dataclass
class RunConfig:
    """One run: the lab's hyperparameters plus the knobs this app adds."""

    precision: str = "fp32"  # fp32 | fp32-default | tf32 | amp-fp16 | amp-bf16, or one of FAILURE_PRECISIONS
    epochs: int = 5
    batch_size: int = 256
    data: str = "cifar10"  # cifar10 | synthetic
    data_root: str = "./data"
    loader: str = "dataloader"  # dataloader | resident (whole split on the device) | lab (the lab's own harness)
    subset: int | None = None  # first N training images; None = the whole split
    test_subset: int | None = None  # first N test images for the accuracy check
    width: int = 1  # channel / hidden-unit multiplier; 1 = the lab's SimpleCNN
    channels_last: bool = False
    cudnn_benchmark: bool = False
    device: str = "auto"  # auto | cpu | cuda
    seed: int = 0
    num_workers: int = 4  # DataLoader workers, as in the lab
    lr: float = 0.01
    momentum: float = 0.9
    log_every: int = 100  # steps between recorded (and printed) losses, as in the lab
    warmup_steps: int = 5  # first steps left out of the steady-state throughput
    breakdown: bool = False  # time data waiting vs compute (adds one sync per step on CUDA)
    tune_host_malloc: bool = True  # CPU runs: reuse freed host memory instead of fresh pages (trainer/host_malloc.py)
    min_steady_s: float = 0.0  # add whole epochs until the steady window lasts this long (sweeps on fast GPUs)
    loss_scale_init: float = DEFAULT_LOSS_SCALE  # amp-fp16's GradScaler: the scale it starts from (1 to 2^32)
    loss_scale_growth_interval: int = DEFAULT_GROWTH_INTERVAL  # good steps in a row before it doubles the scale
    # The loss x 2^-n and the learning rate x 2^n: in fp32 the very same training (a power of two scales exactly),
    # with every gradient 2^n times smaller, as a deeper model's are (the safeguards lesson). 0: the lab's.
    loss_shrink_log2: int = 0
    track_updates: bool = False  # record the shares of zero gradients and of updates rounded away (syncs per step)
    # After training (outside the timed window): this device's best matmul, copy and launch rates (trainer/peaks.py),
    # read from `peaks_cache` or measured into it once per device, for the step budget.
    measure_peaks: bool = False
    peaks_cache: str | None = None
    # After training and the accuracy check: this many more steps under torch.profiler (trainer/profile.py). 0: none.
    profile_steps: int = 0
    compile_mode: str = ""  # torch.compile the model (COMPILE_MODES); its first steps then include compiling

    def validate(self, refused: Mapping[str, str] | None = None) -> "RunConfig":
        """Raise ConfigError with one clear line for the first bad value (UnsupportedModeError for a precision that
        `refused`, a device's refusals, names); return self."""
        check_precision(self.precision, refused)
        _choice("data", self.data, DATA_SOURCES)
        _choice("loader", self.loader, LOADERS)
        _choice("width", self.width, WIDTHS)
        _choice("device", self.device, DEVICES)
        _int_range("epochs", self.epochs, 1, MAX_EPOCHS)
        _int_range("batch size", self.batch_size, 1, MAX_BATCH_SIZE)
        _int_range("num_workers", self.num_workers, 0, 64)
        _int_range("log_every", self.log_every, 1, 1_000_000)
        _int_range("warmup_steps", self.warmup_steps, 0, 1_000_000)
        _int_range("seed", self.seed, 0, 2**31 - 1)
        if self.subset is not None:
            _int_range("subset", self.subset, 1, 10_000_000)
        if self.test_subset is not None:
            _int_range("test_subset", self.test_subset, 1, 10_000_000)
        if isinstance(self.min_steady_s, bool) or not isinstance(self.min_steady_s, (int, float)) or not (
            0 <= self.min_steady_s <= MAX_MIN_STEADY_S
        ):
            raise ConfigError(f"min_steady_s must be 0 to {MAX_MIN_STEADY_S} seconds, got {self.min_steady_s!r}")
        if isinstance(self.loss_scale_init, bool) or not isinstance(self.loss_scale_init, (int, float)) or not (
            1 <= self.loss_scale_init <= MAX_LOSS_SCALE
        ):
            raise ConfigError(f"the initial loss scale must be 1 to 2^32, got {self.loss_scale_init!r}")
        _int_range("loss scale growth interval", self.loss_scale_growth_interval, 1, 1_000_000)
        _int_range("loss_shrink_log2", self.loss_shrink_log2, 0, MAX_LOSS_SHRINK_LOG2)
        if not isinstance(self.track_updates, bool):
            raise ConfigError(f"track_updates is true or false, got {self.track_updates!r}")
        _int_range("profile_steps", self.profile_steps, 0, MAX_PROFILE_STEPS)
        _choice("compile_mode", self.compile_mode, COMPILE_MODES)
        if not isinstance(self.measure_peaks, bool):
            raise ConfigError(f"measure_peaks is true or false, got {self.measure_peaks!r}")
        if not (0 < self.lr < 10):
            raise ConfigError(f"learning rate must be between 0 and 10, got {self.lr}")
        if not (0 <= self.momentum < 1):
            raise ConfigError(f"momentum must be in [0, 1), got {self.momentum}")
        return self

    @property
    def default_scaler(self) -> bool:
        """GradScaler's own settings (what every run used before they could be changed)."""
        return (self.loss_scale_init, self.loss_scale_growth_interval) == (DEFAULT_LOSS_SCALE, DEFAULT_GROWTH_INTERVAL)

    @property
    def is_failure(self) -> bool:
        """A deliberate failure (FAILURE_PRECISIONS), whose results are labelled so wherever they appear."""
        return self.precision in FAILURE_PRECISIONS

    @property
    def loss_factor(self) -> float:
        """What the loss is multiplied by before the backward pass (1 unless loss_shrink_log2 shrinks it)."""
        return 2.0**-self.loss_shrink_log2

    @property
    def optimizer_lr(self) -> float:
        """The learning rate the optimizer is given: `lr`, times 2^loss_shrink_log2 to undo the shrunk loss."""
        return self.lr * 2.0**self.loss_shrink_log2

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping, *, stored: bool = False) -> "RunConfig":
        """Build from a dict. A new request is strict: a key that is not a setting is an error (a typo must not be
        dropped quietly). A stored record (`stored=True`: a result, a job in the history) keeps working across
        versions: keys this version does not know are left out, and missing ones take their defaults."""
        if not stored:
            unknown = sorted(set(data) - {f.name for f in fields(cls)})
            if unknown:
                raise ConfigError(f"unknown run setting {unknown[0]!r}: the settings are {', '.join(SETTING_NAMES)}")
        return from_known_fields(cls, data)


def _choice(name: str, value, allowed: tuple) -> None:
    if value not in allowed:
        listed = ", ".join(str(a) for a in allowed)
        raise ConfigError(f"unknown {name} {value!r}: choose one of {listed}")


def _int_range(name: str, value, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be a whole number, got {value!r}")
    if not low <= value <= high:
        raise ConfigError(f"{name} must be between {low} and {high}, got {value}")


SETTING_NAMES = tuple(f.name for f in fields(RunConfig))
