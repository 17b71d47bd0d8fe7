"""One vocabulary of verdicts: the thresholds every page judges a measurement by, why a measured speedup may be in
doubt, and the headline of a comparison (its speedup, the range over repeated pairs, and whether the timing lets
it be taken as a fact). Results, the Run page, the sweep, the sentence that explains a comparison and the
instructor's console all ask here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from trainer.comparison_table import MEMORY_SHORT_NAMES, headline_memory
from trainer.results import RunResult, SpeedupInterval, compare, median_pair, speedup_interval, split_pairs
from trainer.timing_quality import MIN_STEPS_TO_TIME, is_noisy

# A speedup below this (5%) is within what run-to-run noise does on a shared machine: "little" or "no gain".
PAYS_OFF_SPEEDUP = 1.05
DATA_BOUND_SHARE = 0.5  # waiting for data at least half the time: the pipeline, not arithmetic, bounds the run
DATA_NOTICEABLE_SHARE = 0.2  # a fifth or more: compute bounds the run, but the pipeline costs a noticeable part
ACCURACY_DROP = 0.05  # a fall of more than 5 accuracy points is worth a warning
# Settings that must match for a comparison to be about precision alone.
LIKE_FOR_LIKE = (
    "epochs", "batch_size", "data", "subset", "loader", "width", "channels_last", "device", "tune_host_malloc",
)
SETTING_NAMES = {"tune_host_malloc": "host malloc"}  # where the field name does not read as words
BF16_CPU_FLAGS = {"avx512_bf16", "amx_bf16"}  # without either, a CPU emulates bf16


def differences(baseline: RunResult, candidate: RunResult) -> list[str]:
    """Names of the settings, other than precision, in which the two runs differ."""
    return [SETTING_NAMES.get(key, key.replace("_", " ")) for key in LIKE_FOR_LIKE
            if getattr(baseline.config, key) != getattr(candidate.config, key)]


def emulates_bf16(result: RunResult) -> bool:
    """A CPU run whose recorded CPU flags show no bf16 instructions; False where the flags were not recorded."""
    flags = result.environment.get("cpu_flags")
    return result.environment.get("device_type") == "cpu" and isinstance(flags, list) and not (
        set(flags) & BF16_CPU_FLAGS)


def machine_class(environment: dict) -> str:
    """What decides how mixed precision behaves on a machine, in words: a GPU by its name; a CPU by its 16-bit
    units (AMX tiles, AVX-512 bf16 instructions, or neither, when PyTorch emulates bf16). Two machines of one class
    give the same kind of answer to "is AMP faster here?"; a reference is only an answer for its own class."""
    if environment.get("device_type") == "cuda":
        return environment.get("device_name") or "an unnamed GPU"
    flags = set(environment.get("cpu_flags") or ())
    if {"amx_tile", "amx_bf16"} <= flags:
        return "a CPU with AMX bf16 units"
    if "avx512_bf16" in flags:
        return "a CPU with AVX-512 bf16 instructions, no AMX"
    return "a CPU without bf16 instructions (bf16 emulated)"


@dataclass(frozen=True)
class Doubt:
    """Why a measured speedup cannot be taken as a fact: its kind ("settings", "short", "load" or "spread"), the
    reason in words, and the detail the interpreting sentence names (the settings that differ, the steps)."""

    kind: str
    reason: str
    detail: str = ""


def doubt(
    baseline: RunResult, candidate: RunResult, interval: SpeedupInterval | None = None, runs: Sequence[RunResult] = ()
) -> Doubt | None:
    """The one place each check is made: runs that differ in more than precision, runs too short to time, a noisy
    run, pairs that disagree; None when the speedup stands. `runs`: every run of a repeated comparison in the order
    they ran, each checked (the pair alone when empty)."""
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


def timing_summary(runs: Mapping[str, RunResult]) -> str | None:
    """One line for a comparison's noisy timings (None when every run was timed steadily, or none was measured):
    how many runs, which, and the first reason, in place of one warning per run and reason."""
    noisy = [(label, result) for label, result in runs.items() if is_noisy(result.timing_quality)]
    if not noisy:
        return None
    names = ", ".join(label for label, _ in noisy)
    first = (noisy[0][1].timing_quality.get("reasons") or ["no reason recorded"])[0]
    count = "The run" if len(runs) == 1 else f"{len(noisy)} of the {len(runs)} runs"
    return (f"{count} ({names}) {'was' if len(noisy) == 1 else 'were'} timed while other work shared the machine: "
            f"{first}. Such load moves the times it measures.")


def distinct_warnings(runs: Mapping[str, RunResult]) -> list[str]:
    """Each warning the runs carry, once, with the runs it concerns ("FP32, AMP (fp16): ...")."""
    holders: dict[str, list[str]] = {}
    for label, result in runs.items():
        for warning in result.warnings:
            holders.setdefault(warning, []).append(label)
    return [warning if len(labels) == len(runs) > 1 else f"{', '.join(labels)}: {warning}"
            for warning, labels in holders.items()]


@dataclass(frozen=True)
class Headline:
    """A comparison's headline: the speedup over its pairs (baseline time over candidate time), the pair whose speedup
    is the median one (the lab's table shows it), every run in the order it ran, and any doubt."""

    interval: SpeedupInterval
    baseline: RunResult
    candidate: RunResult
    runs: tuple[RunResult, ...]
    doubt: Doubt | None

    @property
    def speedup(self) -> float:
        return self.interval.median

    @property
    def noisy_runs(self) -> int:
        return sum(is_noisy(run.timing_quality) for run in self.runs)

    @property
    def timing(self) -> str:
        """"uncertain" (a doubt), "steady", or "not measured" (runs recorded before timing quality existed)."""
        if self.doubt is not None:
            return "uncertain"
        return "steady" if all(run.timing_quality for run in self.runs) else "not measured"

    @property
    def memory(self) -> tuple[str | None, float | None]:
        """The memory figure that sums the median pair up (its short name) and the share it saved, in percent."""
        saved = compare(self.baseline, self.candidate).memory_reduction_pct
        key = headline_memory(saved)
        return (MEMORY_SHORT_NAMES.get(key, key), saved[key]) if key else (None, None)


def headline(results: Sequence[RunResult]) -> Headline | None:
    """The headline of a comparison's finished runs in the order they ran (fp32, AMP, fp32, AMP, ...); None without
    a pair."""
    baselines, candidates = split_pairs(list(results))
    interval = speedup_interval(baselines, candidates)
    if interval is None:
        return None
    baseline, candidate = median_pair(baselines, candidates)
    runs = tuple(results)
    return Headline(interval, baseline, candidate, runs, doubt(baseline, candidate, interval, runs))


@dataclass(frozen=True)
class ClassRow:
    """One learner's latest finished comparison, as the instructor's console lists it: with repeated pairs, the
    median speedup and its range, and the median pair's memory and accuracy (as Results shows them)."""

    learner: str
    when: float
    device: str
    baseline: str
    candidate: str
    speedup: float
    speedup_low: float | None  # None for one pair of runs: its spread is unknown
    speedup_high: float | None
    pairs: int
    memory_figure: str
    memory_saving_pct: float | None
    baseline_accuracy: float | None
    candidate_accuracy: float | None
    job_id: str


def class_row(learner: str, when: float, job_id: str, results: Sequence[RunResult]) -> ClassRow | None:
    """The console's row for one learner's comparison (None without a pair of finished runs)."""
    found = headline(results)
    if found is None:
        return None
    figure, saved = found.memory
    interval = found.interval
    return ClassRow(
        learner=learner, when=when, device=str(found.candidate.environment.get("device_name", "?")),
        baseline=found.baseline.precision, candidate=found.candidate.precision, speedup=interval.median,
        speedup_low=interval.low, speedup_high=interval.high, pairs=interval.pairs, memory_figure=figure or "-",
        memory_saving_pct=saved, baseline_accuracy=found.baseline.test_accuracy,
        candidate_accuracy=found.candidate.test_accuracy, job_id=job_id,
    )
