"""The GPU kit under the failures issue 22 reproduced, each simulated for real on the CPU: a missing wheel folder, a
Streamlit that does not import or whose page crashes, a benchmark killed at its cap, a test file that cannot be
collected, a GPU that torch does not see, a machine without the project's .venv. Each keeps what was measured.

Kept apart from test_gpu_check.py, which `make test` runs beside the kit's quick CPU run: these start processes.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from bench.device_command import documented_device_command
from bench.gpu_check import JSON_NAME, MD_NAME, NO_CUDA, NO_GPU, Kit, _child_until, _last_json, make_plan

pytestmark = pytest.mark.slow
REPO_ROOT = Path(__file__).resolve().parents[2]
VENV_PYTHON = sys.executable


def write_package(root: Path, files: dict[str, str]) -> Path:
    """Python files under `root` (a folder to put on PYTHONPATH), by relative path."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def fake_streamlit(root: Path, testing_v1: str | None) -> Path:
    """A `streamlit` that raises ImportError, or one whose `streamlit.testing.v1` is the given source."""
    if testing_v1 is None:
        return write_package(root, {"streamlit/__init__.py": "raise ImportError('this Streamlit is broken')\n"})
    return write_package(root, {"streamlit/__init__.py": "", "streamlit/testing/__init__.py": "",
                                "streamlit/testing/v1.py": testing_v1})


def on_pythonpath(monkeypatch, folder: Path) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")])))


def kit_for(tmp_path: Path, device: str = "cpu", **plan_changes) -> Kit:
    return Kit(tmp_path / "out", device, replace(make_plan(True, device), **plan_changes), "test")


def shim(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(0o755)
    return path


# ---- item 2: the documented device command without its wheels ------------------------------------------------


def test_the_documented_device_command_runs_the_kit_when_the_wheel_folder_is_missing(tmp_path):
    """The command exactly as docs/gpu-check.md gives it, in a folder with no .gpu-wheels/; `python3` is this venv's
    python, and the kit's own run is cut to step 2 on the CPU (done at once: no GPU) so that the test stays short."""
    out, work, bin_dir = tmp_path / "out", tmp_path / "work", tmp_path / "bin"
    out.mkdir()
    work.mkdir()
    shim(bin_dir, "python3", f'if [ "$1 $2" = "-m bench.gpu_check" ]; then cd {REPO_ROOT} && '
                             f'exec {VENV_PYTHON} "$@" --device cpu --quick --only 2; fi\nexec {VENV_PYTHON} "$@"\n')
    env = {**os.environ, "OUT": str(out), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-c", documented_device_command()], cwd=work, env=env, capture_output=True,
                          text=True, timeout=120)
    log = (out / "gpu-check.log").read_text()
    assert done.returncode == 0, log
    assert "gpu-check: the wheels did not install (pip exit 1)" in log
    report = json.loads((out / JSON_NAME).read_text())
    assert report["kit"]["finished"] and report["steps"][1]["reason"] == NO_GPU  # step 2 ran and found none


# ---- item 3: the app step (5) when Streamlit fails --------------------------------------------------------------


def test_step_5_runs_and_keeps_the_job_when_streamlit_cannot_be_imported(tmp_path, monkeypatch):
    on_pythonpath(monkeypatch, fake_streamlit(tmp_path / "fake", testing_v1=None))
    kit = kit_for(tmp_path)
    record = kit.records[4]
    status, reason = kit.app(record, time.monotonic() + 120)
    job, page = record.data["job"], record.data["page"]
    assert job["status"] == "done" and [run["precision"] for run in job["runs"]] == ["fp32", "amp-bf16"]
    assert all(run["total_time_s"] > 0 and run["total_steps"] > 0 for run in job["runs"])
    assert record.counts["train_steps"] == sum(run["total_steps"] for run in job["runs"])
    assert page == {"rendered": False,
                    "error": "Streamlit cannot be imported: ImportError: this Streamlit is broken"}
    assert status == "failed" and reason.startswith("the job is done and its figures kept; the Results page was not")
    assert "\n" not in reason
    references = kit.records[-1].data["references"]  # the job's runs, kept as a quick-demo reference all the same
    assert [name.endswith("-quick-demo.json") for name in references["files"]] == [True]
    assert not references["problems"] and "results" not in record.data["job"]  # the whole results: in the file
    kit.finish(record, status, reason)
    markdown = (kit.out / MD_NAME).read_text()
    assert "- fp32 on " in markdown and "Results page: not rendered: Streamlit cannot be imported" in markdown


def test_step_5_keeps_the_job_when_the_page_crashes_its_process(tmp_path, monkeypatch):
    """As a native crash inside Streamlit would: the check dies with SIGKILL while it renders the page."""
    crash = "import os\nimport signal\n\nclass AppTest:\n    @classmethod\n    def from_file(cls, *args, **kwargs):\n" \
            "        os.kill(os.getpid(), signal.SIGKILL)\n"
    on_pythonpath(monkeypatch, fake_streamlit(tmp_path / "fake", testing_v1=crash))
    kit = kit_for(tmp_path)
    record = kit.records[4]
    status, reason = kit.app(record, time.monotonic() + 120)
    assert record.data["job"]["status"] == "done" and len(record.data["job"]["runs"]) == 2
    assert record.data["page"]["rendered"] is False
    assert "exit code -9" in record.data["page"]["error"]
    assert status == "failed" and "the job is done and its figures kept" in reason


def test_a_child_killed_at_its_deadline_leaves_what_it_printed_before():
    """What step 5 reads when its page hangs past the step's time: the job's line, printed before the page."""
    hang = "import time; print('{\"job\": \"done\"}', flush=True); time.sleep(60)"
    ended = _child_until(["-c", hang], time.monotonic() + 1.5)
    assert ended.timed_out and "timed out after" in ended.problem
    assert _last_json(ended.stdout) == {"job": "done"}


# ---- item 4: the benchmark (6) killed at its cap -----------------------------------------------------------------


def test_step_6_keeps_the_finished_runs_when_the_bench_is_killed_at_the_steps_cap(tmp_path, monkeypatch):
    """The bench is told a budget past the step's end (as if its last run overran), so the kit kills it."""
    monkeypatch.setattr("bench.gpu_check.BENCH_TAIL_S", -600.0)
    kit = kit_for(tmp_path, bench_args=("--batch-size", "16", "--subset", "96", "--epochs", "1", "--repeats", "5",
                                        "--workers", "0", "--test-subset", "16"), bench_modes=("fp32",))
    record = kit.records[5]
    status, reason = kit.benchmark(record, time.monotonic() + 15)
    assert status == "timed out" and "runs that ended are kept" in reason
    assert "--budget" in record.data["command"] and record.data["finished"] is False
    done = [run for row in record.data["rows"] for run in row["repeats"] if "error" not in run]
    assert done and all(run["images_per_s"] > 0 for run in done)
    assert 0 < len(done) < 25 and record.counts["train_steps"] == sum(run["total_steps"] for run in done)
    # Written in the kit's scratch folder and copied out: a bench killed mid-write leaves no temporary in $OUT.
    assert sorted(path.name for path in kit.out.iterdir()) == ["bench-cpu.json"]


# ---- item 8: step 2 collects only the files with GPU tests ----------------------------------------------------


# The GPU-only marker in two pieces, so that this file is not itself taken for one that holds GPU tests.
GPU_ONLY = "@pytest.mark.skipif(not torch.cuda." + "is_available(), reason=\"needs a CUDA GPU\")"
GPU_TEST = f'''import pytest
import torch


{GPU_ONLY}
def test_on_the_gpu():
    assert torch.cuda.is_available()


def test_a_cpu_test_beside_it():  # deselected by bench.cuda_only
    pass
'''


def test_step_2_collects_only_gpu_test_files_and_reports_one_that_cannot_import_apart(tmp_path, monkeypatch):
    """A pytest that believes in a GPU (a plugin patches torch.cuda.is_available), a Streamlit that does not import,
    and three files: GPU tests, GPU tests that need Streamlit, and a page test that needs it but holds no GPU test."""
    fake = fake_streamlit(tmp_path / "fake", testing_v1=None)
    write_package(fake, {"fake_gpu.py": "import torch\n\ntorch.cuda.is_available = lambda: True\n"})
    on_pythonpath(monkeypatch, fake)
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p fake_gpu")
    tests = write_package(tmp_path / "tests", {
        "test_gpu.py": GPU_TEST,
        "ui/test_gpu_page.py": "import streamlit\n" + GPU_TEST,
        "pages/test_page.py": "import streamlit\n\n\ndef test_the_page():\n    pass\n",
    })
    kit = kit_for(tmp_path, device="cuda")
    kit.tests_dir, kit.sees_cuda = tests, True
    record = kit.records[1]
    status, reason = kit.cuda_tests(record, time.monotonic() + 120)
    data = record.data
    assert [Path(f).name for f in data["files"]] == ["test_gpu.py", "test_gpu_page.py"]  # not the page's file
    assert (data["passed"], data["failures"], data["errors"], data["skipped"]) == (1, 0, 0, 0)
    (error,) = data["collection_errors"]
    assert "test_gpu_page" in error["file"] and "this Streamlit is broken" in error["message"]
    assert status == "failed" and reason.startswith("1 passed; 1 test file(s) holding CUDA-only tests not collected")

    (tests / "ui" / "test_gpu_page.py").unlink()  # left: the GPU tests, and a page test Streamlit cannot import
    status, reason = kit.cuda_tests(record, time.monotonic() + 120)
    assert (status, reason, record.data["passed"], record.data["collection_errors"]) == ("ok", None, 1, [])


HANGS = f'''import time

import pytest
import torch


{GPU_ONLY}
def test_first():
    pass


{GPU_ONLY}
def test_second_fails():
    assert False, "a real failure"


{GPU_ONLY}
def test_third_hangs():
    time.sleep(600)


{GPU_ONLY}
def test_fourth_after_it():
    pass
'''


def pretend_gpu(tmp_path: Path, monkeypatch, tests: dict[str, str]) -> Kit:
    """A kit whose step 2 runs these test files under a pytest that believes in a GPU (a plugin patches
    torch.cuda.is_available)."""
    fake = write_package(tmp_path / "fake", {"fake_gpu.py": "import torch\n\ntorch.cuda.is_available = lambda: True\n"})
    on_pythonpath(monkeypatch, fake)
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p fake_gpu")
    kit = kit_for(tmp_path, device="cuda")
    kit.tests_dir, kit.sees_cuda = write_package(tmp_path / "tests", tests), True
    return kit


def test_step_2_killed_at_its_cap_keeps_each_finished_test_and_names_the_one_running(tmp_path, monkeypatch):
    """Issue 34, item 2: pytest killed before it writes its report; the plugin's log kept what had ended."""
    monkeypatch.setattr("bench.gpu_check.per_test_timeout", lambda seconds: [])  # as where pytest-timeout is not
    kit = pretend_gpu(tmp_path, monkeypatch, {"test_gpu.py": HANGS})
    record = kit.records[1]
    status, reason = kit.cuda_tests(record, time.monotonic() + 45)
    outcomes = {test["test"].split("::")[-1]: test["outcome"] for test in record.data["tests_run"]}
    assert outcomes == {"test_first": "passed", "test_second_fails": "failed", "test_third_hangs": "running"}
    assert "cases" not in record.data  # pytest wrote no report
    assert status == "timed out" and "2 test(s) had ended, each kept (1 passed, 1 failed)" in reason
    assert reason.endswith("still running: test_gpu.py::test_third_hangs") and "\n" not in reason
    kit.finish(record, status, reason)
    assert "| `test_gpu.py::test_second_fails` | failed |" in (kit.out / MD_NAME).read_text()


def test_step_2_with_pytest_timeout_fails_the_hanging_test_alone_and_runs_the_rest(tmp_path, monkeypatch):
    pytest.importorskip("pytest_timeout")
    monkeypatch.setattr("bench.gpu_check.per_test_timeout", lambda seconds: ["--timeout", "5"])
    kit = pretend_gpu(tmp_path, monkeypatch, {"test_gpu.py": HANGS})
    record = kit.records[1]
    status, reason = kit.cuda_tests(record, time.monotonic() + 120)
    outcomes = {test["test"].split("::")[-1]: test["outcome"] for test in record.data["tests_run"]}
    assert outcomes == {"test_first": "passed", "test_second_fails": "failed", "test_third_hangs": "failed",
                        "test_fourth_after_it": "passed"}
    assert (record.data["passed"], record.data["failures"]) == (2, 2)
    assert status == "failed" and reason.startswith("2 passed; 2 of 4 CUDA-only tests failed")


# ---- item 9: a GPU run where torch sees no GPU ----------------------------------------------------------------


def test_a_cuda_kit_with_no_visible_gpu_fails_each_gpu_step_and_keeps_step_1s_facts(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run([VENV_PYTHON, "-m", "bench.gpu_check", "--out", str(out), "--quick"], cwd=REPO_ROOT,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": ""}, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1, done.stderr
    steps = json.loads((out / JSON_NAME).read_text())["steps"]
    assert steps[0]["status"] == "failed" and steps[0]["data"]["torch_version"]  # step 1 ran and says why
    assert [(s["status"], s["reason"]) for s in steps[1:6]] == [("failed", NO_CUDA)] * 5
    assert NO_CUDA in (out / MD_NAME).read_text()


def test_a_mode_step_1_found_supported_fails_the_lab_step_when_its_run_refuses_it(tmp_path):
    """Step 1 said fp32 runs here, the kit sees a GPU, but the run's own process does not: not "skipped"."""
    kit = kit_for(tmp_path, device="cuda", lab_dataloader_modes=())
    kit.sees_cuda, kit.supported_modes = True, ["fp32"]
    record = kit.records[2]
    status, reason = kit.lab_workload(record, time.monotonic() + 120)
    rows = record.data["rows"]
    strict = [row for row in rows if row["precision"] == "fp32"]  # the lab's batch and the sweep's second one
    assert [row["batch_size"] for row in strict] == [kit.plan.lab_batch_size, kit.plan.sweep_batch_size]
    assert all(row["status"] == "failed" and "step 1 found fp32 supported here" in row["reason"] for row in strict)
    assert "no CUDA GPU is visible" in strict[0]["reason"]
    assert all(row["status"] == "skipped" for row in rows if row["precision"] != "fp32")
    assert status == "failed" and record.counts["processes"] == len(strict)


# ---- item 1: make gpu-check on a machine without the project's .venv ---------------------------------------


def make(folder: Path, bin_dir: Path, *args: str) -> subprocess.CompletedProcess:
    # make takes these as settings; and run inside `make test` (MAKELEVEL set) it would say "Entering directory"
    env = {key: value for key, value in os.environ.items()
           if key not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "OUT", "PY", "GPU_CHECK_OUT",
                          "GPU_CHECK_ARGS")}
    env.update(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", PYTHONPATH=str(REPO_ROOT))
    return subprocess.run(["make", "--no-print-directory", *args], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_gpu_check_without_a_venv_uses_python3_with_torch_installs_nothing_and_writes_into_out(tmp_path):
    folder, bin_dir, out = tmp_path / "checkout", tmp_path / "bin", tmp_path / "out"
    folder.mkdir()
    shutil.copy(REPO_ROOT / "Makefile", folder)
    shim(bin_dir, "python3", f'exec {VENV_PYTHON} "$@"\n')  # a machine's own python3, with torch
    done = make(folder, bin_dir, "gpu-check", f"OUT={out}", "GPU_CHECK_ARGS=--device cpu --quick --only 2")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"python3 -m bench.gpu_check --out {out} --device cpu --quick --only 2"
    assert "install" not in done.stdout and not (folder / ".venv").exists()
    assert json.loads((out / JSON_NAME).read_text())["steps"][1]["reason"] == NO_GPU

    shim(bin_dir, "python3", "exit 1\n")  # a python3 without torch: the project's .venv, created and installed
    planned = make(folder, bin_dir, "-n", "gpu-check").stdout
    assert "-m venv .venv" in planned and ".venv/bin/python -m bench.gpu_check --out artifacts/gpu-check" in planned

    shim(folder / ".venv" / "bin", "python", f'exec {VENV_PYTHON} "$@"\n')  # the project's .venv: as before
    planned = make(folder, bin_dir, "-n", "gpu-check").stdout
    assert "pip install" in planned and "-m venv" not in planned
    assert ".venv/bin/python -m bench.gpu_check --out artifacts/gpu-check --device cuda" in planned
