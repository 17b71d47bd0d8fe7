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


def test_nvml_reasons_decide_whether_a_lower_clock_is_throttling():
    dipped = {"samples": 40, "other_processes": 0, "sm_clock_min_mhz": 1200, "sm_clock_max_mhz": 1980}
    # NVML gave no power or heat reason in any sample: the lower clock was something else (an idle moment).
    assert assess([100.0] * 3, QUIET_CPU, {**dipped, "slowdown_samples": 0}, window_s=2.0)["verdict"] == "steady"
    (reason,) = assess([100.0] * 3, QUIET_CPU, {**dipped, "slowdown_samples": 3}, window_s=2.0)["reasons"]
    assert reason == ("the GPU held its clock down for power or heat in 3 of 40 samples during the run "
                      "(SM clock 1980 to 1200 MHz while busy)")


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


# ---- the done-when check: a real comparison beside a CPU burner, and on a quiet machine --------------------------

BURN_S = 120  # each burner stops by itself after this, even if the test is killed
COMPARE_S = 600  # the comparison's own bound (two fresh processes; bf16 is emulated on an AVX2-only CPU)
SMALL = ["--amp", "amp-bf16", "--data", "synthetic", "--device", "cpu", "--loader", "resident", "--workers", "0",
         "--epochs", "1", "--batch-size", "64", "--subset", "1024", "--test-subset", "64", "--warmup-steps", "2",
         "--min-steady-s", "1"]


def _compare(tmp_path) -> list[dict]:
    """Both runs' timing quality, from `python -m trainer compare --json` in its own process, as a user runs it."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    path = tmp_path / "compare.json"
    done = subprocess.run([sys.executable, "-m", "trainer", "compare", *SMALL, "--json", str(path)], check=False,
                          cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=COMPARE_S)
    assert done.returncode == 0, done.stderr[-2000:]
    return [run["timing_quality"] for run in json.loads(path.read_text())["runs"]]


def _busy_share(seconds: float = 1.0) -> float:
    """Share of all cores' time in use now, by any process (this test is idle meanwhile)."""
    import time

    def read():
        fields = [float(x) for x in open("/proc/stat").readline().split()[1:]]
        return sum(fields[:3]) + fields[5] + fields[6], sum(fields[:8])

    busy0, total0 = read()
    time.sleep(seconds)
    busy1, total1 = read()
    return (busy1 - busy0) / max(1.0, total1 - total0)


@pytest.mark.slow
def test_a_comparison_beside_a_cpu_burner_on_every_core_is_noisy_and_names_the_load(tmp_path):
    import os
    import subprocess
    import sys

    burn = f"import time\nend = time.monotonic() + {BURN_S}\nwhile time.monotonic() < end: pass"
    burners = [subprocess.Popen([sys.executable, "-c", burn]) for _ in range(os.cpu_count() or 1)]
    try:
        qualities = _compare(tmp_path)
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    for quality in qualities:
        assert quality["verdict"] == "noisy"
        assert any(reason.startswith("other processes used") for reason in quality["reasons"]), quality


@pytest.mark.slow
def test_a_comparison_on_a_quiet_machine_is_steady(tmp_path):
    if _busy_share() > 0.1:
        pytest.skip("other processes are using the CPU now, so this machine is not quiet")
    for quality in _compare(tmp_path):
        if any(reason.startswith(("other processes", "the hypervisor")) for reason in quality["reasons"]):
            pytest.skip(f"the machine got busy during the comparison: {quality['reasons']}")
        assert quality["verdict"] == "steady", quality
