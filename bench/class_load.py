"""What a class's open pages cost the server: `python -m bench.class_load --learners 200 --seconds 20`.

Each simulated learner has a job in the real job manager (with a real SQLite history) and "ticks" the way the
Run page's live fragment does while that job waits or runs: its active jobs from the manager's memory, and the
queue's length. One job runs at a time on a stand-in runner that reports progress and loss points four times a
second, as a real run does. The per-tick wall times are printed (median, p99) and written as JSON. Nothing goes
over the network; it stops by itself after --seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path

from server.jobs import JobManager
from server.records import JobSpec
from server.settings import Settings
from trainer.config import RunConfig
from trainer.isolated import RunOutcome
from trainer.progress import Progress

TICK_S = 1.0  # the Run page's refresh while a job runs (a waiting job's page ticks less often)
PROGRESS_PER_S = 4
STAND_IN_RUN_S = 3.0


def stand_in_runner(config, on_progress=None, should_cancel=None, on_spawn=None, env=None):
    """Trains nothing; reports progress and a loss point PROGRESS_PER_S times a second for STAND_IN_RUN_S."""
    steps = int(STAND_IN_RUN_S * PROGRESS_PER_S)
    for step in range(1, steps + 1):
        if should_cancel is not None and should_cancel():
            return RunOutcome(config, "cancelled", error="cancelled", error_kind="CancelledError")
        on_progress(Progress("training", 1, 1, step, steps, step, steps, loss=2.3 - step / steps, images_per_s=900.0))
        time.sleep(1 / PROGRESS_PER_S)
    return RunOutcome(config, "failed", error="a stand-in run has no result", error_kind="crashed")


def tick(manager: JobManager, learner: str) -> float:
    started = time.perf_counter()
    manager.active_jobs_for(learner)
    manager.queue_length()
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--learners", type=int, default=200, help="simulated learners, each with one job")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long the learners keep ticking")
    parser.add_argument("--json", metavar="PATH", help="also write the figures here")
    args = parser.parse_args(argv)
    if not 1 <= args.learners <= 2000 or not 1 <= args.seconds <= 300:
        parser.error("--learners must be 1..2000 and --seconds 1..300")

    with tempfile.TemporaryDirectory() as state:
        settings = Settings(state_dir=state, max_queued_per_learner=1, device="cpu")
        manager = JobManager(settings, runner=stand_in_runner, device_type="cpu").start()
        config = RunConfig(precision="fp32", epochs=1, batch_size=64, data="synthetic", subset=256, device="cpu")
        learners = [f"learner-{n}" for n in range(args.learners)]
        for learner in learners:
            manager.submit(learner, JobSpec("run", [config], label=f"{learner}'s run"))
        times: list[float] = []
        lock = threading.Lock()
        deadline = time.monotonic() + args.seconds

        def learner_page(learner: str) -> None:
            time.sleep(random.uniform(0, TICK_S))  # pages were opened at different moments
            while time.monotonic() < deadline:
                spent = tick(manager, learner)
                with lock:
                    times.append(spent)
                time.sleep(max(0.0, TICK_S - spent))

        pages = [threading.Thread(target=learner_page, args=(learner,), daemon=True) for learner in learners]
        for page in pages:
            page.start()
        for page in pages:
            page.join(args.seconds + 10)
        manager.shutdown(wait=True, timeout=10)

    times_ms = sorted(1000 * t for t in times)
    figures = {
        "learners": args.learners,
        "seconds": args.seconds,
        "ticks": len(times_ms),
        "tick_median_ms": round(statistics.median(times_ms), 3),
        "tick_p99_ms": round(times_ms[int(0.99 * (len(times_ms) - 1))], 3),
        "tick_max_ms": round(times_ms[-1], 3),
        # Other work on the machine lengthens the tail (ticks wait for a core): say how busy it was.
        "load_average_1min_at_end": round(os.getloadavg()[0], 2),
        "cores": os.cpu_count(),
    }
    print(f"{figures['learners']} learners, {figures['ticks']} ticks in {args.seconds:.0f} s: per tick median "
          f"{figures['tick_median_ms']:.2f} ms, p99 {figures['tick_p99_ms']:.2f} ms, max {figures['tick_max_ms']:.2f} ms (load average {figures['load_average_1min_at_end']} on "
          f"{figures['cores']} cores)")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
