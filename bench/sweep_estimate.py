"""How close the server's time estimates come to a real sweep on this machine: once on a fresh server (the coarse
table) and once more after that sweep is in the history (the estimate a class sees from the second sweep on).

    python -m bench.sweep_estimate [--device cpu] [--amp amp-bf16] [--batch-sizes 32 64] [--steps 5] [--rounds 2]
                                   [--json PATH]

Each round plans a sweep as the "When AMP pays off" page does (server.offer.Offer.sweep), asks server.estimate for
every run, runs the sweep through the real job manager and reads each run's wall time back from the history.
Prints a table of estimate against real time per run and per sweep and writes them as JSON; the issue's target is
a ratio within 1.5x either way.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from server.estimate import estimate_run_seconds
from server.jobs import JobManager
from server.offer import Offer
from server.records import JobSpec
from server.settings import Settings
from trainer.environment import cpu_flags

TARGET_RATIO = 1.5
JOB_TIMEOUT_S = 900


def ratio(estimate: float | None, real: float | None) -> float | None:
    """Estimate over real time: above 1 the estimate was too long, below 1 too short."""
    return None if not estimate or not real else estimate / real


def run_round(manager: JobManager, sweep: JobSpec, name: str) -> dict:
    """Estimate every run of `sweep`, run it as one job and pair each estimate with the run's wall time."""
    plan = sweep.runs
    estimates = [estimate_run_seconds(config, manager.store, manager.device_type) for config in plan]
    job = JobSpec("sweep", plan, label=f"sweep estimate: {name}", probe_max_batch=sweep.probe_max_batch)
    job_id = manager.submit("bench-sweep-estimate", job)
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while not manager.get(job_id).finished and time.monotonic() < deadline:
        time.sleep(0.2)
    job = manager.get(job_id)
    with manager.store.connect() as db:
        walls = dict(db.execute("SELECT run_index, wall_s FROM runs WHERE job_id = ?", (job_id,)).fetchall())
    runs = []
    for index, (config, estimate) in enumerate(zip(plan, estimates)):
        real = walls.get(index)
        runs.append({"precision": config.precision, "batch_size": config.batch_size, "estimate_s": estimate,
                     "real_s": real, "ratio": ratio(estimate, real)})
    total_estimate = None if None in estimates else sum(estimates)
    total_real = (job.finished_at - job.started_at) if job.finished_at and job.started_at else None
    return {"round": name, "status": job.status, "error": job.error, "runs": runs,
            "estimate_s": total_estimate, "real_s": total_real, "ratio": ratio(total_estimate, total_real)}


def print_round(result: dict) -> None:
    def fmt(value, spec=".1f"):
        return "?" if value is None else format(value, spec)

    print(f"\n{result['round']} ({result['status']}{': ' + result['error'] if result['error'] else ''})")
    print(f"{'run':<22} {'estimate s':>10} {'real s':>8} {'ratio':>6}")
    for run in result["runs"]:
        print(f"{run['precision'] + ' @ ' + str(run['batch_size']):<22} {fmt(run['estimate_s']):>10} "
              f"{fmt(run['real_s']):>8} {fmt(run['ratio'], '.2f'):>6}")
    print(f"{'whole sweep':<22} {fmt(result['estimate_s']):>10} {fmt(result['real_s']):>8} "
          f"{fmt(result['ratio'], '.2f'):>6}")


def within_target(value: float | None) -> bool:
    return value is not None and 1 / TARGET_RATIO <= value <= TARGET_RATIO


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--amp", default="amp-bf16", choices=("amp-bf16", "amp-fp16"))
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[32, 64])
    parser.add_argument("--steps", type=int, default=5, help="steps per sweep point (the page's 'steps per run')")
    parser.add_argument("--rounds", type=int, choices=(1, 2), default=2,
                        help="1: the fresh server's estimate only; 2: also a second sweep estimated from the first")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="amp-lab-sweep-estimate-") as state_dir:
        settings = Settings(state_dir=state_dir, data_root=state_dir, device=args.device, class_mode=False)
        manager = JobManager(settings, device_type=args.device).start()
        sweep = Offer.for_device(settings, args.device).sweep(args.amp, args.batch_sizes, steps_per_run=args.steps)
        load_before = os.getloadavg()[0]
        names = ("fresh server (coarse table)", "second sweep (from this server's history)")[:args.rounds]
        rounds = [run_round(manager, sweep, name) for name in names]
        manager.shutdown(wait=True, timeout=10)
    for result in rounds:
        print_round(result)
    report = {
        "command": "python -m bench.sweep_estimate " + " ".join(argv if argv is not None else sys.argv[1:]),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "device": args.device, "cpu_flags": cpu_flags(), "cores": os.cpu_count(),
        "load_avg_before": round(load_before, 2), "load_avg_after": round(os.getloadavg()[0], 2),
        "target_ratio": TARGET_RATIO, "rounds": rounds,
        "within_target": {result["round"]: within_target(result["ratio"]) for result in rounds},
    }
    print(f"\nload average {report['load_avg_before']} before, {report['load_avg_after']} after "
          f"on {report['cores']} cores; target: whole sweep within {TARGET_RATIO}x")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
