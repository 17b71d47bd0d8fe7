"""This device's peaks: measured once per device and torch build, cached, and recorded by a run that asks."""

import json

import pytest
import torch

from trainer import peaks
from trainer.config import RunConfig
from trainer.errors import ConfigError
from trainer.peaks import DevicePeaks, cached_peaks, device_key, measure_peaks
from trainer.run import run_training

CPU = torch.device("cpu")


@pytest.mark.slow
def test_the_cpu_is_measured_in_seconds_with_every_figure():
    measured = measure_peaks(CPU)
    assert set(measured.matmul_tflops) == {"fp32", "bf16", "fp16"}  # no TF32 on a CPU
    assert all(rate > 0 for rate in measured.matmul_tflops.values())
    assert measured.copy_gb_per_s > 0 and measured.launch_us > 0
    assert measured.seconds < 20  # the limit for the micro-benchmark on a CPU


def test_peaks_are_measured_once_then_read_from_the_cache(tmp_path, monkeypatch):
    calls = []

    def fake(device):
        calls.append(device)
        return DevicePeaks("CPU: fake", torch.__version__, matmul_tflops={"fp32": 0.1}, copy_gb_per_s=9.0)

    monkeypatch.setattr(peaks, "measure_peaks", fake)
    cache = tmp_path / "state" / "device-peaks.json"
    first, second = cached_peaks(CPU, cache), cached_peaks(CPU, cache)
    assert len(calls) == 1 and first == second
    assert list(json.loads(cache.read_text())) == [device_key(CPU)]
    cache.write_text("not json")  # a corrupt cache is measured around, and mended
    assert cached_peaks(CPU, cache).matmul_tflops == {"fp32": 0.1} and len(calls) == 2
    assert device_key(CPU) in json.loads(cache.read_text())
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    assert cached_peaks(CPU, blocked / "peaks.json").copy_gb_per_s == 9.0  # cannot be written: still measured


@pytest.mark.slow
def test_a_run_that_asks_records_the_peaks_after_training(tmp_path):
    cache = tmp_path / "device-peaks.json"
    stored = DevicePeaks("CPU: stored", torch.__version__, matmul_tflops={"fp32": 0.123}, copy_gb_per_s=1.0,
                         launch_us=2.0)
    cache.write_text(json.dumps({device_key(CPU): stored.to_dict()}))
    config = RunConfig(precision="fp32", data="synthetic", device="cpu", loader="resident", num_workers=0, epochs=1,
                       batch_size=16, subset=32, test_subset=16, warmup_steps=0, measure_peaks=True,
                       peaks_cache=str(cache))
    assert run_training(config).device_peaks == stored.to_dict()
    with pytest.raises(ConfigError, match="measure_peaks is true or false"):
        RunConfig(measure_peaks="yes").validate()


def test_a_gpus_tf32_peak_is_measured_in_a_process_that_set_tf32_the_new_way(monkeypatch):
    """Issue 34: a tf32 run sets torch's new fp32_precision switches; reading the legacy allow_tf32 flag after that
    raises ("mix of the legacy and new APIs"), so the peaks must switch TF32 through the project's own switches."""
    from trainer.precision import restore_tf32_defaults, set_tf32, tf32_flags

    during = {}

    def fake_matmul(device, dtype, side):
        during[str(dtype) + ("-tf32" if len(during) == 3 else "")] = tf32_flags()["cuda_matmul_allow_tf32"]
        return 1.0

    for name, fake in (("_device_name", lambda device: "a pretend GPU"), ("_matmul_tflops", fake_matmul),
                       ("_copy_gb_per_s", lambda device: 1.0), ("_launch_us", lambda device: 1.0)):
        monkeypatch.setattr(peaks, name, fake)
    try:
        for tf32_run in (True, False):  # a tf32 run's process, then a strict fp32 run's
            set_tf32(tf32_run)
            before = tf32_flags()
            measured = measure_peaks(torch.device("cuda"))
            assert set(measured.matmul_tflops) == {"fp32", "bf16", "fp16", "tf32"}
            assert during.pop("torch.float32-tf32") is True and during.pop("torch.float32") is tf32_run
            during.clear()
            assert tf32_flags() == before
    finally:
        restore_tf32_defaults()
