"""One plain sentence that explains a comparison, computed from its numbers (no Streamlit, so it is testable)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from trainer.comparison_table import MEMORY_SHORT_NAMES, headline_memory
from trainer.results import RunResult, SpeedupInterval, compare
from trainer.timing_quality import is_noisy

# Settings that must match for a comparison to be about precision alone.
LIKE_FOR_LIKE = (
    "epochs", "batch_size", "data", "subset", "loader", "width", "channels_last", "device", "tune_host_malloc",
)
SETTING_NAMES = {"tune_host_malloc": "host malloc"}  # where the field name does not read as words
DATA_BOUND_SHARE = 0.5  # the run spent more than this share of its time waiting for batches
LITTLE_GAIN = 1.05  # a speedup below this is "little"
ACCURACY_DROP = 0.05  # a fall of more than 5 accuracy points is worth a warning
MIN_STEPS_TO_TIME = 30  # runs shorter than this are mostly warm-up
BF16_CPU_FLAGS = {"avx512_bf16", "amx_bf16"}  # without either, a CPU emulates bf16


def data_wait_share(result: RunResult) -> float | None:
    """Share of the measured time spent waiting for batches; None when the run did not time it."""
    if result.data_wait_s is None or result.compute_s is None:
        return None
    total = result.data_wait_s + result.compute_s
    return result.data_wait_s / total if total > 0 else None


def emulates_bf16(result: RunResult) -> bool:
    """A CPU run whose recorded CPU flags show no bf16 instructions; False where the flags were not recorded."""
    flags = result.environment.get("cpu_flags")
    return result.environment.get("device_type") == "cpu" and isinstance(flags, list) and not (
        set(flags) & BF16_CPU_FLAGS)


def differences(baseline: RunResult, candidate: RunResult) -> list[str]:
    """Names of the settings, other than precision, in which the two runs differ."""
    return [
        SETTING_NAMES.get(key, key.replace("_", " "))
        for key in LIKE_FOR_LIKE
        if baseline.config.get(key) != candidate.config.get(key)
    ]


@dataclass(frozen=True)
class Doubt:
    """Why a measured speedup cannot be taken as a fact: its kind ("settings", "short", "load" or "spread"), the
    reason in words, and the detail the interpreting sentence names (the settings that differ, the steps)."""

    kind: str
    reason: str
    detail: str = ""


def _doubt(
    baseline: RunResult, candidate: RunResult, interval: SpeedupInterval | None, runs: Sequence[RunResult]
) -> Doubt | None:
    """The one place each check is made, for the headline's Timing and for the sentence alike."""
    if differ := differences(baseline, candidate):
        return Doubt("settings", f"the runs differ in more than precision ({', '.join(differ)})", ", ".join(differ))
    if (steps := min(baseline.total_steps, candidate.total_steps)) < MIN_STEPS_TO_TIME:
        return Doubt("short", f"the runs are too short to time reliably ({steps} steps, mostly warm-up)", str(steps))
    checked = list(runs) or [baseline, candidate]
    noisy = [(index, run) for index, run in enumerate(checked) if is_noisy(run.timing_quality)]
    if noisy and len(checked) <= 2:
        return Doubt("load", "; ".join(f"the {run.precision} run's timing was noisy "
                                       f"({run.timing_quality['reasons'][0]})" for _, run in noisy))
    if noisy:
        index, first = noisy[0]
        return Doubt("load", f"the timing of {len(noisy)} of the {len(checked)} runs was noisy (pair "
                             f"{index // 2 + 1}'s {first.precision} run: {first.timing_quality['reasons'][0]})")
    if interval is not None and interval.straddles_one:
        return Doubt("spread", f"over {interval.pairs} alternating pairs the speedup ranged from {interval.low:.2f}x "
                               f"to {interval.high:.2f}x, so the runs disagree on which mode is faster")
    return None


def uncertainty(
    baseline: RunResult, candidate: RunResult, interval: SpeedupInterval | None = None, runs: Sequence[RunResult] = ()
) -> str | None:
    """Why the measured speedup cannot be taken as a fact (runs that differ in more than precision, runs too short
    to time, a noisy run, pairs that disagree), or None. `runs`: every run of a repeated comparison in the order
    they ran, each checked (the pair alone when empty)."""
    doubt = _doubt(baseline, candidate, interval, runs)
    return doubt.reason if doubt else None


def interpret(
    baseline: RunResult, candidate: RunResult, interval: SpeedupInterval | None = None, runs: Sequence[RunResult] = ()
) -> str:
    """The sentence a teacher would say on seeing these two runs side by side (with `interval` and `runs`, over
    repeated pairs: `baseline` and `candidate` are then the pair with the median speedup)."""
    comparison = compare(baseline, candidate)
    speedup = comparison.speedup if interval is None else interval.median
    name = candidate.precision
    device = candidate.environment.get("device_type") or candidate.config.get("device")
    doubt = _doubt(baseline, candidate, interval, runs)
    if doubt is not None and doubt.kind == "settings":
        sentence = (
            f"These runs differ in more than precision ({doubt.detail}), so the {speedup:.2f}x change in "
            "time is not down to precision alone; compare runs with the same settings."
        )
    elif doubt is not None and doubt.kind == "short":
        sentence = (
            f"These runs are too short to time reliably ({doubt.detail} steps): one-off start-up costs "
            "of the first steps dominate them; train on more images or for more epochs before drawing conclusions."
        )
    elif doubt is not None:
        if doubt.kind == "load":
            advice = (f"The {speedup:.2f}x measured here may be down to the machine's load rather than to "
                      "precision; run the comparison again when the machine is quiet, or with repeats.")
        else:  # steady runs whose pairs disagree: the difference is smaller than the run-to-run spread here
            advice = (f"The difference between the modes is smaller than the spread between pairs here, so the "
                      f"{speedup:.2f}x cannot say which is faster; more pairs or longer runs can.")
        sentence = f"The speedup is uncertain: {doubt.reason}. {advice}"
    elif name == "amp-fp16" and device == "cpu" and speedup < 1 / LITTLE_GAIN:
        sentence = (
            f"amp-fp16 took {1 / speedup:.2f}x the {baseline.precision} time here, most likely because PyTorch has "
            "no fast fp16 kernels for this CPU (a few recent CPUs, with AMX-FP16, have them): here use amp-bf16, "
            "and keep fp16 for GPUs with Tensor Cores."
        )
    elif name == "amp-bf16" and speedup < 1 / LITTLE_GAIN and emulates_bf16(candidate):
        sentence = (
            f"amp-bf16 took {1 / speedup:.2f}x the {baseline.precision} time here because this CPU has no bf16 "
            "instructions "
            "(AVX512-BF16 or AMX), so PyTorch emulates bf16 on it: a larger batch or width will not change that. "
            "AMP pays off on a GPU, or on a CPU with bf16 hardware."
        )
    elif (share := data_wait_share(candidate)) is not None and share > DATA_BOUND_SHARE:
        sentence = (
            f"The data loader bounds this run: {share:.0%} of the {name} run's time went to waiting for batches, "
            "so faster arithmetic cannot show; try the resident loader."
        )
    elif speedup >= LITTLE_GAIN:
        sentence = (
            f"{name} trained {speedup:.2f}x as fast as {baseline.precision} "
            f"({comparison.time_saved_pct:.0f}% less time"
            + (f"; {interval.low:.2f}x to {interval.high:.2f}x over {interval.pairs} alternating pairs)"
               if interval is not None and interval.known else ")")
        )
        saved = comparison.memory_reduction_pct
        key = headline_memory(saved)
        if key is not None and round(saved[key]) != 0:
            figure = MEMORY_SHORT_NAMES.get(key, key)
            sentence += (f", and its peak memory ({figure}) was {saved[key]:.0f}% lower" if saved[key] > 0
                         else f", but its peak memory ({figure}) was {-saved[key]:.0f}% higher")
        sentence += "."
    elif speedup >= 1 / LITTLE_GAIN:
        sentence = f"{name} makes little difference here ({speedup:.2f}x), probably because " + _why_little(candidate)
    else:
        sentence = (
            f"{name} was slower here ({1 / speedup:.2f}x the {baseline.precision} time). A common cause at this model "
            "size: the casts autocast adds cost more than the low-precision math saves on this hardware; a larger "
            "width or batch gives it more to save."
        )
    if comparison.accuracy_delta is not None and comparison.accuracy_delta < -ACCURACY_DROP:
        sentence += f" Accuracy fell by {-100 * comparison.accuracy_delta:.1f} points: check the loss curves."
    return sentence


def _why_little(result: RunResult) -> str:
    config = result.config
    if config.get("loader") == "dataloader" and result.data_wait_s is None:
        return (
            "the lab's DataLoader may be the bottleneck (turn on the data-wait breakdown to see), or each step "
            "does too little arithmetic; try the resident loader or a larger width."
        )
    if config.get("width", 1) < 4 or config.get("batch_size", 256) < 256:
        return (
            "each step does too little arithmetic for low precision to matter: fixed costs (Python, kernel "
            "launches, the optimizer) dominate; try a larger width or batch size."
        )
    return "this hardware has little low-precision speedup to offer for this model (not measured here: a guess)."
