"""The app's job manager on a Ray cluster that an operator started (`ray_address` in the settings, as the app reads
it), in a process of its own for tests/server/test_ray_operator.py: two comparisons run, one on each node; after
"running" is printed the test stops the second node; a third comparison is queued after; then every job's end is
printed as a JSON line."""

import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from server.jobs import JobManager
from server.offer import ComparisonRequest, Offer
from server.settings import Settings


def main(address: str, state: Path) -> None:
    settings = Settings(ray_address=address, state_dir=str(state), data_root=str(state), device="cpu",
                        class_mode=False, max_queued_per_learner=3)
    manager = JobManager(settings).start()  # joins the cluster itself, as the app does
    offer = Offer.for_device(settings, manager.device_type)
    # Long enough (hundreds of steps of 32 images) to be running on both nodes when the second one leaves; fp32 in
    # both runs (fp32-default is fp32 on a CPU), since bf16 is emulated, and slow, on CPUs without bf16 units.
    long = ComparisonRequest(precision="fp32-default", epochs=2, batch_size=32, subset=2048, data="synthetic",
                             loader="resident")
    ids = []
    for learner in ("ada", "bob"):
        spec = offer.comparison(long)
        spec.runs = [replace(run, num_workers=0) for run in spec.runs]
        ids.append(manager.submit(learner, spec))
    deadline = time.monotonic() + 180
    while not all(manager.get(job_id).status == "running" and manager.get(job_id).progress for job_id in ids):
        views = [manager.get(job_id) for job_id in ids]
        assert time.monotonic() < deadline and not any(view.finished for view in views), \
            f"both jobs never ran at once: {[(view.status, view.error) for view in views]}"
        time.sleep(0.1)
    print("running", flush=True)
    sys.stdin.readline()  # the test has stopped the second node
    short = replace(long, epochs=1, subset=256)
    spec = offer.comparison(short)
    spec.runs = [replace(run, num_workers=0) for run in spec.runs]
    ids.append(manager.submit("cy", spec))
    deadline = time.monotonic() + 300
    while not all(manager.get(job_id).finished for job_id in ids) and time.monotonic() < deadline:
        time.sleep(0.2)
    for job_id in ids:
        view = manager.get(job_id)
        print(json.dumps({"learner": view.learner_id, "status": view.status, "error": view.error}), flush=True)
    manager.shutdown(wait=True, timeout=30)


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
