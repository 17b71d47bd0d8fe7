"""The GPU acceptance kit: one command that runs the class-server path on a GPU and writes what it found.

    python -m bench.gpu_check --out DIR [--quick] [--device cuda|cpu] [--budget SECONDS] [--only N,...]

Steps, in order, each bounded in time and each written to DIR/gpu-check.json and DIR/gpu-check.md as soon as it
ends (a failed step records its error and the kit goes on): 1 environment, 2 the CUDA-only tests, 3 the lab
workload, 4 the largest batch and the memory picture, 5 the app, 6 the benchmark, 7 the ladder to the fastest lab
run (only when --only names it: a call of its own), 8 the summary. See docs/gpu-check.md for what each figure means
and how long the full plan takes.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib.util
import json
import math
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from bench.cuda_only import gpu_test_files, read_log
from bench.gpu_env import nvml_facts
from bench.kit_reference import FOLDER as REFERENCE_FOLDER
from bench.kit_reference import KitReference, write_references
from bench.run_bench import BENCH_LOADERS, Row, bench_configs, format_table, format_targets, resolve_modes
from server.batch_probe import PROBE_CEILING, PROBE_START, probe_max_batch
from server.offer import QUICK_DEMO
from trainer.child_process import REPO_ROOT, ChildProcessError
from trainer.config import AMP_PRECISIONS, PRECISIONS, RunConfig
from trainer.errors import CancelledError, TrainerError, one_line
from trainer.isolated import run_isolated
from trainer.results import MEMORY_LABELS, RunResult, compare
from trainer.synthetic import prepare_synthetic

JSON_NAME = "gpu-check.json"
MD_NAME = "gpu-check.md"
STEPS = (
    ("environment", "Environment"),
    ("cuda_tests", "CUDA-only tests"),
    ("lab_workload", "Lab workload"),
    ("memory", "Largest batch and memory"),
    # The app before the benchmark: it is the class server's only end-to-end check, and the benchmark, which stops
    # starting runs at its budget, is the step that gives way when the time runs short.
    ("app", "The app: a comparison through the job manager, Results page in AppTest"),
    ("benchmark", "Benchmark: plain loop vs trainer"),
    ("ladder", "The ladder to the fastest lab run"),
    ("summary", "Summary"),
)
# Steps that run only when --only names them. The ladder fills a window's second call (docs/gpu-check.md: after a
# first try that needs no retry), so the first try's plan is the six steps before it.
OPT_IN_STEPS = ("ladder",)
NO_GPU = "no GPU"
NO_CUDA = "torch sees no CUDA GPU (torch.cuda.is_available() is False)"
CPU_STEPS = ("environment",)  # the steps that run without a GPU under --device cuda: step 1 says why there is none
# The lent GPU's window (docs/gpu-check.md, "The window"): 15 minutes of device time in all, each machine's start
# (1-2 minutes) and the 30 s it stays warm after a call included, at most 10 minutes a command. Two calls, the
# second sent as the first ends; if the machine has gone back by then, a second start: 120 + 15 + 330 + 30 + 120 +
# 15 + 210 + 30 = 870 s (starts, wheels, calls, warm waits), within the 900.
FIRST_TRY_S = 330.0
SECOND_CALL_S = 210.0  # the window's second call: the ladder, or a retry (--only)
BENCH_TAIL_S = 20.0  # after the bench's own budget: its last run, its environment record and its exit
PAGE_RESERVE_S = 25.0  # step 5: kept for the Results page after the job (it took 3 s on 2 CPU cores)
MIN_STEP_S = 10.0  # a step given less than this is skipped as out of time rather than started
# The time plan (docs/gpu-check.md, "The time plan"): each step's work counted as fresh processes, each costing what
# step 1's own took (this until it has run), plus the rest of its seconds (Plan.work_s). The plan fills at most
# PLAN_FILL of the time left; where it would fill more, the runs of OPTIONAL_UNITS are left out, least valuable
# first, before any of them starts.
PLANNED_START_S = 5.0  # a fresh process: Python, torch, a run's imports, a CUDA context
PLAN_FILL = 0.85
SWEEP_UNIT = "the sweep's second point"
SEARCH_UNIT = "the largest-batch search"
# Least valuable first: strict fp32 with the lab's DataLoader (the lab's own comparison is fp32-default against
# amp-fp16), the sweep's second point (a reference for one page), the largest-batch search (on a large GPU it can
# only say "at least 16,384", which the breakdown's straight line goes past), tf32 with the data resident.
OPTIONAL_UNITS = ("fp32 dataloader", SWEEP_UNIT, SEARCH_UNIT, "tf32 resident")
EXIT_OK, EXIT_STEP_FAILED, EXIT_BAD_ARGUMENTS = 0, 1, 2
# Step 3's modes: the lab's own baseline first (fp32 as PyTorch defaults, as its script runs), then the trainer's
# others.
LAB_BASELINE = "fp32-default"
LAB_MODES = (LAB_BASELINE, *(mode for mode in PRECISIONS if mode != LAB_BASELINE))
# Step 3's runs go most valuable first, so that a step that runs long loses the least: the lab's own comparison as its
# script runs (its DataLoader, fp32 as PyTorch defaults against fp16 with the GradScaler), then the device's own
# figures with the data resident (strict fp32 against each AMP mode first), the sweep's second point, then the
# DataLoader's other modes.
LAB_COMPARISON = (LAB_BASELINE, "amp-fp16")
RESIDENT_ORDER = ("fp32", "amp-fp16", "amp-bf16", LAB_BASELINE, "tf32")


@dataclass(frozen=True)
class Plan:
    """How much each step does: `full` is the lab's setting sized for an H100 or an H200, `quick` checks the
    wiring."""

    name: str  # full | quick
    budget_s: float  # the whole kit; a step past it is recorded as out of time
    step_caps_s: dict[str, float]  # most seconds each step may take
    lab_epochs: int
    lab_subset: int | None  # None: all 50,000 training images
    lab_test_subset: int | None  # None: all 10,000 test images
    lab_batch_size: int
    lab_warmup_steps: int
    lab_dataloader_modes: tuple[str, ...] | None  # the modes also run with the lab's DataLoader; None: every mode
    lab_min_steady_s: float  # CUDA resident runs: whole epochs added until this many seconds are timed after warm-up
    sweep_batch_size: int  # step 3 also runs strict fp32 and the demo's AMP mode here: a second point of a sweep
    workers: int  # DataLoader workers in steps 3 and 5
    probe_precisions: tuple[str, ...]  # step 4; tf32 keeps fp32 tensors, so its footprint is fp32's
    breakdown_precisions: tuple[str, ...]  # step 4's memory page breakdown, one step of each
    breakdown_batches: tuple[int, int]  # ... at these two batch sizes (their difference gives the bytes per image)
    bench_args: tuple[str, ...]  # step 6, passed to python -m bench.run_bench: its sizes
    bench_modes: tuple[str, ...] | None  # step 6's modes; None: the bench's own (fp32 and this device's AMP mode)
    bench_loaders: tuple[str, ...]  # step 6's loaders
    app_amp: str  # step 5: the AMP mode compared with fp32 where step 1 did not name this device's best
    app_subset: int
    app_epochs: int
    app_batch_size: int
    ladder_args: tuple[str, ...]  # step 7, passed to python -m bench.ladder
    ladder_tail_s: float  # step 7's time after the ladder's own budget: its last run (a compile included), its exit
    # The seconds of one unit of work beyond its fresh processes, as the time plan counts them (Kit.units).
    work_s: dict[str, float] = field(default_factory=dict)
    # Step 2: pytest-timeout's limit on one test, where it is installed. The largest CUDA-only test (50,000 images
    # generated, then an epoch trained) is estimated at about 6 s on a GPU; a fresh process inside one, about 6 s.
    test_timeout_s: float = 30.0
    # Step 3's runs at the lab's batch that are also profiled after their timed training (trainer/profile.py: the
    # step by kind of work; on CUDA the kernels, Tensor Core ones marked) and measure the device's peaks once.
    profile_steps: int = 20


def make_plan(quick: bool, device_type: str) -> Plan:
    """The full plan (lab sizes, about 4.5 minutes of an H100 or an H200 by docs/gpu-check.md's time plan, and no
    more than FIRST_TRY_S) or the quick one."""
    on_gpu = device_type == "cuda"
    # fp16 is the mode with a real GradScaler on Tensor Cores; on a CPU it is tens of times slower, so bf16 there.
    amp = "amp-fp16" if on_gpu else "amp-bf16"
    if not quick:
        # Each cap is the step's estimate at 8 s a fresh process plus a margin (docs/gpu-check.md), and sets what
        # a retry takes.
        return Plan(
            name="full", budget_s=FIRST_TRY_S,
            step_caps_s={"environment": 30, "cuda_tests": 70, "lab_workload": 200, "memory": 45, "app": 60,
                         "benchmark": 80, "ladder": SECOND_CALL_S},
            # Estimates (docs/gpu-check.md, "The time plan"): the lab's DataLoader at 17,000 images/s (4 workers
            # through PIL at 4,300 each, measured on a CPU core here); an eager step of the lab's model on the GPU
            # in 2 ms (about 100 kernel launches); 50,000 synthetic images generated in 3.8 s.
            work_s={
                "environment": 1.0,  # NVML and the records, after the imports and the CUDA context
                # Collection 3 s, the first CUDA use 2 s, the 50,000-image run 6 s, the out-of-memory test 2 s, the
                # partial-batch test 3 s, autocast's op lists 2 s, the other 9 tests 6 s.
                "cuda_tests": 24.0,
                "lab_once": 8.0,  # the split generated once (5 s), the device's peaks measured once (3 s)
                "lab_dataloader": 17.0,  # 260,000 images through the DataLoader (15.3 s), 20 profiled steps
                "lab_resident": 5.5,  # the 3 s steady window, a second of warm-up and set-up, 20 profiled steps
                "lab_sweep": 4.0,  # the 3 s steady window and its set-up, at batch 1,024
                "breakdown": 2.0,  # 8 steps at batch 256 and 4,096
                "search": 2.0,  # per precision: one try of two steps at the search's ceiling, where it fits
                "app": 12.0,  # Streamlit's import 3 s, the two runs' 5,000 images 2 s each, the page 3 s, the jobs 2 s
                "bench_run": 1.5,  # 200 steps, step 3's split read, 512 test images
                # One round: the lab rung's 260,000 images 15 s, 3 eager rungs 3 s each, 2 compiled rungs 35 s
                # each (a compile on 16 cores: assumed), the first larger batch (compiled) 25 s.
                "ladder": 120.0,
            },
            lab_epochs=5, lab_subset=None, lab_test_subset=None, lab_batch_size=256, lab_warmup_steps=5,
            # The lab's own comparison and strict fp32 with the lab's DataLoader: its other modes' rows cost a
            # fresh process and 260,000 images each, and the resident rows already give those modes' figures.
            lab_dataloader_modes=(*LAB_COMPARISON, "fp32"),
            # An H100 or an H200 trains the lab's 5 epochs in about a second: a few seconds of steady window
            # measure the arithmetic rather than one-off setup (cuDNN's plans, lazy kernel loading, clocks ramping).
            lab_min_steady_s=3.0,
            sweep_batch_size=1024,  # the sweep page's largest default (server.offer.sweep_defaults: 64, 256, 1024)
            workers=4,
            # Each try of the search is a fresh process; amp-bf16 keeps the same 16-bit activations as amp-fp16.
            probe_precisions=("fp32", "amp-fp16"),
            # 4096: the memory page's largest batch (lessons.memory_breakdown.MAX_BATCH).
            breakdown_precisions=("fp32", "amp-fp16"), breakdown_batches=(256, 4096),
            # A GPU run is mostly process start, so one repeat of 200 steps; raise --repeats when time allows. The
            # trainer's overhead shows most where a step is shortest, with the data resident: the DataLoader's
            # cells (4 more runs, each with 51,200 images through it) are left to step 3's lab runs.
            bench_args=("--subset", "25600", "--epochs", "2", "--repeats", "1", "--workers", "4"),
            bench_modes=None, bench_loaders=("resident",),
            # The Run page's quick demo, as server.offer.QUICK_DEMO sizes it (resident, synthetic data).
            app_amp=amp, app_subset=QUICK_DEMO["subset"], app_epochs=QUICK_DEMO["epochs"],
            app_batch_size=QUICK_DEMO["batch_size"],
            # The lab's 5 epochs per rung; a second repeat for the spreads where the budget leaves room.
            ladder_args=("--repeats", "2"), ladder_tail_s=60.0,
        )
    # The quick plan runs inside `make test` on 2 cores, where a fresh process costs more than its training: a few
    # small batches per run (fp16, and bf16 without AMX, are tens of times slower than fp32 on a CPU), the DataLoader
    # path once (fp32), and only fp32 in the CPU bench.
    return Plan(
        name="quick", budget_s=290.0,
        # Measured on this project's 2-core machine, other work beside it (docs/gpu-check.md).
        work_s={"environment": 0.5, "cuda_tests": 0.0, "lab_once": 2.0, "lab_dataloader": 6.0, "lab_resident": 5.0,
                "lab_sweep": 4.0, "breakdown": 6.0, "search": 2.0, "app": 11.0, "bench_run": 4.5, "ladder": 30.0},
        # The ladder's cap holds its rungs and its compiled larger batch on 2 busy cores, each process 3 s slower
        # to start (the rehearsal's option): measured so, the rungs took 128 s (torch.compile's 54 s of it, at a
        # load average of 6 to 10) and the larger batch, a compile again, over 77 s.
        step_caps_s={"environment": 45, "cuda_tests": 120, "lab_workload": 120, "memory": 60, "benchmark": 130,
                     "app": 90, "ladder": 270},
        lab_epochs=1, lab_subset=96, lab_test_subset=32, lab_batch_size=32, lab_warmup_steps=1,
        lab_dataloader_modes=("fp32",), lab_min_steady_s=0.5, sweep_batch_size=16, workers=2,
        probe_precisions=("amp-fp16",), breakdown_precisions=("fp32", amp), breakdown_batches=(8, 32),
        bench_args=("--batch-size", "64", "--subset", "384", "--epochs", "1", "--repeats", "1", "--workers", "2",
                    "--test-subset", "32"),
        bench_modes=None if on_gpu else ("fp32",), bench_loaders=BENCH_LOADERS,
        app_amp=amp, app_subset=64, app_epochs=1, app_batch_size=32, profile_steps=2,
        ladder_args=("--quick", "--repeats", "1"), ladder_tail_s=90.0,  # a compiled run on 2 busy cores
    )


def lab_runs(plan: Plan, sweep_amp: str) -> list[tuple[str, str, int]]:
    """Step 3's runs as (loader, precision, batch size), most valuable first (LAB_COMPARISON, RESIDENT_ORDER)."""
    batch = plan.lab_batch_size
    dataloader = [mode for mode in LAB_MODES if plan.lab_dataloader_modes is None or mode in plan.lab_dataloader_modes]
    return ([("dataloader", mode, batch) for mode in LAB_COMPARISON if mode in dataloader]
            + [("resident", mode, batch) for mode in RESIDENT_ORDER]
            + [("resident", mode, plan.sweep_batch_size) for mode in ("fp32", sweep_amp)]
            + [("dataloader", mode, batch) for mode in dataloader if mode not in LAB_COMPARISON])


def lab_unit(plan: Plan, loader: str, precision: str, batch_size: int) -> str:
    """The unit of the time plan a run of step 3 belongs to: the sweep's second point (both its runs), or the run."""
    return SWEEP_UNIT if batch_size != plan.lab_batch_size else f"{precision} {loader}"


@dataclass(frozen=True)
class Unit:
    """A piece of one step's work as the time plan counts it: its fresh processes, and its other seconds."""

    step: str
    name: str
    processes: int
    work_s: float

    def seconds(self, start_s: float) -> float:
        return self.processes * start_s + self.work_s


def left_out_first(units: list[Unit], start_s: float, time_s: float) -> list[str]:
    """The optional units to leave out, least valuable first, until the rest fills at most PLAN_FILL of `time_s`."""
    total = sum(unit.seconds(start_s) for unit in units)
    left_out = []
    for name in OPTIONAL_UNITS:
        if total <= PLAN_FILL * time_s:
            break
        matching = [unit for unit in units if unit.name == name]
        if matching:
            left_out.append(name)
            total -= sum(unit.seconds(start_s) for unit in matching)
    return left_out


def lab_time_s(result: RunResult, epochs: int) -> float:
    """The time of a run's first `epochs` epochs, warm-up included: the lab's work, without the epochs a run added
    only to lengthen its steady window."""
    return sum(result.epoch_times_s[:epochs])


def per_image_figures(breakdowns: list[dict], memory_total: int | None) -> dict:
    """Per precision, from the memory page's breakdown at two batch sizes: the bytes each image adds to the step's
    peak (the allocator's), what the process holds whatever the batch (the rest of the stacked bar: weights,
    optimizer state, and on a GPU the allocator's reserve and the CUDA context), and the batch at which the two would
    fill `memory_total` if both grew as measured: an extrapolation, not a measurement."""
    figures = {}
    for precision in dict.fromkeys(b["precision"] for b in breakdowns):
        small, *_, large = sorted((b for b in breakdowns if b["precision"] == precision), key=lambda b: b["batch_size"])
        if large["batch_size"] == small["batch_size"]:
            continue
        per_image = (large["peak"] - small["peak"]) / (large["batch_size"] - small["batch_size"])
        fixed = sum(small["components"].values()) - per_image * small["batch_size"]
        limit = int((memory_total - fixed) // per_image) if memory_total and per_image > 0 else None
        figures[precision] = {"bytes_per_image": round(per_image), "fixed_bytes": round(fixed),
                              "memory_total_bytes": memory_total, "extrapolated_largest_batch": limit,
                              "from_batches": [small["batch_size"], large["batch_size"]]}
    return figures


def default_budget(plan: Plan, only: set[int] | None) -> float:
    """The kit's budget when --budget is not given: the plan's, or with --only the chosen steps' caps added up and
    no more than the window's second call (docs/gpu-check.md lists the retries, whose length is known before they
    start: a retry that would take more leaves out what its time plan cannot fit)."""
    if only is None:
        return plan.budget_s
    chosen = [name for number, (name, _) in enumerate(STEPS[:-1], start=1) if number in only]
    second_call = SECOND_CALL_S if plan.name == "full" else plan.budget_s
    return min(second_call, sum(plan.step_caps_s[name] for name in chosen))


@dataclass
class StepRecord:
    """What one step did: its outcome in one word and one line, its figures, and what it cost."""

    number: int
    name: str
    title: str
    status: str = "pending"  # pending | ok | failed | timed out | skipped
    reason: str | None = None  # one line: why it failed or was skipped
    started_at: str | None = None
    duration_s: float | None = None
    counts: dict = field(default_factory=lambda: {"processes": 0, "train_steps": 0, "train_images": 0})
    data: dict = field(default_factory=dict)

    def count(self, processes: int = 0, steps: int = 0, images: int = 0) -> None:
        self.counts["processes"] += processes
        self.counts["train_steps"] += steps
        self.counts["train_images"] += images


class StepTimeout(Exception):
    """A step ran out of its time; the message says where, and `stdout` keeps what its child printed before."""

    def __init__(self, message: str, stdout: str = ""):
        super().__init__(message)
        self.stdout = stdout


def torch_sees_cuda() -> bool:
    """Whether torch sees a CUDA GPU in this process: asked only when step 1 did not say (--only without 1)."""
    return torch.cuda.is_available()


class Kit:
    """Runs the steps in order against one deadline and writes both files after each of them."""

    def __init__(self, out: Path, device_type: str, plan: Plan, command: str, only: set[int] | None = None):
        self.out = out
        self.device_type = device_type
        self.plan = plan
        self.command = command
        self.only = only  # step numbers to run (--only); None: all
        self.work = scratch_folder(out)  # every temporary, the children's reports included: never in `out`
        self.started = dt.datetime.now(dt.timezone.utc)
        self.clock = time.monotonic()
        self.deadline = self.clock + plan.budget_s
        self.records = [StepRecord(i + 1, name, title) for i, (name, title) in enumerate(STEPS)]
        self.supported_modes: list[str] | None = None  # from step 1; None: unknown, let each run say
        self.refused: dict[str, str] = {}  # mode -> why this device cannot run it, from step 1
        self.lab_results: dict[tuple[str, str, int], RunResult] = {}  # (precision, loader, batch size) -> result
        self.prepared_root: Path | None = None  # step 3's synthetic split, generated once for all its runs
        self.references: list[KitReference] = []  # written to out/reference/ as they are made
        self.tests_dir = REPO_ROOT / "tests"  # step 2 collects the files here that hold CUDA-only tests
        self.sees_cuda: bool | None = None  # step 1's answer; else asked here at the first step that needs a GPU
        self.start_s = PLANNED_START_S  # a fresh process's start: step 1 times its own
        self.left_out: list[str] = []  # the time plan's optional units left out (OPTIONAL_UNITS)
        self.time_plan: dict = {}
        self.nvml_name: str | None = None  # the GPU's name as NVML gives it, asked once where step 1 did not run

    # ---- running ------------------------------------------------------------------------------

    def run(self) -> int:
        out_of_time = f"out of time: the kit's budget of {self.plan.budget_s:.0f} s was spent"
        self.plan_time()
        for record, step in zip(self.records[:-1], self.step_functions()):
            if not self.selected(record):
                self.finish(record, "skipped", "not selected (--only)" if self.only is not None else
                            f"runs only as a call of its own (--only {record.number})")
                continue
            if self.gpu_missing(record):
                self.finish(record, "failed", NO_CUDA)
                continue
            seconds = self.time_for(record)
            if seconds < MIN_STEP_S:
                self.finish(record, "skipped", out_of_time)
                continue
            record.started_at = _now()
            started = time.monotonic()
            print(f"==> step {record.number}: {record.title} (at most {seconds:.0f} s)", flush=True)
            try:
                status, reason = step(record, started + seconds)
            except StepTimeout as err:
                status, reason = "timed out", str(err)
            except Exception as err:  # a step's own bug must not stop the steps after it
                status, reason = "failed", one_line(err)
                record.data["traceback"] = traceback.format_exc().splitlines()[-12:]
            record.duration_s = round(time.monotonic() - started, 1)
            self.finish(record, status, reason)
            if record.name == "environment" and "process_start_s" in record.data:
                self.start_s = record.data["process_start_s"]
                self.plan_time()
                self.write()
        summary = self.records[-1]
        summary.started_at = _now()
        self.finish(summary, "ok", None)
        shutil.rmtree(self.work, ignore_errors=True)
        failed = [r for r in self.records if r.status in ("failed", "timed out")]
        print(f"==> done in {time.monotonic() - self.clock:.0f} s: {len(failed)} step(s) failed or timed out; "
              f"wrote {self.out / JSON_NAME} and {self.out / MD_NAME}", flush=True)
        return EXIT_STEP_FAILED if failed else EXIT_OK

    def step_functions(self) -> list[Callable[[StepRecord, float], tuple[str, str | None]]]:
        return [getattr(self, name) for name, _ in STEPS[:-1]]

    def selected(self, record: StepRecord) -> bool:
        """Whether this call runs the step: --only's steps, or else every step but the opt-in ones."""
        return record.number in self.only if self.only is not None else record.name not in OPT_IN_STEPS

    def gpu_missing(self, record: StepRecord) -> bool:
        """A step that needs the GPU, asked for with --device cuda, where torch sees none: it fails without running
        (rather than reading ok with nothing run). --device cpu keeps its own "skipped: no GPU"."""
        if self.device_type != "cuda" or record.name in CPU_STEPS:
            return False
        if self.sees_cuda is None:
            self.sees_cuda = torch_sees_cuda()
        return not self.sees_cuda

    def time_for(self, record: StepRecord) -> float:
        """This step's cap, or less when the budget must still keep each later step's estimate for it."""
        later = [r.name for r in self.records[record.number:-1] if self.selected(r)]
        reserve = sum(max(MIN_STEP_S, self.estimate_s(name)) for name in later)
        left = self.deadline - time.monotonic() - reserve
        return max(0.0, min(self.plan.step_caps_s[record.name], left))

    # ---- the time plan (docs/gpu-check.md, "The time plan") ---------------------------------------------------

    def units(self, step: str) -> list[Unit]:
        """One step's work as the time plan counts it on this device, the modes step 1 found it refuses left out."""
        plan, work, cuda = self.plan, self.plan.work_s, self.device_type == "cuda"

        def runs_here(mode: str) -> bool:
            return self.supported_modes is None or mode in self.supported_modes

        if step == "lab_workload":
            found = {"the split and the peaks": Unit(step, "the split and the peaks", 0, work["lab_once"])}
            for loader, precision, batch in lab_runs(plan, self.demo_amp()):
                if runs_here(precision):
                    name = lab_unit(plan, loader, precision, batch)
                    kind = "lab_sweep" if name == SWEEP_UNIT else f"lab_{loader}"
                    before = found.get(name, Unit(step, name, 0, 0.0))
                    found[name] = Unit(step, name, before.processes + 1, before.work_s + work[kind])
            return list(found.values())
        if step == "memory":
            probes = [mode for mode in plan.probe_precisions if runs_here(mode)] if cuda else []
            return [Unit(step, "the memory page's breakdown", 1, work["breakdown"])] + (
                [Unit(step, SEARCH_UNIT, len(probes), work["search"] * len(probes))] if probes else [])
        if step == "benchmark":
            modes = resolve_modes(",".join(plan.bench_modes) if plan.bench_modes else None, self.device_type)
            runs = len(bench_configs(modes, self.device_type, plan.bench_loaders))
            return [Unit(step, "the benchmark", 1 + runs, work["bench_run"] * runs)]
        # The app: the check, its two runs and, on a GPU, the server's hardware query; the ladder: its parent, the
        # lab rung, 5 rungs and the first larger batch. Step 2 runs nothing on a CPU.
        processes = {"environment": 1, "cuda_tests": 2 if cuda else 0, "app": 4 if cuda else 3, "ladder": 8}[step]
        return [Unit(step, step, processes, work[step] if processes else 0.0)]

    def estimate_s(self, step: str) -> float:
        """A step's seconds by the time plan, the units it left out not counted."""
        return sum(unit.seconds(self.start_s) for unit in self.units(step) if unit.name not in self.left_out)

    def plan_time(self) -> None:
        """Size what is left of this call from a fresh process's start (step 1's, once it has run): leave out the
        least valuable optional runs before any of them starts, rather than run out of time at the end."""
        steps = [r.name for r in self.records[:-1] if self.selected(r) and r.status == "pending"]
        units = [unit for step in steps for unit in self.units(step)]
        time_s = self.deadline - time.monotonic()
        self.left_out = left_out_first(units, self.start_s, time_s)
        estimate = sum(unit.seconds(self.start_s) for unit in units if unit.name not in self.left_out)
        measured = self.records[0].data.get("process_start_s") is not None
        self.time_plan = {
            "process_start_s": self.start_s, "measured": measured, "time_left_s": round(time_s, 1),
            "estimate_s": round(estimate, 1), "fill": round(estimate / time_s, 3) if time_s > 0 else None,
            "steps_s": {step: round(self.estimate_s(step), 1) for step in steps}, "left_out": self.left_out,
        }
        print(f"    time plan: {time_plan_line(self.time_plan)}", flush=True)

    def machine(self) -> dict:
        """This machine's name and its short name for file names ("h100", "h200"; "cpu"): step 1's, else on a GPU
        NVML's first (asked without a CUDA context), so H100 figures are never filed as an H200's."""
        found = self.records[0].data
        if self.device_type != "cuda":
            return {"name": (found.get("environment") or {}).get("device_name"), "slug": "cpu"}
        name = found.get("gpu_name")
        if name is None and self.nvml_name is None:
            self.nvml_name = next((gpu["name"] for gpu in nvml_facts(None).get("gpus", [])), "")
        name = name or self.nvml_name or None
        return {"name": name, "slug": machine_slug(name)}

    def files_to_commit(self) -> dict[str, str]:
        """Each file the kit wrote that belongs in the project, and where (docs/gpu-check.md): named after this
        machine and today's date."""
        slug, date = self.machine()["slug"], self.started.date().isoformat()
        gpu = f"-{slug}" if self.device_type == "cuda" else ""
        moves = {MD_NAME: f"bench/results/gpu-check-{slug}-{date}.md",
                 JSON_NAME: f"bench/results/gpu-check-{slug}-{date}.json"}
        if (self.out / f"bench-{slug}.json").exists():  # as bench/results/ names them: cpu-DATE.json
            moves[f"bench-{slug}.json"] = f"bench/results/{self.device_type}{gpu}-{date}.json"
        if (self.out / f"ladder-{slug}.json").exists():  # the date first: the page takes the last name as the newest
            moves[f"ladder-{slug}.json"] = f"reference/ladder-{self.device_type}-{date}{gpu}.json"
        return moves

    def left_out_reason(self) -> str:
        return f"left out by the time plan: {time_plan_line(self.time_plan)}"

    def finish(self, record: StepRecord, status: str, reason: str | None) -> None:
        record.status, record.reason = status, reason
        print(f"    step {record.number} {status}" + (f": {reason}" if reason else ""), flush=True)
        self.write()

    def write(self) -> None:
        """Both files, with every step so far; pending steps are listed as pending."""
        self.out.mkdir(parents=True, exist_ok=True)
        report = {
            "kit": {
                "command": self.command,
                "device": self.device_type,
                "plan": asdict(self.plan),
                "time_plan": self.time_plan,
                "machine": self.machine(),
                "files_to_commit": self.files_to_commit(),
                "started_at": self.started.isoformat(timespec="seconds"),
                "duration_s": round(time.monotonic() - self.clock, 1),
                "finished": self.records[-1].status != "pending",
            },
            "steps": [asdict(r) for r in self.records],
        }
        _write_atomic(self.out / JSON_NAME, json.dumps(report, indent=2, default=str) + "\n", self.work)
        _write_atomic(self.out / MD_NAME, render_markdown(report), self.work)

    # ---- the steps: each returns (status, reason) ------------------------------------------------

    def environment(self, record: StepRecord, deadline: float) -> tuple[str, str | None]:
        record.count(processes=1)
        started = time.monotonic()
        facts = _json_child(["-m", "bench.gpu_env", "--device", self.device_type], deadline)
        # The child imports what a run imports and makes a CUDA context: its time is a fresh run's start here.
        facts["process_start_s"] = round(time.monotonic() - started, 2)
        record.data = facts
        if self.device_type == "cuda" and "cuda_available" in facts:  # a fresh process's answer: the kit asks none
            self.sees_cuda = facts["cuda_available"]
        if "modes" in facts:
            self.supported_modes = facts["modes"]["supported"]
            self.refused = facts["modes"]["refused"]
        if "error" in facts:
            return "failed", facts["error"]
        return "ok", None

    def cuda_tests(self, record: StepRecord, deadline: float) -> tuple[str, str | None]:
        if self.device_type != "cuda":
            return "skipped", NO_GPU
        # Only the files that hold CUDA-only tests: a file that cannot import (Streamlit missing, say) and holds
        # none is no concern of this step. Within them, bench.cuda_only keeps the CUDA-only tests.
        files = [_repo_relative(path) for path in gpu_test_files(self.tests_dir)]
        if not files:
            return "failed", f"no test file under {_repo_relative(self.tests_dir)} holds a CUDA-only test"
        junit, log = self.work / "cuda-tests.xml", self.work / "cuda-tests.jsonl"
        # pytest would root node ids at the common parent of the tests and the working directory: "/tmp" for a
        # checkout under /tmp. Rooting them here keeps them the same wherever the repository lives.
        root = REPO_ROOT if Path(self.tests_dir).resolve().is_relative_to(REPO_ROOT) else Path(self.tests_dir)
        args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "bench.cuda_only", f"--rootdir={root}",
                "--continue-on-collection-errors", f"--junitxml={junit}", "--cuda-only-log", str(log),
                *per_test_timeout(self.plan.test_timeout_s), *files]
        record.count(processes=1)
        ended = _child_until(args, deadline)
        lines = ended.stdout.strip().splitlines()
        # The log has a line per test as it ends: what a pytest killed at the cap (its report unwritten) had done.
        record.data = {"exit_code": ended.returncode, "summary_line": lines[-1] if lines else "", "files": files,
                       "tests_run": read_log(log), **read_junit(junit)}
        if ended.timed_out:
            return "timed out", killed_tests_reason(record.data["tests_run"], ended.problem)
        if ended.returncode == 5:
            return "failed", "no CUDA-only test was collected"
        if "cases" not in record.data:  # pytest ended before writing its report
            return "failed", record.data["summary_line"] or ended.problem
        return cuda_tests_outcome(record.data)

    def lab_workload(self, record: StepRecord, deadline: float) -> tuple[str, str | None]:
        plan = self.plan
        rows = []
        record.data = {"settings": {"data": "synthetic", "epochs": plan.lab_epochs, "subset": plan.lab_subset,
                                    "test_subset": plan.lab_test_subset, "batch_size": plan.lab_batch_size,
                                    "warmup_steps": plan.lab_warmup_steps, "workers": plan.workers,
                                    "min_steady_s": self.min_steady_s("resident"),
                                    "sweep_batch_size": plan.sweep_batch_size},
                       "prepared_split": self.prepare_split(), "rows": rows}
        runs = lab_runs(plan, self.demo_amp())
        runs_left = len(runs)
        for loader, precision, batch_size in runs:
            row = {"precision": precision, "loader": loader, "batch_size": batch_size}
            rows.append(row)
            unit = lab_unit(plan, loader, precision, batch_size)
            run_s = self.start_s + plan.work_s["lab_sweep" if unit == SWEEP_UNIT else f"lab_{loader}"]
            if self.supported_modes is not None and precision not in self.supported_modes:
                row.update(status="skipped", reason=self.refusal(precision))
            elif unit in self.left_out:
                row.update(status="skipped", reason=self.left_out_reason())
            elif unit in OPTIONAL_UNITS and time.monotonic() + run_s > deadline:  # the runs before it ran long
                row.update(status="skipped", reason=f"left out: the step's {deadline - time.monotonic():.0f} s "
                                                    f"left are less than this run's estimate of {run_s:.0f} s")
            elif time.monotonic() > deadline - MIN_STEP_S:
                row.update(status="timed out", reason="the step's time ran out before this run")
            else:
                row.update(self.lab_run(record, precision, loader, batch_size,
                                        self.run_deadline(deadline, runs_left)))
                if row["status"] == "skipped" and self.supported_modes is not None:  # step 1 found it supported
                    row.update(status="failed", reason=f"step 1 found {precision} supported here, yet the run "
                                                        f"refused it: {row['reason']}")
            runs_left -= 1
            self.write()
        for row in rows:
            row.update(self.speedups(row["precision"], row["loader"], row["batch_size"]))
        self.add_references(self.sweep_references())
        status, reason = _worst(rows)
        if status == "ok" and not any(row["status"] == "ok" for row in rows):
            return "failed", "no mode ran: " + "; ".join(f"{r['precision']} {r['loader']}: {r['reason']}" for r in rows)
        return status, reason

    def prepare_split(self) -> dict:
        """Step 3's synthetic split, generated once for every run to read (the pixels each would have generated)."""
        folder = self.work / "synthetic"
        started = time.monotonic()
        try:
            prepare_synthetic(folder, seed=RunConfig().seed, train_limit=self.plan.lab_subset,
                              test_limit=self.plan.lab_test_subset)
        except OSError as err:  # a full disk, say: each run then generates its own, as it always could
            return {"status": "failed", "reason": f"each run generates its own split: {one_line(err)}"}
        self.prepared_root = folder
        return {"status": "ok", "folder": str(folder), "seconds": round(time.monotonic() - started, 1)}

    def min_steady_s(self, loader: str) -> float:
        """The steady window a run of step 3 must reach: a CUDA resident run's lab epochs last about a second."""
        return self.plan.lab_min_steady_s if (self.device_type, loader) == ("cuda", "resident") else 0.0

    def speedups(self, precision: str, loader: str, batch_size: int) -> dict:
        """One run against strict fp32 and against the lab's baseline, same loader and batch: the lab's epochs'
        time (warm-up included) and the steady throughput."""
        result = self.lab_results.get((precision, loader, batch_size))
        found = {}
        for name, other in (("fp32", "fp32"), ("lab_baseline", LAB_BASELINE)):
            baseline = self.lab_results.get((other, loader, batch_size))
            if result is None or baseline is None or precision == other:
                continue
            found[f"speedup_vs_{name}"] = lab_time_s(baseline, self.plan.lab_epochs) / lab_time_s(
                result, self.plan.lab_epochs)
            found[f"throughput_vs_{name}"] = compare(baseline, result).throughput_speedup
            if name == "fp32":
                found["memory_saved_pct"] = compare(baseline, result).memory_reduction_pct
        return found

    @staticmethod
    def run_deadline(deadline: float, runs_left: int) -> float:
        """One run's deadline: twice its fair share of the step's time left (a minute at least), so a run that
        hangs cannot take the time of all the runs after it."""
        left = deadline - time.monotonic()
        return min(deadline, time.monotonic() + max(60.0, 2 * left / max(1, runs_left)))

    def lab_args(self, precision: str, loader: str, batch_size: int, path: Path) -> list[str]:
        """The `python -m trainer run` arguments of one run of step 3."""
        plan = self.plan
        args = ["-m", "trainer", "run", "--precision", precision, "--loader", loader, "--data", "synthetic",
                "--device", self.device_type, "--epochs", str(plan.lab_epochs),
                "--batch-size", str(batch_size), "--warmup-steps", str(plan.lab_warmup_steps),
                "--workers", str(plan.workers), "--json", str(path)]
        if plan.lab_subset is not None:
            args += ["--subset", str(plan.lab_subset)]
        if plan.lab_test_subset is not None:
            args += ["--test-subset", str(plan.lab_test_subset)]
        if self.min_steady_s(loader):
            args += ["--min-steady-s", f"{self.min_steady_s(loader):g}"]
        if self.prepared_root is not None:
            args += ["--data-root", str(self.prepared_root)]
        if self.profiled(precision, loader, batch_size):
            args += ["--profile-steps", str(plan.profile_steps), "--measure-peaks",
                     "--peaks-cache", str(self.work / "device-peaks.json")]
        return args

    def profiled(self, precision: str, loader: str, batch_size: int) -> bool:
        """The runs whose step is also profiled: at the lab's batch, the resident ones (the device's own step) and
        the lab's own comparison with its DataLoader. A few seconds each on a GPU, after their timed training."""
        return batch_size == self.plan.lab_batch_size and (loader == "resident" or precision in LAB_COMPARISON)

    def lab_run(self, record: StepRecord, precision: str, loader: str, batch_size: int, deadline: float) -> dict:
        """One `python -m trainer run` in a fresh process; its figures, or why it did not run."""
        path = self.work / f"lab-{precision}-{loader}-{batch_size}.json"
        record.count(processes=1)
        print(f"    lab: {precision} with the {loader} loader, batch {batch_size}", flush=True)
        try:
            done = _child(self.lab_args(precision, loader, batch_size, path), deadline)
        except StepTimeout as err:
            return {"status": "timed out", "reason": str(err)}
        if done.returncode == 2:  # a mode this device cannot run: the trainer says why in one line
            return {"status": "skipped", "reason": _tail(done.stderr)}
        if done.returncode != 0 or not path.exists():
            return {"status": "failed", "reason": f"exit code {done.returncode}: {_tail(done.stderr)}"}
        result = RunResult.from_json(path.read_text(encoding="utf-8"))
        self.lab_results[(precision, loader, batch_size)] = result
        record.count(steps=result.total_steps, images=result.train_images)
        return {
            "status": "ok",
            "total_time_s": result.total_time_s,
            "lab_time_s": lab_time_s(result, self.plan.lab_epochs),
            "epochs_run": len(result.epoch_times_s),
            "steady_images_per_s": result.steady_images_per_s,
            "peak_memory": result.peak_memory,
            "resident_data_bytes": result.resident_data_bytes,
            "test_accuracy": result.test_accuracy,
            "skipped_steps": result.skipped_steps,
            "total_steps": result.total_steps,
            "train_images": result.train_images,
            "tf32_flags": {k: result.environment.get(k) for k in ("cuda_matmul_allow_tf32", "cudnn_allow_tf32")},
            "timing": (result.timing_quality or {}).get("verdict"),
            "warnings": result.warnings,
            "profile": result.profile,
            "device_peaks": result.device_peaks,
        }

    def memory(self, record: StepRecord, deadline: float) -> tuple[str, str | None]:
        pictures = [
            {"precision": p, "loader": loader, "batch_size": batch, "peak_memory": result.peak_memory,
             "resident_data_bytes": result.resident_data_bytes}
            for (p, loader, batch), result in self.lab_results.items() if batch == self.plan.lab_batch_size
        ]
        record.data = {"memory_source": "the peak memory of step 3's runs, per precision and loader",
                       "memory": pictures}
        # The breakdown first, in at most half the step: the search may take all of its time where the model does
        # not fit at the search's ceiling, and the breakdown is what says how far the limit is on a large GPU.
        half = time.monotonic() + max(MIN_STEP_S, (deadline - time.monotonic()) / 2)
        page = record.data["memory_page"] = self.memory_breakdown(record, min(deadline, half))
        self.write()
        page_problem = None if page["status"] == "ok" else (
            page["status"], f"the memory page's breakdown {page['status']}: {page['reason']}")
        if self.device_type != "cuda":
            record.data["largest_batch"] = {"status": "skipped", "reason": NO_GPU}
            return page_problem or ("ok", f"the largest-batch search skipped: {NO_GPU}")
        if SEARCH_UNIT in self.left_out:
            record.data["largest_batch"] = {"status": "skipped", "reason": self.left_out_reason()}
            return page_problem or ("ok", f"{SEARCH_UNIT} {self.left_out_reason()}")
        status, reason = self.largest_batch(record, deadline)
        if status == "ok" and page_problem:
            return page_problem
        return status, reason

    def memory_breakdown(self, record: StepRecord, deadline: float) -> dict:
        """The memory page's breakdown of one step (lessons.memory_breakdown, in a fresh process as the page runs
        it) at two batch sizes, and what the two give per image."""
        plan = self.plan
        precisions = [p for p in plan.breakdown_precisions
                      if self.supported_modes is None or p in self.supported_modes]
        args = ["-m", "lessons.memory_breakdown", "--precisions", ",".join(precisions),
                "--batch-sizes", ",".join(str(b) for b in plan.breakdown_batches), "--device", self.device_type]
        found = {"command": "python " + shlex.join(args)}
        print(f"    memory page breakdown: {', '.join(precisions)} at batch "
              f"{' and '.join(str(b) for b in plan.breakdown_batches)}", flush=True)
        # Each measurement is two steps: a warm-up step in fp32, then the measured one.
        record.count(processes=1, steps=2 * len(precisions) * len(plan.breakdown_batches),
                     images=2 * len(precisions) * sum(plan.breakdown_batches))
        try:
            found["breakdowns"] = _json_child(args, deadline)
        except StepTimeout as err:
            return {**found, "status": "timed out", "reason": str(err)}
        except (ChildProcessError, ValueError) as err:  # a failed child, or a last line that is not its JSON
            return {**found, "status": "failed", "reason": one_line(err)}
        found["per_image"] = per_image_figures(found["breakdowns"], self.gpu_memory_total())
        return {**found, "status": "ok", "reason": None}

    def gpu_memory_total(self) -> int | None:
        """The GPU's memory as torch reports it, from step 1 (None on a CPU, or when step 1 did not run)."""
        return (self.records[0].data.get("environment") or {}).get("gpu_memory_total_bytes")

    def largest_batch(self, record: StepRecord, deadline: float) -> tuple[str, str | None]:
        """The largest-batch search, one precision at a time, each result kept as soon as it is found."""
        found: dict[str, int | None] = {}
        record.data["largest_batch"] = {"status": "ok", "batch": found, "notes": {}}
        notes = record.data["largest_batch"]["notes"]

        def counted(config: RunConfig, should_cancel=None):
            record.count(processes=1, steps=2, images=2 * config.batch_size)
            return run_isolated(config, should_cancel=should_cancel)

        # Step 3's prepared split, where it holds enough images: the same pixels, without generating them each try.
        data_root = str(self.prepared_root) if self.prepared_root is not None else RunConfig().data_root
        base = RunConfig(data="synthetic", data_root=data_root, device="cuda", loader="resident", num_workers=0)
        for precision in self.plan.probe_precisions:
            if self.supported_modes is not None and precision not in self.supported_modes:
                notes[precision] = self.refusal(precision)
                continue
            print(f"    largest batch: {precision}", flush=True)
            try:
                found.update(probe_max_batch(base, [precision], should_cancel=lambda: time.monotonic() > deadline,
                                             runner=counted))
            except CancelledError:
                record.data["largest_batch"]["status"] = "timed out"
                notes[precision] = "the step's time ran out during the search"
                return "timed out", f"the largest-batch search for {precision} ran out of time"
            except TrainerError as err:
                found[precision] = None
                notes[precision] = str(err)
                record.data["largest_batch"]["status"] = "failed"
            self.write()
        if record.data["largest_batch"]["status"] != "ok":
            return "failed", "; ".join(f"{p}: {n}" for p, n in notes.items())
        return "ok", None

    def benchmark(self, record: StepRecord, deadline: float) -> tuple[str, str | None]:
        path = self.work / f"bench-{self.machine()['slug']}.json"
        seconds = max(1.0, deadline - time.monotonic())
        # The bench stops starting runs before the step's end and writes its JSON after every run, so a bench that
        # still overruns and is killed leaves each finished run to read.
        budget = max(1.0, seconds - BENCH_TAIL_S)
        args = ["-m", "bench.run_bench", "--device", self.device_type, *self.plan.bench_args,
                "--loaders", ",".join(self.plan.bench_loaders), "--timeout", f"{seconds:.0f}", "--budget",
                f"{budget:.0f}", "--json", str(path)]
        if self.plan.bench_modes:
            args += ["--modes", ",".join(self.plan.bench_modes)]
        if self.prepared_root is not None:  # step 3's split: each run reads its first images, generating none
            args += ["--data", "synthetic", "--data-root", str(self.prepared_root)]
        report, ended = self.reporting_child(record, args, path, deadline, "bench")
        if report is None:
            return "failed", ended.problem
        rows = [Row(**row) for row in report["rows"]]
        self.record_bench(record, report, rows)
        finished_runs = f"{sum(len(row.repeats) for row in rows)} of {len(rows) * report['settings']['repeats']}"
        if ended.timed_out:
            return "timed out", f"{ended.problem}; the {finished_runs} runs that ended are kept"
        if report.get("stopped"):
            return "timed out", report["stopped"]
        if ended.problem:
            failed = [f"{r.implementation} {r.precision} {r.loader}: {'; '.join(r.errors)}" for r in rows
                      if r.status != "ok"]
            return "failed", "; ".join(failed) or ended.problem
        return "ok", None

    def reporting_child(self, record: StepRecord, args: list[str], path: Path, deadline: float,
                        what: str) -> tuple[dict | None, "ChildEnd"]:
        """A child that writes its JSON report to `path` after every run (the bench, the ladder): its report as far
        as it got, copied into the output folder, or None where it wrote none, with why. Killed before its first run
        ended: the step timed out. The child writes in the kit's scratch folder, so that one killed mid-write leaves
        its temporary there, not among the files the device tool brings back."""
        record.data = {"command": "python " + shlex.join(args), "json": path.name}
        ended = _child_until(args, deadline)
        if path.exists():
            text = path.read_text(encoding="utf-8")
            _write_atomic(self.out / path.name, text, self.work)
            return json.loads(text), ended
        record.count(processes=1)
        if ended.timed_out:
            raise StepTimeout(f"{ended.problem}, before its first run ended")
        return None, ChildEnd(ended.stdout, ended.problem or f"the {what} wrote no JSON", timed_out=False)

    @staticmethod
    def record_bench(record: StepRecord, report: dict, rows: list[Row]) -> None:
        """The bench's figures and what they cost, from its JSON (complete, or as far as it got)."""
        runs = [run for row in rows for run in row.repeats if "error" not in run]
        steps = sum(run.get("total_steps", 0) for run in runs)
        record.count(processes=1 + sum(len(row.repeats) for row in rows), steps=steps,
                     images=steps * report["settings"]["batch_size"])
        record.data.update(
            duration_s=report["duration_s"], settings=report["settings"], rows=report["rows"],
            finished=report.get("finished", True), targets=report["targets"], table=format_table(rows),
            verdicts=format_targets(report["targets"]),
        )

    def ladder(self, record: StepRecord, deadline: float) -> tuple[str, str | None]:
        """bench.ladder in a fresh process: every rung once, then the largest batch, then a second repeat as far as
        the step's time goes. The ladder writes its JSON after every run, so a kill keeps each finished one."""
        path = self.work / f"ladder-{self.machine()['slug']}.json"
        seconds = max(1.0, deadline - time.monotonic())
        budget = max(1.0, seconds - self.plan.ladder_tail_s)
        args = ["-m", "bench.ladder", "--device", self.device_type, *self.plan.ladder_args,
                "--budget", f"{budget:.0f}", "--timeout", f"{max(1.0, seconds - 5):.0f}", "--json", str(path)]
        report, ended = self.reporting_child(record, args, path, deadline, "ladder")
        if report is None:
            return "failed", ended.problem
        counts = report.get("counts", {})
        record.count(processes=1 + counts.get("runs", 0), steps=counts.get("train_steps", 0),
                     images=counts.get("train_images", 0))
        record.data.update(ladder_summary(report))
        return ladder_outcome(report, ended)

    def app(self, record: StepRecord, deadline: float) -> tuple[str, str | None]:
        plan = self.plan
        job_s = max(10.0, deadline - time.monotonic() - PAGE_RESERVE_S)
        args = ["-m", "bench.app_check", "--device", self.device_type, "--state-dir", str(self.work / "app"),
                "--amp", self.demo_amp(), "--subset", str(plan.app_subset), "--epochs", str(plan.app_epochs),
                "--batch-size", str(plan.app_batch_size), "--timeout", f"{job_s:.0f}"]
        record.count(processes=4)  # the check, the two runs, the app's hardware query on a GPU (at most)
        # The check prints the job's line before it renders the page: a page that crashes or hangs keeps the job.
        ended = _child_until(args, deadline)
        report = _last_json(ended.stdout)
        if report is None:
            if ended.timed_out:
                raise StepTimeout(f"{ended.problem}, before its job ended")
            raise ChildProcessError(ended.problem or "python -m bench.app_check printed no JSON")
        results = [RunResult.from_dict(run) for run in report["job"].pop("results", [])]  # kept in the reference
        record.data = report
        report.setdefault("page", {"rendered": False,
                                   "error": f"the check ended before the page was done: {ended.problem}"})
        for run in report["job"]["runs"]:
            record.count(steps=run["total_steps"], images=run["train_images"])
        if report["job"]["status"] == "done" and len(results) == 2:
            self.add_references([self.demo_reference(*results)])
        return app_outcome(report["job"], report["page"], ended.timed_out)

    def refusal(self, precision: str) -> str:
        return self.refused.get(precision, f"this device cannot run {precision}")

    # ---- the reference results the teaching pages read (reference/, bench/kit_reference.py) -------------------

    def demo_amp(self) -> str:
        """The AMP mode of step 5's quick demo and of step 3's sweep points: the one this device is best at (step
        1's hardware report), as the server's quick demo picks it; the plan's where step 1 did not name one."""
        best = (self.records[0].data.get("hardware") or {}).get("recommended_amp")
        runs_here = self.supported_modes is None or best in self.supported_modes
        return best if best in AMP_PRECISIONS and runs_here else self.plan.app_amp

    def demo_reference(self, baseline: RunResult, candidate: RunResult) -> KitReference:
        """Step 5's job, the Run page's quick demo on the full plan, as a quick-demo reference."""
        config = baseline.config
        what = (f"The Run page's quick demo ({config.subset:,} synthetic images, {config.epochs} epoch(s), batch "
                f"{config.batch_size}, data resident on the device, fp32 against {candidate.precision})"
                if self.plan.name == "full" else
                f"A wiring check of the kit's quick plan, not a reference to commit ({config.subset} images, not the "
                "quick demo's)")
        how = ("submitted to the app's job manager and run as the class server runs it, each run in a fresh "
               "process, by the GPU acceptance kit's step 5")
        return KitReference("quick-demo", "quick-demo", baseline, candidate,
                            f"{what}, {how}, {self.recorded_on(baseline)}. {_one_pair_note([baseline, candidate])}")

    def sweep_references(self) -> list[KitReference]:
        """Step 3's resident runs of strict fp32 and the demo's AMP mode at its two batch sizes: two points of a
        sweep for the When AMP pays off page (none unless all four ran)."""
        plan, amp = self.plan, self.demo_amp()
        batches = sorted((plan.lab_batch_size, plan.sweep_batch_size))
        pairs = [(self.lab_results.get(("fp32", "resident", b)), self.lab_results.get((amp, "resident", b)))
                 for b in batches]
        if not all(run is not None for pair in pairs for run in pair):
            return []
        config = pairs[0][0].config
        images = "all 50,000" if config.subset is None else f"{config.subset:,}"
        steady = (f", then whole epochs until {config.min_steady_s:g} s were timed after warm-up"
                  if config.min_steady_s else "")
        what = (f"One point of a reference sweep for the When AMP pays off page (batch {batches[0]} and {batches[1]}, "
                f"{images} synthetic images, {config.epochs} epoch(s){steady}, {config.warmup_steps} warm-up steps, "
                f"resident loader), recorded by the GPU acceptance kit's step 3 with each run a fresh `python -m "
                f"trainer run` (other modes' runs between them; the synthetic split generated once and read by "
                f"every run: the same pixels), {self.recorded_on(pairs[0][0])}")
        if plan.name != "full":
            what = "A wiring check of the kit's quick plan, not a reference to commit. " + what
        return [KitReference(f"sweep-batch{batch}", "sweep", base, cand, f"{what}. {_one_pair_note([base, cand])}")
                for batch, (base, cand) in zip(batches, pairs)]

    @staticmethod
    def recorded_on(run: RunResult) -> str:
        env = run.environment
        cuda = f", CUDA {env.get('cuda_version')}" if env.get("device_type") == "cuda" else ""
        return f"on {env.get('device_name')} ({env.get('device_type')}) with torch {env.get('torch_version')}{cuda}"

    def add_references(self, references: list[KitReference]) -> None:
        """Keep these and write every reference so far (out/reference/), so a kill leaves the ones already made."""
        summary = self.records[-1].data.setdefault("references", {"folder": REFERENCE_FOLDER, "files": []})
        self.references += references
        if not references:
            return
        try:
            summary["files"], summary["problems"] = write_references(
                self.out, self.device_type, self.started.date().isoformat(), self.references)
        except OSError as err:
            summary["problems"] = [f"not written: {one_line(err)}"]


def machine_slug(gpu_name: str | None) -> str:
    """A GPU's short name for file names: its model where its name holds one ("NVIDIA H100 80GB HBM3": h100,
    "NVIDIA H200": h200), else its name in lower case, "cuda" where it is not known."""
    if not gpu_name:
        return "cuda"
    model = re.search(r"\b([A-Z]{1,3}\d{2,4}[A-Z]?)\b", gpu_name.upper().replace("NVIDIA", ""))
    return model.group(1).lower() if model else re.sub(r"[^a-z0-9]+", "-", gpu_name.lower()).strip("-")


def time_plan_line(plan: dict) -> str:
    """The time plan in one line: what it was sized from, how full it is, and what it left out."""
    start = (f"a fresh process took {plan['process_start_s']:.1f} s here (step 1's)" if plan["measured"] else
             f"a fresh process assumed to take {plan['process_start_s']:.1f} s")
    fill = f" ({plan['fill']:.0%})" if plan["fill"] is not None else ""
    left_out = ", ".join(plan["left_out"]) or "nothing"
    return (f"{start}; {plan['estimate_s']:.0f} s of work for the {plan['time_left_s']:.0f} s left{fill}, at most "
            f"{PLAN_FILL:.0%}; left out, least valuable first: {left_out}")


def _one_pair_note(runs: list[RunResult]) -> str:
    """One pair's caveat, and how its timing was rated."""
    verdicts = [f"{run.precision} {(run.timing_quality or {}).get('verdict', 'not rated')}" for run in runs]
    return f"One pair of runs, so the speedup's spread is unknown; timing: {', '.join(verdicts)}."


def ladder_summary(report: dict) -> dict:
    """Step 7's figures: the ladder's rungs as its JSON has them, its reference lines, and where it stopped."""
    return {key: report.get(key) for key in ("device_name", "torch", "quick", "repeats", "seconds", "references",
                                             "rungs", "stopped", "counts")}


def ladder_outcome(report: dict, ended: "ChildEnd") -> tuple[str, str | None]:
    """Step 7's verdict: a rung whose runs failed fails it; a rung this device can run that never started (the
    time ran out) times it out; repeats cut short are a note: each rung's first run is the ladder."""
    failed = [f"{rung['name']}: {'; '.join(rung['errors'])}" for rung in report["rungs"] if rung["errors"]]
    if failed:
        return "failed", "; ".join(failed)
    missing = [rung["name"] for rung in report["rungs"]
               if rung["config"] is not None and not rung["seconds"]
               or (rung["why_not"] or "").startswith("the budget ran out")]
    if ended.timed_out or missing:
        return "timed out", (ended.problem or "") + ("; " if ended.problem and missing else "") + (
            f"not run for want of time: {', '.join(missing)}" if missing else "")
    if ended.problem:
        return "failed", ended.problem
    return "ok", report.get("stopped") and f"{report['stopped']} (fewer repeats: wider or unknown spreads)"


def app_outcome(job: dict, page: dict, timed_out: bool) -> tuple[str, str | None]:
    """Step 5's verdict: the job first; then the page, said apart, since the job's figures stand without it."""
    if job["status"] != "done":
        return "failed", f"the job {job['status']}: {job['error']}"
    if not page["rendered"]:
        status = "timed out" if timed_out else "failed"
        return status, f"the job is done and its figures kept; the Results page was not rendered: {page['error']}"
    problems = (page["exceptions"] + page["errors"] + ([] if page["charts"] else ["no chart drawn"])
                + ([] if page["selected_job"] == job["job_id"] else ["the page shows another job"]))
    return ("failed", "; ".join(problems)) if problems else ("ok", None)


def read_junit(path: Path) -> dict:
    """Counts and failures from pytest's JUnit XML ({} when pytest wrote none), the test files that could not be
    collected apart: their tests did not run, which is not a test failing."""
    if not path.exists():
        return {}
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    cases, not_collected = [], []
    for case in suite.iter("testcase"):
        outcome = next((child for child in case if child.tag in ("failure", "error", "skipped")), None)
        if outcome is not None and outcome.tag == "error" and outcome.get("message") == "collection failure":
            not_collected.append({"file": case.get("name"), "message": _collection_error(outcome.text or "")})
            continue
        cases.append({
            "test": f"{case.get('classname')}::{case.get('name')}",
            "outcome": "passed" if outcome is None else outcome.tag,
            "message": None if outcome is None else (outcome.get("message") or "")[:300],
            "time_s": float(case.get("time") or 0),
        })
    counts = {key: int(suite.get(key) or 0) for key in ("tests", "failures", "errors", "skipped")}
    counts["tests"] -= len(not_collected)
    counts["errors"] -= len(not_collected)
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return {**counts, "time_s": float(suite.get("time") or 0), "cases": cases, "collection_errors": not_collected}


def _collection_error(text: str) -> str:
    """The line of a collection failure that says what went wrong (pytest marks it "E   ...")."""
    lines = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
    return one_line(lines[-1] if lines else _tail(text))


def per_test_timeout(seconds: float) -> list[str]:
    """pytest-timeout's limit on each test, where it is installed (the GPU machine's image has it): a test that hangs
    then fails alone and the tests after it still run, rather than the step's cap killing pytest."""
    if importlib.util.find_spec("pytest_timeout") is None or os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        return []
    return ["--timeout", f"{seconds:g}"]


def killed_tests_reason(tests: list[dict], problem: str) -> str:
    """Step 2's reason when pytest was killed at the step's cap: the tests that had ended, and the one running."""
    ended = [test for test in tests if test["outcome"] != "running"]
    outcomes = Counter(test["outcome"] for test in ended)
    running = [test["test"] for test in tests if test["outcome"] == "running"]
    return (f"{problem}; {len(ended)} test(s) had ended, each kept ("
            + (", ".join(f"{n} {outcome}" for outcome, n in outcomes.items()) or "none") + ")"
            + (f"; still running: {', '.join(running)}" if running else ""))


def cuda_tests_outcome(found: dict) -> tuple[str, str | None]:
    """Step 2's verdict from its JUnit counts: failing tests, then files not collected, each said apart."""
    problems = []
    failing = [c for c in found["cases"] if c["outcome"] in ("failure", "error")]
    if failing:
        problems.append(f"{len(failing)} of {found['tests']} CUDA-only tests failed, first "
                        f"{failing[0]['test']}: {one_line(failing[0]['message'] or '')}")
    if found["collection_errors"]:
        problems.append(f"{len(found['collection_errors'])} test file(s) holding CUDA-only tests not collected "
                        "(their tests did not run; no test failed for it): " + "; ".join(
                            f"{e['file']}: {e['message']}" for e in found["collection_errors"]))
    if not problems and found["passed"] == 0:
        problems.append(f"no CUDA-only test ran: {found['skipped']} skipped")
    if not problems:
        return "ok", None
    return "failed", f"{found['passed']} passed; " + "; ".join(problems)


# ---- the summary ---------------------------------------------------------------------------------


def render_markdown(report: dict) -> str:
    """gpu-check.md: the steps at a glance, then each step's tables, ready to paste into the README."""
    kit, steps = report["kit"], report["steps"]
    machine = kit.get("machine") or {}
    lines = [
        "# GPU acceptance kit" + (f": {machine['name']}" if machine.get("name") else ""),
        "",
        f"`{kit['command']}`: device {kit['device']}, {kit['plan']['name']} plan, started {kit['started_at']}, "
        f"{kit['duration_s']:.0f} s so far" + ("" if not kit["finished"] else " (finished)") + ".",
        "",
        "| step | status | time | processes | training steps | note |",
        "|---|---|---:|---:|---:|---|",
    ]
    for s in steps:
        took = "" if s["duration_s"] is None else f"{s['duration_s']:.0f} s"
        lines.append(f"| {s['number']}. {s['title']} | {s['status']} | {took} | {s['counts']['processes']} | "
                     f"{s['counts']['train_steps']:,} | {_cell(s['reason'] or '')} |")
    if kit.get("time_plan"):
        lines += ["", f"Time plan (docs/gpu-check.md): {time_plan_line(kit['time_plan'])}."]
    if kit.get("files_to_commit"):
        lines += ["", "To commit (named after this machine and the date): " + "; ".join(
            f"`{name}` as `{path}`" for name, path in kit["files_to_commit"].items()) + "."]
    by_name = {s["name"]: s for s in steps}
    lines += _md_references(by_name["summary"]["data"].get("references") or {})
    renders = {"environment": _md_environment, "cuda_tests": _md_tests, "lab_workload": _md_lab, "memory": _md_memory,
               "app": _md_app, "benchmark": _md_bench, "ladder": _md_ladder}
    for name, _ in STEPS[:-1]:
        render, step = renders[name], by_name[name]
        lines += ["", f"## {step['number']}. {step['title']}: {step['status']}", ""]
        if step["status"] == "pending":
            lines.append("Not run yet.")
            continue
        if step["reason"]:
            lines += [f"{'Note' if step['status'] == 'ok' else step['status'].capitalize()}: {step['reason']}", ""]
        lines += render(step["data"])
    return "\n".join(lines).rstrip() + "\n"


def _md_references(found: dict) -> list[str]:
    """Where the reference results for the teaching pages are, how to commit them, and any not written."""
    lines = [f"Reference results: {_cell(problem)}" for problem in found.get("problems") or []]
    if found.get("files"):
        folder = found["folder"]
        listed = ", ".join(f"`{folder}/{name}`" for name in found["files"])
        lines.insert(0, f"Reference results for the teaching pages, in the format of the project's reference/: "
                        f"{listed}, listed in `{folder}/index.json`. To commit them, copy the files into reference/ "
                        "and add the entries to its index.json.")
    return ["", *lines] if lines else []


def _md_environment(data: dict) -> list[str]:
    if not data:
        return []
    env = data.get("environment", {})
    nvml = data.get("nvml", {})
    host = data.get("host", {})
    gpus = nvml.get("gpus") or [{}]
    # NVML's entry for torch's device 0, found by UUID: under CUDA_VISIBLE_DEVICES NVML's first GPU may be another,
    # and on a MIG slice it is one of a GPU's MIG devices.
    torch_uuid = data.get("gpu_uuid") or ""
    devices = [device for gpu in gpus for device in [gpu, *gpu.get("mig_devices", [])]]
    same = next((device for device in devices if torch_uuid and torch_uuid in str(device.get("uuid", ""))), None)
    rows = [
        ("device", env.get("device_name") or data.get("gpu_name") or data.get("device_type")),
        ("GPU UUID (torch / NVML)", f"{data.get('gpu_uuid')} / " + (
            same["uuid"] if same else f"no NVML GPU with that UUID (NVML's first: {gpus[0].get('uuid')})"
            if torch_uuid else str(gpus[0].get("uuid")))),
        ("compute capability", env.get("compute_capability")),
        ("driver / NVML library (NVML)", nvml.get("error") or f"{nvml.get('driver_version')} / "
                                                              f"{nvml.get('nvml_version')}"),
        ("torch / CUDA / cuDNN", " / ".join(str(v) for v in (data.get("torch_version"), data.get("cuda_version"),
                                                             env.get("cudnn_version")))),
        ("TF32 defaults", ", ".join(f"{k}={v}" for k, v in data.get("tf32_defaults", {}).items() if k != "warnings")),
        ("warnings while reading them", "; ".join(data.get("tf32_defaults", {}).get("warnings", [])
                                                  + data.get("warnings", [])) or "none"),
        ("modes this device runs", ", ".join(data.get("modes", {}).get("supported", []))),
        ("modes that compute exactly as another here", ", ".join(
            f"{mode} = {other}" for mode, other in data.get("modes", {}).get("same_as", {}).items()) or "none"),
        ("Python", env.get("python_version")),
        ("CPU cores (usable / all)", f"{host.get('cpu_usable')} / {host.get('cpu_count')}"),
        ("/dev/shm (the DataLoader workers' batches)", _shm(host.get("dev_shm") or {})),
        ("a fresh process (step 1's, timed)", "" if data.get("process_start_s") is None else
         f"{data['process_start_s']:.1f} s: Python, torch, a run's imports, the CUDA context"),
    ]
    return ["| | |", "|---|---|"] + [f"| {k} | {_cell(str(v))} |" for k, v in rows]


def _shm(shm: dict) -> str:
    if "total_bytes" not in shm:
        return shm.get("error", "")
    return f"{shm['total_bytes'] / 2**30:,.1f} GiB, {shm['free_bytes'] / 2**30:,.1f} GiB free"


def _md_tests(data: dict) -> list[str]:
    if not data:
        return []
    lines = [f"pytest: `{data.get('summary_line', '')}`", ""]
    if data.get("tests_run"):
        lines += ["| test | outcome | time | note |", "|---|---|---:|---|"]
        lines += [f"| `{t['test']}` | {t['outcome']} | {t['time_s']:.1f} s | {_cell(t['message'] or '')} |"
                  for t in data["tests_run"]]
        lines.append("")
    failing = [c for c in data.get("cases", []) if c["outcome"] in ("failure", "error")]
    lines += [f"- {c['outcome']}: `{c['test']}`: {_cell(c['message'] or '')}" for c in failing]
    lines += [f"- not collected: `{e['file']}`: {_cell(e['message'])}" for e in data.get("collection_errors", [])]
    return lines


def _md_lab(data: dict) -> list[str]:
    if not data.get("rows"):
        return []
    s = data["settings"]
    subset = "all 50,000" if s["subset"] is None else f"{s['subset']:,}"
    steady = (f" CUDA resident runs add whole epochs until {s['min_steady_s']:g} s are timed after warm-up (the "
              "images/s and steady columns use them; the lab's epochs' time leaves them out)."
              if s.get("min_steady_s") else "")
    prepared = data.get("prepared_split", {})
    lines = [
        (f"Synthetic CIFAR-shaped data, {subset} training images, {s['epochs']} epoch(s), batch {s['batch_size']} "
         f"(and {s['sweep_batch_size']} for the sweep's second point), first {s['warmup_steps']} step(s) left out of "
         f"images/s, each run `python -m trainer run` in a fresh process, most valuable first; the split "
         + (f"generated once ({prepared['seconds']:.1f} s) and read by every run." if prepared.get("status") == "ok"
            else f"generated by every run ({prepared.get('reason')}).") + steady),
        "",
        ("Time: the lab's epochs, first batch to the end of the last, warm-up included. *vs fp32 (time)*: strict "
         "fp32's time over this run's, same loader and batch (the app's speedup); *vs fp32 (steady)*: this run's "
         "steady images/s over fp32's, which leaves out the one-off setup a run of about a second is dominated by; "
         "*vs fp32-default*: the time against the lab's baseline as its script runs (fp32 as PyTorch defaults). "
         "TF32 conv/matmul: the switches the run recorded (CUDA's switches: on a CPU they change nothing). PyTorch "
         "allocated / reserved leave the resident loader's data out (its own column, the same in every mode); "
         "nvidia-smi counts it, and the CUDA context: this process's use where NVML lists it, else the whole "
         "GPU's. Accuracy: after all the epochs the run trained."),
        "",
        ("| mode | loader | batch | status | time (lab's epochs) | epochs run | images/s | vs fp32 (time) "
         "| vs fp32 (steady) | vs fp32-default | TF32 conv/matmul | PyTorch allocated (resident data left out) "
         "| PyTorch reserved (resident data left out) | resident data | nvidia-smi (NVML) | RSS growth | accuracy "
         "| skipped steps |"),
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in data["rows"]:
        batch = r.get("batch_size", s["batch_size"])
        if r["status"] != "ok":
            reason = _cell(r.get("reason") or "")
            lines.append(f"| {r['precision']} | {r['loader']} | {batch} | {r['status']}: {reason} " + "| " * 14 + "|")
            continue
        mem = r["peak_memory"]
        resident = r.get("resident_data_bytes") if r["loader"] == "resident" else None
        lines.append(
            f"| {r['precision']} | {r['loader']} | {batch} | ok | {r.get('lab_time_s', r['total_time_s']):.1f} s "
            f"| {r.get('epochs_run', '')} | {_num(r['steady_images_per_s'])} | {_ratio(r.get('speedup_vs_fp32'))} "
            f"| {_ratio(r.get('throughput_vs_fp32'))} | {_ratio(r.get('speedup_vs_lab_baseline'))} "
            f"| {_tf32(r.get('tf32_flags') or {})} "
            f"| {_mib(mem.get('torch_max_allocated'))} | {_mib(mem.get('torch_max_reserved'))} | {_mib(resident)} "
            f"| {_mib(_nvml_figure(mem))} | {_mib(mem.get('process_rss_growth'))} "
            f"| {_pct(r['test_accuracy'])} | {r['skipped_steps']} |"
        )
    return lines + _md_profiles(data["rows"])


def _md_profiles(rows: list[dict]) -> list[str]:
    """The profiled runs' step by kind of work (ms per step) and, on CUDA, how many of their kernels' names show
    Tensor Cores."""
    profiled = [r for r in rows if r.get("status") == "ok" and r.get("profile")]
    if not profiled:
        return []
    names = list(profiled[0]["profile"]["categories"])
    lines = ["", "Profiled steps after training (trainer/profile.py), milliseconds per step:", "",
             "| mode | loader | step | " + " | ".join(names) + " | Tensor Core kernels |",
             "|---|---|---:|" + "---:|" * len(names) + "---:|"]
    for r in profiled:
        profile = r["profile"]
        kernels = profile.get("kernels") or []
        tensor_cores = f"{sum(k['tensor_cores'] for k in kernels)} of {len(kernels)}" if kernels else "-"
        cells = " | ".join(f"{profile['categories'].get(name, 0.0) * 1e3:.2f}" for name in names)
        lines.append(f"| {r['precision']} | {r['loader']} | {profile['step_s'] * 1e3:.2f} | {cells} | "
                     f"{tensor_cores} |")
    return lines


def _md_memory(data: dict) -> list[str]:
    if not data:
        return []
    lines = _md_memory_page(data.get("memory_page") or {})
    probe = data.get("largest_batch", {})
    lines += ["", f"Largest batch per precision (the search's ceiling of {PROBE_CEILING:,} first, then doubling from "
              f"{PROBE_START}, then bisection; each try two steps in a fresh process): {probe.get('status')}"
              + (f", {probe['reason']}" if probe.get("reason") else ""), ""]
    if probe.get("batch"):
        lines += ["| mode | largest batch |", "|---|---:|"]
        lines += [f"| {p} | {_largest(b)} |" for p, b in probe["batch"].items()]
        lines.append("")
    lines += [f"- {p}: {_cell(n)}" for p, n in probe.get("notes", {}).items()]
    lines += ["", f"Memory per precision ({data.get('memory_source')}; PyTorch's figures leave the resident loader's "
              "data out, nvidia-smi's count it):", ""]
    keys = [k for k in MEMORY_LABELS if any(k in m["peak_memory"] for m in data.get("memory", []))]
    if keys:
        lines += ["| mode | loader | " + " | ".join(keys) + " | resident_data_bytes |",
                  "|---|---|" + "---:|" * (len(keys) + 1)]
        lines += [f"| {m['precision']} | {m['loader']} | " + " | ".join(_mib(m["peak_memory"].get(k)) for k in keys)
                  + f" | {_mib(m.get('resident_data_bytes') if m['loader'] == 'resident' else None)} |"
                  for m in data["memory"]]
    return lines


def _md_memory_page(page: dict) -> list[str]:
    """The memory page's breakdown at two batch sizes, and what it gives per image."""
    if not page:
        return []
    lines = [f"The memory page's breakdown (`{page.get('command')}`: one step of the lab's model in a fresh process, "
             f"as the page measures it): {page['status']}" + (f", {page['reason']}" if page.get("reason") else "")]
    if not page.get("breakdowns"):
        return lines
    lines += ["", ("| mode | batch | saved activations | the step's peak (allocator) "
                   "| the whole bar (peak, allocator's reserve, CUDA context) | nvidia-smi, this process |"),
              "|---|---:|---:|---:|---:|---:|"]
    for b in page["breakdowns"]:
        saved = sum(v for k, v in b["components"].items() if k.startswith("saved activations"))
        lines.append(f"| {b['precision']} | {b['batch_size']} | {_mib(saved)} | {_mib(b['peak'])} "
                     f"| {_mib(sum(b['components'].values()))} | {_mib(b.get('process_total'))} |")
    lines.append("")
    for precision, f in page.get("per_image", {}).items():
        small, large = f["from_batches"]
        line = (f"- {precision}: {f['bytes_per_image'] / 1e3:,.1f} kB per image (the step's peak, batch {small} to "
                f"{large}), {_mib(f['fixed_bytes'])} whatever the batch")
        on_cpu = page["breakdowns"][0].get("device") == "cpu"
        if f["extrapolated_largest_batch"] is None:
            line += ("; no limit extrapolated: " + ("a CPU's is the machine's RAM" if on_cpu else
                                                      "the GPU's memory is unknown (step 1 did not run)"))
        else:
            line += (f"; the GPU's {_mib(f['memory_total_bytes'])} would hold a batch of about "
                     f"{f['extrapolated_largest_batch']:,} (extrapolated in a straight line, not measured: cuDNN's "
                     "workspaces and the allocator's fragmentation at larger batches can lower it)")
            if f["extrapolated_largest_batch"] > 50_000:
                line += "; more than the 50,000 training images: memory does not limit the batch here"
        lines.append(line + ".")
    return lines


def _nvml_figure(memory: dict) -> int | None:
    """nvidia-smi's figure for a run: its own process's use where NVML lists processes, else the whole device's."""
    return memory.get("nvml_process_used", memory.get("nvml_device_used"))


def _largest(batch: int | None) -> str:
    """A found batch; one at the ceiling fitted there, and the real limit may be higher."""
    if batch is None:
        return "-"
    return f"at least {batch:,} (the ceiling; the breakdown extrapolates)" if batch >= PROBE_CEILING else f"{batch:,}"


def _md_bench(data: dict) -> list[str]:
    if not data.get("table"):
        return [f"`{data['command']}`"] if data.get("command") else []
    return [f"`{data['command']}` ({data['duration_s']:.0f} s; the JSON is `{data['json']}`)", "", "```text",
            data["table"], "", data["verdicts"], "```"]


def _md_ladder(data: dict) -> list[str]:
    if not data.get("rungs"):
        return [f"`{data['command']}`"] if data.get("command") else []
    lines = [f"`{data['command']}` ({data['seconds']:.0f} s, {data['repeats']} repeat(s) planned; the JSON is "
             f"`{data['json']}`, which the When AMP pays off page reads from `reference/ladder-*.json`)", "",
             "| rung | images/s | time (median) | vs the lab's loop | accuracy | compile | runs | note |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for rung in data["rungs"]:
        speed = rung["speedup_vs_lab"] or {}
        spread = f" ({speed['low']:.2f}-{speed['high']:.2f})" if speed.get("low") is not None else ""
        seconds = rung["seconds"]
        note = rung["why_not"] or "; ".join(rung["errors"]) or (
            f"noisy timing: {rung['noisy_runs']} run(s)" if rung["noisy_runs"] else "")
        lines.append(f"| {_cell(rung['name'])} | {_num(rung['images_per_s'])} | "
                     + (f"{statistics.median(seconds):.1f} s" if seconds else "-") + " | "
                     + (f"{speed['median']:.2f}x{spread}" if speed else "-") + f" | {_pct(rung['test_accuracy'])} | "
                     + ("" if rung["compile_s"] is None else f"{rung['compile_s']:.1f} s")
                     + f" | {len(rung['seconds'])} | {_cell(note)} |")
    references = "; ".join(f"{name} {seconds:g} s" for name, seconds in (data.get("references") or {}).items())
    return lines + ["", f"Reference lines (other people's figures, on their machines): {references}."]


def _md_app(data: dict) -> list[str]:
    job = data.get("job")
    if not job:
        return []
    took = ", ".join(f"{s:.1f} s" for s in job.get("run_wall_s") or [])
    lines = [f"Job {job['job_id'][:8]} on {job['device_type']}: {job['status']}, runs took {took} (starts included).",
             ""]
    for run in job["runs"]:
        lines.append(f"- {run['precision']} on {run['device_name']}: {run['total_time_s']:.1f} s, "
                     f"{_num(run['steady_images_per_s'])} images/s, accuracy {_pct(run['test_accuracy'])}")
    page = data.get("page")
    if page and not page.get("rendered", True):
        lines += ["", f"Results page: not rendered: {_cell(page['error'])}"]
    elif page:
        lines += ["", (f"Results page: {len(page['exceptions'])} exception(s), {len(page['errors'])} error(s), "
                       f"{page['charts']} chart(s), downloads: {', '.join(page['downloads'])}.")]
        if page.get("lab_table"):
            head = list(page["lab_table"][0])
            lines += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            lines += ["| " + " | ".join(_cell(str(row[h])) for h in head) + " |" for row in page["lab_table"]]
    return lines


# ---- small helpers -------------------------------------------------------------------------------


def _child(args: list[str], deadline: float) -> subprocess.CompletedProcess:
    """`python ARGS` from the repository root in a process group of its own, bounded by `deadline`.

    trainer.child_process.run_python, except that running out of time stops the whole group: a benchmark's runs,
    pytest's tests and DataLoader workers would otherwise run on and share the device with the next step.
    """
    seconds = deadline - time.monotonic()
    if seconds < 1:
        raise StepTimeout("the step's time ran out")
    child = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             cwd=REPO_ROOT, start_new_session=True)
    try:
        out, err = child.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        out, _ = _stop_group(child)
        raise StepTimeout(f"python {' '.join(args[:2])} timed out after {seconds:.0f} s", stdout=out) from None
    except BaseException:  # Ctrl-C included: nothing the kit started outlives it
        _stop_group(child)
        raise
    return subprocess.CompletedProcess(child.args, child.returncode, out, err)


@dataclass
class ChildEnd:
    """How a child that writes as it goes ended: what it printed, and why it ended early (None: exit code 0)."""

    stdout: str
    problem: str | None
    timed_out: bool
    returncode: int | None = None  # None: killed at its deadline


def _child_until(args: list[str], deadline: float) -> ChildEnd:
    """`_child`, for a child whose output so far is worth reading even when it fails or is killed at `deadline`."""
    try:
        done = _child(args, deadline)
    except StepTimeout as err:
        return ChildEnd(err.stdout, str(err), timed_out=True)
    problem = None if done.returncode == 0 else (
        f"python {' '.join(args[:2])} exit code {done.returncode}: {_tail(done.stderr)}")
    return ChildEnd(done.stdout, problem, timed_out=False, returncode=done.returncode)


def _stop_group(child: subprocess.Popen) -> tuple[str, str]:
    """Kill the child's whole group; what it printed until then (communicate keeps it across a timeout)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        return child.communicate(timeout=10)
    return "", ""


def _json_child(args: list[str], deadline: float):
    """The JSON value on the last line the child printed (as trainer.child_process.run_python_json reads it)."""
    done = _child(args, deadline)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise ChildProcessError(f"python {' '.join(args[:2])} exit code {done.returncode}: {_tail(done.stderr)}")
    return json.loads(lines[-1])


def _last_json(text: str) -> dict | None:
    """The last line of `text` that is a JSON object, or None."""
    for line in reversed((text or "").strip().splitlines()):
        with contextlib.suppress(json.JSONDecodeError):
            value = json.loads(line)
            if isinstance(value, dict):
                return value
    return None


def _repo_relative(path: Path) -> str:
    """A path as pytest is given it: relative to the repository root where it is under it."""
    path = Path(path).resolve()
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


def _worst(rows: list[dict]) -> tuple[str, str | None]:
    """A step of several runs: failed if one failed, timed out if one ran out of time, else ok."""
    for status in ("failed", "timed out"):
        bad = [r for r in rows if r["status"] == status]
        if bad:
            return status, "; ".join(f"{r['precision']} {r['loader']}: {r['reason']}" for r in bad)
    return "ok", None


def _tail(text: str) -> str:
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return one_line(lines[-1]) if lines else "no output"


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def scratch_folder(out: Path) -> Path:
    """A new folder for the kit's temporaries, outside `out`: beside it where it may be made there (the same
    filesystem, so a finished file is renamed into `out` whole), else in the system's temporary folder."""
    out.mkdir(parents=True, exist_ok=True)
    try:
        return Path(tempfile.mkdtemp(prefix=f".{out.name}-scratch-", dir=out.resolve().parent))
    except OSError:
        return Path(tempfile.mkdtemp(prefix="gpu-check-"))


def _write_atomic(path: Path, text: str, scratch: Path) -> None:
    """Write in `scratch`, then move into place: a kit killed mid-write leaves the previous complete file and no
    temporary in the output folder, whose files the device tool brings back (8 at most)."""
    partial = scratch / (path.name + ".partial")
    partial.write_text(text, encoding="utf-8")
    shutil.move(partial, path)  # a rename where both share a filesystem, else a copy


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _tf32(flags: dict) -> str:
    """'on/off': TF32 for convolutions, then for matmuls, as a run recorded them."""
    words = {True: "on", False: "off"}
    return "/".join(words.get(flags.get(key), "?") for key in ("cudnn_allow_tf32", "cuda_matmul_allow_tf32"))


def _ratio(value) -> str:
    return "" if value is None else f"{value:.2f}x"


def _mib(n_bytes) -> str:
    return "" if n_bytes is None else f"{n_bytes / 2**20:,.0f} MiB"


def _num(value) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_check", description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder for gpu-check.json, gpu-check.md and the bench JSON")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                        help="cuda (default): the GPU acceptance run; cpu: the same wiring without a GPU")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks the wiring in a few minutes")
    parser.add_argument("--budget", type=float, default=None,
                        help=f"seconds for the whole kit (default: {FIRST_TRY_S:.0f} full, 290 quick; with --only, "
                             "the chosen steps' caps added up); later steps are skipped past it")
    parser.add_argument("--only", default=None, metavar="N[,N...]",
                        help="run only these steps (1-7), e.g. --only 5 to retry the app after fixing it; step 3 "
                             "feeds step 4's memory picture; step 7, the ladder, runs only when named here")
    args = parser.parse_args(argv)
    only = None
    if args.only is not None:
        try:
            only = {int(n) for n in args.only.split(",") if n.strip()}
        except ValueError:
            parser.error(f"--only takes step numbers such as 3,5, got {args.only!r}")
        if not only or not only <= set(range(1, len(STEPS))):
            parser.error(f"--only takes step numbers from 1 to {len(STEPS) - 1}, got {args.only!r}")
    plan = make_plan(args.quick, args.device)
    if args.budget is not None and (not math.isfinite(args.budget) or args.budget <= 0):
        parser.error("--budget must be a positive number of seconds")
    budget = args.budget if args.budget is not None else default_budget(plan, only)
    plan = Plan(**{**asdict(plan), "budget_s": budget})
    command = "python -m bench.gpu_check " + shlex.join(argv)
    kit = Kit(Path(args.out), args.device, plan, command, only)
    print(f"gpu-check: {plan.name} plan on {args.device}, at most {plan.budget_s:.0f} s, writing to {args.out}",
          flush=True)
    return kit.run()


if __name__ == "__main__":
    sys.exit(main())
