from dataclasses import replace

import pytest

from server.batch_probe import largest_fitting, probe_config, probe_max_batch
from trainer.config import RunConfig
from trainer.errors import UnsupportedModeError
from trainer.isolated import RunOutcome
from trainer.results import RunResult


def result(precision, batch):
    config = RunConfig(precision=precision, batch_size=batch)
    return RunResult(config=replace(config), environment={}, total_time_s=1.0, epoch_times_s=[1.0],
                     steady_images_per_s=1.0, peak_memory={}, loss_history=[], test_accuracy=None)


@pytest.mark.parametrize("limit", [0, 100, 256, 5000, 16383, 10**9])
def test_largest_fitting_is_bounded_and_close(limit):
    tries = []

    def fits(batch):
        tries.append(batch)
        return batch <= limit

    found = largest_fitting(fits)
    assert len(tries) <= 12
    assert found <= limit and found <= 16384
    assert found >= min(limit, 16384) * 0.96 or found == limit
    assert tries[0] == 16384  # the ceiling first: on a large GPU one try answers
    if limit >= 16384:
        assert tries == [16384]


def test_probe_needs_a_gpu():
    with pytest.raises(UnsupportedModeError, match="GPU"):
        probe_max_batch(RunConfig(device="cpu"), ["fp32"])


def test_probe_recovers_from_out_of_memory(monkeypatch):
    monkeypatch.setattr("server.batch_probe.resolve_device_type", lambda name: "cuda")
    limits = {"fp32": 3000, "amp-fp16": 6000}

    def runner(config, should_cancel=None):
        if config.batch_size <= limits[config.precision]:
            return RunOutcome(config=config, status="ok", result=result(config.precision, config.batch_size))
        return RunOutcome(config=config, status="failed", error="does not fit", error_kind="OutOfMemoryError")

    found = probe_max_batch(RunConfig(device="cuda"), ["fp32", "amp-fp16"], runner=runner)
    assert 2900 <= found["fp32"] <= 3000 and 5800 <= found["amp-fp16"] <= 6000
    config = probe_config(RunConfig(device="cuda"), "fp32", 512)
    assert (config.subset, config.epochs, config.warmup_steps) == (1024, 1, 0)
