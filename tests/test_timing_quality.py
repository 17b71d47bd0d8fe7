"""Timing quality: the throughput spread, other processes' CPU, steal and GPU figures, and the verdict from them."""

import pytest

from trainer import timing_quality as tq
from trainer.timing_quality import TimingMonitor, assess, interval_steps, interval_throughputs

QUIET_CPU = {"cores": 2, "load_avg_1min": 2.1, "window_s": 2.0, "other_cpu_share": 0.02, "steal_share": 0.0}


def test_short_runs_sample_more_often_than_they_log():
    assert interval_steps(980, 100) == 100  # a long run samples at its log points
    assert interval_steps(40, 100) == 5  # a short one still gets MIN_INTERVALS samples
    assert interval_steps(3, 100) == 1


def test_an_epochs_short_tail_is_left_out_of_the_intervals():
    points = [(0.0, 0), (1.0, 100), (2.0, 200), (2.1, 210)]  # the last 10 images: one step of a new epoch
    assert interval_throughputs(points) == [100.0, 100.0]


def test_a_quiet_run_is_steady_with_no_reasons():
    record = assess([100.0, 102.0, 98.0, 101.0], QUIET_CPU, None, window_s=2.0)
    assert record["verdict"] == "steady" and record["reasons"] == []
    assert record["cv"] == pytest.approx(0.0148, abs=1e-3) and record["other_cpu_share"] == 0.02


def test_a_spread_out_throughput_is_noisy():
    record = assess([100.0, 50.0, 100.0, 40.0], QUIET_CPU, None, window_s=2.0)
    assert record["verdict"] == "noisy" and "throughput varied by" in record["reasons"][0]


def test_other_processes_and_steal_each_give_a_reason_that_names_them():
    busy = {**QUIET_CPU, "other_cpu_share": 0.48, "load_avg_1min": 4.2, "steal_share": 0.08}
    record = assess([100.0, 101.0, 99.0], busy, None, window_s=2.0)
    assert record["verdict"] == "noisy"
    others, steal = record["reasons"]
    assert others.startswith("other processes used 48% of the 2 CPU cores") and "load average 4.2" in others
    assert "steal" in steal


def test_a_window_too_short_for_the_kernels_ticks_is_not_judged_on_cpu():
    busy = {**QUIET_CPU, "other_cpu_share": 0.9}
    assert assess([100.0] * 3, busy, None, window_s=0.05)["verdict"] == "steady"


def test_too_few_intervals_leave_the_spread_unmeasured():
    record = assess([100.0, 10.0], None, None, window_s=1.0)
    assert record["cv"] is None and record["verdict"] == "steady"


def test_gpu_neighbours_and_throttling_are_reasons():
    gpu = {"other_processes": 2, "sm_clock_min_mhz": 1200, "sm_clock_max_mhz": 1980, "utilization_mean_pct": 99}
    reasons = assess([100.0] * 3, QUIET_CPU, gpu, window_s=2.0)["reasons"]
    assert reasons[0].startswith("2 other process(es) computed on the same GPU")
    assert "SM clock fell from 1980 to 1200 MHz" in reasons[1]
    steady_gpu = {**gpu, "other_processes": 0, "sm_clock_min_mhz": 1950}
    assert assess([100.0] * 3, QUIET_CPU, steady_gpu, window_s=2.0)["verdict"] == "steady"


def test_the_monitor_reads_this_machines_counters():
    monitor = TimingMonitor()
    assert monitor.record() is None  # never left warm-up
    monitor.start(0.0, 0)
    for i in range(1, 5):
        monitor.mark(float(i), 100 * i)
    monitor.stop(5.0, 500)
    record = monitor.record()
    assert record["intervals"] == 5 and record["cv"] == 0.0
    assert record["cores"] >= 1 and 0.0 <= record["other_cpu_share"]
    assert monitor.worker_cpu_s is not None and monitor.window[0] <= monitor.window[1]


def test_is_noisy_reads_a_record_or_its_absence():
    assert tq.is_noisy({"verdict": "noisy"}) and not tq.is_noisy({"verdict": "steady"}) and not tq.is_noisy(None)
