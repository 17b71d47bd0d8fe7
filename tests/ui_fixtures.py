"""Hand-made RunResults and finished jobs for the tests of the ui package and the pages (no training needed)."""

import time
from dataclasses import replace

from server.records import JobSpec, JobView
from trainer.config import RunConfig
from trainer.isolated import RunOutcome
from trainer.results import RunResult


def make_result(precision: str = "fp32", total_time_s: float = 75.0, **overrides) -> RunResult:
    """A plausible finished run; any RunResult field (or `config` entries via config=...) can be overridden."""
    config = RunConfig(precision=precision, epochs=2, batch_size=256, data="synthetic", subset=4096, device="cpu")
    fields = dict(
        config=replace(config, **overrides.pop("config", {})),
        environment={"device_type": "cpu", "device_name": "Test CPU"},
        total_time_s=total_time_s,
        epoch_times_s=[total_time_s * 0.6, total_time_s * 0.4],
        steady_images_per_s=8192 / total_time_s,
        peak_memory={"torch_max_allocated": 1_800_000_000, "process_rss_growth": 300_000_000},
        loss_history=[
            {"step": 8, "epoch": 1, "loss": 2.2},
            {"step": 16, "epoch": 1, "loss": 1.9},
            {"step": 24, "epoch": 2, "loss": 1.6},
            {"step": 32, "epoch": 2, "loss": 1.4},
        ],
        test_accuracy=0.50,
        warmup_steps=5,
        total_steps=32,
        train_images=4096,
        images_per_s=8192 / total_time_s,
    )
    fields.update(overrides)
    return RunResult(**fields)


def lab_pair(amp: str = "amp-fp16") -> tuple[RunResult, RunResult]:
    """The lab's own figures as two runs: 75 s and 1.8 GB in fp32, 48 s and 1.1 GB with AMP."""
    baseline = make_result("fp32", 75.0)
    candidate = make_result(
        amp, 48.0, peak_memory={"torch_max_allocated": 1_100_000_000, "process_rss_growth": 300_000_000},
        test_accuracy=0.51,
    )
    return baseline, candidate


def counted_result(precision: str, zero: int, stalled: int, loss: float, **config) -> RunResult:
    """A finished run with the update counts a tracked run records (1000 gradient elements, 600 of them moving),
    the same shares at each of three logged steps, and a loss that ends at `loss`."""
    history = [{"step": step, "zero_grad_share": zero / 1000, "stalled_update_share": stalled / 600}
               for step in (8, 16, 24)]
    return make_result(precision, config={**config, "track_updates": True}, update_history=history,
                       update_counts={"steps": 24, "gradients": 1000, "zero": zero, "moving": 600, "stalled": stalled},
                       loss_history=[{"step": 8, "epoch": 1, "loss": 2.3}, {"step": 24, "epoch": 1, "loss": loss}])


def finished_job(job_id: str, results, label: str = "a comparison", *, kind: str = "compare", purpose: str = "",
                 learner: str = "another-learner", created_at: float | None = None) -> JobView:
    """A job that finished with `results`, as the job manager records one."""
    created = time.time() if created_at is None else created_at
    return JobView(
        id=job_id, learner_id=learner, kind=kind, label=label, status="done", queue_position=None,
        estimated_wait_s=None, current_run=len(results) - 1, progress=None, live_losses=[],
        outcomes=[RunOutcome(config=r.config, status="ok", result=r) for r in results], error=None,
        spec=JobSpec(kind, [r.config for r in results], label, purpose=purpose), created_at=created,
        started_at=created, finished_at=created + 60, extras={"device_type": "cpu"},
    )
