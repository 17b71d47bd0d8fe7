"""The ladder to the fastest lab run: the lab's workload, one change at a time, each rung measured against the lab's
own loop in the same harness.

Rungs, each adding to the one before: the lab's loop (fp32 as PyTorch defaults it, in the lab's own harness: its
DataLoader forked each epoch, a sync every step) -> data held on the device (no DataLoader, no sync per step) ->
AMP (fp16 on a GPU, as the lab; bf16 on a CPU, where fp16 is tens of times slower) -> channels_last ->
torch.compile (its compile time reported apart) -> CUDA graphs (torch.compile's reduce-overhead mode; GPU only) ->
the largest batch that still trains to the lab's accuracy (the learning rate scaled with the batch).

Every rung runs in a fresh process (trainer.isolated), all rungs in turn once per repeat (lab, rung 2, ..., lab,
rung 2, ...), so a rung's speedup over the lab's loop is the lab's time over the rung's within each repeat, given
as the median and range over the repeats (trainer.results.speedup_interval); a rung's images/s is its images over
the same training time, so the two columns agree. A compiled rung's time leaves its compiling out and reports it
apart: its first step, and its first smaller last batch of an epoch (a new shape, which torch.compile compiles
again: 50,000 images at batch 256 end each epoch on 80). A rung this device cannot run says why. The largest batch
is kept while its accuracy is within a point of the lab loop's; a lower one is judged against the test split's own
noise (a real loss, or too few test images to tell).

    python -m bench.ladder --device cpu --quick --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from trainer.config import RunConfig
from trainer.isolated import RunOutcome, run_isolated
from trainer.results import RunResult, speedup_interval
from trainer.synthetic import prepare_synthetic
from trainer.timing_quality import is_noisy

LAB_SECONDS = 75.0  # the lab's own fp32 run: 5 epochs of CIFAR-10 at batch 256 on its Tensor Core GPU
# Other people's figures, shown as reference lines: airbench's published CIFAR-10 training times on one A100
# (Keller Jordan, "94% on CIFAR-10 in 3.29 Seconds on a Single GPU", arXiv:2404.00498): to 94%, 95% and 96%.
AIRBENCH_SECONDS = {"airbench94 (94%)": 3.29, "airbench95 (95%)": 10.4, "airbench96 (96%)": 46.3}
ACCURACY_TOLERANCE = 0.01  # a larger batch "trains to the same accuracy" within one point of the lab rung's
Z_95 = 1.96  # two accuracies on n test images differ by noise alone within this many standard errors, 95% of the time
LARGER_BATCHES = (512, 1024, 2048)
LARGEST = "largest batch at the lab's accuracy"


@dataclass
class Rung:
    name: str
    changes: dict  # RunConfig fields set on top of the rung before
    why_not: str | None = None  # why this device cannot run it (then it is not run)


@dataclass
class RungResult:
    name: str
    config: dict | None = None
    why_not: str | None = None
    images_per_s: float | None = None
    seconds: list[float] = field(default_factory=list)  # training time per repeat (compiling left out)
    compile_s: float | None = None  # compiled rungs: the compiling inside the timed training (compile_seconds)
    speedup_vs_lab: dict | None = None  # {"median", "low", "high", "pairs"}
    test_accuracy: float | None = None
    noisy_runs: int = 0  # runs whose timing other load disturbed (trainer/timing_quality.py)
    errors: list[str] = field(default_factory=list)


def rungs_for(device: str) -> list[Rung]:
    gpu = device == "cuda"
    amp = "amp-fp16" if gpu else "amp-bf16"
    return [
        Rung("the lab's loop", {"precision": "fp32-default", "loader": "lab"}),
        Rung("data held on the device, no sync per step", {"loader": "resident", "num_workers": 0}),
        Rung(f"AMP ({amp})", {"precision": amp}),
        Rung("channels_last", {"channels_last": True}),
        Rung("torch.compile", {"compile_mode": "default"}),
        Rung("CUDA graphs", {"compile_mode": "reduce-overhead"},
             None if gpu else "CUDA graphs record GPU kernel launches: this device has no CUDA GPU"),
    ]


def base_config(device: str, quick: bool) -> RunConfig:
    """The lab's workload: 5 epochs of the whole split at batch 256; quick: 1 epoch of 2,048 images."""
    sizes = dict(epochs=1, subset=2048, test_subset=512) if quick else dict(epochs=5, subset=None, test_subset=None)
    return RunConfig(device=device, data="synthetic", batch_size=256, warmup_steps=2 if quick else 5, **sizes)


def training_seconds(result: RunResult, compiled: bool) -> float:
    """The run's training time; for a compiled rung, less its compiling (compile_seconds)."""
    if not compiled or result.first_step_s is None or not result.steady_images_per_s:
        return result.total_time_s
    return result.total_time_s - compile_seconds(result)


def compile_seconds(result: RunResult) -> float:
    """What a compiled run spent compiling inside its timed training: its first step beyond a steady step, and its
    first smaller last batch (a new shape, compiled again) beyond what a steady step of that many images takes."""
    per_image = 1.0 / result.steady_images_per_s
    first = max(result.first_step_s - result.config.batch_size * per_image, 0.0)
    partial = result.first_partial_step
    again = 0.0 if partial is None else max(partial["s"] - partial["images"] * per_image, 0.0)
    return first + again


def tested_images(result: RunResult) -> int:
    return result.config.test_subset or 10_000


def accuracy_verdict(lab: float, accuracy: float, images: int) -> str | None:
    """None when `accuracy` is within ACCURACY_TOLERANCE of the lab loop's; else why the batch is not kept: a loss
    beyond the noise of `images` test images, or one the noise could explain (one point of 512 images is 5 of
    them), where the test split is too small to tell."""
    noise = Z_95 * ((lab * (1 - lab) + accuracy * (1 - accuracy)) / images) ** 0.5
    drop = lab - accuracy
    if drop <= ACCURACY_TOLERANCE:
        return None
    said = f"{accuracy:.1%} against the lab loop's {lab:.1%} (±{noise:.1%} on {images:,} test images)"
    if drop - noise > ACCURACY_TOLERANCE:
        return f"trained to {said}: more than a point lower, beyond the noise"
    return f"trained to {said}: too few test images to tell whether it lost more than a point"


def climb(device: str, quick: bool, repeats: int, out: Path | None, budget_s: float | None = None,
          timeout_s: float | None = None) -> dict:
    """Every rung once, then the largest batch, then the further repeats: a ladder cut short by `budget_s` (no run
    starts past it) is whole before its spreads are. A run still going `timeout_s` after the start is cancelled.
    The synthetic split is generated once, and every run reads it."""
    started, clock = time.time(), time.monotonic()
    stop_at = None if budget_s is None else clock + budget_s
    cancel_at = None if timeout_s is None else clock + timeout_s
    with tempfile.TemporaryDirectory(prefix="ladder-data-") as data_root:
        base = base_config(device, quick)
        prepare_synthetic(data_root, seed=base.seed, train_limit=base.subset, test_limit=base.test_subset)
        base = replace(base, data_root=data_root)
        state = _Climb(device, quick, repeats, out, started, stop_at, cancel_at)
        current = base
        for rung in rungs_for(device):
            current = replace(current, **rung.changes)
            state.add(rung.name, None if rung.why_not else current, rung.why_not)
        state.repeated = len(state.configs)
        state.round()
        state.largest_batch(base.batch_size)
        for _ in range(repeats - 1):
            state.round()
    return state.write()


class _Climb:
    """The ladder as it is being measured: each rung's config and finished runs, written after every run."""

    def __init__(self, device, quick, repeats, out, started, stop_at, cancel_at):
        self.device, self.quick, self.repeats, self.out, self.started = device, quick, repeats, out, started
        self.stop_at, self.cancel_at = stop_at, cancel_at
        self.configs: list[RunConfig | None] = []
        self.results: list[RungResult] = []
        self.runs: dict[int, list[RunResult]] = {}
        self.not_started = 0
        self.counts = {"runs": 0, "train_steps": 0, "train_images": 0}  # every run started, refused batches too
        self.repeated = 0  # the rungs of rungs_for, which every round runs

    def add(self, name: str, config: RunConfig | None, why_not: str | None) -> None:
        self.configs.append(config)
        self.results.append(RungResult(name, None if config is None else config.to_dict(), why_not))
        self.runs[len(self.configs) - 1] = []

    def out_of_time(self) -> bool:
        return self.stop_at is not None and time.monotonic() > self.stop_at

    def run(self, name: str, config: RunConfig) -> RunOutcome | None:
        """One run in a fresh process; None when the budget has run out (it is counted, not started)."""
        if self.out_of_time():
            self.not_started += 1
            return None
        print(f"ladder: {name} ({config.precision}, {config.loader}, batch {config.batch_size})", flush=True)
        cancel_at = self.cancel_at
        past = None if cancel_at is None else lambda: time.monotonic() > cancel_at
        outcome = run_isolated(config, should_cancel=past)
        self.counts["runs"] += 1
        if outcome.status == "ok":
            self.counts["train_steps"] += outcome.result.total_steps
            self.counts["train_images"] += outcome.result.train_images
        return outcome

    def round(self) -> None:
        """Each rung of rungs_for once, in order (the largest batch, added after, runs once and is not repeated)."""
        for index, config in enumerate(self.configs[:self.repeated]):
            if config is None:
                continue
            outcome = self.run(self.results[index].name, config)
            if outcome is None:
                continue
            if outcome.status == "ok":
                self.runs[index].append(outcome.result)
            else:
                self.results[index].errors.append(outcome.error or outcome.status)
            self.write()

    def largest_batch(self, lab_batch: int) -> None:
        """The largest batch on top of the last rung that ran, learning rate scaled with it, kept while it trains to
        within ACCURACY_TOLERANCE of the lab loop's accuracy."""
        ran = [index for index, config in enumerate(self.configs) if config is not None and self.runs[index]]
        lab = self.runs[0][0].test_accuracy if self.runs[0] else None
        kept, refusal = None, "the lab's loop did not run"
        for batch in (LARGER_BATCHES[:1] if self.quick else LARGER_BATCHES) if ran and lab is not None else ():
            last = self.configs[ran[-1]]
            config = replace(last, batch_size=batch, lr=last.lr * batch / lab_batch)
            outcome = self.run(f"{LARGEST}: {batch}?", config)
            if outcome is None:
                refusal = f"the budget ran out before batch {batch} started"
                break
            if outcome.status != "ok":
                refusal = f"batch {batch} did not run: {outcome.error or outcome.status}"
                break
            verdict = accuracy_verdict(lab, outcome.result.test_accuracy, tested_images(outcome.result))
            if verdict is not None:
                refusal = f"batch {batch}: {verdict}"
                break
            kept, refusal = (config, outcome.result), None
        if kept is None:
            self.add(LARGEST, None, refusal)
        else:
            config, result = kept
            self.add(f"{LARGEST} ({config.batch_size})", config, None)
            self.runs[len(self.configs) - 1] = [result]
        self.write()

    def write(self) -> dict:
        report = _report(self.device, self.quick, self.repeats, self.results, self.runs, self.started)
        report["counts"] = dict(self.counts)
        if self.not_started:
            report["stopped"] = f"the budget ran out: {self.not_started} run(s) not started"
        _write(self.out, report)
        return report


def _report(device: str, quick: bool, repeats: int, results: list[RungResult], runs: dict, started: float) -> dict:
    lab = runs.get(0, [])
    for index, rung in enumerate(results):
        done = runs.get(index, [])
        if not done:
            continue
        compiled = bool(done[0].config.compile_mode)
        rung.seconds = [training_seconds(result, compiled) for result in done]
        # The speedup's own clock: the images trained over the same training time (not the steady window).
        rung.images_per_s = statistics.median(r.train_images * len(r.epoch_times_s) / seconds
                                              for r, seconds in zip(done, rung.seconds))
        rung.test_accuracy = sum(r.test_accuracy for r in done) / len(done)
        rung.noisy_runs = sum(is_noisy(r.timing_quality) for r in done)
        rung.compile_s = compile_seconds(done[0]) if compiled and done[0].steady_images_per_s else None
        pairs = list(zip(lab, done))
        if pairs:
            # Each repeat's lab run against this rung's run of the same repeat, as compare --repeats pairs them.
            baselines = [_timed(a, training_seconds(a, False)) for a, _ in pairs]
            candidates = [_timed(b, training_seconds(b, compiled)) for _, b in pairs]
            interval = speedup_interval(baselines, candidates)
            rung.speedup_vs_lab = None if interval is None else {
                "median": interval.median, "low": interval.low, "high": interval.high, "pairs": interval.pairs}
    first = next((done[0] for done in runs.values() if done), None)
    return {
        "device": device, "device_name": _device_name(device, runs), "torch": torch.__version__, "quick": quick,
        # What decides the ladder's machine class (lessons/verdicts.machine_class), as every reference records it.
        "environment": None if first is None else {key: first.environment.get(key) for key in
                                                    ("device_type", "device_name", "cpu_flags")},
        "repeats": repeats, "seconds": time.time() - started,
        "references": {"the lab's fp32 run (its GPU)": LAB_SECONDS, **AIRBENCH_SECONDS},
        "rungs": [vars(rung) for rung in results],
    }


def _timed(result: RunResult, seconds: float) -> RunResult:
    return replace(result, total_time_s=seconds)


def _device_name(device: str, runs: dict) -> str | None:
    """The device's name as the first finished run recorded it (None before one has). Asking torch here would make
    this process a CUDA one, which every later rung's run would count as another process on its GPU."""
    for done in runs.values():
        if done:
            return done[0].environment.get("device_name")
    if device == "cpu":
        from trainer.environment import cpu_model

        return cpu_model()
    return None


def _write(out: Path | None, report: dict) -> None:
    if out is None:
        return
    temporary = out.with_suffix(".tmp")
    temporary.write_text(json.dumps(report, indent=2), encoding="utf-8")
    temporary.replace(out)


def table(report: dict) -> str:
    lines = [f"{'rung':44} {'images/s':>10} {'vs lab':>22} {'accuracy':>9} {'compile':>9}"]
    for rung in report["rungs"]:
        if rung["why_not"]:
            lines.append(f"{rung['name']:44} not run: {rung['why_not']}")
            continue
        speed = rung["speedup_vs_lab"]
        vs = "-" if speed is None else (f"{speed['median']:.2f}x" + (f" ({speed['low']:.2f}-{speed['high']:.2f})"
                                                                    if speed["low"] is not None else ""))
        images = "-" if rung["images_per_s"] is None else f"{rung['images_per_s']:,.0f}"
        accuracy = "-" if rung["test_accuracy"] is None else f"{rung['test_accuracy']:.1%}"
        compile_s = "" if rung["compile_s"] is None else f"{rung['compile_s']:.1f} s"
        lines.append(f"{rung['name']:44} {images:>10} {vs:>22} {accuracy:>9} {compile_s:>9}"
                     + (f"  noisy timing: {rung['noisy_runs']} run(s)" if rung["noisy_runs"] else "")
                     + (f"  errors: {'; '.join(rung['errors'])}" if rung["errors"] else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ladder", description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--quick", action="store_true", help="1 epoch of 2,048 images, one larger batch")
    parser.add_argument("--repeats", type=int, default=None, help="rounds over the rungs (default 2, 3 in full)")
    parser.add_argument("--json", type=Path, default=None, help="write the ladder here (after every run)")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds: no run starts after them (every rung once comes first, then the largest "
                             "batch, then the further repeats)")
    parser.add_argument("--timeout", type=float, default=None, help="seconds: a run still going then is cancelled")
    args = parser.parse_args(argv)
    repeats = args.repeats if args.repeats is not None else (2 if args.quick else 3)
    if repeats < 1:
        parser.error("--repeats must be at least 1")
    for name in ("budget", "timeout"):
        if getattr(args, name) is not None and not getattr(args, name) > 0:
            parser.error(f"--{name} must be a positive number of seconds")
    report = climb(args.device, args.quick, repeats, args.json, args.budget, args.timeout)
    print(table(report))
    return 0 if all(not rung["errors"] for rung in report["rungs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
