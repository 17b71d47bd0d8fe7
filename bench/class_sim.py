"""A simulated class: N learners each submit one tiny comparison through the real job manager, at once.

    python -m bench.class_sim --learners N --backend local|ray [--workers K] [--fake-gpus G] [--nodes N] [--json PATH]
    python -m bench.class_sim --learners 200 --pages 20 [--json PATH]

Every run is a real training run in its own process (synthetic data, a few seconds each); only the learners are
simulated. Prints and writes one JSON object: learners, submitted, finished, failed, lost (submitted but never
final), duplicated (a run executed more than once), max_concurrent_runs (from the runs' own start and end: the
child's start to the runner's return), makespan_s (first submit to last final state), first_progress_s (first
submit to the first progress line of any job: what a learner waits on an empty queue), backend, workers, the
1-minute load average at the end and (ray) nodes.

`--backend local` runs the embedded workers, as the app does (each run's process started ahead; `--no-prestart`
starts it at the run, and `--warm-s` is how long the server is up before the learners come): one worker on a CPU
unless `--workers K` asks for more (timings then share the cores). `--backend ray` starts a local Ray with
`--fake-gpus G` GPU resources (runs still on the CPU), or with `--nodes N` a local cluster of N separate Ray nodes
(each with G fake GPUs, default 1), or joins the cluster at `--ray-address`, and gives each run to Ray as a task;
as in the app, the workers follow the cluster's GPUs unless `--workers K` fixes them.

`--pages S` measures what the class's open pages cost the server instead: no run trains (a stand-in runner reports
progress and a loss point four times a second for 3 s, as a real run does), one job runs at a time, and for S
seconds each learner's page ticks once a second as a page that follows its job does (its active jobs from the
manager's memory, and the queue's length). It prints and writes the ticks' wall times (median, p99, max), with the
load average at the end and the cores: other work on the machine lengthens the tail. Nothing goes over the network.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from server.devices import Slot
from server.jobs import JobManager
from server.records import FINISHED_STATUSES, JobSpec
from server.settings import Settings
from trainer.config import RunConfig
from trainer.isolated import PrestartedRunner, RunOutcome, run_isolated
from trainer.progress import Progress

POLL_S = 0.05
TICK_S = 1.0  # a page's refresh while its job runs (a waiting job's page ticks less often)
PROGRESS_PER_S = 4
STAND_IN_RUN_S = 3.0


class RunLog:
    """Wraps a runner: counts each (learner, precision) run and keeps its start and end times."""

    def __init__(self, runner):
        self._runner = runner
        self._lock = threading.Lock()
        self.calls: Counter = Counter()
        self.spans: list[tuple[float, float]] = []
        self.first_progress: float | None = None

    def __call__(self, config: RunConfig, **kwargs):
        with self._lock:
            self.calls[(config.seed, config.precision)] += 1
        started: list[float] = []
        spawned = kwargs.pop("on_spawn", None)

        def on_spawn(pid: int) -> None:
            started.append(time.time())
            if spawned is not None:
                spawned(pid)

        progressed = kwargs.pop("on_progress", None)

        def on_progress(progress) -> None:
            if self.first_progress is None:
                self.first_progress = time.time()
            if progressed is not None:
                progressed(progress)

        try:
            return self._runner(config, on_spawn=on_spawn, on_progress=on_progress, **kwargs)
        finally:
            if started:
                with self._lock:
                    self.spans.append((started[0], time.time()))

    @property
    def duplicated(self) -> int:
        return sum(1 for count in self.calls.values() if count > 1)

    def max_concurrent(self) -> int:
        """The most runs alive at one moment (an end at the same instant as a start does not overlap it)."""
        events = sorted([(start, 1) for start, _ in self.spans] + [(end, -1) for _, end in self.spans])
        alive = most = 0
        for _, change in events:
            alive += change
            most = max(most, alive)
        return most


def tiny_compare(learner: int) -> JobSpec:
    """fp32 against amp-bf16 on 256 synthetic images: a few seconds per run on a CPU."""
    common = {"epochs": 1, "batch_size": 64, "data": "synthetic", "loader": "resident", "subset": 256,
              "test_subset": 128, "num_workers": 0, "log_every": 1, "seed": learner}
    runs = [RunConfig(precision=precision, **common) for precision in ("fp32", "amp-bf16")]
    return JobSpec("compare", runs, label=f"class_sim learner {learner}")


def simulate(
    learners: int,
    runner,
    slots: list[Slot] | None,
    backend: str,
    state_dir: str,
    timeout_s: float,
    warm_s: float = 0.0,
    cluster_slots: Callable[[], list[Slot]] | None = None,
    jobs_for: Callable[[int], list[JobSpec]] | None = None,
    settings: Settings | None = None,
) -> dict:
    """Submit one comparison per learner (or the jobs `jobs_for(learner)` gives, in that order) from N threads at once
    and wait for every job to end (or the timeout). The workers are `slots`, or (None) follow `cluster_slots` as in
    the app; `settings` are the server's (by default one job per learner at a time, open mode)."""
    settings = settings or Settings(state_dir=state_dir, data_root=state_dir, device="cpu", max_queued_per_learner=1,
                                    class_mode=False)
    jobs_for = jobs_for or (lambda index: [tiny_compare(index)])
    log = RunLog(runner)
    manager = JobManager(settings, runner=log, device_type="cpu",
                         slots=slots if slots is not None else cluster_slots()).start()
    if slots is None:
        from server.ray_runner import follow_cluster  # Ray is imported only on this path

        follow_cluster(manager, cluster_slots)
    slots = manager.slots
    if isinstance(runner, PrestartedRunner):
        for slot in slots:
            runner.prestart(slot.env)
    time.sleep(warm_s)
    started = time.time()
    ids, refused = submit_at_once(manager, learners, jobs_for)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not all(manager.get(i).finished for i in ids):
        time.sleep(POLL_S)
    views = [manager.get(i) for i in ids]
    manager.shutdown(wait=True, timeout=10)
    if isinstance(runner, PrestartedRunner):
        runner.close()
    final = [v for v in views if v.status in FINISHED_STATUSES]
    ends = [v.finished_at for v in final if v.finished_at]
    last_end: dict[str, float] = {}
    for view in final:
        if view.finished_at:
            last_end[view.spec.purpose] = max(last_end.get(view.spec.purpose, 0.0), view.finished_at - started)
    return {
        "learners": learners,
        "submitted": len(ids),
        "finished": sum(1 for v in final if v.status == "done"),
        "failed": sum(1 for v in final if v.status != "done"),
        "lost": len(ids) - len(final),
        "duplicated": log.duplicated,
        "max_concurrent_runs": log.max_concurrent(),
        "makespan_s": round(max(ends) - started, 2) if ends else None,
        "makespan_by_purpose_s": {purpose: round(seconds, 2) for purpose, seconds in sorted(last_end.items())},
        "first_progress_s": round(log.first_progress - started, 2) if log.first_progress else None,
        "backend": backend,
        "workers": len(slots),
        "load_1min": round(os.getloadavg()[0], 1),  # other work on the machine stretches every run
        "refused": refused,
        "errors": sorted({v.error for v in final if v.error}),
    }


def submit_at_once(manager: JobManager, learners: int, jobs_for: Callable[[int], list[JobSpec]]):
    """Each learner submits its jobs from a thread of its own, all at once: (the jobs' ids, why any were refused)."""
    ids: list[str] = []
    refused: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(learners)

    def learner(index: int) -> None:
        barrier.wait()
        for spec in jobs_for(index):
            try:
                job_id = manager.submit(f"learner-{index}", spec)
            except Exception as err:  # a refused submit is a result of the simulation, not a crash of it
                with lock:
                    refused.append(str(err))
                continue
            with lock:
                ids.append(job_id)

    threads = [threading.Thread(target=learner, args=(n,)) for n in range(learners)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return ids, refused


def stand_in_runner(config, on_progress=None, should_cancel=None, on_spawn=None, env=None):
    """Trains nothing; reports progress and a loss point PROGRESS_PER_S times a second for STAND_IN_RUN_S."""
    steps = int(STAND_IN_RUN_S * PROGRESS_PER_S)
    for step in range(1, steps + 1):
        if should_cancel is not None and should_cancel():
            return RunOutcome(config, "cancelled", error="cancelled", error_kind="CancelledError")
        on_progress(Progress("training", 1, 1, step, steps, step, steps, loss=2.3 - step / steps, images_per_s=900.0))
        time.sleep(1 / PROGRESS_PER_S)
    return RunOutcome(config, "failed", error="a stand-in run has no result", error_kind="crashed")


def open_pages(learners: int, seconds: float, state_dir: str) -> dict:
    """Each learner submits a tiny comparison (stand-in runs) and keeps its page open for `seconds`, ticking every
    TICK_S; the ticks' wall times."""
    settings = Settings(state_dir=state_dir, data_root=state_dir, device="cpu", max_queued_per_learner=1,
                        class_mode=False)
    manager = JobManager(settings, runner=stand_in_runner, device_type="cpu").start()
    submit_at_once(manager, learners, lambda index: [tiny_compare(index)])
    times: list[float] = []
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def page(learner: str) -> None:
        time.sleep(random.uniform(0, TICK_S))  # pages were opened at different moments
        while time.monotonic() < deadline:
            tick_started = time.perf_counter()
            manager.active_jobs_for(learner)
            manager.queue_length()
            spent = time.perf_counter() - tick_started
            with lock:
                times.append(spent)
            time.sleep(max(0.0, TICK_S - spent))

    pages = [threading.Thread(target=page, args=(f"learner-{n}",), daemon=True) for n in range(learners)]
    for thread in pages:
        thread.start()
    for thread in pages:
        thread.join(seconds + 10)
    manager.shutdown(wait=True, timeout=10)
    times_ms = sorted(1000 * t for t in times)
    return {
        "learners": learners,
        "seconds": seconds,
        "ticks": len(times_ms),
        "tick_median_ms": round(statistics.median(times_ms), 3),
        "tick_p99_ms": round(times_ms[int(0.99 * (len(times_ms) - 1))], 3),
        "tick_max_ms": round(times_ms[-1], 3),
        "load_average_1min_at_end": round(os.getloadavg()[0], 2),
        "cores": os.cpu_count(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--learners", type=int, default=6, help="simulated learners, one comparison each")
    parser.add_argument("--backend", choices=("local", "ray"), default="local", help="embedded workers or Ray tasks")
    parser.add_argument("--workers", type=int, default=None,
                        help="parallel workers (local: default 1; ray: default the cluster's GPUs or nodes,"
                        " followed as they change)")
    parser.add_argument("--fake-gpus", type=int, default=None,
                        help="ray: start a local Ray with this many fake GPU resources; local: that many workers")
    parser.add_argument("--nodes", type=int, default=None,
                        help="ray: start a local cluster of this many separate nodes, each with --fake-gpus GPUs (1)")
    parser.add_argument("--ray-address", default=None, help="ray: join this cluster instead of starting one")
    parser.add_argument("--no-prestart", action="store_true", help="local: start each run's process at the run")
    parser.add_argument("--warm-s", type=float, default=20.0,
                        help="local: seconds the server is up before the learners submit (the processes import)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for every job to end")
    parser.add_argument("--pages", type=float, default=None, metavar="S",
                        help="instead: each learner's page ticks for S seconds, stand-in runs (local, 1..300)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.learners < 1:
        parser.error("--learners must be at least 1")
    if args.nodes is not None and (args.nodes < 1 or args.backend != "ray" or args.ray_address):
        parser.error("--nodes needs --backend ray without --ray-address, and at least 1")
    if args.pages is not None:
        if args.backend != "local" or not 1 <= args.pages <= 300 or args.learners > 2000:
            parser.error("--pages needs --backend local, 1 to 300 seconds and at most 2000 learners")
        with tempfile.TemporaryDirectory(prefix="amp-lab-class-sim-") as state_dir:
            return _report(open_pages(args.learners, args.pages, state_dir), args.json, ok=True)

    cleanups: list[Callable[[], None]] = []
    try:
        runner, slots, follow = _backend(args, cleanups)
        with tempfile.TemporaryDirectory(prefix="amp-lab-class-sim-") as state_dir:
            warm_s = args.warm_s if args.backend == "local" and not args.no_prestart else 0.0
            figures = simulate(args.learners, runner, slots, args.backend, state_dir, args.timeout, warm_s, follow)
        if args.backend == "ray":
            figures["nodes"], figures["nodes_used"] = runner.nodes, len(runner.runs_by_node)
    finally:
        for cleanup in reversed(cleanups):
            cleanup()
    return _report(figures, args.json, figures["finished"] == figures["submitted"] == figures["learners"]
                   and not figures["duplicated"])


def _report(figures: dict, path: Path | None, ok: bool) -> int:
    """Print the figures as JSON, and write them to `path` too; the exit status."""
    text = json.dumps(figures, indent=2)
    print(text)
    if path is not None:
        path.write_text(text + "\n")
    return 0 if ok else 1


def _backend(args: argparse.Namespace, cleanups: list[Callable[[], None]]):
    """The runner, the fixed workers (or None) and what they follow (or None); what to stop goes into `cleanups`."""
    if args.backend == "local":
        count = args.workers or args.fake_gpus or 1
        slots = [Slot("cpu")] if count == 1 else [Slot(f"worker {n}") for n in range(count)]
        return (run_isolated if args.no_prestart else PrestartedRunner()), slots, None
    from server.ray_runner import LocalCluster, RayRunner  # Ray is imported only on this path

    address = args.ray_address
    if args.nodes:
        gpus = 1 if args.fake_gpus is None else args.fake_gpus
        cluster = LocalCluster(gpus=gpus)
        cleanups.append(cluster.shutdown)
        for _ in range(args.nodes - 1):
            cluster.add_node(gpus=gpus)
        address = cluster.address
    runner = RayRunner.start(address, fake_gpus=args.fake_gpus)
    cleanups.append(runner.close)
    if args.workers:
        return runner, runner.slots(args.workers), None
    return runner, None, runner.slots


if __name__ == "__main__":
    sys.exit(main())
