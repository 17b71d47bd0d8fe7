"""One plain sentence that explains a comparison, computed from its numbers and judged by lessons/verdicts."""

from __future__ import annotations

from collections.abc import Sequence

from lessons.verdicts import ACCURACY_DROP, DATA_BOUND_SHARE, PAYS_OFF_SPEEDUP, doubt, emulates_bf16
from trainer.comparison_table import MEMORY_SHORT_NAMES, headline_memory
from trainer.config import WORKER_LOADERS
from trainer.results import RunResult, SpeedupInterval, compare


def interpret(
    baseline: RunResult, candidate: RunResult, interval: SpeedupInterval | None = None, runs: Sequence[RunResult] = ()
) -> str:
    """The sentence a teacher would say on seeing these two runs side by side (with `interval` and `runs`, over
    repeated pairs: `baseline` and `candidate` are then the pair with the median speedup)."""
    comparison = compare(baseline, candidate)
    speedup = comparison.speedup if interval is None else interval.median
    name = candidate.precision
    device = candidate.environment.get("device_type") or candidate.config.device
    found = doubt(baseline, candidate, interval, runs)
    hardware = _hardware_cause(name, device, speedup, interval, baseline, candidate)
    if found is not None and found.kind == "settings":
        sentence = (
            f"These runs differ in more than precision ({found.detail}), so the {speedup:.2f}x change in "
            "time is not down to precision alone; compare runs with the same settings."
        )
    elif found is not None and found.kind == "short":
        sentence = (
            f"These runs are too short to time reliably ({found.detail} steps): one-off start-up costs "
            "of the first steps dominate them; train on more images or for more epochs before drawing conclusions."
        )
    elif found is not None and found.kind == "load" and hardware is not None:
        # The hardware explains a slowdown this large; load on the machine moves the figure, not its direction.
        sentence = f"{hardware} The timing was noisy ({found.reason}): that changes the figure, not the direction."
    elif found is not None:
        if found.kind == "load":
            advice = (f"The {speedup:.2f}x measured here may be down to the machine's load rather than to "
                      "precision; run the comparison again when the machine is quiet, or with repeats.")
        else:  # steady runs whose pairs disagree: the difference is smaller than the run-to-run spread here
            advice = (f"The difference between the modes is smaller than the spread between pairs here, so the "
                      f"{speedup:.2f}x cannot say which is faster; more pairs or longer runs can.")
        sentence = f"The speedup is uncertain: {found.reason}. {advice}"
    elif hardware is not None:
        sentence = hardware
    elif (share := candidate.data_wait_share) is not None and share > DATA_BOUND_SHARE:
        sentence = (
            f"The data loader bounds this run: {share:.0%} of the {name} run's time went to waiting for batches, "
            "so faster arithmetic cannot show; try the resident loader."
        )
    elif speedup >= PAYS_OFF_SPEEDUP:
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
    elif speedup >= 1 / PAYS_OFF_SPEEDUP:
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
    if config.loader in WORKER_LOADERS and result.data_wait_s is None:
        return (
            "the lab's DataLoader may be the bottleneck (turn on the data-wait breakdown to see), or each step "
            "does too little arithmetic; try the resident loader or a larger width."
        )
    if config.width < 4 or config.batch_size < 256:
        return (
            "each step does too little arithmetic for low precision to matter: fixed costs (Python, kernel "
            "launches, the optimizer) dominate; try a larger width or batch size."
        )
    return "this hardware has little low-precision speedup to offer for this model (not measured here: a guess)."


def _hardware_cause(name: str, device: str, speedup: float, interval: SpeedupInterval | None,
                    baseline: RunResult, candidate: RunResult) -> str | None:
    """The hardware's own reason for a slowdown, when it has one: fp16 on a CPU without fp16 units, bf16 on a CPU
    without bf16 units (emulated). Every pair must be slower (the range's top too), so noise cannot flip it."""
    slowest = interval.high if interval is not None and interval.known else speedup
    if slowest >= 1 / PAYS_OFF_SPEEDUP:
        return None
    if name == "amp-fp16" and device == "cpu":
        return (f"amp-fp16 took {1 / speedup:.2f}x the {baseline.precision} time here, most likely because PyTorch "
                "has no fast fp16 kernels for this CPU (a few recent CPUs, with AMX-FP16, have them): here use "
                "amp-bf16, and keep fp16 for GPUs with Tensor Cores.")
    if name == "amp-bf16" and emulates_bf16(candidate):
        return (f"amp-bf16 took {1 / speedup:.2f}x the {baseline.precision} time here because this CPU has no bf16 "
                "instructions (AVX512-BF16 or AMX), so PyTorch emulates bf16 on it: expect it to be several times "
                "slower than fp32 here, and a larger batch or width will not change that. AMP pays off on a GPU, or "
                "on a CPU with bf16 hardware.")
    return None


# Two loss curves "lie on top of each other" when, at every step both logged, they are this close (relative to fp32's):
LOSS_TRACKS_SHARE = 0.01


def loss_tracking(baseline: RunResult, candidate: RunResult) -> str | None:
    """What the two loss curves show when they lie on top of each other (None otherwise, or with no common step):
    both runs start from the same weights and see the same batches (the same seed), so curves that coincide say the
    16-bit arithmetic left training on fp32's course."""
    ours = {point["step"]: point["loss"] for point in baseline.loss_history}
    steps = [(ours[point["step"]], point["loss"]) for point in candidate.loss_history if point["step"] in ours]
    if not steps:
        return None
    largest = max(abs(theirs - mine) / abs(mine) for mine, theirs in steps if mine)
    if largest > LOSS_TRACKS_SHARE:
        return None
    return (f"The two loss curves lie on top of each other: at each of the {len(steps)} logged steps the "
            f"{candidate.precision} run's loss was within {largest:.2%} of {baseline.precision}'s. Both started from "
            f"the same weights and saw the same batches, so {candidate.precision} kept to {baseline.precision}'s "
            "course: its 16-bit arithmetic moved the loss by no more than that.")
