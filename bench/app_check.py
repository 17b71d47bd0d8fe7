"""Step 5 of the GPU kit, in a fresh process: the class-server path end to end on one device.

A comparison (fp32 against an AMP mode) is submitted to the app's job manager (`server.jobs.JobManager`, as the Run
page does), runs as the server runs it (each run in its own process), and the Results page is then rendered on
it with Streamlit's AppTest through `app.py`'s navigation. Prints a JSON line as soon as the job has ended (the job
and its runs), then another with the page too: the last line is the whole answer, and a page that crashes or hangs
the process still leaves the job's line. Streamlit is imported before the job runs; when it cannot be, the job
still runs and the page is reported as not rendered, with why, in one line.

    python -m bench.app_check --device cuda --state-dir DIR [--amp amp-fp16] [--subset N] [--epochs E] [--batch-size B]

The job's line holds each run's whole result too ("results"), which the kit keeps as a reference comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from trainer.errors import one_line

REPO_ROOT = Path(__file__).resolve().parent.parent
APP = REPO_ROOT / "app.py"
RESULTS_PAGE = "pages/results.py"


def run_comparison(device: str, amp: str, subset: int, epochs: int, deadline: float, batch_size: int = 256) -> dict:
    """Submit one compare job to a JobManager on the instructor's settings (from AMP_LAB_*) and wait for it."""
    from server.jobs import JobManager
    from server.records import JobSpec
    from server.settings import Settings
    from trainer.config import RunConfig

    settings = Settings.from_env()
    manager = JobManager(settings).start()
    try:
        common = {"data": "synthetic", "epochs": epochs, "subset": subset, "test_subset": min(subset, 1000),
                  "batch_size": batch_size, "device": device, "loader": "resident", "num_workers": 0}
        spec = JobSpec("compare", [RunConfig(precision="fp32", **common), RunConfig(precision=amp, **common)],
                       label=f"gpu-check: fp32 vs {amp}")
        job_id = manager.submit("gpu-check", spec)
        view = manager.get(job_id)
        while not view.finished and time.monotonic() < deadline:
            time.sleep(0.2)
            view = manager.get(job_id)
        if not view.finished:
            manager.cancel(job_id, "gpu-check")
    finally:
        manager.shutdown(wait=True, timeout=30)
    view = manager.get(job_id)
    return {
        "job_id": job_id,
        "status": view.status,
        "error": view.error,
        "device_type": view.extras.get("device_type"),
        "run_wall_s": view.extras.get("run_wall_s"),
        "runs": [
            {
                "precision": result.precision,
                "device_name": result.environment.get("device_name"),
                "total_time_s": result.total_time_s,
                "steady_images_per_s": result.steady_images_per_s,
                "peak_memory": result.peak_memory,
                "test_accuracy": result.test_accuracy,
                "total_steps": result.total_steps,
                "train_images": result.train_images,
                "skipped_steps": result.skipped_steps,
                "warnings": result.warnings,
            }
            for result in view.results
        ],
        "results": [result.to_dict() for result in view.results],
    }


def load_app_test() -> tuple[type | None, str | None]:
    """Streamlit's AppTest, or None and why it cannot be imported (one line). Asked before the job runs, so that a
    missing or broken Streamlit is known at once and costs the job nothing."""
    try:
        from streamlit.testing.v1 import AppTest
    except Exception as err:  # ImportError, or anything Streamlit's own import raises
        return None, f"Streamlit cannot be imported: {type(err).__name__}: {one_line(err)}"
    return AppTest, None


def render_results_page(app_test: type, job_id: str) -> dict:
    """The Results page for `job_id` through the app's navigation, as AppTest sees it."""
    at = app_test.from_file(str(APP), default_timeout=120)
    at.run()
    at.query_params["job"] = job_id
    at.switch_page(RESULTS_PAGE).run()
    tables = [table.value for table in at.table]
    return {
        "rendered": True,
        "exceptions": [str(e.value) for e in at.exception],
        "errors": [e.value for e in at.error],
        "selected_job": at.selectbox[0].value if at.selectbox else None,
        "captions": [c.value for c in at.caption],
        "lab_table": tables[0].to_dict(orient="records") if tables else None,
        "charts": len(at.get("vega_lite_chart")),
        "downloads": [d.label for d in at.get("download_button")],
    }


def page_report(app_test: type | None, import_error: str | None, job: dict) -> dict:
    """The page's part of the answer: its figures, or {"rendered": False, "error": one line} and the job kept."""
    if app_test is None:
        return {"rendered": False, "error": import_error}
    if job["status"] != "done":
        return {"rendered": False, "error": f"not rendered: the job {job['status']}"}
    try:
        return render_results_page(app_test, job["job_id"])
    except Exception as err:  # the page's own failure must not take the job's figures with it
        return {"rendered": False, "error": f"the page failed: {type(err).__name__}: {one_line(err)}"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.app_check", description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="the device the server runs on")
    parser.add_argument("--state-dir", required=True, help="an empty folder for the job history")
    parser.add_argument("--amp", default="amp-fp16", help="the AMP mode compared with fp32")
    parser.add_argument("--subset", type=int, default=10240, help="training images per run")
    parser.add_argument("--epochs", type=int, default=1, help="epochs per run")
    parser.add_argument("--batch-size", type=int, default=256, help="images per step")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds the job may take")
    args = parser.parse_args(argv)
    started = time.monotonic()
    state = Path(args.state_dir)
    # The app reads its settings from these, as on the class server; an empty data root means synthetic data only.
    os.environ.update({
        "AMP_LAB_STATE_DIR": str(state / "state"),
        "AMP_LAB_DATA_ROOT": str(state / "data"),
        "AMP_LAB_DEVICE": args.device,
    })
    app_test, import_error = load_app_test()
    report = {"job": run_comparison(args.device, args.amp, args.subset, args.epochs, started + args.timeout,
                                    args.batch_size)}
    job_s = time.monotonic() - started
    report["timings_s"] = {"job": round(job_s, 1)}
    print(json.dumps(report), flush=True)  # the job's figures, whatever the page does next
    report["page"] = page_report(app_test, import_error, report["job"])
    report["timings_s"]["page"] = round(time.monotonic() - started - job_s, 1)
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
