"""The GPU acceptance kit: its quick CPU run writes both files with every step, and its pieces on tiny inputs.

`make test` runs the kit (`python -m bench.gpu_check --device cpu --quick`) and points GPU_CHECK_OUT at its
folder; without that variable the output test runs the kit itself (a few minutes on 2 cores).
"""

import functools
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
import types
from dataclasses import replace
from pathlib import Path

import pytest

from bench.cuda_only import gpu_test_files, is_gpu_only, read_log
from bench.device_command import DEVICE_COMMAND_LIMIT, GPU_CHECK_DOC, documented_calls, documented_device_command
from bench.gpu_check import (
    FIRST_TRY_S,
    JSON_NAME,
    LAB_COMPARISON,
    LAB_MODES,
    MD_NAME,
    NO_CUDA,
    NO_GPU,
    OPTIONAL_UNITS,
    PLAN_FILL,
    PLANNED_START_S,
    SECOND_CALL_S,
    STEPS,
    ChildEnd,
    Kit,
    Plan,
    _md_environment,
    _md_memory,
    _md_memory_page,
    _nvml_figure,
    cuda_tests_outcome,
    default_budget,
    killed_tests_reason,
    lab_runs,
    lab_time_s,
    ladder_outcome,
    machine_slug,
    main,
    make_plan,
    per_image_figures,
    per_test_timeout,
    read_junit,
    render_markdown,
    time_plan_line,
)
from bench.gpu_env import host_facts, nvml_facts, tf32_defaults
from bench.ladder import LARGEST, rungs_for
from server.batch_probe import PROBE_MAX_TRIES
from trainer.config import PRECISIONS
from trainer.errors import TrainerError

REPO_ROOT = Path(__file__).resolve().parents[2]
DOC = GPU_CHECK_DOC
WINDOW_S = 15 * 60  # the lent GPU's device time, all tries together
MACHINE_START_S = 120  # "1-2 minutes" to start one
WARM_S = 30  # a machine stays warm this long after a call, then goes back (this idle time counts too)
NO_START_UNDER_S = 4 * 60  # no machine starts with less device time left
WHEELS_S = 15  # installing .gpu-wheels/ before each call


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
    # The ladder is the window's second call, not part of the first try.
    assert (by_name["ladder"]["status"], by_name["ladder"]["reason"]) == (
        "skipped", "runs only as a call of its own (--only 7)")
    assert not (quick_cpu_run / "ladder-cpu.json").exists()
    # Sized from step 1's own process (issue 34): the quick plan fits with nothing left out.
    plan = report["kit"]["time_plan"]
    assert plan["measured"] and plan["process_start_s"] == by_name["environment"]["data"]["process_start_s"] > 0
    assert plan["left_out"] == [] and plan["fill"] <= PLAN_FILL
    assert "Time plan (docs/gpu-check.md): a fresh process took " in markdown


def test_the_ladder_call_climbs_every_rung_this_device_can_run(tmp_path):
    """Issue 24: the kit runs the ladder as a call of its own (--only 7), writes the ladder's JSON where the device
    tool brings it back, and its table in gpu-check.md."""
    assert main(["--out", str(tmp_path), "--device", "cpu", "--quick", "--only", "7"]) == 0
    report = json.loads((tmp_path / JSON_NAME).read_text())
    step = next(s for s in report["steps"] if s["name"] == "ladder")
    assert (step["status"], step["reason"]) == ("ok", None)
    ladder = json.loads((tmp_path / "ladder-cpu.json").read_text())
    names = [rung["name"] for rung in ladder["rungs"]]
    assert names[:-1] == [rung.name for rung in rungs_for("cpu")] and names[-1].startswith(LARGEST)
    runnable = [rung for rung in ladder["rungs"][:-1] if rung["why_not"] is None]
    assert len(runnable) == 5 and all(len(rung["seconds"]) == 1 and not rung["errors"] for rung in runnable)
    assert runnable[0]["speedup_vs_lab"]["median"] == pytest.approx(1.0)
    batch_tries = 1  # the quick ladder tries one larger batch, kept or refused for its accuracy
    assert ladder["counts"]["runs"] == len(runnable) + batch_tries
    assert step["counts"]["processes"] == 1 + ladder["counts"]["runs"]
    assert step["counts"]["train_steps"] == ladder["counts"]["train_steps"] > 0
    markdown = (tmp_path / MD_NAME).read_text()
    for rung in ladder["rungs"]:
        assert f"| {rung['name']} |" in markdown
    assert sorted(path.name for path in tmp_path.iterdir()) == ["gpu-check.json", "gpu-check.md", "ladder-cpu.json"]


def test_the_ladder_steps_verdict_tells_a_cut_repeat_from_a_missing_rung():
    def rung(name, seconds=(1.0,), errors=(), why_not=None, config=True):
        return {"name": name, "seconds": list(seconds), "errors": list(errors), "why_not": why_not,
                "config": {} if config else None}

    calm = ChildEnd("", None, timed_out=False)
    whole = {"rungs": [rung("the lab's loop"), rung("AMP"), rung(LARGEST, (), why_not="batch 512 trained to 10%",
                                                                  config=False)]}
    assert ladder_outcome(whole, calm) == ("ok", None)
    cut = {**whole, "stopped": "the budget ran out: 5 run(s) not started"}
    assert ladder_outcome(cut, calm) == (
        "ok", "the budget ran out: 5 run(s) not started (fewer repeats: wider or unknown spreads)")
    missing = {"rungs": [rung("the lab's loop"), rung("AMP", ()),
                         rung(LARGEST, (), why_not="the budget ran out before batch 512 started", config=False)]}
    assert ladder_outcome(missing, calm) == ("timed out", f"not run for want of time: AMP, {LARGEST}")
    broken = {"rungs": [rung("the lab's loop"), rung("CUDA graphs", (), errors=["cancelled"])]}
    assert ladder_outcome(broken, calm) == ("failed", "CUDA graphs: cancelled")


def test_quick_cpu_run_counts_the_training_steps_its_plan_asks_for(quick_cpu_run):
    """The step counts that size the full GPU plan (docs/gpu-check.md) are the ones the runs really made."""
    report = json.loads((quick_cpu_run / JSON_NAME).read_text())
    plan = Plan(**report["kit"]["plan"])
    lab = next(s for s in report["steps"] if s["name"] == "lab_workload")
    rows = lab["data"]["rows"]
    ran = [r for r in rows if r["status"] == "ok"]
    assert {r["precision"] for r in rows if r["status"] == "skipped"} >= {"tf32"}  # GPU-only
    assert [(r["loader"], r["precision"], r["batch_size"]) for r in rows] == lab_runs(plan, plan.app_amp)
    assert lab["data"]["prepared_split"]["status"] == "ok"  # generated once, read by every run
    lab_baseline = next(r for r in ran if r["precision"] == "fp32-default")  # runs on a CPU too, with a note
    assert set(lab_baseline["tf32_flags"]) == {"cuda_matmul_allow_tf32", "cudnn_allow_tf32"}
    strict = next(r for r in ran if (r["precision"], r["loader"]) == ("fp32", "resident"))
    assert strict["tf32_flags"] == {"cuda_matmul_allow_tf32": False, "cudnn_allow_tf32": False}
    assert strict["speedup_vs_lab_baseline"] > 0 and strict["throughput_vs_lab_baseline"] > 0
    assert all(r["epochs_run"] == plan.lab_epochs and r["lab_time_s"] == r["total_time_s"] for r in ran)  # a CPU
    assert strict["resident_data_bytes"] > 0
    steps = sum(math.ceil(plan.lab_subset / r["batch_size"]) * plan.lab_epochs for r in ran)
    assert lab["counts"] == {"processes": len(ran), "train_steps": steps,
                             "train_images": plan.lab_subset * plan.lab_epochs * len(ran)}
    app = next(s for s in report["steps"] if s["name"] == "app")
    assert app["data"]["page"]["charts"] > 0 and not app["data"]["page"]["exceptions"]


def test_quick_cpu_run_measures_the_memory_pages_breakdown_at_two_batch_sizes(quick_cpu_run):
    report = json.loads((quick_cpu_run / JSON_NAME).read_text())
    plan = Plan(**report["kit"]["plan"])
    memory = next(s for s in report["steps"] if s["name"] == "memory")
    page = memory["data"]["memory_page"]
    assert page["status"] == "ok" and "lessons.memory_breakdown" in page["command"]
    assert sorted((b["precision"], b["batch_size"]) for b in page["breakdowns"]) == sorted(
        (p, b) for p in plan.breakdown_precisions for b in plan.breakdown_batches)
    fp32, amp = (page["per_image"][p] for p in plan.breakdown_precisions)
    assert fp32["bytes_per_image"] > amp["bytes_per_image"] > 0  # AMP keeps its activations in 16 bits
    assert fp32["extrapolated_largest_batch"] is None  # a CPU: the limit is the machine's RAM
    assert "no limit extrapolated: a CPU's is the machine's RAM" in (quick_cpu_run / MD_NAME).read_text()


def test_the_breakdowns_straight_line_passes_through_what_it_measured(quick_cpu_run):
    """Given a GPU of exactly the memory the larger batch's bar measured (the simulated part), the extrapolation
    finds that batch again; given an H200's 139 GiB it says that memory does not limit the lab's batch."""
    report = json.loads((quick_cpu_run / JSON_NAME).read_text())
    breakdowns = next(s for s in report["steps"] if s["name"] == "memory")["data"]["memory_page"]["breakdowns"]
    for precision in {b["precision"] for b in breakdowns}:
        mine = [b for b in breakdowns if b["precision"] == precision]
        large = max(mine, key=lambda b: b["batch_size"])
        bar = sum(large["components"].values())  # on a CPU the bar is the allocator's peak
        figures = per_image_figures(mine, memory_total=bar)[precision]
        assert figures["extrapolated_largest_batch"] in (large["batch_size"] - 1, large["batch_size"])
    h200 = per_image_figures(breakdowns, memory_total=139 * 2**30)
    assert all(f["extrapolated_largest_batch"] > 50_000 for f in h200.values())
    page = {"status": "ok", "command": "python -m lessons.memory_breakdown", "breakdowns": breakdowns,
            "per_image": h200}
    text = "\n".join(_md_memory_page(page))
    assert "extrapolated in a straight line, not measured" in text and "memory does not limit the batch" in text


@pytest.mark.slow  # imports Streamlit
def test_quick_cpu_run_writes_reference_results_the_teaching_pages_load(quick_cpu_run, monkeypatch):
    """Issue 22, item 14: the files load with ui/reference.py's own loader, and the two sweep points make a sweep."""
    pytest.importorskip("streamlit")
    import ui.reference as reference

    folder = quick_cpu_run / "reference"
    demo = reference.load_references(folder, device_type="cpu", purpose="quick-demo")
    sweep = reference.load_references(folder, device_type="cpu", purpose="sweep")
    assert len(demo) == 1 and len(sweep) == 2
    assert (demo[0].baseline.precision, demo[0].candidate.precision) == ("fp32", "amp-bf16")
    assert demo[0].speedup > 0 and demo[0].command.startswith("python -m trainer compare --amp amp-bf16")
    monkeypatch.setattr(reference, "load_references", functools.partial(reference.load_references, folder))
    found = reference.reference_sweep("cpu")  # differ in batch size alone: the page's own test
    plan = make_plan(True, "cpu")
    assert [r.baseline.config.batch_size for r in found] == sorted([plan.lab_batch_size, plan.sweep_batch_size])
    assert len(reference.reference_rows(found)) == 4
    report = json.loads((quick_cpu_run / JSON_NAME).read_text())
    written = report["steps"][-1]["data"]["references"]["files"]
    assert sorted(written) == sorted(path.name for path in folder.glob("cpu-*.json"))
    assert "not a reference to commit" in demo[0].note  # the quick plan's sizes are not the quick demo's


def test_the_lab_workload_runs_the_labs_own_baseline_first_then_every_other_mode():
    # issue 15: fp32 as PyTorch defaults, strict fp32, tf32, amp-fp16, amp-bf16
    assert LAB_MODES == ("fp32-default", "fp32", "tf32", "amp-fp16", "amp-bf16")
    assert set(LAB_MODES) == set(PRECISIONS)


def test_the_full_plan_is_the_labs_setting_and_fits_one_device_command():
    full, quick = make_plan(False, "cuda"), make_plan(True, "cpu")
    assert (full.lab_epochs, full.lab_subset, full.lab_batch_size) == (5, None, 256)  # 5 epochs of 50,000 images
    assert full.budget_s == FIRST_TRY_S <= 360  # the first try ends by about 6 minutes (issue 22, item 13)
    assert quick.budget_s < 300  # the "under 5 minutes" for the quick CPU run
    assert set(full.step_caps_s) == {name for name, _ in STEPS[:-1]}
    assert make_plan(False, "cpu").app_amp == "amp-bf16" and full.app_amp == "amp-fp16"


def test_the_kits_temporaries_are_never_in_its_output_folder(tmp_path, monkeypatch):
    """Issue 34, item 5: a kit killed mid-write (here, before its finished file is moved into place) leaves the
    complete file before it and no temporary among the 8 files the device tool brings back."""
    kit = Kit(tmp_path / "out", "cpu", make_plan(True, "cpu"), "test")
    kit.write()
    before = (kit.out / JSON_NAME).read_text()

    def killed(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr("bench.gpu_check.shutil.move", killed)
    with pytest.raises(KeyboardInterrupt):
        kit.write()
    assert sorted(path.name for path in kit.out.iterdir()) == [JSON_NAME, MD_NAME]
    assert (kit.out / JSON_NAME).read_text() == before
    assert list(kit.work.glob("*.partial")) and not kit.work.resolve().is_relative_to(kit.out.resolve())


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
    monkeypatch.setattr(Kit, "memory_breakdown", lambda self, record, deadline: {"status": "ok", "reason": None})
    plan = replace(make_plan(False, "cuda"), probe_precisions=("fp32", "amp-fp16", "amp-bf16"))
    kit = Kit(tmp_path, "cuda", plan, "test")
    kit.supported_modes, kit.refused = ["fp32", "amp-fp16"], {"amp-bf16": "amp-bf16 needs native bfloat16"}
    record = kit.records[3]
    status, reason = kit.memory(record, time.monotonic() + 60)
    probe = record.data["largest_batch"]
    assert (status, probe["status"]) == ("failed", "failed")
    assert probe["batch"] == {"fp32": 16384, "amp-fp16": None}
    assert probe["notes"]["amp-bf16"] == "amp-bf16 needs native bfloat16" and "boom" in reason
    assert "| fp32 | at least 16,384 (the ceiling; the breakdown extrapolates) |" in "\n".join(_md_memory(record.data))


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


def test_step_1_records_what_the_dataloaders_workers_depend_on_and_a_fresh_processs_start():
    """Issue 34, item 5: the cores, /dev/shm (where the workers hand batches over) and the NVML library's version,
    beside the start of step 1's own process, which imports what a run imports."""
    host = host_facts()
    assert 1 <= host["cpu_usable"] <= host["cpu_count"]
    assert host["dev_shm"]["total_bytes"] >= host["dev_shm"]["free_bytes"] >= 0
    data = {"host": host, "process_start_s": 4.25, "nvml": {"driver_version": "580.159.04", "nvml_version": "13.580"}}
    table = "\n".join(_md_environment(data))
    assert f"| CPU cores (usable / all) | {host['cpu_usable']} / {host['cpu_count']} |" in table
    assert "| /dev/shm (the DataLoader workers' batches) | " in table and " GiB free |" in table
    assert "| driver / NVML library (NVML) | 580.159.04 / 13.580 |" in table
    assert "| a fresh process (step 1's, timed) | 4.2 s: " in table


def test_tf32_defaults_are_read_without_setting_anything():
    defaults = tf32_defaults()
    assert "float32_matmul_precision" in defaults and isinstance(defaults["warnings"], list)


def test_only_runs_the_chosen_steps_and_records_the_others(tmp_path):
    assert main(["--out", str(tmp_path), "--device", "cpu", "--quick", "--only", "2"]) == 0  # 2: at once on a CPU
    report = json.loads((tmp_path / JSON_NAME).read_text())
    steps = report["steps"]
    assert [(s["number"], s["reason"]) for s in steps] == [
        (1, "not selected (--only)"), (2, NO_GPU), (3, "not selected (--only)"), (4, "not selected (--only)"),
        (5, "not selected (--only)"), (6, "not selected (--only)"), (7, "not selected (--only)"), (8, None)]
    assert report["kit"]["plan"]["budget_s"] == make_plan(True, "cpu").step_caps_s["cuda_tests"]  # the retry's caps
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path), "--only", "8"])


def _documented_retries() -> list[tuple[str, int]]:
    """The rows of docs/gpu-check.md's table of retries: (the --only value, its seconds)."""
    return [(only, int(seconds)) for only, seconds in
            re.findall(r"^\| `--only ([\d,]+)` \|[^|]*\| (\d+) s \|$", DOC.read_text(), re.MULTILINE)]


def test_the_window_holds_both_calls_even_when_the_machine_goes_back_between_them():
    """Issue 34, item 4: the first try, then the second call (the ladder, or a retry of the length the docs give);
    if the machine went back in between (it stays warm 30 s), a second start, which needs 4 minutes left."""
    full = make_plan(False, "cuda")
    retries = _documented_retries()
    assert len(retries) >= 4
    for only, seconds in retries:
        chosen = {int(n) for n in only.split(",")}
        assert default_budget(full, chosen) == seconds <= SECOND_CALL_S, only
    first = MACHINE_START_S + WHEELS_S + full.budget_s + WARM_S
    assert WINDOW_S - first >= NO_START_UNDER_S
    assert first + MACHINE_START_S + WHEELS_S + SECOND_CALL_S + WARM_S <= WINDOW_S
    assert default_budget(full, {3, 4}) == SECOND_CALL_S  # caps of 245 s, held to the call: its plan leaves out
    assert default_budget(full, None) == full.budget_s


def planned_kit(tmp_path: Path, start_s: float) -> Kit:
    """The full first try on a GPU that runs every mode (an H100 or an H200), sized after step 1 timed its own
    process at `start_s`."""
    kit = Kit(tmp_path / "out", "cuda", make_plan(False, "cuda"), "test")
    kit.supported_modes = list(PRECISIONS)
    kit.records[0].status, kit.records[0].data = "ok", {"process_start_s": start_s}
    kit.start_s = start_s
    kit.deadline -= kit.estimate_s("environment")  # the time step 1 took
    kit.plan_time()
    return kit


@pytest.mark.parametrize("start_s, left_out", [
    (3.0, []),
    (PLANNED_START_S, ["fp32 dataloader"]),
    (PLANNED_START_S + 3, list(OPTIONAL_UNITS)),  # the rehearsal's slowdown on the GPU's estimate
])
def test_the_first_try_leaves_out_its_least_valuable_runs_up_front_when_processes_start_slowly(tmp_path, start_s,
                                                                                              left_out):
    """Issue 34, item 1: sized from step 1's own start, the plan fits the budget with room to spare, each step's
    share within its cap, by leaving out the least valuable runs before any of them starts."""
    kit = planned_kit(tmp_path, start_s)
    plan = kit.time_plan
    assert plan["left_out"] == left_out and plan["measured"]
    assert plan["fill"] <= PLAN_FILL
    assert all(seconds <= kit.plan.step_caps_s[step] for step, seconds in plan["steps_s"].items()), plan
    assert list(plan["steps_s"]) == ["cuda_tests", "lab_workload", "memory", "app", "benchmark"]
    assert f"left out, least valuable first: {', '.join(left_out) or 'nothing'}" in time_plan_line(plan)


def test_a_left_out_run_is_skipped_with_the_plans_reason_and_its_step_stays_ok(tmp_path, monkeypatch):
    kit = planned_kit(tmp_path, PLANNED_START_S + 3)
    ran = []

    def fake_run(self, record, precision, loader, batch_size, deadline):
        ran.append((loader, precision, batch_size))
        return {"status": "ok"}

    monkeypatch.setattr(Kit, "lab_run", fake_run)
    monkeypatch.setattr(Kit, "prepare_split", lambda self: {"status": "ok"})
    assert kit.lab_workload(kit.records[2], time.monotonic() + 200) == ("ok", None)
    rows = kit.records[2].data["rows"]
    skipped = [(row["loader"], row["precision"], row["batch_size"]) for row in rows if row["status"] == "skipped"]
    assert skipped == [("resident", "tf32", 256), ("resident", "fp32", 1024), ("resident", "amp-fp16", 1024),
                       ("dataloader", "fp32", 256)]
    assert ran == [run for run in lab_runs(kit.plan, "amp-fp16") if run not in skipped]
    assert all(row["reason"].startswith("left out by the time plan: a fresh process took 8.0 s here")
               for row in rows if row["status"] == "skipped")

    monkeypatch.setattr(Kit, "memory_breakdown", lambda self, record, deadline: {"status": "ok", "reason": None})
    status, reason = kit.memory(kit.records[3], time.monotonic() + 45)
    assert status == "ok" and reason.startswith("the largest-batch search left out by the time plan")
    assert kit.records[3].data["largest_batch"]["status"] == "skipped"


def test_an_optional_run_that_no_longer_fits_its_step_is_left_out_rather_than_cut(tmp_path, monkeypatch):
    """The runs before it ran long: a run the plan kept but whose estimate passes the step's end is not started."""
    kit = planned_kit(tmp_path, 3.0)
    monkeypatch.setattr(Kit, "lab_run", lambda self, record, precision, loader, batch_size, deadline: {"status": "ok"})
    monkeypatch.setattr(Kit, "prepare_split", lambda self: {"status": "ok"})
    assert kit.lab_workload(kit.records[2], time.monotonic() + 15) == ("ok", None)  # less than a DataLoader run
    rows = {(row["loader"], row["precision"], row["batch_size"]): row for row in kit.records[2].data["rows"]}
    assert rows[("dataloader", "fp32-default", 256)]["status"] == "ok"  # not optional: it runs
    assert rows[("dataloader", "fp32", 256)]["reason"].startswith("left out: the step's ")


def test_the_windows_two_documented_calls_go_on_without_the_wheels_and_fit_the_device_tool():
    """Issue 34, item 4: both calls are on the page, ready to paste; the second is the first with step 1 and the
    ladder, so it needs no reading of the first's results before it is sent."""
    first, second = documented_calls()
    assert documented_device_command() == first
    for command in (first, second):
        assert len(command) < DEVICE_COMMAND_LIMIT
        assert "&&" not in command  # issue 22, item 2: a failed wheel install must not stop the kit
    assert "bench.gpu_check --out $OUT;" in first
    assert second == first.replace("--out $OUT;", "--out $OUT --only 1,7;")
    text = DOC.read_text()
    assert "| 1, the first try | left out (an H100), or `\"nvidia-h200\"` | `[\".gpu-wheels\"]` | 420 | 330 s |" in text
    assert f"| 2, the ladder (or a retry) | left out (the first call's kind) | `[\".gpu-wheels\"]` | 300 | " \
           f"{SECOND_CALL_S:.0f} s |" in text
    assert make_plan(False, "cuda").budget_s == FIRST_TRY_S == 330


def test_the_time_plans_table_is_the_codes():
    """docs/gpu-check.md's table of the full plan's units, against Kit.units on a GPU that runs every mode."""
    kit = Kit(Path(tempfile.mkdtemp()) / "out", "cuda", make_plan(False, "cuda"), "test")
    kit.supported_modes = list(PRECISIONS)
    rows = re.findall(r"^\| (\d) [^|]+ \| (\d+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$", DOC.read_text(), re.MULTILINE)
    assert [int(row[0]) for row in rows] == list(range(1, 8))
    for number, processes, work, at_5, at_8 in rows:
        units = kit.units(STEPS[int(number) - 1][0])
        assert int(processes) == sum(unit.processes for unit in units), number
        assert float(work) == sum(unit.work_s for unit in units), number
        assert (float(at_5), float(at_8)) == tuple(sum(unit.seconds(start) for unit in units) for start in (5, 8))


def test_step_2_is_given_only_the_suites_files_that_hold_cuda_only_tests():
    """Issue 22, item 8: the files that need Streamlit (the pages' and ui's tests) hold no GPU test, so a GPU
    machine without Streamlit collects none of them."""
    files = [str(path.relative_to(REPO_ROOT)) for path in gpu_test_files(REPO_ROOT / "tests")]
    assert "tests/trainer/test_cuda.py" in files and "tests/trainer/test_run.py" in files  # module and param marks
    assert not any(f.startswith(("tests/pages/", "tests/browser/")) for f in files)
    assert "tests/trainer/test_cli.py" not in files  # it skips *on* a GPU: a CPU test
    for path in files:
        assert "streamlit" not in (REPO_ROOT / path).read_text(), path


def test_the_cuda_only_log_keeps_each_tests_last_line_in_the_order_they_started(tmp_path):
    log = tmp_path / "tests.jsonl"
    lines = [{"test": "a", "outcome": "running"}, {"test": "a", "outcome": "passed", "time_s": 1.5},
             {"test": "b", "outcome": "running"}]
    log.write_text("".join(json.dumps(line) + "\n" for line in lines) + '{"test": "b", "outc')  # cut by a kill
    assert read_log(log) == [lines[1], lines[2]]
    assert read_log(tmp_path / "absent.jsonl") == []
    assert killed_tests_reason(read_log(log), "timed out after 70 s") == (
        "timed out after 70 s; 1 test(s) had ended, each kept (1 passed); still running: b")


def test_step_2_limits_each_test_only_where_pytest_timeout_is_installed(monkeypatch):
    """The GPU machine's image has pytest-timeout; a pytest without it would refuse the option."""
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    monkeypatch.setattr("importlib.util.find_spec", lambda name: object() if name == "pytest_timeout" else None)
    assert per_test_timeout(30.0) == ["--timeout", "30"]
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # installed, but pytest would not load it
    assert per_test_timeout(30.0) == []
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    assert per_test_timeout(30.0) == []


def test_junit_collection_errors_are_counted_apart_from_failing_tests(tmp_path):
    xml = tmp_path / "junit.xml"
    xml.write_text(  # pytest 9's report of one passing test and one file that could not be imported
        '<testsuites><testsuite errors="1" failures="0" skipped="0" tests="2" time="0.1">'
        '<testcase classname="" name="tests.ui.test_gpu_page" time="0.0"><error message="collection failure">'
        "ImportError while importing test module\nE   ModuleNotFoundError: No module named 'streamlit'</error>"
        '</testcase><testcase classname="tests.test_cuda" name="test_a" time="0.5"/></testsuite></testsuites>'
    )
    found = read_junit(xml)
    assert (found["tests"], found["passed"], found["failures"], found["errors"]) == (1, 1, 0, 0)
    assert found["collection_errors"] == [
        {"file": "tests.ui.test_gpu_page", "message": "ModuleNotFoundError: No module named 'streamlit'"}]
    status, reason = cuda_tests_outcome(found)
    assert status == "failed" and reason.startswith("1 passed; 1 test file(s) holding CUDA-only tests not collected")
    assert "failed, first" not in reason  # no test is counted as failing


def test_a_cuda_kit_where_torch_sees_no_gpu_fails_every_gpu_step_without_running_it(tmp_path, monkeypatch):
    """Issue 22, item 9: not "ok" with nothing run. (On a CPU machine torch sees none anyway; the patch makes the
    test mean the same on a GPU machine.)"""
    monkeypatch.setattr("bench.gpu_check.torch_sees_cuda", lambda: False)
    assert main(["--out", str(tmp_path), "--device", "cuda", "--quick", "--only", "2,3,4,5,6"]) == 1
    steps = json.loads((tmp_path / JSON_NAME).read_text())["steps"]
    assert [(s["number"], s["status"], s["reason"]) for s in steps[1:6]] == [
        (n, "failed", NO_CUDA) for n in range(2, 7)]
    assert all(s["counts"]["processes"] == 0 for s in steps)
    assert "\n" not in NO_CUDA and "torch.cuda.is_available() is False" in NO_CUDA


# ---- issue 22, items 5, 6, 12 and 14: on tiny inputs -------------------------------------------------------------


def test_step_3_runs_the_labs_own_comparison_first_and_the_other_dataloader_modes_last():
    """Item 6: a step that runs long loses its least valuable rows, never the lab's own comparison."""
    plan = make_plan(False, "cuda")
    runs = lab_runs(plan, "amp-bf16")
    assert runs[:2] == [("dataloader", mode, 256) for mode in LAB_COMPARISON] == [
        ("dataloader", "fp32-default", 256), ("dataloader", "amp-fp16", 256)]
    assert runs[2:4] == [("resident", "fp32", 256), ("resident", "amp-fp16", 256)]
    assert runs[7:9] == [("resident", "fp32", 1024), ("resident", "amp-bf16", 1024)]  # the sweep's second point
    # Issue 34: with the lab's DataLoader, its comparison and strict fp32 alone (tf32's and amp-bf16's rows cost a
    # fresh process and 260,000 images each, for figures the resident rows give), strict fp32 last.
    assert runs[9:] == [("dataloader", "fp32", 256)]
    assert {mode for loader, mode, batch in runs if (loader, batch) == ("resident", 256)} == set(LAB_MODES)
    assert len(runs) == len(LAB_MODES) + 2 + 3


def test_cuda_resident_runs_get_a_steady_window_of_a_few_seconds_and_every_run_reads_the_prepared_split(tmp_path):
    """Item 5 and 6: the arguments each `python -m trainer run` of step 3 is given."""
    kit = Kit(tmp_path, "cuda", make_plan(False, "cuda"), "test")
    kit.prepared_root = tmp_path / "synthetic"
    resident = kit.lab_args("fp32", "resident", 256, tmp_path / "r.json")
    dataloader = kit.lab_args("fp32", "dataloader", 256, tmp_path / "d.json")
    assert resident[resident.index("--min-steady-s") + 1] == "3" and "--min-steady-s" not in dataloader
    assert all(args[args.index("--data-root") + 1] == str(kit.prepared_root) for args in (resident, dataloader))
    on_cpu = Kit(tmp_path, "cpu", make_plan(True, "cpu"), "test")
    assert "--min-steady-s" not in on_cpu.lab_args("fp32", "resident", 32, tmp_path / "c.json")
    assert "--data-root" not in on_cpu.lab_args("fp32", "resident", 32, tmp_path / "c.json")  # none prepared


def test_the_app_runs_before_the_benchmark_which_keeps_the_data_resident_and_reads_step_3s_split(tmp_path,
                                                                                                 monkeypatch):
    """Issue 34, item 1: the class server's only end-to-end check does not get what the benchmark leaves."""
    assert [name for name, _ in STEPS].index("app") < [name for name, _ in STEPS].index("benchmark")
    started = []

    def no_bench(self, record, args, path, deadline, what):
        started.append(args)
        return None, ChildEnd("", "not run here", timed_out=False)

    monkeypatch.setattr(Kit, "reporting_child", no_bench)
    kit = Kit(tmp_path, "cuda", make_plan(False, "cuda"), "test")
    kit.prepared_root = tmp_path / "split"
    kit.records[0].data = {"gpu_name": "NVIDIA H100 80GB HBM3"}
    assert kit.benchmark(kit.records[5], time.monotonic() + 60) == ("failed", "not run here")
    (args,) = started
    assert Path(args[args.index("--json") + 1]).name == "bench-h100.json"  # named after step 1's GPU
    assert args[args.index("--loaders") + 1] == "resident" and "--modes" not in args  # fp32 and amp-fp16 there
    assert args[args.index("--data-root") + 1] == str(tmp_path / "split")
    assert args[args.index("--data") + 1] == "synthetic"


def test_the_kit_names_its_files_and_its_title_after_the_gpu_step_1_found(tmp_path, monkeypatch):
    """Issue 34, item 4: a first call that names no kind gets an H100; its figures must not be filed as an H200's."""
    kit = Kit(tmp_path / "out", "cuda", make_plan(False, "cuda"), "test")
    kit.records[0].data = {"gpu_name": "NVIDIA H100 80GB HBM3"}
    assert kit.machine() == {"name": "NVIDIA H100 80GB HBM3", "slug": "h100"}
    for name in ("bench-h100.json", "ladder-h100.json"):
        (kit.out / name).write_text("{}")
    date = kit.started.date().isoformat()
    assert kit.files_to_commit() == {
        MD_NAME: f"bench/results/gpu-check-h100-{date}.md", JSON_NAME: f"bench/results/gpu-check-h100-{date}.json",
        "bench-h100.json": f"bench/results/cuda-h100-{date}.json",
        "ladder-h100.json": f"reference/ladder-cuda-{date}-h100.json"}
    kit.write()
    markdown = (kit.out / MD_NAME).read_text()
    assert markdown.startswith("# GPU acceptance kit: NVIDIA H100 80GB HBM3\n")
    assert f"`bench-h100.json` as `bench/results/cuda-h100-{date}.json`" in markdown

    asked = []  # without step 1 (a retry): NVML's name, asked once and without a CUDA context
    monkeypatch.setattr("bench.gpu_check.nvml_facts",
                        lambda uuid: asked.append(uuid) or {"gpus": [{"name": "NVIDIA H200"}]})
    retry = Kit(tmp_path / "retry", "cuda", make_plan(False, "cuda"), "test", only={6})
    assert retry.machine()["slug"] == retry.machine()["slug"] == "h200" and asked == [None]
    assert [machine_slug(name) for name in ("NVIDIA H200 NVL", "NVIDIA A100-SXM4-80GB", None)] == [
        "h200", "a100", "cuda"]


def test_the_labs_time_leaves_out_the_epochs_added_for_the_steady_window():
    from trainer.config import RunConfig
    from trainer.results import RunResult

    run = RunResult(RunConfig(epochs=2, min_steady_s=3.0), {}, total_time_s=4.5, epoch_times_s=[2.5, 1.0, 1.0],
                    steady_images_per_s=None, peak_memory={}, loss_history=[], test_accuracy=None)
    assert lab_time_s(run, 2) == 3.5 and lab_time_s(run, 5) == 4.5


def test_the_demo_and_the_sweep_use_the_mode_step_1_found_best_here(tmp_path):
    kit = Kit(tmp_path, "cuda", make_plan(False, "cuda"), "test")
    assert kit.demo_amp() == "amp-fp16"  # step 1 not run: the plan's
    kit.records[0].data = {"hardware": {"recommended_amp": "amp-bf16"}}
    kit.supported_modes = ["fp32", "fp32-default", "tf32", "amp-fp16", "amp-bf16"]
    assert kit.demo_amp() == "amp-bf16"  # an H200, as the server's quick demo picks it
    kit.supported_modes = ["fp32", "amp-fp16"]
    assert kit.demo_amp() == "amp-fp16"  # recommended yet refused here: the plan's
    kit.records[0].data = {"hardware": {"recommended_amp": "fp32"}}  # a CPU without bf16 hardware
    assert kit.demo_amp() == "amp-fp16"


def test_the_lab_table_says_what_pytorchs_figures_leave_out_and_shows_the_steady_ratio(quick_cpu_run):
    markdown = (quick_cpu_run / MD_NAME).read_text()
    for column in ("vs fp32 (time)", "vs fp32 (steady)", "PyTorch allocated (resident data left out)",
                   "| resident data |", "time (lab's epochs)", "epochs run"):
        assert column in markdown, column


def test_the_environment_step_finds_a_mig_slice_among_nvmls_devices(monkeypatch):
    """Item 12: torch's device is a MIG slice; NVML lists the whole GPU and, under it, the slice (simulated)."""
    bare = "1f2e3d4c-0000-1111-2222-333344445555"
    gpu = types.SimpleNamespace(total=141 * 2**30, used=2**30)
    mig = types.SimpleNamespace(total=18 * 2**30, used=0)
    fake = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlSystemGetDriverVersion=lambda: "580.65",
        nvmlSystemGetNVMLVersion=lambda: "13.580.65",
        nvmlSystemGetCudaDriverVersion=lambda: 13000, nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda index: "gpu", nvmlDeviceGetName=lambda handle: "NVIDIA H200",
        nvmlDeviceGetUUID=lambda handle: {"gpu": "GPU-aaaa", "mig": f"MIG-{bare}"}[handle],
        nvmlDeviceGetMemoryInfo=lambda handle: {"gpu": gpu, "mig": mig}[handle],
        nvmlDeviceGetMigMode=lambda handle: (1, 1), NVML_DEVICE_MIG_ENABLE=1,
        nvmlDeviceGetMaxMigDeviceCount=lambda handle: 2,
        nvmlDeviceGetMigDeviceHandleByIndex=lambda handle, slot: ["mig"][slot],  # slot 1 empty: IndexError
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    facts = nvml_facts(f"MIG-{bare}")
    assert (facts["driver_version"], facts["nvml_version"]) == ("580.65", "13.580.65")
    assert facts["gpus"][0]["mig_devices"] == [{"uuid": f"MIG-{bare}", "memory_total_bytes": 18 * 2**30}]
    assert facts["torch_gpu_found_by_uuid"] is True
    row = f"| GPU UUID (torch / NVML) | MIG-{bare} / MIG-{bare} |"
    assert row in _md_environment({"gpu_uuid": f"MIG-{bare}", "nvml": facts})


@pytest.mark.slow  # collects the GPU test files in a fresh pytest
def test_the_docs_counts_of_gpu_tests_and_search_tries_are_the_codes():
    """Item 12: docs/gpu-check.md's counts, checked against the suite and the search."""
    text = DOC.read_text()
    files = gpu_test_files(REPO_ROOT / "tests")
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-p", "bench.cuda_only",
         *map(str, files)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    tests = re.search(r"(\d+)/\d+ tests collected", collected.stdout)  # the GPU-only ones, out of the files' all
    assert tests, collected.stdout[-2000:]
    assert f"the suite's CUDA-only tests ({tests.group(1)} today, in {len(files)} files)" in text
    per_precision = PROBE_MAX_TRIES
    tries = per_precision * len(make_plan(False, "cuda").probe_precisions)
    assert f"up to {per_precision} tries per precision, {tries} in all" in text
    assert f"up to {tries} processes" in text


def test_the_lab_batchs_resident_runs_and_the_labs_comparison_are_profiled_and_measure_the_peaks(quick_cpu_run):
    data = json.loads((quick_cpu_run / JSON_NAME).read_text())["steps"][2]["data"]
    ran = [row for row in data["rows"] if row["status"] == "ok"]
    profiled = [row for row in ran if row.get("profile")]
    lab_batch = data["settings"]["batch_size"]
    assert profiled and all(row["batch_size"] == lab_batch for row in profiled)
    assert {row["loader"] for row in profiled if row["loader"] == "resident"} == {"resident"}
    assert all(row["loader"] == "resident" or row["precision"] in ("fp32-default", "amp-fp16") for row in profiled)
    for row in profiled:
        profile = row["profile"]
        assert sum(profile["categories"].values()) == pytest.approx(profile["step_s"])  # they add up to the step
        assert row["device_peaks"]["matmul_tflops"]["fp32"] > 0
    assert "Profiled steps after training" in (quick_cpu_run / MD_NAME).read_text()
