"""`python -m trainer`: exit statuses, one-line errors, the lab's log lines, the summary and the compare table."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from trainer.cli import main

ROOT = Path(__file__).resolve().parent.parent
TINY = ["--data", "synthetic", "--device", "cpu", "--loader", "resident", "--workers", "0", "--epochs", "1",
        "--batch-size", "16", "--subset", "64", "--test-subset", "32", "--log-every", "2", "--warmup-steps", "1"]


def _cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainer", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})


def _one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


@pytest.mark.parametrize(
    "args, phrase",
    [
        (["--batch-size", "0"], "batch size must be between 1"),
        (["--epochs", "-1"], "epochs must be between 1"),
        (["--precision", "fp8"], "invalid choice: 'fp8'"),
        (["--batch-size", "many"], "invalid int value"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(args, phrase):
    done = _cli("run", *args)
    assert done.returncode == 2
    assert phrase in _one_line(done.stderr)


def test_tf32_on_the_cpu_exits_2(capsys):
    assert main(["run", "--precision", "tf32", "--device", "cpu"]) == 2
    assert "tf32 needs an NVIDIA GPU" in _one_line(capsys.readouterr().err)


def test_missing_cifar10_offline_exits_1_and_suggests_synthetic(tmp_path, capsys):
    root = tmp_path / "data"
    assert main(["run", "--data", "cifar10", "--data-root", str(root), "--device", "cpu", "--subset", "32"]) == 1
    line = _one_line(capsys.readouterr().err)
    assert "synthetic" in line and str(root) in line


@pytest.mark.skipif(torch.cuda.is_available(), reason="auto uses the GPU here")
def test_auto_on_the_cpu_says_in_one_line_when_the_driver_sees_a_gpu(tmp_path, capsys, monkeypatch):
    import trainer.capabilities

    monkeypatch.setattr(trainer.capabilities, "unseen_gpu_note", lambda: "the NVIDIA driver 535 sees 1 GPU, but ...")
    assert main(["run", "--data", "cifar10", "--data-root", str(tmp_path), "--subset", "32"]) == 1
    warning, error = capsys.readouterr().err.splitlines()
    assert warning == "python -m trainer: warning: the NVIDIA driver 535 sees 1 GPU, but ..."
    assert error.startswith("python -m trainer: error:")


def test_help_documents_the_exit_statuses():
    done = _cli("run", "--help")
    assert done.returncode == 0
    assert "exit status" in done.stdout and "130" in done.stdout and "--channels-last" in done.stdout


def test_run_prints_lab_lines_and_a_summary_and_writes_json(tmp_path, capsys):
    path = tmp_path / "run.json"
    assert main(["run", "--precision", "amp-bf16", *TINY, "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "[Epoch: 1, Batch:     2] loss: " in out and "[Epoch: 1, Batch:     4] loss: " in out
    assert "warm-up included" in out and "excluding the first 1 warm-up steps" in out
    assert "Process RSS growth" in out and "test accuracy" in out
    saved = json.loads(path.read_text())
    assert saved["config"]["precision"] == "amp-bf16" and saved["total_steps"] == 4


def test_compare_runs_both_modes_and_prints_the_table(tmp_path, capsys):
    path = tmp_path / "compare.json"
    assert main(["compare", "--amp", "amp-bf16", *TINY, "--json", str(path)]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("Metric"))
    assert [cell.strip() for cell in header.split(" | ")][1:] == ["FP32", "AMP", "Improvement"]
    for row in ("Training time (1 epoch)", "Throughput (images/s after", "Peak memory: Process RSS growth",
                "Test accuracy"):
        assert row in out
    saved = json.loads(path.read_text())
    assert saved["baseline"]["config"]["precision"] == "fp32"
    assert saved["candidate"]["config"]["precision"] == "amp-bf16"
    assert saved["comparison"]["speedup"] == pytest.approx(
        saved["baseline"]["total_time_s"] / saved["candidate"]["total_time_s"])


def test_compare_repeats_alternates_the_modes_and_writes_the_speedup_interval(tmp_path, capsys):
    path = tmp_path / "compare.json"
    assert main(["compare", "--amp", "amp-bf16", *TINY, "--repeats", "2", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "pair 2 of 2" in out and "Speedup over 2 alternating pairs" in out and "Timing quality" in out
    saved = json.loads(path.read_text())
    assert saved["order"] == ["fp32", "amp-bf16", "fp32", "amp-bf16"]
    started = [run["started_at"] for run in saved["runs"]]
    assert started == sorted(started)  # each in its own process, one after the other
    speedup = saved["speedup"]
    assert speedup["pairs"] == 2 and speedup["low"] <= speedup["median"] <= speedup["high"]
    assert all(run["timing_quality"]["verdict"] in ("steady", "noisy") for run in saved["runs"])


def test_compare_once_says_the_interval_is_unknown(tmp_path, capsys):
    path = tmp_path / "compare.json"
    assert main(["compare", "--amp", "amp-bf16", *TINY, "--json", str(path)]) == 0
    assert "its spread is unknown" in capsys.readouterr().out
    speedup = json.loads(path.read_text())["speedup"]
    assert speedup["low"] is None and speedup["high"] is None and "unknown" in speedup["note"]


def test_compare_refuses_repeats_out_of_range(capsys):
    assert main(["compare", "--amp", "amp-bf16", *TINY, "--repeats", "0"]) == 2
    assert "--repeats must be between 1 and 10" in capsys.readouterr().err


def test_compare_with_the_default_malloc_runs_both_children_untuned(tmp_path, capsys):
    path = tmp_path / "compare.json"
    assert main(["compare", "--amp", "amp-bf16", *TINY, "--default-malloc", "--json", str(path)]) == 0
    assert "host malloc default" in capsys.readouterr().out
    saved = json.loads(path.read_text())
    for role in ("baseline", "candidate"):
        # each mode ran in a fresh process, so the default really was the default there
        assert saved[role]["config"]["tune_host_malloc"] is False
        assert saved[role]["environment"]["host_malloc"].startswith("default")
        assert not any("malloc" in w for w in saved[role]["warnings"])


def test_ctrl_c_exits_130_with_one_line():
    child = subprocess.Popen([sys.executable, "-m", "trainer", "run", *TINY, "--subset", "4096", "--log-every", "1"],
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)},
                             # A parent started in the background may ignore SIGINT, and children inherit that.
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        for line in child.stdout:
            if line.startswith("[Epoch: 1"):
                child.send_signal(signal.SIGINT)
                break
        _, stderr = child.communicate(timeout=60)
    finally:
        child.kill()
    assert child.returncode == 130
    assert _one_line(stderr) == "python -m trainer: error: cancelled before the run finished"
