"""AppTest for the core pages, through the real app.py navigation; the experiment page end to end with a tiny real
synthetic job (real trainer, real subprocess), then the results and history pages showing it."""

import json
import sqlite3
import time
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

from server.history import HistoryStore
from server.identity import LearnerStore
from server.offer import QUICK_DEMO
from tests.app_testing import APP, app, app_on_server, charts, open_page, state_dir, texts  # noqa: F401 (fixtures)
from tests.server.test_history import make_job
from trainer.comparison_table import format_seconds, precision_name
from trainer.environment import HardwareReport, hardware_report
from trainer.isolated import RunOutcome
from trainer.results import RunResult, median_pair, split_pairs
from ui.charts import comparison_table
from ui.experiment import tf32_note
from ui.reference import load_references

JOB_TIMEOUT_S = 120
HAS_TF32 = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 8
# A job small enough for a 2-core CPU: 256 synthetic images, one epoch, data held on the device.
TINY = {
    "run_epochs": 1,
    "run_batch_size": 64,
    "run_subset": 256,
    "run_data": "synthetic",
    "run_loader": "resident",
    "run_precision": "amp-bf16",
}


def run_button(at: AppTest):
    return next(b for b in at.button if b.label == "Run")


def wait_for_job_end(at: AppTest) -> None:
    """Rerun the page (as run_every would) until this session's job ends, within JOB_TIMEOUT_S."""
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while time.monotonic() < deadline:
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        if at.success or any("This job" in e for e in texts(at.error) + texts(at.warning)):
            return
        time.sleep(0.5)
    pytest.fail(f"the job did not finish within {JOB_TIMEOUT_S} s")


def test_overview_shows_the_hardware_and_a_quick_demo(app):
    open_page(app, "overview")
    assert app.title[0].value.startswith("AMP Lab")
    assert [m.label for m in app.metric] == [
        "Tensor Cores", "Native bf16 on the GPU", "CPU bf16 instructions", "CPU AMX tile units"
    ]
    assert any(i.startswith("**What to expect here:**") for i in texts(app.info))
    assert [b.label for b in app.button] == ["Lock in my guess", "Just show me", "Run the quick demo"]
    assert "1.56x as fast (36% less time)" in " ".join(" ".join(texts(app.markdown)).split())
    assert any("Next: the fp32 baseline" in link.label for link in app.get("page_link"))


@pytest.fixture
def cpu_app(app_on_server):
    """The app with its jobs pinned to the CPU, the device this project's references were recorded on."""
    return app_on_server(DEVICE="cpu")


def test_overview_checks_a_guess_of_the_quick_demos_speedup_against_its_reference(cpu_app):
    open_page(cpu_app, "overview")
    assert not any(c.startswith("Measured in a reference run") for c in texts(cpu_app.caption))
    next(b for b in cpu_app.button if b.label == "Lock in my guess").click().run()
    assert not cpu_app.exception
    (demo,) = load_references(device_type="cpu", purpose="quick-demo")
    assert demo.baseline.config.subset == QUICK_DEMO["subset"]
    measured = demo.baseline.total_time_s / demo.candidate.total_time_s
    markdown = " ".join(texts(cpu_app.markdown))
    assert f"how many times as fast as fp32 will {demo.candidate.precision} train" in markdown
    assert f"Your guess: **1.50x** · measured: **{measured:.2f}x**" in markdown
    assert any(c.startswith(f"Measured in a reference run, not yours: {demo.label}") for c in texts(cpu_app.caption))


def test_baseline_page_shows_the_baseline_script(app):
    open_page(app, "fp32_baseline")
    assert app.title[0].value == "The fp32 baseline"
    script = (APP.parent / "lab" / "fp32_baseline.py").read_text()
    assert script.strip() in texts(app.code)
    assert "2,122,186 parameters" in "".join(texts(app.markdown))


def test_adding_amp_page_shows_the_diff_and_the_old_spellings_warning(app):
    open_page(app, "adding_amp")
    code = texts(app.code)
    diff = next(c for c in code if c.startswith("--- lab/fp32_baseline.py"))
    assert "+    scaler = torch.amp.GradScaler(device.type, enabled=amp_dtype == torch.float16)" in diff
    assert any("torch.cuda.amp.GradScaler()" in c for c in code)
    assert any("FutureWarning" in c and "torch.amp.GradScaler('cuda'" in c for c in code)
    from ui.lab_code import changed_lines

    removed, added = changed_lines()
    markdown = " ".join(texts(app.markdown))
    assert f"with {removed} lines changed and {added} lines in their place" in markdown
    next(b for b in app.button if b.label == "Lock in my guess").click().run()
    markdown = " ".join(texts(app.markdown))
    # The scale a fresh GradScaler starts from, read from this torch; scored on a log scale, and the reveal says why.
    assert "Your guess: **256x** · measured: **65536x** (off: the measured value is 256.0 times higher)" in markdown
    assert "**Why:** GradScaler starts at init_scale=65,536, read from this torch's own signature" in markdown


def test_run_page_offers_the_labs_settings(app):
    open_page(app, "run_experiment")
    epochs = app.select_slider(key="run_epochs")
    batch = app.select_slider(key="run_batch_size")
    assert epochs.options[0] == "1" and epochs.options[-1] == "20" and epochs.value == 5
    assert batch.options[0] == "32" and batch.options[-1] == "4096" and batch.value == 256
    assert "amp-bf16" in app.radio(key="run_precision").options
    assert app.radio(key="run_data").options == ["synthetic (CIFAR-shaped, generated)"]  # no CIFAR-10 in the data root
    assert any("CIFAR-10 is not offered" in c for c in texts(app.caption))
    assert any(i.startswith("**Estimated time for both runs:** about") for i in texts(app.info))
    assert [b.label for b in app.button] == ["Lock in my guess", "Just show me", "Run", "Run the lab's comparison"]
    assert "Nothing yet" in "".join(texts(app.caption))
    reference = next(e for e in app.expander if e.label.startswith("Reference results recorded on a"))
    shown = [m.value for m in reference.markdown if m.value.startswith("**Reference, not yours:**")]
    device_type = "cuda" if torch.cuda.is_available() else "cpu"
    assert shown == [f"**Reference, not yours:** {r.label}" for r in load_references(device_type=device_type,
                                                                                       purpose="quick-demo")]
    assert len(shown) < len(load_references(device_type="cpu"))  # the sweep's points are on When AMP pays off
    if not torch.cuda.is_available():  # strict fp32 and the lab's fp32 are one and the same on a CPU
        assert tf32_note(hardware_report("cpu")) in texts(app.caption)
        assert not any(c.startswith("fp32-default is not offered") for c in texts(app.caption))
    next(b for b in app.button if b.label == "Just show me").click().run()  # no comparison yet: the answer waits
    assert any("No guess this time." in m for m in texts(app.markdown))


@pytest.mark.slow
def test_repeats_queue_alternating_pairs_and_the_batch_links_to_the_memory_page(app):
    for key, value in TINY.items():
        app.session_state[key] = value
    open_page(app, "run_experiment")
    link = next(link.proto for link in app.get("page_link") if link.proto.label == "Memory at this batch size")
    assert "Where the memory goes" in link.help
    assert link.page == "memory"  # the address app.py registers for pages/memory.py
    repeats = app.radio(key="run_repeats")
    assert repeats.options == ["1 pair", "2 pairs", "3 pairs"] and repeats.value == 1
    repeats.set_value(3).run()
    assert any(i.startswith("**Estimated time for all 6 runs (3 pairs):** about") for i in texts(app.info))
    run_button(app).click().run()
    assert not app.exception and not app.error, texts(app.error)
    assert [p.proto.text.split(":")[0] for p in app.get("progress")] == [
        f"{name}, pair {pair} of 3" for pair in (1, 2, 3) for name in ("FP32", "AMP (bf16)")]
    assert any(m.startswith("**fp32 vs amp-bf16 x3, 1 epoch") for m in texts(app.markdown))
    next(b for b in app.button if b.label == "Cancel").click().run()
    wait_for_job_end(app)


def test_instructor_limits_cap_the_sliders(app, monkeypatch):
    monkeypatch.setenv("AMP_LAB_MAX_EPOCHS", "3")
    monkeypatch.setenv("AMP_LAB_MAX_BATCH_SIZE", "512")
    open_page(app, "run_experiment")
    assert app.select_slider(key="run_epochs").options == ["1", "2", "3"]
    assert app.select_slider(key="run_batch_size").options[-1] == "512"
    limits = app.table[0].value
    assert limits.loc[limits["Limit"] == "most epochs one run may train", "Value"].tolist() == ["3"]


def test_a_batch_limit_below_the_usual_choices_is_offered_and_accepted(app, monkeypatch):
    monkeypatch.setenv("AMP_LAB_MAX_BATCH_SIZE", "16")
    for key, value in TINY.items():
        if key != "run_batch_size":
            app.session_state[key] = value
    open_page(app, "run_experiment")
    batch = app.select_slider(key="run_batch_size")
    assert batch.options == ["16"] and batch.value == 16
    run_button(app).click().run()
    assert not app.exception and not app.error, texts(app.error)


def test_out_of_range_values_in_session_state_are_refused(app):
    app.session_state["run_epochs"] = 99
    app.session_state["run_batch_size"] = 100
    open_page(app, "run_experiment")
    errors = texts(app.error)
    assert "Epochs 99 set in the session state is not allowed here: choose 1 to 20. Using 5 instead." in errors
    refused_batch = "Batch size 100 set in the session state is not allowed here: choose 32, 64"
    assert any(e.startswith(refused_batch) for e in errors)
    assert app.select_slider(key="run_epochs").value == 5
    assert app.select_slider(key="run_batch_size").value == 256


def test_out_of_range_query_params_are_refused_and_good_ones_applied(app):
    app.query_params.update({"epochs": "50", "batch_size": "128", "width": "3", "amp": "tf32"})
    open_page(app, "run_experiment")
    errors = texts(app.error)
    assert any(e.startswith("Epochs '50' in the address is not allowed here: choose 1 to 20.") for e in errors)
    assert any(e.startswith("Model width '3' in the address is not allowed here: choose 1, 2, 4, 8.") for e in errors)
    if not HAS_TF32:
        assert any(e.startswith("AMP mode 'tf32' in the address is not allowed here") for e in errors)
    assert app.select_slider(key="run_epochs").value == 1  # issue 33: the smallest offered, not the lab's 5
    assert app.select_slider(key="run_batch_size").value == 128


def test_run_page_on_a_gpu_with_tf32_says_its_fp32_is_strict_and_the_labs_is_fp32_default(cpu_app, monkeypatch):
    from ui import server_bundle

    ampere = HardwareReport("A100", "cuda", tensor_cores=True, native_bf16=True, cpu_bf16=False, cpu_amx=False,
                            cpu_fp16=False, recommended_amp="amp-bf16", expected_gain="", compute_capability="8.0")
    # The report a TF32 GPU would give (its child pinned by child_env, as on a GPU server).
    monkeypatch.setattr(server_bundle, "_hardware_for", lambda device_type, child_env=(): ampere)
    open_page(cpu_app, "run_experiment")
    assert "fp32-default" in cpu_app.radio(key="run_precision").options
    assert tf32_note(ampere) in texts(cpu_app.caption)
    assert "**fp32 in this app is strict fp32**" in tf32_note(ampere)


@pytest.mark.skipif(torch.cuda.is_available(), reason="amp-fp16 is restricted only on a CPU")
def test_fp16_on_a_cpu_needs_a_subset_and_carries_a_warning(app):
    open_page(app, "run_experiment")
    app.radio(key="run_precision").set_value("amp-fp16")
    app.select_slider(key="run_subset").set_value(None).run()
    # Said of this CPU, from the hardware report (AMX-FP16 units or not), not of every CPU.
    assert f"amp-fp16 on this server's CPU: {hardware_report('cpu').cpu_fp16_note}" in texts(app.warning)
    assert any("at most 5,000 training images" in e for e in texts(app.error))
    assert run_button(app).disabled
    app.select_slider(key="run_subset").set_value(2048).run()
    assert not run_button(app).disabled


def test_results_and_history_pages_before_any_job(app):
    open_page(app, "results")
    assert any("You have no finished comparison yet" in i for i in texts(app.info))
    app.radio(key="results_whose").set_value("Whole class").run()
    assert any("No comparison has finished on this server" in i for i in texts(app.info))
    open_page(app, "history")
    assert "0 jobs match." in texts(app.caption)


def test_results_before_any_comparison_show_the_reference_quick_demo_as_not_theirs(cpu_app):
    open_page(cpu_app, "results")
    assert any("You have no finished comparison yet" in i for i in texts(cpu_app.info))
    (demo,) = load_references(device_type="cpu", purpose="quick-demo")
    assert "Meanwhile: a reference comparison, not yours" in texts(cpu_app.subheader)
    # The Run page's expander draws the same panel: label (machine, date, settings), the lab's table, note, command.
    assert f"**Reference, not yours:** {demo.label}" in texts(cpu_app.markdown)
    assert demo.note in texts(cpu_app.caption) and demo.command in texts(cpu_app.code)
    table = cpu_app.table[0].value
    assert list(table.columns) == list(comparison_table(demo.baseline, demo.candidate).columns)
    cpu_app.radio(key="results_whose").set_value("Whole class").run()
    assert f"**Reference, not yours:** {demo.label}" in texts(cpu_app.markdown)


def test_results_and_history_show_mine_first_and_the_class_with_owners(app, state_dir):
    store = HistoryStore(state_dir / "history.sqlite3")
    learners = LearnerStore(store)
    other, _ = learners.create("Grace")
    me = app.session_state["amp_lab_learner"]
    store.save_job(make_job("a" * 32, label="the other learner's", learner_id=other.id, created_at=time.time()))
    store.save_job(make_job("b" * 32, label="mine", learner_id=me.id, created_at=time.time() - 60))
    open_page(app, "results")
    assert app.selectbox[0].options == [f"{app.selectbox[0].options[0].split(' · ')[0]} · mine · yours"]
    assert app.selectbox[0].options[0].split(" · ")[0].endswith(" UTC")
    app.radio(key="results_whose").set_value("Whole class").run()
    assert [o.split(" · ", 1)[1] for o in app.selectbox[0].options] == ["mine · yours", "the other learner's · Grace"]

    open_page(app, "history")
    assert "1 job match." in texts(app.caption)
    assert app.dataframe[0].value["Owner"].tolist() == ["you"]
    assert app.dataframe[0].value["When"].str.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC").all()
    app.radio(key="history_whose").set_value("Whole class").run()
    assert app.dataframe[0].value["Owner"].tolist() == ["Grace", "you"]


def test_results_page_refuses_an_unknown_job_in_the_address(app):
    app.query_params["job"] = "[nope](http://example.com)"
    open_page(app, "results")
    assert texts(app.error)[0].startswith("There is no finished comparison with the id '\\[nope\\]")


def test_results_page_says_one_line_for_a_damaged_job_in_the_address(app, state_dir):
    store = HistoryStore(state_dir / "history.sqlite3")
    store.save_job(make_job("d" * 32))
    with sqlite3.connect(store.path) as db:
        db.execute("UPDATE jobs SET spec = '{not json' WHERE id = ?", ("d" * 32,))
    app.query_params["job"] = "d" * 32
    open_page(app, "results")
    assert texts(app.error) == [
        (
            f"The comparison '{'d' * 32}' is damaged in this server's history: showing the latest one instead. "
            "Pick any finished comparison below."
        )
    ]


RECORDED = Path(__file__).parents[1] / "recorded"


def recorded_runs(name: str) -> tuple[dict, list[RunResult]]:
    """The real runs that `compare --json` recorded in tests/recorded/`name`, in the order they ran."""
    recorded = json.loads((RECORDED / name).read_text())
    return recorded, [RunResult.from_dict(run) for run in recorded["runs"]]


def save_comparison(state: Path, learner_id: str, results: list[RunResult]) -> None:
    """A finished comparison job of these runs in the history of the app whose state folder is `state`."""
    job = make_job("e" * 32, precisions=[r.precision for r in results], label="recorded", learner_id=learner_id)
    job.outcomes = [RunOutcome(r.config, "ok", result=r) for r in results]
    HistoryStore(state / "history.sqlite3").save_job(job)


def test_results_page_shows_a_repeated_comparison_with_its_range_and_doubt(app, state_dir):
    recorded, results = recorded_runs("repeated_compare_cpu.json")
    results = results[4:] + results[:4]  # the recording's median pair came first; here it is the second
    save_comparison(state_dir, app.session_state["amp_lab_learner"].id, results)
    baseline, candidate = median_pair(*split_pairs(results))
    assert baseline is not results[0]
    speedup = recorded["speedup"]
    open_page(app, "results")
    headline = {metric.label: metric.value for metric in app.metric}
    assert headline["Speedup (the middle of 3 pairs)"] == f"{speedup['median']:.2f}x"  # as the command line computed
    assert headline["Range over the pairs"] == f"{speedup['low']:.2f}x to {speedup['high']:.2f}x"
    assert headline["Timing"] == "uncertain"
    assert any(c.startswith("**Uncertain:** the timing of") for c in texts(app.caption))
    ours = app.table[0].value
    assert "Speedup over 3 alternating pairs" in ours["Metric"].tolist()
    assert ours.iloc[0][["FP32", "AMP bf16"]].tolist() == [format_seconds(baseline.total_time_s),
                                                           format_seconds(candidate.total_time_s)]
    assert any(m.startswith("**What this says:** amp-bf16 took") and "changes the figure, not the direction" in m
               for m in texts(app.markdown))  # bf16 emulated on this CPU: the cause first, the noise after
    # One line for the noise: how many runs, which (under the names the Run page gave them), the first reason.
    names = [f"{precision_name(r.precision)}, pair {i // 2 + 1} of 3" for i, r in enumerate(results)]
    noisy = [(name, result.timing_quality["reasons"][0]) for name, result in zip(names, results)
             if result.timing_quality["verdict"] == "noisy"]
    assert len(noisy) >= 2  # the recording's noisy runs
    timing_lines = [w for w in texts(app.warning) if "timed while other work shared the machine" in w]
    assert timing_lines == [f"{len(noisy)} of the 6 runs ({', '.join(name for name, _ in noisy)}) were timed while "
                            f"other work shared the machine: {noisy[0][1]}. Such load moves the times it measures."]
    assert app.get("download_button")[0].label == "All 6 runs (JSON)"
    assert len(app.expander) == 6


def test_results_page_says_one_pairs_spread_is_unknown(app, state_dir):
    _, results = recorded_runs("noisy_compare_cpu.json")
    save_comparison(state_dir, app.session_state["amp_lab_learner"].id, results)
    open_page(app, "results")
    headline = {metric.label: metric.value for metric in app.metric}
    assert headline["Range over the pairs"] == "unknown" and "Speedup (one pair of runs)" in headline
    assert headline["Timing"] == "uncertain"
    assert any("from one pair of runs: its spread is unknown" in c for c in texts(app.caption))
    assert "Speedup over" not in " ".join(app.table[0].value["Metric"])
    assert app.get("download_button")[0].label == "Both runs (JSON)"


@pytest.mark.slow
def test_experiment_end_to_end_then_results_and_history(app, state_dir):
    for key, value in TINY.items():
        app.session_state[key] = value
    open_page(app, "run_experiment")
    assert not app.error
    next(b for b in app.button if b.label == "Lock in my guess").click().run()  # guess first, then run
    assert any("Now press Run" in m for m in texts(app.markdown))
    run_button(app).click().run()
    assert not app.exception and not app.error, texts(app.error)
    assert len(app.get("progress")) == 2
    wait_for_job_end(app)
    assert texts(app.success)[0].startswith("Done in"), texts(app.error)
    assert [p.proto.text for p in app.get("progress")][0].startswith("FP32: finished")
    assert app.get("page_link")[-1].proto.label == "See the results"
    assert any(m.startswith("Your guess: **1.50x** · measured: **") for m in texts(app.markdown))  # this run's

    # Leaving and coming back (same session) finds the job, and the settings chosen.
    open_page(app, "overview")
    open_page(app, "run_experiment")
    assert texts(app.success)[0].startswith("Done in")
    assert app.select_slider(key="run_subset").value == 256

    # A link to this comparison opens it.
    (job,) = HistoryStore(state_dir / "history.sqlite3").list_jobs(kind="compare")
    job_id = job.id
    app.query_params["job"] = job_id
    open_page(app, "results")
    assert not app.error
    assert app.selectbox[0].value == job_id

    open_page(app, "results")
    ours, reference = app.table[0].value, app.table[1].value
    assert list(ours.columns) == ["Metric", "FP32", "AMP bf16", "Improvement"]  # each mode by its exact name
    assert ours["Metric"].tolist()[0] == "Training time (1 epoch)"
    assert "Test accuracy" in ours["Metric"].tolist()
    assert list(reference.columns) == ["Metric", "FP32 (lab)", "AMP (lab)", "Improvement"]
    assert any(m.startswith("**What this says:**") for m in texts(app.markdown))
    assert len(charts(app)) == 5
    assert [d.label for d in app.get("download_button")] == [
        "Both runs (JSON)", "Main figures (CSV)", "Loss history (CSV)", "Your lab report (HTML)"
    ]
    assert len(app.expander) == 2

    open_page(app, "history")
    jobs = app.dataframe[0].value
    assert jobs["Status"].tolist() == ["done"]
    assert jobs["Owner"].tolist() == ["you"]
    assert app.table[0].value["Metric"].tolist()[0] == "Training time (1 epoch)"
    assert len(charts(app)) == 5
    # The two runs offered by default are the job's fp32 and AMP runs, each named by its place in the job.
    baseline, compared = app.selectbox(key="history-a"), app.selectbox(key="history-b")
    assert baseline.options[baseline.index].startswith("FP32 · 1 ep")
    assert baseline.options[baseline.index].endswith(f"job {job.id[:8]}, run 1")
    assert compared.options[compared.index].endswith(f"job {job.id[:8]}, run 2")


def test_a_full_queue_is_refused_with_one_line(app, monkeypatch):
    monkeypatch.setenv("AMP_LAB_MAX_QUEUED_PER_LEARNER", "1")
    for key, value in TINY.items():
        app.session_state[key] = value
    open_page(app, "run_experiment")
    run_button(app).click().run()
    assert not app.error
    run_button(app).click().run()
    assert not app.exception
    assert texts(app.error) == [
        "you already have 1 job waiting or running; wait for one to finish or cancel it (this server allows 1 per learner)"
    ]


def test_results_sets_the_step_against_the_devices_measured_peaks(app, state_dir):
    from dataclasses import replace

    from trainer.peaks import DevicePeaks

    _, results = recorded_runs("noisy_compare_cpu.json")
    measured = DevicePeaks("CPU: recorded", "2.14.1", matmul_tflops={"fp32": 0.2, "bf16": 0.4, "fp16": 0.01},
                           copy_gb_per_s=20.0, launch_us=3.0).to_dict()
    save_comparison(state_dir, app.session_state["amp_lab_learner"].id,
                    [replace(result, device_peaks=measured) for result in results])
    open_page(app, "results")
    assert any(m.startswith("At this device's measured best rates, FP32: the arithmetic needs")
               for m in texts(app.markdown))
    budget = next(t.value for t in app.table if "FLOPs per step" in t.value.columns)
    assert budget["Run"].tolist() == list(budget["Run"])[:2] and len(budget) == 2
    assert budget["FLOPs per step"].iloc[0].endswith("GFLOP")
    assert any("Measured peaks on CPU: recorded (torch 2.14.1)" in c for c in texts(app.caption))


def test_results_of_runs_without_peaks_say_how_to_get_a_budget(app, state_dir):
    _, results = recorded_runs("noisy_compare_cpu.json")
    save_comparison(state_dir, app.session_state["amp_lab_learner"].id, results)
    open_page(app, "results")
    assert any(c.startswith("These runs did not measure this device's peak rates") for c in texts(app.caption))


def test_results_shows_a_profiled_comparisons_step_by_kind_of_work(app, state_dir):
    from dataclasses import replace

    from trainer.profile import CATEGORIES

    _, results = recorded_runs("noisy_compare_cpu.json")
    shares = {"matrix products": 0.06, "pooling": 0.04, "optimizer": 0.002}
    profiled = []
    for index, result in enumerate(results):
        categories = {name: shares.get(name, 0.001) / (index + 1) for name in CATEGORIES}
        profiled.append(replace(result, profile={"steps": 20, "step_s": sum(categories.values()),
                                                 "categories": categories, "top_ops": [], "kernels": []}))
    save_comparison(state_dir, app.session_state["amp_lab_learner"].id, profiled)
    open_page(app, "results")
    assert any("One step by kind of work" in chart.proto.spec for chart in charts(app))
    changes = next(m for m in texts(app.markdown) if m.startswith("From FP32 to"))
    assert "the largest changes: matrix products 60.0 → 30.0 ms; pooling 40.0 → 20.0 ms" in changes
