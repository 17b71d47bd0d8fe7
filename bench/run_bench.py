"""Benchmark: the plain lab loop against the trainer, same device, data and batch size, each run in a fresh process.

    python -m bench.run_bench [--device auto|cpu|cuda] [--batch-size 256] [--subset N] [--epochs E]
                              [--modes fp32,amp-bf16] [--loaders dataloader,resident] [--repeats R] [--workers 4]
                              [--budget S] [--json PATH]

Prints a table (median over repeats) and writes it as JSON with the environment and the exact command. The JSON is
written again after every run, so a bench killed part-way keeps each finished run; with --budget, no run starts
once that many seconds have passed, and the runs left out are rows marked "not run".
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from bench.plain_loop import PLAIN_MODES
from trainer.capabilities import resolve_device
from trainer.child_process import ChildProcessError, run_python_json
from trainer.cifar10 import cifar10_available
from trainer.config import RunConfig
from trainer.environment import capture_environment
from trainer.precision import set_tf32

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO_ROOT / "bench" / "results"
# The lab's loop: fp32, its DataLoader, plain malloc. On a CPU that is the lab as written; on a GPU of compute
# capability 8.0 or newer the lab as written runs its convolutions in TF32, while this fp32 is strict (the GPU kit's
# lab workload has the lab's own baseline, fp32-default).
BASELINE = ("plain", "fp32", "dataloader", False, "default")
SPEEDUP_TARGET = 3.0  # trainer amp-bf16 + resident + channels_last vs BASELINE, CPU batch 256
OVERHEAD_TARGET_PCT = 3.0  # trainer vs plain loop, same mode, loader and memory format
BENCH_LOADERS = ("dataloader", "resident")  # the two the plain loop has too (the lab harness: bench.lab_harness)


@dataclass
class BenchConfig:
    """One cell of the table: which loop, in which mode, fed by which loader."""

    implementation: str  # plain | trainer
    precision: str
    loader: str
    channels_last: bool
    malloc: str = "default"  # default | tuned (trainer.host_malloc, what the trainer does on a CPU)

    @property
    def key(self) -> tuple:
        return (self.implementation, self.precision, self.loader, self.channels_last, self.malloc)

    def label(self) -> str:
        layout = " channels_last" if self.channels_last else ""
        malloc = " tuned-malloc" if self.malloc == "tuned" else ""
        return f"{self.implementation} {self.precision} {self.loader}{layout}{malloc}"


@dataclass
class Row:
    """The median figures of one configuration over its repeats, and how it compares."""

    implementation: str
    precision: str
    loader: str
    channels_last: bool
    malloc: str
    status: str = "ok"  # ok | failed (no repeat succeeded) | not run (no repeat started: the budget ran out)
    images_per_s: float | None = None  # median of the steady-state images/s over repeats
    ms_per_step: float | None = None  # 1000 * batch_size / images_per_s: the time of one full batch
    total_time_s: float | None = None  # median, warm-up included
    speedup_vs_lab_fp32: float | None = None  # images/s over the lab's loop in strict fp32 (BASELINE)
    speedup_vs_fp32: float | None = None  # AMP rows: over fp32 in the same loop, loader and malloc (no channels_last)
    overhead_pct: float | None = None  # trainer only: extra time per step vs the plain loop, same cell
    repeats: list[dict] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def key(self) -> tuple:  # the same cell key as BenchConfig.key
        return (self.implementation, self.precision, self.loader, self.channels_last, self.malloc)


def trainer_malloc(device_type: str) -> str:
    """The host malloc the trainer runs with on this device: tuned on a CPU, untouched on CUDA."""
    return "tuned" if device_type == "cpu" else "default"


def bench_configs(modes: list[str], device_type: str, loaders: tuple[str, ...] = BENCH_LOADERS) -> list[BenchConfig]:
    """Plain/trainer pairs: every mode with each of `loaders`, plus channels_last for each AMP mode on the resident
    loader, each pair run with the host malloc the trainer uses on this device. On a CPU (where the trainer
    tunes malloc) the plain loop also runs with glibc's defaults in the lab's fp32 DataLoader cell (the
    baseline) and in each AMP mode's fastest cell, so the allocator's share of any speedup shows on its own."""
    malloc = trainer_malloc(device_type)
    cells = [(mode, loader, False) for mode in modes for loader in loaders]
    cells += [(mode, "resident", True) for mode in modes if mode != "fp32" and "resident" in loaders]
    configs = [BenchConfig(impl, mode, loader, cl, malloc)
               for mode, loader, cl in cells for impl in ("plain", "trainer")]
    if malloc == "tuned":
        untuned = [("fp32", "dataloader", False)] + [(mode, "resident", True) for mode in modes if mode != "fp32"]
        configs += [BenchConfig("plain", mode, loader, cl, "default") for mode, loader, cl in untuned
                    if loader in loaders]
    return configs


def run_order(configs: list[BenchConfig], repeat: int) -> list[BenchConfig]:
    """The configurations in the order of one repeat: every other repeat swaps each plain/trainer pair, so
    slow drift of the machine favours neither side of an overhead figure."""
    if repeat % 2 == 0:
        return list(configs)
    order, i = [], 0
    while i < len(configs):
        first, second = configs[i], configs[i + 1] if i + 1 < len(configs) else None
        if second is not None and first.key[1:] == second.key[1:]:
            order += [second, first]
            i += 2
        else:
            order.append(first)
            i += 1
    return order


def run_child(spec: dict, timeout_s: float) -> dict:
    """Run one configuration in a fresh interpreter; return its figures, or {"error": one line}."""
    try:
        return run_python_json(["-m", "bench.child"], input_text=json.dumps(spec), timeout_s=timeout_s)
    except ChildProcessError as err:
        return {"error": str(err)}


def summarise(config: BenchConfig, repeats: list[dict], batch_size: int) -> Row:
    row = Row(config.implementation, config.precision, config.loader, config.channels_last, config.malloc,
              repeats=repeats)
    good = [r for r in repeats if "error" not in r and r.get("images_per_s")]
    row.errors = [r["error"] for r in repeats if "error" in r]
    if not repeats:
        row.status = "not run"
        return row
    if not good:
        row.status = "failed"
        return row
    row.images_per_s = statistics.median(r["images_per_s"] for r in good)
    row.ms_per_step = 1000.0 * batch_size / row.images_per_s
    row.total_time_s = statistics.median(r["total_time_s"] for r in good)
    return row


def compare_rows(rows: list[Row]) -> None:
    """Fill in each row's speedups and, for trainer rows, the overhead against the plain loop in the same cell."""
    by_key = {r.key: r for r in rows}
    baseline = by_key.get(BASELINE)
    for row in rows:
        if row.images_per_s is None:
            continue
        if baseline is not None and baseline.images_per_s:
            row.speedup_vs_lab_fp32 = row.images_per_s / baseline.images_per_s
        if row.precision != "fp32":
            fp32 = by_key.get((row.implementation, "fp32", row.loader, False, row.malloc))
            if fp32 is not None and fp32.images_per_s:
                row.speedup_vs_fp32 = row.images_per_s / fp32.images_per_s
        if row.implementation == "trainer":
            plain = by_key.get(("plain", *row.key[1:]))
            if plain is not None and plain.images_per_s:
                row.overhead_pct = 100.0 * (plain.images_per_s / row.images_per_s - 1.0)


def assess_targets(rows: list[Row], device_type: str, batch_size: int) -> list[dict]:
    """The issue's two targets, each with its measured value and whether it was met (None: not measured)."""
    by_key = {r.key: r for r in rows}
    fast = by_key.get(("trainer", "amp-bf16", "resident", True, trainer_malloc(device_type)))
    speedup = fast.speedup_vs_lab_fp32 if fast is not None else None
    overheads = [r for r in rows if r.overhead_pct is not None]
    worst = max(overheads, key=lambda r: r.overhead_pct, default=None)
    trainer_rows = [r for r in rows if r.implementation == "trainer"]
    return [
        {
            "name": "amp speedup",
            "description": (
                f"trainer amp-bf16 + resident + channels_last >= {SPEEDUP_TARGET:g}x the images/s of the lab's "
                "fp32 loop as written, with its DataLoader (CPU, batch 256)"
            ),
            "threshold": SPEEDUP_TARGET,
            "value": speedup,
            "met": None if speedup is None else speedup >= SPEEDUP_TARGET,
            "conditions_match": device_type == "cpu" and batch_size == 256,
        },
        {
            "name": "trainer overhead",
            "description": (
                f"trainer overhead <= {OVERHEAD_TARGET_PCT:g}% vs the plain loop in the same mode and loader "
                "(worst configuration)"
            ),
            "threshold": OVERHEAD_TARGET_PCT,
            "value": worst.overhead_pct if worst is not None else None,
            "worst_configuration": None if worst is None else BenchConfig(
                worst.implementation, worst.precision, worst.loader, worst.channels_last, worst.malloc).label(),
            "met": (
                None if worst is None or len(overheads) < len(trainer_rows)
                else worst.overhead_pct <= OVERHEAD_TARGET_PCT
            ),
            "conditions_match": True,
        },
    ]


def format_table(rows: list[Row]) -> str:
    header = ("impl", "mode", "loader", "ch_last", "malloc", "ms/step", "images/s", "vs lab fp32", "vs fp32",
              "overhead")
    lines = [header]
    for r in rows:
        if r.status != "ok":
            figures = (r.status, "", "", "", "")
        else:
            figures = (
                f"{r.ms_per_step:.1f}",
                f"{r.images_per_s:.0f}",
                f"{r.speedup_vs_lab_fp32:.2f}x" if r.speedup_vs_lab_fp32 is not None else "-",
                f"{r.speedup_vs_fp32:.2f}x" if r.speedup_vs_fp32 is not None else "",
                f"{r.overhead_pct:+.1f}%" if r.overhead_pct is not None else "",
            )
        lines.append((r.implementation, r.precision, r.loader, "yes" if r.channels_last else "no", r.malloc,
                      *figures))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    left = 5  # text columns left-aligned, figures right-aligned
    return "\n".join(
        "  ".join(cell.ljust(w) if i < left else cell.rjust(w) for i, (cell, w) in enumerate(zip(line, widths)))
        for line in lines
    )


def format_targets(targets: list[dict]) -> str:
    lines = []
    for t in targets:
        if t["met"] is None:
            verdict = "NOT MEASURED"
        else:
            verdict = "MET" if t["met"] else "NOT MET"
        unit = "x" if t["name"] == "amp speedup" else "%"
        value = "-" if t["value"] is None else f"{t['value']:.2f}{unit}"
        where = f" ({t['worst_configuration']})" if t.get("worst_configuration") else ""
        caveat = "" if t["conditions_match"] else " [measured outside the target's conditions]"
        lines.append(f"target: {t['description']}: {value}{where} -> {verdict}{caveat}")
    return "\n".join(lines)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"), help="where both loops run")
    parser.add_argument("--batch-size", type=int, default=256, help="images per step (the lab uses 256)")
    parser.add_argument("--subset", type=int, default=None, help="first N training images (default: the whole split)")
    parser.add_argument("--epochs", type=int, default=1, help="passes over the (subset of the) training split")
    parser.add_argument("--modes", default=None,
                        help="comma-separated precisions; default fp32 plus amp-bf16 on CPU, amp-fp16 on CUDA")
    parser.add_argument("--loaders", default=",".join(BENCH_LOADERS),
                        help="comma-separated loaders (default: both); the GPU kit's bench keeps the data resident")
    parser.add_argument("--repeats", type=int, default=3, help="runs per configuration; the table shows the median")
    parser.add_argument("--workers", type=int, default=4, help="DataLoader workers (the lab uses 4)")
    parser.add_argument("--data", default="auto", choices=("auto", "cifar10", "synthetic"),
                        help="auto: CIFAR-10 if it is already in --data-root, else synthetic")
    parser.add_argument("--data-root", default="./data", help="where CIFAR-10 would be")
    parser.add_argument("--test-subset", type=int, default=512,
                        help="test images the trainer evaluates after training (outside the timed part)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds before one run is abandoned")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds for the whole bench: no run starts after them (default: no limit)")
    parser.add_argument("--json", default=None,
                        help="where to write the results (default bench/results/<device>-<date>.json)")
    args = parser.parse_args(argv)
    for name in ("batch_size", "epochs", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.subset is not None and args.subset < 1:
        parser.error("--subset must be at least 1")
    if args.workers < 0:
        parser.error("--workers must be 0 or more")
    if args.budget is not None and not args.budget > 0:
        parser.error("--budget must be a positive number of seconds")
    args.loaders = tuple(loader.strip() for loader in args.loaders.split(",") if loader.strip())
    if not args.loaders or not set(args.loaders) <= set(BENCH_LOADERS):
        parser.error(f"--loaders takes {', '.join(BENCH_LOADERS)}, got {','.join(args.loaders) or 'none'}")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is visible; use --device cpu")
    return args


def bench_environment(device_type: str) -> dict:
    """This machine's record, with the TF32 switches as every child ran them: off (fp32 is true fp32 in both loops)."""
    set_tf32(False)
    return capture_environment(torch.device(device_type))


def resolve_modes(text: str | None, device_type: str) -> list[str]:
    """The precisions to run, always with fp32 first: it is the baseline every speedup refers to."""
    if text is None:
        return ["fp32", "amp-fp16" if device_type == "cuda" else "amp-bf16"]
    modes = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in modes if m not in PLAIN_MODES]
    if unknown:
        raise SystemExit(f"unknown mode {unknown[0]!r} in --modes: choose from {', '.join(PLAIN_MODES)}")
    return ["fp32"] + [m for m in dict.fromkeys(modes) if m != "fp32"]


@dataclass
class BenchState:
    """What the bench has measured so far, and all it needs to write that as the report at any moment."""

    command: str
    settings: dict
    configs: list[BenchConfig]
    device_type: str
    started: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.timezone.utc))
    clock: float = field(default_factory=time.perf_counter)
    measured: dict[tuple, list[dict]] = field(default_factory=dict)
    environment: dict | None = None  # read once the runs are over: on CUDA it starts a context in this process
    stopped: str | None = None  # why some runs were not started (the budget ran out), if any were not
    finished: bool = False

    def rows(self) -> list[Row]:
        rows = [summarise(c, self.measured.get(c.key, []), self.settings["batch_size"]) for c in self.configs]
        compare_rows(rows)
        return rows

    def report(self, rows: list[Row]) -> dict:
        return {
            "command": self.command,
            "started_at": self.started.isoformat(timespec="seconds"),
            "duration_s": round(time.perf_counter() - self.clock, 1),
            "finished": self.finished,  # false: the bench was still running (or was killed) when this was written
            "stopped": self.stopped,
            "settings": self.settings,
            "environment": self.environment,
            "rows": [asdict(r) for r in rows],
            "targets": assess_targets(rows, self.device_type, self.settings["batch_size"]),
        }


def write_report(path: Path, report: dict) -> None:
    """Write beside, then rename: a bench killed mid-write leaves the previous complete report."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(report, indent=2))
    partial.replace(path)


def describe(figures: dict) -> str:
    """One run's outcome for the progress line."""
    if "error" in figures:
        return figures["error"]
    if figures["images_per_s"] is None:
        return "no steady-state figure (every step was a warm-up step)"
    return f"{figures['images_per_s']:.0f} images/s"


def run_all(state: BenchState, common: dict, args: argparse.Namespace, path: Path) -> None:
    """Every configuration, repeat after repeat, the report rewritten after each run; none starts past --budget."""
    deadline = None if args.budget is None else time.monotonic() + args.budget
    total = len(state.configs) * args.repeats
    done = 0
    for repeat in range(args.repeats):
        for config in run_order(state.configs, repeat):
            if deadline is not None and time.monotonic() >= deadline:
                state.stopped = (f"the budget of {args.budget:g} s ran out after {done} of {total} runs; "
                                 "the others were not started")
                print(f"bench: {state.stopped}", flush=True)
                return
            done += 1
            figures = run_child({**common, **asdict(config)}, args.timeout)
            state.measured.setdefault(config.key, []).append(figures)
            print(f"[{done}/{total}] repeat {repeat + 1}: {config.label()}: {describe(figures)}", flush=True)
            write_report(path, state.report(state.rows()))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    device_type = resolve_device(args.device).type
    modes = resolve_modes(args.modes, device_type)
    data = args.data if args.data != "auto" else ("cifar10" if cifar10_available(args.data_root) else "synthetic")
    warmup_steps = RunConfig().warmup_steps  # the trainer's own warm-up, so both sides skip the same steps
    if args.subset is not None:
        steps = -(-args.subset // args.batch_size) * args.epochs
        if steps <= warmup_steps:
            raise SystemExit(
                f"--subset {args.subset} at batch size {args.batch_size} for {args.epochs} epoch(s) gives {steps} "
                f"steps, all within the trainer's {warmup_steps} warm-up steps: raise --subset or --epochs"
            )
        if args.subset % args.batch_size:
            print(f"note: --subset {args.subset} is not a multiple of the batch size; ms/step is per full batch")

    configs = bench_configs(modes, device_type, args.loaders)
    common = {
        "device": device_type, "batch_size": args.batch_size, "epochs": args.epochs, "data": data,
        "data_root": args.data_root, "subset": args.subset, "test_subset": args.test_subset,
        "num_workers": args.workers, "seed": 0, "warmup_steps": warmup_steps,
    }
    print(f"bench: {len(configs)} configurations x {args.repeats} repeats on {device_type}, {data} data, "
          f"batch {args.batch_size}, {warmup_steps} warm-up steps excluded, each run in a fresh process", flush=True)
    state = BenchState(command=shlex.join(["python", "-m", "bench.run_bench", *argv]),
                       settings={**common, "modes": modes, "loaders": list(args.loaders), "repeats": args.repeats,
                                 "budget_s": args.budget},
                       configs=configs, device_type=device_type)
    path = Path(args.json) if args.json else RESULTS_DIR / f"{device_type}-{state.started:%Y-%m-%d}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    run_all(state, common, args, path)

    rows = state.rows()
    state.environment, state.finished = bench_environment(device_type), True
    report = state.report(rows)
    print()
    print(format_table(rows))
    print()
    print(format_targets(report["targets"]))
    write_report(path, report)
    print(f"\nwrote {path}")
    return 0 if all(r.status == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
