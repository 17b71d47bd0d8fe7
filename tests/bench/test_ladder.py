"""The ladder: each rung adds one change, runs in turn with the others once per repeat, and is set against the lab's
loop of the same repeat; compiling is reported apart; a rung this device cannot run says why."""

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench import ladder
from tests.ui_fixtures import make_result
from trainer.config import RunConfig
from trainer.errors import ConfigError, UnsupportedModeError
from trainer.isolated import RunOutcome
from trainer.run import run_training


def fake_runs(monkeypatch, seconds_for, accuracy_for=lambda config: 0.5):
    """run_isolated replaced by runs whose time each rung's settings decide (the harness is what is tested)."""
    calls = []

    def run(config, **_):
        # The split was generated once, before the first run, and every run reads it from the same folder.
        assert list(Path(config.data_root).glob("synthetic-*-train.npz")), "no prepared split to read"
        assert not calls or config.data_root == calls[0].data_root
        calls.append(config)
        total = seconds_for(config)
        result = make_result(config.precision, total, config=config.to_dict(), test_accuracy=accuracy_for(config),
                             steady_images_per_s=2048 / total, first_step_s=5.0 if config.compile_mode else 0.1,
                             timing_quality={"verdict": "noisy" if config.channels_last else "steady", "reasons": []})
        return RunOutcome(config, "ok", result=result)

    monkeypatch.setattr(ladder, "run_isolated", run)
    return calls


def test_each_rung_adds_one_change_and_is_timed_against_the_lab_loop_of_its_own_repeat(monkeypatch, tmp_path):
    # Five rungs, the larger batch, then the second repeat of the five: a ladder cut short is whole first.
    times = iter([10.0, 8.0, 4.0, 3.5, 3.0, 2.0, 12.0, 8.0, 4.0, 3.5, 3.0])

    calls = fake_runs(monkeypatch, lambda config: next(times))
    report = ladder.climb("cpu", quick=True, repeats=2, out=tmp_path / "ladder.json")
    assert [c.batch_size for c in calls] == [256] * 5 + [512] + [256] * 5
    assert [c.loader for c in calls[:2]] == ["lab", "resident"]  # the lab's own harness first
    assert [c.precision for c in calls[:3]] == ["fp32-default", "fp32-default", "amp-bf16"]
    assert calls[3].channels_last and calls[4].compile_mode == "default" and calls[4].channels_last
    rungs = {rung["name"]: rung for rung in report["rungs"]}
    assert rungs["CUDA graphs"]["why_not"].startswith("CUDA graphs record GPU kernel launches")
    assert rungs["CUDA graphs"]["config"] is None
    data = rungs["data held on the device, no sync per step"]["speedup_vs_lab"]
    assert (data["median"], data["low"], data["high"]) == pytest.approx((10 / 8, 10 / 8, 12 / 8))
    # images/s on the speedup's own clock (not the steady window's): the lab's 2 x 4,096 images over 10 s and 12 s,
    # their median; the next rung's over 8 s twice.
    lab_rate = rungs["the lab's loop"]["images_per_s"]
    assert lab_rate == pytest.approx((8192 / 10 + 8192 / 12) / 2)
    assert rungs["data held on the device, no sync per step"]["images_per_s"] == pytest.approx(8192 / 8)
    compiled = rungs["torch.compile"]
    steady_step = 256 / (2048 / 3.0)
    assert compiled["compile_s"] == pytest.approx(5.0 - steady_step)  # the first step beyond a steady one
    assert compiled["seconds"][0] == pytest.approx(3.0 - compiled["compile_s"])
    assert rungs["channels_last"]["noisy_runs"] == 2 and rungs["AMP (amp-bf16)"]["noisy_runs"] == 0
    batch = rungs["largest batch at the lab's accuracy (512)"]
    assert batch["config"]["batch_size"] == 512 and batch["config"]["lr"] == pytest.approx(0.02)
    assert json.loads((tmp_path / "ladder.json").read_text())["rungs"][0]["name"] == "the lab's loop"
    assert "not run: CUDA graphs record" in ladder.table(report)


def test_a_budget_stops_new_runs_and_keeps_every_finished_one(monkeypatch, tmp_path):
    """No run starts past --budget: each rung once came first, so what is cut is the last rung, the larger batch
    and the second repeat, each counted; the finished runs are in the JSON."""
    clock = [0.0]
    monkeypatch.setattr(ladder, "time", SimpleNamespace(monotonic=lambda: clock[0], time=lambda: clock[0]))

    def seconds(config):
        clock[0] += 6.5  # each run takes 6.5 s of the fake clock: the 4th ends at 26 s, past a 25 s budget
        return 6.5

    calls = fake_runs(monkeypatch, seconds)
    report = ladder.climb("cpu", quick=True, repeats=2, out=tmp_path / "ladder.json", budget_s=25.0)
    assert len(calls) == 4
    assert report["stopped"] == "the budget ran out: 7 run(s) not started"  # compile, the batch, 5 of repeat 2
    rungs = {rung["name"]: rung for rung in json.loads((tmp_path / "ladder.json").read_text())["rungs"]}
    assert rungs["channels_last"]["seconds"] == [6.5] and rungs["torch.compile"]["seconds"] == []
    assert rungs["largest batch at the lab's accuracy"]["why_not"] == "the budget ran out before batch 512 started"


def test_a_larger_batch_that_trains_worse_is_not_a_rung(monkeypatch):
    fake_runs(monkeypatch, lambda config: 4.0, accuracy_for=lambda config: 0.3 if config.batch_size > 256 else 0.5)
    report = ladder.climb("cpu", quick=True, repeats=1, out=None)
    (batch,) = [rung for rung in report["rungs"] if rung["name"].startswith("largest batch")]
    assert batch["why_not"] == ("batch 512: trained to 30.0% against the lab loop's 50.0% (±5.9% on 512 test images): "
                                "more than a point lower, beyond the noise")
    assert report["references"]["airbench94 (94%)"] == 3.29 and report["references"][
        "the lab's fp32 run (its GPU)"] == 75.0


def test_a_compiled_runs_compiling_counts_its_first_step_and_the_new_shape_of_its_last_batch():
    """50,000 images at batch 256 end each epoch on a batch of 80, a new shape that torch.compile compiles again:
    that step's excess over a steady one is compiling too, left out of the rung's time like the first step's."""
    config = RunConfig(batch_size=256, compile_mode="default")
    result = make_result("fp32", 30.0, config=config.to_dict(), steady_images_per_s=2560.0, first_step_s=12.1,
                         first_partial_step={"images": 80, "s": 8.03125})
    # A steady step of 256 images takes 0.1 s, one of 80 images 0.03125 s: 12.0 s and 8.0 s of compiling.
    assert ladder.compile_seconds(result) == pytest.approx(20.0)
    assert ladder.training_seconds(result, compiled=True) == pytest.approx(10.0)
    assert ladder.training_seconds(result, compiled=False) == 30.0
    whole = make_result("fp32", 30.0, config=config.to_dict(), steady_images_per_s=2560.0, first_step_s=12.1)
    assert ladder.compile_seconds(whole) == pytest.approx(12.0)  # every batch full: the first step alone


def test_on_a_gpu_the_lab_keeps_fp16_and_cuda_graphs_are_a_rung():
    rungs = ladder.rungs_for("cuda")
    assert rungs[2].changes == {"precision": "amp-fp16"} and rungs[-1].why_not is None


@pytest.mark.slow
def test_the_trainer_compiles_on_request_and_refuses_cuda_graphs_without_a_gpu():
    tiny = dict(data="synthetic", device="cpu", loader="resident", num_workers=0, epochs=1, batch_size=16,
                subset=32, test_subset=16, warmup_steps=1)
    result = run_training(RunConfig(**tiny))
    assert result.first_step_s is not None and 0 < result.first_step_s < result.total_time_s
    with pytest.raises(UnsupportedModeError, match="reduce-overhead records CUDA graphs: it needs a CUDA GPU"):
        run_training(RunConfig(compile_mode="reduce-overhead", **tiny))
    with pytest.raises(ConfigError, match="compile_mode"):
        replace(RunConfig(), compile_mode="max").validate()


def test_the_ladders_parent_takes_the_gpus_name_from_its_runs_and_never_asks_torch(monkeypatch, tmp_path):
    """Issue 34, item 5: a parent that asked torch for the name could make a CUDA context of its own, which every
    later rung's run would see as another process on its GPU (its timing then "noisy")."""
    def no_cuda_here(*args, **kwargs):
        raise AssertionError("the ladder's parent asked torch's CUDA")

    for name in ("get_device_name", "get_device_properties", "init", "_lazy_init", "current_device"):
        monkeypatch.setattr(ladder.torch.cuda, name, no_cuda_here)
    runs = {0: [make_result(environment={"device_type": "cuda", "device_name": "NVIDIA H100 80GB HBM3"})]}
    report = ladder._report("cuda", False, 1, [ladder.RungResult("the lab's loop")], runs, started=0.0)
    assert report["device_name"] == "NVIDIA H100 80GB HBM3"
    assert ladder._report("cuda", False, 1, [], {}, started=0.0)["device_name"] is None  # before a run ended


def test_a_larger_batchs_accuracy_is_judged_against_the_noise_of_the_test_split():
    """Issue 32: one point of accuracy on 512 test images is 5 images. The recorded quick CPU ladder's 17.0% against
    19.3% cannot tell a real loss from noise; on 10,000 test images a point and a half can."""
    assert "too few test images to tell" in ladder.accuracy_verdict(0.193, 0.170, 512)
    assert "±4.7% on 512 test images" in ladder.accuracy_verdict(0.193, 0.170, 512)
    assert ladder.accuracy_verdict(0.60, 0.595, 512) is None  # within a point: kept
    assert "beyond the noise" in ladder.accuracy_verdict(0.60, 0.57, 10_000)  # 3 points lower, ±1.4: real
    assert "too few test images" in ladder.accuracy_verdict(0.60, 0.585, 10_000)  # 1.5 points lower, ±1.4
