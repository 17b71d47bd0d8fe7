"""bench/sweep_estimate: each run's estimate is paired with that run's own wall time, and the second sweep is
estimated from the first sweep's history (the tool behind bench/README.md's "Sweep estimates" figures)."""

import time
from dataclasses import replace

import pytest

from bench.sweep_estimate import run_round, within_target
from server.jobs import JobManager
from server.offer import Offer
from server.settings import Settings
from trainer.isolated import RunOutcome
from trainer.results import RunResult

# A fake run's throughput per mode (images/s), the same at every batch size: amp the slower, as emulated bf16 is.
IMAGES_PER_S = {"fp32": 320.0, "amp-bf16": 80.0}


def run_seconds(precision: str, images: int) -> float:
    return images / IMAGES_PER_S[precision]


def timed_runner(config, on_spawn=None, **kwargs):
    """A run that trains its images at its mode's throughput and reports that throughput."""
    if on_spawn:
        on_spawn(4321)
    seconds = run_seconds(config.precision, config.subset)
    time.sleep(seconds)
    result = RunResult(
        config=replace(config), environment={"device_type": "cpu"}, total_time_s=seconds,
        epoch_times_s=[seconds], steady_images_per_s=IMAGES_PER_S[config.precision], peak_memory={},
        loss_history=[{"step": 1, "epoch": 1, "loss": 2.0}], test_accuracy=0.1, train_images=config.subset,
    )
    return RunOutcome(config, "ok", result=result)


@pytest.fixture
def manager(tmp_path):
    settings = Settings(state_dir=str(tmp_path), data_root=str(tmp_path), device="cpu", class_mode=False)
    manager = JobManager(settings, runner=timed_runner, device_type="cpu").start()
    yield manager
    manager.shutdown(wait=True, timeout=10)


@pytest.mark.slow
def test_each_estimate_meets_its_own_runs_time_and_the_second_sweep_learns_from_the_first(manager):
    sweep = Offer.for_device(manager.settings, "cpu").sweep("amp-bf16", [16, 32], steps_per_run=4)
    # One epoch each, as the fake runner trains: no extra epochs for a minimum steady window.
    sweep.runs = [replace(config, min_steady_s=0.0) for config in sweep.runs]
    fresh = run_round(manager, sweep, "fresh")
    assert fresh["status"] == "done"
    assert [(r["precision"], r["batch_size"]) for r in fresh["runs"]] == [
        ("fp32", 16), ("amp-bf16", 16), ("fp32", 32), ("amp-bf16", 32)]
    for run in fresh["runs"]:  # the real time is the run's own, not the job's or a neighbour's
        expected = run_seconds(run["precision"], 4 * run["batch_size"])
        assert expected <= run["real_s"] < expected + 0.15
        assert run["estimate_s"] > 0 and run["ratio"] == pytest.approx(run["estimate_s"] / run["real_s"])
    assert fresh["real_s"] >= sum(run_seconds(r["precision"], 4 * r["batch_size"]) for r in fresh["runs"])

    second = run_round(manager, sweep, "second")
    for before, run in zip(fresh["runs"], second["runs"]):
        # From the history: the same mode's past time, not the coarse table's (which knows nothing of fake runs).
        assert run["estimate_s"] == pytest.approx(before["real_s"], rel=0.5)
        assert within_target(run["ratio"])
    assert within_target(second["ratio"]) and not within_target(None)
