"""The GPU acceptance kit: its quick CPU run writes both files with every step, and its pieces on tiny inputs.

`make test` runs the kit (`python -m bench.gpu_check --device cpu --quick`) and points GPU_CHECK_OUT at its
folder; without that variable the output test runs the kit itself (a few minutes on 2 cores).
"""

import json
import math
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from bench.cuda_only import is_gpu_only
from bench.gpu_check import (
    JSON_NAME,
    LAB_MODES,
    MD_NAME,
    NO_GPU,
    STEPS,
    Kit,
    _md_environment,
    _md_memory,
    _nvml_figure,
    main,
    make_plan,
    read_junit,
    render_markdown,
)
from bench.gpu_env import tf32_defaults
from trainer.config import PRECISIONS
from trainer.errors import TrainerError

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def quick_cpu_run(tmp_path_factory) -> Path:
    """The folder of a finished `--device cpu --quick` run: make test's, or one made here."""
    given = os.environ.get("GPU_CHECK_OUT")
    if given:
        return Path(given)
    out = tmp_path_factory.mktemp("gpu-check")
    subprocess.run([sys.executable, "-m", "bench.gpu_check", "--out", str(out), "--device", "cpu", "--quick"],
                   cwd=REPO_ROOT, timeout=600, check=False)
    return out


def test_quick_cpu_run_writes_both_files_with_every_step(quick_cpu_run):
    report = json.loads((quick_cpu_run / JSON_NAME).read_text())
    markdown = (quick_cpu_run / MD_NAME).read_text()
    steps = report["steps"]
    assert [s["name"] for s in steps] == [name for name, _ in STEPS]
    assert report["kit"]["finished"] and report["kit"]["device"] == "cpu"
    for step in steps:
        assert f"## {step['number']}. {step['title']}" in markdown or step["name"] == "summary"
        assert step["status"] in ("ok", "skipped"), (step["name"], step["reason"])
    by_name = {s["name"]: s for s in steps}
    assert (by_name["cuda_tests"]["status"], by_name["cuda_tests"]["reason"]) == ("skipped", NO_GPU)
    assert by_name["memory"]["data"]["largest_batch"] == {"status": "skipped", "reason": NO_GPU}
    assert (quick_cpu_run / "bench-cpu.json").exists()


def test_quick_cpu_run_counts_the_training_steps_its_plan_asks_for(quick_cpu_run):
    """The step counts that size the full GPU plan (docs/gpu-check.md) are the ones the runs really made."""
    report = json.loads((quick_cpu_run / JSON_NAME).read_text())
    plan = report["kit"]["plan"]
    lab = next(s for s in report["steps"] if s["name"] == "lab_workload")
    ran = [r for r in lab["data"]["rows"] if r["status"] == "ok"]
    assert {r["precision"] for r in lab["data"]["rows"] if r["status"] == "skipped"} >= {"tf32"}  # GPU-only
    assert len(lab["data"]["rows"]) == len(PRECISIONS) + len(plan["lab_dataloader_modes"])
    assert [r["precision"] for r in lab["data"]["rows"]][:len(LAB_MODES)] == list(LAB_MODES)
    lab_baseline = next(r for r in ran if r["precision"] == "fp32-default")  # runs on a CPU too, with a note
    assert set(lab_baseline["tf32_flags"]) == {"cuda_matmul_allow_tf32", "cudnn_allow_tf32"}
    strict = next(r for r in ran if (r["precision"], r["loader"]) == ("fp32", "resident"))
    assert strict["tf32_flags"] == {"cuda_matmul_allow_tf32": False, "cudnn_allow_tf32": False}
    assert strict["speedup_vs_lab_baseline"] > 0
    per_run = math.ceil(plan["lab_subset"] / plan["lab_batch_size"]) * plan["lab_epochs"]
    assert lab["counts"] == {"processes": len(ran), "train_steps": per_run * len(ran),
                             "train_images": plan["lab_subset"] * plan["lab_epochs"] * len(ran)}
    app = next(s for s in report["steps"] if s["name"] == "app")
    assert app["data"]["page"]["charts"] > 0 and not app["data"]["page"]["exceptions"]


def test_the_lab_workload_runs_the_labs_own_baseline_first_then_every_other_mode():
    # issue 15: fp32 as PyTorch defaults, strict fp32, tf32, amp-fp16, amp-bf16
    assert LAB_MODES == ("fp32-default", "fp32", "tf32", "amp-fp16", "amp-bf16")
    assert set(LAB_MODES) == set(PRECISIONS)


def test_the_full_plan_is_the_labs_setting_and_fits_one_device_command():
    full, quick = make_plan(False, "cuda"), make_plan(True, "cpu")
    assert (full.lab_epochs, full.lab_subset, full.lab_batch_size) == (5, None, 256)  # 5 epochs of 50,000 images
    assert full.budget_s <= 540  # a device command may run 600 s
    assert quick.budget_s < 300  # the "under 5 minutes" for the quick CPU run
    assert set(full.step_caps_s) == {name for name, _ in STEPS[:-1]}
    assert make_plan(False, "cpu").app_amp == "amp-bf16" and full.app_amp == "amp-fp16"


def test_markdown_lists_pending_steps_before_they_run():
    report = {
        "kit": {"command": "python -m bench.gpu_check --out x", "device": "cuda", "plan": {"name": "full"},
                "started_at": "2026-11-30T00:00:00+00:00", "duration_s": 1.0, "finished": False},
        "steps": [{"number": i + 1, "name": name, "title": title, "status": "pending", "reason": None,
                   "duration_s": None, "counts": {"processes": 0, "train_steps": 0, "train_images": 0},
                   "data": {}} for i, (name, title) in enumerate(STEPS)],
    }
    text = render_markdown(report)
    assert text.count("Not run yet.") == len(STEPS) - 1
    assert "| 3. Lab workload | pending |" in text


def test_read_junit_counts_and_failures(tmp_path):
    xml = tmp_path / "junit.xml"
    xml.write_text(
        '<testsuites><testsuite tests="2" failures="1" errors="0" skipped="0" time="1.5">'
        '<testcase classname="tests.test_cuda" name="test_a" time="0.5"/>'
        '<testcase classname="tests.test_cuda" name="test_b" time="1.0"><failure message="boom"/></testcase>'
        "</testsuite></testsuites>"
    )
    found = read_junit(xml)
    assert (found["tests"], found["failures"]) == (2, 1)
    assert [c["outcome"] for c in found["cases"]] == ["passed", "failure"]
    assert found["cases"][1]["message"] == "boom"
    assert read_junit(tmp_path / "absent.xml") == {}


class _Mark:
    def __init__(self, condition, reason):
        self.args, self.kwargs = (condition,), {"reason": reason}


class _Item:
    def __init__(self, *marks):
        self.marks = [_Mark(*mark) for mark in marks]

    def iter_markers(self, name):
        return iter(self.marks) if name == "skipif" else iter(())


@pytest.mark.parametrize("cuda", [False, True])
@pytest.mark.parametrize("skips, reason, gpu_only", [
    ("without a GPU", "needs a CUDA GPU", True),
    ("without a GPU", "needs a CUDA device", True),
    ("on a GPU", "auto uses the GPU here", False),  # a CPU test that names the GPU
    ("on a GPU", "needs a machine without an NVIDIA driver", False),
    ("never here", "malloc tuning needs glibc", False),
])
def test_cuda_only_selects_the_suites_gpu_only_tests(cuda, skips, reason, gpu_only):
    condition = {"without a GPU": not cuda, "on a GPU": cuda, "never here": False}[skips]
    assert is_gpu_only(_Item((condition, reason)), cuda_available=cuda) is gpu_only
    assert is_gpu_only(_Item(), cuda_available=cuda) is False


def test_the_gpu_only_largest_batch_step_records_each_precision(tmp_path, monkeypatch):
    """Step 4's GPU path, with the search faked: a found batch, a failure and a mode this GPU refuses."""
    def fake_probe(base, precisions, should_cancel=None, runner=None):
        (precision,) = precisions
        if precision == "amp-fp16":
            raise TrainerError("amp-fp16 at batch 512 failed for another reason: boom")
        return {precision: 16384}

    monkeypatch.setattr("bench.gpu_check.probe_max_batch", fake_probe)
    plan = replace(make_plan(False, "cuda"), probe_precisions=("fp32", "amp-fp16", "amp-bf16"))
    kit = Kit(tmp_path, "cuda", plan, "test")
    kit.supported_modes, kit.refused = ["fp32", "amp-fp16"], {"amp-bf16": "amp-bf16 needs native bfloat16"}
    record = kit.records[3]
    status, reason = kit.memory(record, time.monotonic() + 60)
    probe = record.data["largest_batch"]
    assert (status, probe["status"]) == ("failed", "failed")
    assert probe["batch"] == {"fp32": 16384, "amp-fp16": None}
    assert probe["notes"]["amp-bf16"] == "amp-bf16 needs native bfloat16" and "boom" in reason
    assert "| fp32 | at least 16,384 (the ceiling) |" in "\n".join(_md_memory(record.data))  # the limit may be higher


def test_the_environment_table_sets_torchs_gpu_beside_nvmls_entry_for_the_same_uuid():
    # Pinned to the second GPU: torch's device 0 is NVML's GPU 1.
    data = {"gpu_uuid": "bbbb-2222", "nvml": {"gpus": [{"uuid": "GPU-aaaa-1111"}, {"uuid": "GPU-bbbb-2222"}]}}
    assert "| GPU UUID (torch / NVML) | bbbb-2222 / GPU-bbbb-2222 |" in _md_environment(data)
    data["nvml"]["gpus"].pop()
    assert ("| GPU UUID (torch / NVML) | bbbb-2222 / no NVML GPU with that UUID (NVML's first: GPU-aaaa-1111) |"
            in _md_environment(data))


def test_the_nvidia_smi_column_takes_the_process_figure_or_else_the_devices():
    assert _nvml_figure({"nvml_process_used": 700, "torch_max_allocated": 100}) == 700
    assert _nvml_figure({"nvml_device_used": 900}) == 900
    assert _nvml_figure({"process_rss_growth": 50}) is None  # a CPU run


def test_tf32_defaults_are_read_without_setting_anything():
    defaults = tf32_defaults()
    assert "float32_matmul_precision" in defaults and isinstance(defaults["warnings"], list)


def test_only_runs_the_chosen_steps_and_records_the_others(tmp_path):
    assert main(["--out", str(tmp_path), "--device", "cpu", "--quick", "--only", "4"]) == 0
    steps = json.loads((tmp_path / JSON_NAME).read_text())["steps"]
    assert [(s["number"], s["status"]) for s in steps] == [
        (1, "skipped"), (2, "skipped"), (3, "skipped"), (4, "ok"), (5, "skipped"), (6, "skipped"), (7, "ok")]
    assert steps[0]["reason"] == "not selected (--only)"
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path), "--only", "7"])
