"""One run from config to result, on tiny synthetic runs: learning, measurement records, progress, cancel and errors."""

import math
import time

import pytest
import torch

import trainer.loop as loop
import trainer.run as run
from trainer.capabilities import CPU_FP16_WARNING, resolve_device
from trainer.config import RunConfig
from trainer.errors import CancelledError, OutOfMemoryError, UnsupportedModeError
from trainer.results import RunResult
from trainer.run import run_training

TINY = dict(data="synthetic", device="cpu", loader="resident", num_workers=0, test_subset=128)


@pytest.fixture(scope="module")
def learned():
    """Two epochs on 512 synthetic images (lr raised from the lab's 0.01 so that so few steps learn)."""
    reports = []
    config = RunConfig(precision="fp32", epochs=2, batch_size=32, subset=512, test_subset=256, lr=0.05,
                       log_every=4, warmup_steps=3, **{k: v for k, v in TINY.items() if k != "test_subset"})
    return config, run_training(config, on_progress=reports.append), reports


def test_a_short_run_lowers_the_loss_and_beats_chance(learned):
    _, result, _ = learned
    assert result.epoch_losses[1] < result.epoch_losses[0]
    assert result.loss_history[-1]["loss"] < result.loss_history[0]["loss"]
    assert result.test_accuracy > 0.3  # chance is 0.1


def test_run_records_steps_times_and_memory(learned):
    config, result, _ = learned
    assert result.total_steps == 2 * 16 and result.train_images == 512
    assert len(result.epoch_times_s) == 2
    assert result.total_time_s == pytest.approx(sum(result.epoch_times_s))
    assert result.steady_images_per_s > 0 and result.warmup_steps == 3
    assert result.peak_memory.keys() == {"process_rss_growth"}
    assert result.resident_data_bytes == (512 + 256) * (3 * 32 * 32 * 4 + 8)  # on its own, not in the peak
    assert result.environment["device_type"] == "cpu"
    assert result.config == config and result.config is not config
    assert result.loss_scale_history == [] and result.skipped_steps == 0
    assert result.data_wait_s is None and result.compute_s is None
    assert RunResult.from_json(result.to_json()) == result


def test_loss_history_holds_window_means_at_log_points(learned):
    _, result, _ = learned
    assert [p["step"] for p in result.loss_history] == list(range(4, 33, 4))
    assert [p["epoch"] for p in result.loss_history] == [1] * 4 + [2] * 4
    assert all(math.isfinite(p["loss"]) for p in result.loss_history)
    # Each epoch's mean equals the mean of its four windows of four steps.
    first_epoch = [p["loss"] for p in result.loss_history[:4]]
    assert result.epoch_losses[0] == pytest.approx(sum(first_epoch) / 4, rel=1e-5)


def test_progress_reports_every_phase_and_each_logged_loss(learned):
    _, result, reports = learned
    phases = [r.phase for r in reports]
    assert phases[:2] == ["starting", "loading data"] and phases[-1] == "done"
    assert "evaluating" in phases
    logged = [(r.global_step, r.loss) for r in reports if r.loss is not None]
    assert logged == [(p["step"], p["loss"]) for p in result.loss_history]
    training = [r for r in reports if r.phase == "training" and r.global_step]
    assert all(r.steps_per_epoch == 16 and r.total_steps == 32 for r in training)
    assert all(r.images_per_s > 0 and r.eta_s >= 0 for r in training)
    assert reports[-1].fraction_done == 1.0


def test_amp_fp16_on_cpu_records_the_loss_scale_and_warns():
    # fp16 autocast is tens of times slower on a CPU: two steps of 16 images are enough here.
    config = RunConfig(precision="amp-fp16", epochs=1, batch_size=16, subset=32, log_every=1, **{**TINY, "test_subset": 16})
    result = run_training(config)
    assert [h["step"] for h in result.loss_scale_history] == [1, 2]
    assert all(h["scale"] > 0 for h in result.loss_scale_history)
    assert all(math.isfinite(x["loss"]) for x in result.loss_history)
    assert result.skipped_steps == len(result.skipped_step_numbers)
    assert CPU_FP16_WARNING in result.warnings
    # Two steps are all warm-up with the default five: the result says so instead of inventing a number.
    assert result.steady_images_per_s is None
    assert any("warm-up" in w for w in result.warnings)


def test_breakdown_with_the_dataloader_and_channels_last():
    config = RunConfig(epochs=1, batch_size=32, subset=96, breakdown=True, warmup_steps=0, channels_last=True,
                       **{**TINY, "loader": "dataloader"})
    result = run_training(config)
    assert result.total_steps == 3
    assert result.data_wait_s > 0 and result.compute_s > 0
    assert result.data_wait_s + result.compute_s <= result.total_time_s
    assert result.steady_images_per_s > 0
    assert result.resident_data_bytes == 0


def test_every_run_records_its_timing_quality_over_enough_intervals(learned):
    _, result, _ = learned
    quality = result.timing_quality
    assert quality["verdict"] in ("steady", "noisy") and isinstance(quality["reasons"], list)
    assert quality["intervals"] >= 8  # 29 steps after warm-up, logged every 4: sampled every 3
    assert quality["cv"] is not None and result.worker_cpu_s is None  # no DataLoader workers


def test_dataloader_workers_cpu_time_is_recorded():
    config = RunConfig(epochs=1, batch_size=32, subset=128, warmup_steps=1, **{**TINY, "loader": "dataloader",
                                                                                  "num_workers": 1})
    result = run_training(config)
    assert result.worker_cpu_s is not None and result.worker_cpu_s >= 0


def test_cancel_stops_the_run():
    calls = []

    def cancel_on_third_check() -> bool:
        calls.append(1)
        return len(calls) >= 3

    with pytest.raises(CancelledError):
        run_training(RunConfig(epochs=5, batch_size=16, subset=128, **TINY), should_cancel=cancel_on_third_check)
    assert len(calls) == 3


def test_subsets_larger_than_their_split_are_said_in_the_warnings(monkeypatch):
    real_load_split = run.load_split

    def small_splits(source, data_root, train, limit=None, seed=0):
        return real_load_split(source, data_root, train, limit=48 if train else 24, seed=seed)

    monkeypatch.setattr(run, "load_split", small_splits)  # splits of 48 training and 24 test images
    result = run_training(RunConfig(epochs=1, batch_size=16, subset=64, **{**TINY, "test_subset": 32}))
    assert result.train_images == 48
    assert result.warnings[-2:] == [
        "a subset of 64 training images was asked for, but the training split has 48: the run trained on all 48",
        "a test subset of 32 images was asked for, but the test split has 24: the accuracy check used all 24",
    ]


def test_out_of_memory_becomes_one_line_with_a_smaller_batch(monkeypatch):
    def no_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("pretend the allocator failed")

    monkeypatch.setattr(loop, "train_step", no_memory)
    with pytest.raises(OutOfMemoryError) as caught:
        run_training(RunConfig(precision="amp-bf16", epochs=1, batch_size=64, subset=64, **TINY))
    message = str(caught.value)
    assert "\n" not in message
    assert "batch size 64" in message and "amp-bf16" in message and "GiB" in message
    assert "batch size of 32" in message


def test_resolve_device():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(UnsupportedModeError, match="no CUDA GPU"):
            resolve_device("cuda")


def test_tf32_on_cpu_is_refused_before_any_work():
    with pytest.raises(UnsupportedModeError):
        run_training(RunConfig(precision="tf32", **TINY))


@pytest.mark.parametrize("device", [
    "cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")),
])
@pytest.mark.slow
def test_partial_batches_are_left_out_of_the_steady_throughput(monkeypatch, device):
    real_step = loop.train_step

    def slow_partial_batch(model, images, *args):
        if images.shape[0] < 32:
            time.sleep(0.3)  # as a new shape's one-off work (cuDNN's algorithm search) would
        return real_step(model, images, *args)

    monkeypatch.setattr(loop, "train_step", slow_partial_batch)
    config = RunConfig(epochs=2, batch_size=32, subset=72, warmup_steps=0, cudnn_benchmark=True,
                       **{**TINY, "device": device})  # batches of 32, 32 and 8 in each epoch
    result = run_training(config)
    assert result.total_steps == 6 and result.train_images == 72
    # The steady figure is the 4 full batches over their own time: at least the 0.6 s of partial batches less.
    assert 128 / result.steady_images_per_s <= result.total_time_s - 0.6
    # The first partial batch is recorded on its own, with its one-off work (a compiled model compiles again there).
    assert result.first_partial_step["images"] == 8 and result.first_partial_step["s"] >= 0.3


def test_a_minimum_steady_time_adds_whole_epochs_and_no_more_than_it_needs():
    config = RunConfig(epochs=1, batch_size=32, subset=64, warmup_steps=1, min_steady_s=0.5, **TINY)
    result = run_training(config)
    epochs = len(result.epoch_times_s)
    assert result.total_steps == 2 * epochs and result.train_images == 64  # whole epochs of 2 steps
    steady_s = (epochs * 64 - 32) / result.steady_images_per_s  # every image after the one warm-up step
    assert steady_s >= 0.5  # long enough ...
    # ... and stopped as soon as it was: without its last epoch the window was short (on a quiet machine a step
    # takes milliseconds, so several epochs are added; on a busy one the first may already be long enough).
    assert epochs == 1 or steady_s - result.epoch_times_s[-1] < 0.5 + 0.05


def test_the_epochs_mean_loss_counts_every_step_whatever_the_log_interval():
    every_step = run_training(RunConfig(epochs=2, batch_size=32, subset=160, log_every=1, **TINY))  # 5 steps an epoch
    every_other = run_training(RunConfig(epochs=2, batch_size=32, subset=160, log_every=2, **TINY))
    for epoch, mean in enumerate(every_step.epoch_losses, 1):
        losses = [point["loss"] for point in every_step.loss_history if point["epoch"] == epoch]
        assert len(losses) == 5 and mean == pytest.approx(sum(losses) / 5, rel=1e-6)
    # Logged in windows of 2, 2 and a last step flushed at the epoch's end: the same means.
    assert every_other.epoch_losses == pytest.approx(every_step.epoch_losses, rel=1e-6)



def test_a_new_probe_runs_after_training_and_one_that_fails_is_a_warning_not_the_loss_of_the_run(monkeypatch):
    seen = []

    def count_test_batches(config, setup):  # a toy probe: it sees the trained run and fills a result field
        seen.append(len(setup.test_batches))
        return {"device_peaks": {"toy": True}}

    def broken(config, setup):
        raise RuntimeError("the profiler could not start")

    monkeypatch.setattr(run, "PROBES", run.PROBES + (("a toy count", count_test_batches), ("a broken probe", broken)))
    result = run_training(RunConfig(epochs=1, batch_size=16, subset=32, **{**TINY, "test_subset": 48}))
    assert seen == [3] and result.device_peaks == {"toy": True} and result.total_steps == 2
    assert result.warnings[-1] == ("a broken probe could not be measured after training (RuntimeError: the profiler "
                                   "could not start); the run's own figures are unaffected")


def test_the_labs_harness_waits_for_every_steps_loss_as_the_lab_does(monkeypatch):
    import trainer.meters

    synced = []
    monkeypatch.setattr(trainer.meters.SyncEveryStep, "record", lambda self, at, loss: synced.append(at.global_step))
    result = run_training(RunConfig(epochs=2, batch_size=32, subset=64, warmup_steps=1,
                                    **{**TINY, "loader": "lab", "num_workers": 1}))
    assert synced == [1, 2, 3, 4] and result.total_steps == 4
    assert result.environment["loader_workers"] == 1 and result.worker_cpu_s is not None
    assert run_training(RunConfig(epochs=1, batch_size=32, subset=64, **TINY)).total_steps == 2
    assert synced == [1, 2, 3, 4]  # no other loader syncs every step
