"""Command line: `python -m trainer run ...` trains one run; `python -m trainer compare ...` runs fp32 and an
AMP mode, each in a fresh process, and prints the lab's results table."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from trainer.comparison_table import MEMORY_SHORT_NAMES, comparison_table, format_bytes
from trainer.config import (
    DATA_SOURCES,
    DEFAULT_GROWTH_INTERVAL,
    DEFAULT_LOSS_SCALE,
    DEVICES,
    LOADERS,
    PRECISIONS,
    TRAINING_PRECISIONS,
    WIDTHS,
    RunConfig,
)
from trainer.errors import CancelledError, ConfigError, TrainerError, UnsupportedModeError
from trainer.progress import Progress
from trainer.results import MEMORY_LABELS, RunResult, compare, median_pair, speedup_interval

PROG = "python -m trainer"
CANDIDATES = tuple(mode for mode in PRECISIONS if mode != "fp32")  # compare's --amp: any mode but the baseline
EXIT_RUN_FAILED, EXIT_BAD_ARGUMENTS, EXIT_CANCELLED = 1, 2, 130
MAX_REPEATS = 10

EPILOG = """exit status:
  0    the run finished
  1    the run failed: dataset missing or damaged, out of memory, or the training process crashed
  2    bad arguments, or a precision mode this device cannot run (e.g. tf32 on a CPU)
  130  cancelled (Ctrl-C)

Throughput is 'steady': the first --warmup-steps steps are left out. Total time runs from the first batch
to the end of the last, warm-up included, as the lab measures it."""


class _OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (no usage dump) with exit status 2."""

    def error(self, message: str):
        self.exit(EXIT_BAD_ARGUMENTS, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(prog=PROG, description=__doc__, epilog=EPILOG,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, metavar="{run,compare}")
    run = commands.add_parser("run", help="train one run and print the lab's log and a summary",
                              epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("--precision", default="fp32", choices=TRAINING_PRECISIONS,
                     help="number format mode (default fp32): fp32 is strict fp32 (TF32 off); fp32-default leaves "
                          "TF32 as PyTorch sets it, as the lab's script runs (convolutions in TF32 on Ampere or "
                          "newer); tf32 turns it on for matmuls too; amp-fp16 and amp-bf16 are AMP; "
                          "amp-fp16-unscaled (no GradScaler) and fp16-true (the model in fp16, no fp32 master "
                          "weights) are deliberate failures")
    _add_run_options(run)
    run.set_defaults(handler=_run_command)
    comp = commands.add_parser("compare", help="run fp32 and an AMP mode in fresh processes and compare them",
                               epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    comp.add_argument("--amp", default=None, choices=CANDIDATES,
                      help="the mode to compare against fp32 (default: what this hardware is best at)")
    comp.add_argument("--repeats", type=int, default=1,
                      help="pairs of runs, fp32 and the AMP mode alternately (A B A B ...), each in a fresh process; "
                           "2 or more give the speedup's range (default 1: the range is unknown)")
    _add_run_options(comp)
    comp.set_defaults(handler=_compare_command)
    return parser


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    d = RunConfig()
    parser.add_argument("--epochs", type=int, default=d.epochs, help=f"passes over the training data (default {d.epochs})")
    parser.add_argument("--batch-size", type=int, default=d.batch_size, help=f"images per step (default {d.batch_size})")
    parser.add_argument("--data", default=d.data, choices=DATA_SOURCES,
                        help="cifar10 (downloaded into --data-root) or synthetic CIFAR-shaped images (no download)")
    parser.add_argument("--data-root", default=d.data_root, help=f"where CIFAR-10 lives (default {d.data_root})")
    parser.add_argument("--loader", default=d.loader, choices=LOADERS,
                        help="dataloader: the lab's DataLoader pipeline; resident: the whole split on the device")
    parser.add_argument("--subset", type=int, default=None, help="train on the first N images only")
    parser.add_argument("--test-subset", type=int, default=None, help="test on the first N images only")
    parser.add_argument("--width", type=int, default=d.width, choices=WIDTHS, help="model width multiplier (1 = the lab's)")
    parser.add_argument("--channels-last", action="store_true", help="NHWC memory format for model and inputs")
    parser.add_argument("--cudnn-benchmark", action="store_true", help="let cuDNN pick the fastest kernels (CUDA)")
    parser.add_argument("--device", default=d.device, choices=DEVICES, help="auto picks the GPU if there is one")
    parser.add_argument("--seed", type=int, default=d.seed, help="same seed = same initial weights and data order")
    parser.add_argument("--workers", type=int, default=d.num_workers, help=f"DataLoader workers (default {d.num_workers})")
    parser.add_argument("--log-every", type=int, default=d.log_every, help=f"steps between loss lines (default {d.log_every})")
    parser.add_argument("--warmup-steps", type=int, default=d.warmup_steps,
                        help=f"first steps left out of the steady throughput (default {d.warmup_steps})")
    parser.add_argument("--min-steady-s", type=float, default=d.min_steady_s,
                        help="add whole epochs until this many seconds after warm-up are timed (default: none)")
    parser.add_argument("--breakdown", action="store_true",
                        help="also time data waiting vs compute (one extra sync per step on CUDA)")
    parser.add_argument("--default-malloc", action="store_true",
                        help="CPU: keep glibc's malloc defaults (fresh pages for every large tensor, as the lab runs)")
    parser.add_argument("--loss-scale-init", type=float, default=DEFAULT_LOSS_SCALE, metavar="SCALE",
                        help=f"amp-fp16: the GradScaler's starting loss scale, 1 to 2^32 "
                             f"(default {DEFAULT_LOSS_SCALE:g}, GradScaler's own)")
    parser.add_argument("--growth-interval", type=int, default=DEFAULT_GROWTH_INTERVAL, metavar="STEPS",
                        help=f"amp-fp16: good steps in a row before the GradScaler doubles the scale "
                             f"(default {DEFAULT_GROWTH_INTERVAL}, GradScaler's own)")
    parser.add_argument("--loss-shrink-log2", type=int, default=0, metavar="N",
                        help="multiply the loss by 2^-N and the learning rate by 2^N: the same training in fp32, "
                             "with gradients 2^N times smaller (default 0)")
    parser.add_argument("--track-updates", action="store_true",
                        help="count zero gradients and updates rounded away, every step (adds a sync per step)")
    parser.add_argument("--measure-peaks", action="store_true",
                        help="after training, measure this device's best matmul, copy and launch rates (a few "
                             "seconds; kept in --peaks-cache when given) for the step budget")
    parser.add_argument("--peaks-cache", metavar="PATH", default=None,
                        help="a JSON file of measured peaks per device: read if this device is there, else added")
    parser.add_argument("--compile-mode", default="", choices=("", "default", "reduce-overhead"),
                        help="torch.compile the model (reduce-overhead adds CUDA graphs: GPU only); the first step "
                             "then includes compiling, left out of the steady figures")
    parser.add_argument("--profile-steps", type=int, default=0, metavar="N",
                        help="after training, profile N more steps with torch.profiler: the step's time by kind of "
                             "work (default 0: no profile)")
    parser.add_argument("--json", metavar="PATH", default=None, help="write the result(s) as JSON to PATH")


# The run options named as RunConfig's fields; the other three are spelled differently on the command line.
_SAME_NAMES = ("epochs", "batch_size", "data", "data_root", "loader", "subset", "test_subset", "width", "channels_last",
               "cudnn_benchmark", "device", "seed", "log_every", "warmup_steps", "min_steady_s", "breakdown",
               "loss_scale_init", "loss_shrink_log2", "track_updates", "measure_peaks", "peaks_cache", "profile_steps",
               "compile_mode")


def _config_from(args: argparse.Namespace, precision: str) -> RunConfig:
    return RunConfig.from_dict({
        **{name: getattr(args, name) for name in _SAME_NAMES}, "precision": precision, "num_workers": args.workers,
        "tune_host_malloc": not args.default_malloc, "loss_scale_growth_interval": args.growth_interval,
    })


def _check_runnable(config: RunConfig):
    """Fail fast with ConfigError / UnsupportedModeError before any data is loaded; return the device."""
    config.validate()  # before the device is asked, so that a typo is answered at once
    from trainer.capabilities import resolve_device, support_on

    device = resolve_device(config.device)
    refusal = support_on(device).refused.get(config.precision)
    if refusal:
        raise UnsupportedModeError(refusal)
    return device


def _check_json_path(path: str | None) -> None:
    if path is not None and not Path(path).resolve().parent.is_dir():
        raise ConfigError(f"cannot write --json {path}: its folder does not exist")


def _run_command(args: argparse.Namespace) -> int:
    config = _config_from(args, args.precision)
    device = _check_runnable(config)
    _check_json_path(args.json)
    _warn_if_gpu_unseen(config, device)
    _warn_if_scaler_unused(config, [config.precision])
    from trainer.run import run_training

    print(_describe(config, device.type), flush=True)
    result = run_training(config, on_progress=_LogPrinter())
    print(summary(result))
    if args.json:
        Path(args.json).write_text(result.to_json() + "\n", encoding="utf-8")
        print(f"result written to {args.json}")
    return 0


def _compare_command(args: argparse.Namespace) -> int:
    baseline_config = _config_from(args, "fp32")
    device = _check_runnable(baseline_config)
    _warn_if_gpu_unseen(baseline_config, device)
    from trainer.environment import hardware_report
    from trainer.isolated import run_isolated

    amp = args.amp or _default_candidate(hardware_report(device).recommended_amp)
    candidate_config = _config_from(args, amp)
    _check_runnable(candidate_config)
    _warn_if_scaler_unused(candidate_config, [baseline_config.precision, amp])
    _check_json_path(args.json)
    if not 1 <= args.repeats <= MAX_REPEATS:
        raise ConfigError(f"--repeats must be between 1 and {MAX_REPEATS}, got {args.repeats}")
    baselines, candidates = [], []
    # Alternating, so that a slow drift or a burst of load on the machine touches both modes alike.
    for repeat in range(1, args.repeats + 1):
        for role, config, done in (("baseline", baseline_config, baselines), ("candidate", candidate_config, candidates)):
            numbered = f", pair {repeat} of {args.repeats}" if args.repeats > 1 else ""
            print(f"== {config.precision} ({role}{numbered}), in a fresh process: {_describe(config, device.type)}",
                  flush=True)
            outcome = run_isolated(config, on_progress=_LogPrinter(prefix=f"{config.precision:>8} "))
            if outcome.status != "ok":
                return _outcome_failure(config, outcome)
            done.append(outcome.result)
    interval = speedup_interval(baselines, candidates)
    baseline, candidate = median_pair(baselines, candidates)
    print()
    if args.repeats > 1:
        print(f"The table shows the pair with the median speedup; speedup {interval.describe()}.")
    print(comparison_table(baseline, candidate, interval).as_text())
    if args.json:
        runs = [run for pair in zip(baselines, candidates) for run in pair]  # in the order they ran
        payload = {
            "baseline": baseline.to_dict(),
            "candidate": candidate.to_dict(),
            "comparison": compare(baseline, candidate).to_dict(),
            "speedup": interval.to_dict(),
            "order": [run.precision for run in runs],
            "runs": [run.to_dict() for run in runs],
        }
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        print(f"results written to {args.json}")
    return 0


def _default_candidate(recommended: str) -> str:
    return recommended if recommended in CANDIDATES else "amp-bf16"


def _outcome_failure(config: RunConfig, outcome) -> int:
    kind = outcome.error_kind or ""
    if kind == "CancelledError":
        _error_line(f"{config.precision} run cancelled")
        return EXIT_CANCELLED
    _error_line(f"the {config.precision} run failed: {outcome.error}")
    return EXIT_BAD_ARGUMENTS if kind in ("ConfigError", "UnsupportedModeError") else EXIT_RUN_FAILED


class _LogPrinter:
    """Prints the lab's loss lines, `[Epoch: 1, Batch:   100] loss: 2.301`, and the evaluation phase."""

    def __init__(self, prefix: str = ""):
        self.prefix = prefix
        self._evaluating = False

    def __call__(self, progress: Progress) -> None:
        if progress.phase == "training" and progress.loss is not None:
            print(f"{self.prefix}[Epoch: {progress.epoch}, Batch: {progress.step:5d}] loss: {progress.loss:.3f}",
                  flush=True)
        elif progress.phase == "evaluating" and not self._evaluating:
            self._evaluating = True
            print(f"{self.prefix}training done; evaluating top-1 accuracy on the test split...", flush=True)


def _describe(config: RunConfig, device_type: str) -> str:
    subset = f", first {config.subset} images" if config.subset else ""
    extras = "".join([
        ", channels_last" if config.channels_last else "",
        ", breakdown" if config.breakdown else "",
        (f", loss scale from {config.loss_scale_init:g}, doubled after {config.loss_scale_growth_interval} good steps"
         if config.precision == "amp-fp16" and not config.default_scaler else ""),
        # On a CPU the allocator moves step times by a third or more (trainer/host_malloc.py): say which one ran.
        (", host malloc " + ("tuned" if config.tune_host_malloc else "default")) if device_type == "cpu" else "",
    ])
    return (f"{config.precision} on {device_type}: {config.data}{subset}, {config.epochs} epoch(s), "
            f"batch {config.batch_size}, {config.loader} loader, width {config.width}{extras}")


def summary(result: RunResult) -> str:
    """The closing summary of one run, as plain text lines."""
    lines = [
        f"Finished {result.precision} training in {result.total_time_s:.2f} s "
        f"({len(result.epoch_times_s)} epochs, {result.total_steps} steps, warm-up included)",
        "  steady throughput: " + (
            f"{result.steady_images_per_s:,.0f} images/s (excluding the first {result.warmup_steps} warm-up steps)"
            if result.steady_images_per_s else "not measured (every step was a warm-up step)"),
        "  epoch times: " + ", ".join(f"{t:.2f} s" for t in result.epoch_times_s),
        "  epoch losses: " + ", ".join(f"{x:.3f}" for x in result.epoch_losses),
    ]
    if result.peak_memory:
        lines.append("  peak memory:")
    for key, value in result.peak_memory.items():
        lines.append(f"    {MEMORY_SHORT_NAMES.get(key, key)}: {format_bytes(value)} ({MEMORY_LABELS.get(key, key)})")
    if result.test_accuracy is not None:
        lines.append(f"  test accuracy: {100 * result.test_accuracy:.1f}% (top-1, evaluated in {result.precision})")
    if result.loss_scale_history:
        final = result.loss_scale_history[-1]["scale"]
        lines.append(f"  skipped steps: {result.skipped_steps} of {result.total_steps} (final loss scale {final:g})")
    if result.update_counts:
        stalled = result.stalled_update_share
        lines.append(f"  zero gradients: {result.zero_grad_share:.2%} of every gradient element; updates rounded "
                     "away: " + ("none moved" if stalled is None else f"{stalled:.3%} of the weights with a "
                                                                           "nonzero gradient"))
    if result.profile:
        parts = ", ".join(f"{name} {seconds * 1e3:.1f} ms" for name, seconds in result.profile["categories"].items()
                          if seconds > 0)
        lines.append(f"  profile of {result.profile['steps']} steps, {result.profile['step_s'] * 1e3:.1f} ms a step: "
                     f"{parts}")
    if result.device_peaks:
        rates = ", ".join(f"{dtype} {tflops:.3g}" for dtype, tflops in result.device_peaks["matmul_tflops"].items())
        lines.append(f"  device peaks: matmul TFLOP/s {rates}; copy {result.device_peaks['copy_gb_per_s']:.3g} GB/s; "
                     f"one tiny op {result.device_peaks['launch_us']:.3g} µs")
    if result.data_wait_s is not None:
        lines.append(f"  breakdown: waiting for data {result.data_wait_s:.2f} s, computing {result.compute_s:.2f} s")
    quality = result.timing_quality
    if quality:
        spread = "not measured" if quality.get("cv") is None else f"{quality['cv']:.1%} spread between intervals"
        lines.append(f"  timing: {quality['verdict']} ({spread})")
        lines.extend(f"    noisy: {reason}" for reason in quality.get("reasons", []))
    lines.extend(f"  warning: {w}" for w in result.warnings)
    return "\n".join(lines)


def _warn_if_gpu_unseen(config: RunConfig, device) -> None:
    """`auto` fell back to the CPU: say so in one line where the driver sees a GPU this torch cannot use."""
    from trainer.capabilities import unseen_gpu_note

    note = unseen_gpu_note() if config.device == "auto" and device.type == "cpu" else None
    if note:
        print(f"{PROG}: warning: {note}", file=sys.stderr, flush=True)


def _warn_if_scaler_unused(config: RunConfig, precisions: list[str]) -> None:
    """Loss-scale settings given for runs without a GradScaler: say so in one line rather than ignore them quietly."""
    if not config.default_scaler and "amp-fp16" not in precisions:
        print(f"{PROG}: warning: --loss-scale-init and --growth-interval apply to amp-fp16 only "
              f"(the only mode with a loss scaler); {' and '.join(precisions)} ignore them", file=sys.stderr,
              flush=True)


def _error_line(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except ConfigError as exc:  # includes UnsupportedModeError
        _error_line(str(exc))
        return EXIT_BAD_ARGUMENTS
    except (CancelledError, KeyboardInterrupt):
        _error_line("cancelled before the run finished")
        return EXIT_CANCELLED
    except TrainerError as exc:  # DatasetError, OutOfMemoryError
        _error_line(str(exc))
        return EXIT_RUN_FAILED
