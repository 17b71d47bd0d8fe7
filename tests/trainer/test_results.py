"""RunResult's JSON form and the lab's comparison table computed from two hand-made results."""

import pytest

from trainer.config import RunConfig
from trainer.results import Comparison, RunResult, compare


def _result(precision: str, time_s: float, memory: dict, accuracy=0.5, steady=1000.0) -> RunResult:
    return RunResult(
        config=RunConfig(precision=precision),
        environment={"device_type": "cuda"},
        total_time_s=time_s,
        epoch_times_s=[time_s / 5] * 5,
        steady_images_per_s=steady,
        peak_memory=memory,
        loss_history=[{"step": 100, "epoch": 1, "loss": 2.301}],
        test_accuracy=accuracy,
        loss_scale_history=[{"step": 1, "scale": 65536.0}],
    )


def test_json_round_trip_keeps_every_field():
    result = _result("amp-fp16", 48.0, {"torch_max_allocated": 1_100_000_000})
    data = result.to_dict()
    for key in ("config", "environment", "total_time_s", "epoch_times_s", "steady_images_per_s", "peak_memory",
                "loss_history", "test_accuracy", "skipped_steps", "warnings"):
        assert key in data
    assert RunResult.from_json(result.to_json()) == result
    assert RunResult.from_dict({**data, "added_in_a_later_version": 1}) == result


def test_compare_reproduces_the_labs_table():
    baseline = _result("fp32", 75.0, {"nvml_device_used": 1_800_000_000, "torch_max_allocated": 1_000}, 0.50, 1000.0)
    candidate = _result("amp-fp16", 48.0, {"nvml_device_used": 1_100_000_000}, 0.52, 1600.0)
    c = compare(baseline, candidate)
    assert (c.baseline_precision, c.candidate_precision) == ("fp32", "amp-fp16")
    assert c.speedup == pytest.approx(75 / 48)
    assert c.time_saved_pct == pytest.approx(36.0)
    assert c.throughput_speedup == pytest.approx(1.6)
    assert c.memory_reduction_pct == pytest.approx({"nvml_device_used": 100 * 0.7 / 1.8})  # only shared figures
    assert c.accuracy_delta == pytest.approx(0.02)
    assert Comparison.from_dict(c.to_dict()) == c


def test_compare_without_throughput_or_accuracy():
    baseline = _result("fp32", 10.0, {}, accuracy=None, steady=None)
    candidate = _result("amp-bf16", 20.0, {}, accuracy=0.4)
    c = compare(baseline, candidate)
    assert c.throughput_speedup is None and c.accuracy_delta is None
    assert c.time_saved_pct == pytest.approx(-100.0)  # slower shows as negative savings


def test_compare_survives_a_zero_time_baseline():
    c = compare(_result("fp32", 0.0, {}), _result("amp-bf16", 1.0, {}))
    assert c.time_saved_pct == 0.0 and c.speedup == 0.0


def test_speedup_interval_over_alternating_pairs():
    from trainer.results import median_pair, speedup_interval, split_pairs

    runs = []
    for fp32_s, amp_s in ((10.0, 8.0), (12.0, 8.0), (10.0, 9.0)):  # speedups 1.25, 1.5, 1.11
        runs += [_result("fp32", fp32_s, {}), _result("amp-bf16", amp_s, {})]
    baselines, candidates = split_pairs(runs)
    assert [r.precision for r in baselines] == ["fp32"] * 3 and len(candidates) == 3
    interval = speedup_interval(baselines, candidates)
    assert (interval.median, interval.low, interval.high, interval.pairs) == pytest.approx((1.25, 10 / 9, 1.5, 3))
    assert not interval.straddles_one and "the middle of 3 alternating pairs (range 1.11x to 1.50x)" in interval.describe()
    assert median_pair(baselines, candidates)[0].total_time_s == 10.0 and median_pair(baselines, candidates)[1].total_time_s == 8.0


def test_one_pair_has_no_interval_and_says_so():
    from trainer.results import SpeedupInterval, speedup_interval

    interval = speedup_interval([_result("fp32", 10.0, {})], [_result("amp-bf16", 5.0, {})])
    assert interval.median == 2.0 and interval.low is None and not interval.known
    assert "spread is unknown" in interval.describe() and interval.to_dict()["note"]
    assert SpeedupInterval.from_dict(interval.to_dict()) == interval
    assert SpeedupInterval(1.02, 0.9, 1.2, 3).straddles_one
