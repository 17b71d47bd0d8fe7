"""`python -m trainer`: exit statuses, one-line errors, the lab's log lines, the summary and the compare table."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from trainer.cli import CANDIDATES, _config_from, _warn_if_scaler_unused, build_parser, main
from trainer.config import PRECISIONS, RunConfig

ROOT = Path(__file__).resolve().parents[2]
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


@pytest.mark.parametrize(
    "args, phrase",
    [
        (["--loss-scale-init", "0.5"], "the initial loss scale must be 1 to 2^32, got 0.5"),
        (["--loss-scale-init", "1e12"], "the initial loss scale must be 1 to 2^32"),
        (["--loss-scale-init", "nan"], "the initial loss scale must be 1 to 2^32, got nan"),
        (["--growth-interval", "0"], "loss scale growth interval must be between 1 and 1000000, got 0"),
    ],
)
def test_bad_scaler_settings_exit_2_with_one_line(args, phrase, capsys):
    assert main(["run", "--precision", "amp-fp16", "--device", "cpu", *args]) == 2
    assert phrase in _one_line(capsys.readouterr().err)


@pytest.mark.parametrize("args, phrase", [(["--loss-scale-init", "big"], "invalid float value: 'big'"),
                                          (["--growth-interval", "2.5"], "invalid int value: '2.5'")])
def test_unreadable_scaler_settings_exit_2_with_one_line(args, phrase, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["run", *args])
    assert stopped.value.code == 2 and phrase in _one_line(capsys.readouterr().err)


def test_scaler_settings_reach_the_run_config_and_default_to_gradscalers_own():
    args = build_parser().parse_args(["run", "--precision", "amp-fp16", "--loss-scale-init", "1024",
                                      "--growth-interval", "50"])
    config = _config_from(args, args.precision)
    assert (config.loss_scale_init, config.loss_scale_growth_interval) == (1024.0, 50) and not config.default_scaler
    compare_args = build_parser().parse_args(["compare", "--amp", "amp-fp16"])
    assert _config_from(compare_args, "amp-fp16").default_scaler


def test_scaler_settings_without_amp_fp16_warn_in_one_line(capsys):
    _warn_if_scaler_unused(RunConfig(loss_scale_init=1024.0), ["fp32", "amp-bf16"])
    assert "apply to amp-fp16 only" in _one_line(capsys.readouterr().err)
    _warn_if_scaler_unused(RunConfig(loss_scale_init=1024.0), ["fp32", "amp-fp16"])
    _warn_if_scaler_unused(RunConfig(), ["fp32"])
    assert capsys.readouterr().err == ""


def test_precision_choices_are_the_trainers_modes():
    assert "fp32-default" in PRECISIONS and CANDIDATES == tuple(p for p in PRECISIONS if p != "fp32")


def test_fp32_default_on_the_cpu_runs_with_a_note_and_records_its_tf32_switches(tmp_path, capsys):
    path = tmp_path / "run.json"
    assert main(["run", "--precision", "fp32-default", *TINY, "--json", str(path)]) == 0
    assert "warning: fp32-default computes exactly as fp32 on a CPU" in capsys.readouterr().out
    saved = json.loads(path.read_text())
    assert saved["config"]["precision"] == "fp32-default"
    # PyTorch's defaults (cuDNN convolutions may use TF32, matmuls full fp32), whatever earlier tests here set
    assert (saved["environment"]["cudnn_allow_tf32"], saved["environment"]["cuda_matmul_allow_tf32"]) == (True, False)


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
    assert "Process memory growth (RSS)" in out and "test accuracy" in out
    saved = json.loads(path.read_text())
    assert saved["config"]["precision"] == "amp-bf16" and saved["total_steps"] == 4


@pytest.fixture(scope="module")
def one_compare(tmp_path_factory):
    """`compare` once, fp32 against amp-bf16, one pair: its printed lines and its JSON (the tests below read one run:
    each compare starts two fresh Pythons, seconds each)."""
    from contextlib import redirect_stdout
    from io import StringIO

    path = tmp_path_factory.mktemp("compare") / "compare.json"
    printed = StringIO()
    with redirect_stdout(printed):
        assert main(["compare", "--amp", "amp-bf16", *TINY, "--json", str(path)]) == 0
    return printed.getvalue(), json.loads(path.read_text())


@pytest.mark.slow
def test_compare_runs_both_modes_and_prints_the_table(one_compare):
    out, saved = one_compare
    header = next(line for line in out.splitlines() if line.startswith("Metric"))
    assert [cell.strip() for cell in header.split(" | ")][1:] == ["FP32", "AMP bf16", "Improvement"]
    for row in ("Training time (1 epoch)", "Throughput (images/s after", "Peak memory: Process memory growth (RSS)",
                "Test accuracy"):
        assert row in out
    assert saved["baseline"]["config"]["precision"] == "fp32"
    assert saved["candidate"]["config"]["precision"] == "amp-bf16"
    assert saved["comparison"]["speedup"] == pytest.approx(
        saved["baseline"]["total_time_s"] / saved["candidate"]["total_time_s"])


@pytest.mark.slow
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


@pytest.mark.slow
def test_compare_once_says_the_interval_is_unknown(one_compare):
    out, saved = one_compare
    assert "its spread is unknown" in out
    speedup = saved["speedup"]
    assert speedup["low"] is None and speedup["high"] is None and "unknown" in speedup["note"]


def test_compare_refuses_repeats_out_of_range(capsys):
    assert main(["compare", "--amp", "amp-bf16", *TINY, "--repeats", "0"]) == 2
    assert "--repeats must be between 1 and 10" in capsys.readouterr().err


@pytest.mark.slow
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


@pytest.mark.slow
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
