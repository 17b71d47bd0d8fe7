"""A class server's job queue in a process of its own, for the restart tests: `submit` queues three jobs (one runs,
two wait) and serves until it is killed; `resume` starts on the same state folder and serves until every job has
ended, then prints the jobs as JSON lines. SIGTERM stops the queue as a server's shutdown does.

Each run records its seed in CALLS (one line per start) and waits until the RELEASE file exists."""

import json
import signal
import sys
import time
from pathlib import Path

from server.jobs import JobManager
from server.records import JobSpec
from server.settings import Settings
from trainer.config import RunConfig
from trainer.isolated import RunOutcome
from trainer.results import RunResult


def main(mode: str, state: Path) -> None:
    calls, release = state / "calls.txt", state / "release"

    def runner(config, on_progress=None, should_cancel=None, on_spawn=None, env=None):
        with calls.open("a") as log:
            log.write(f"{config.seed}\n")
        on_spawn(0)
        while not release.exists():
            if should_cancel():
                return RunOutcome(config, "cancelled", error="the run was cancelled", error_kind="CancelledError")
            time.sleep(0.02)
        result = RunResult(config=config, environment={}, total_time_s=0.1, epoch_times_s=[0.1],
                           steady_images_per_s=100.0, peak_memory={}, loss_history=[], test_accuracy=None)
        return RunOutcome(config, "ok", result=result)

    settings = Settings(state_dir=str(state), data_root=str(state), device="cpu")
    manager = JobManager(settings, runner=runner, device_type="cpu").start()
    signal.signal(signal.SIGTERM, lambda *_: (manager.shutdown(wait=True, timeout=10), sys.exit(0)))
    if mode == "submit":
        for seed, learner in ((1, "ada"), (2, "bob"), (3, "cy")):
            run = RunConfig(precision="fp32", epochs=1, batch_size=32, data="synthetic", subset=64, seed=seed)
            manager.submit(learner, JobSpec("run", [run], label=f"job {seed}"))
        while not calls.exists():
            time.sleep(0.02)
        print("ready", flush=True)
        while True:
            time.sleep(1)
    print(json.dumps({"requeued": manager.requeued_at_start, "failed": manager.interrupted_at_start}), flush=True)
    deadline = time.monotonic() + 60
    while any(not view.finished for view in manager.store.list_jobs()) and time.monotonic() < deadline:
        time.sleep(0.05)
    for view in sorted(manager.store.list_jobs(), key=lambda view: view.created_at):
        print(json.dumps({"label": view.label, "status": view.status, "restarts": view.extras.get("restarts", 0)}))
    manager.shutdown(wait=True, timeout=10)


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
