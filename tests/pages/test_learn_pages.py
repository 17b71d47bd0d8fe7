"""AppTest for the learn pages (number formats, underflow, the scaler at work, autocast, the baseline, adding AMP,
memory, when AMP pays, the recipe), through app.py."""

import re
import time
from pathlib import Path

import pytest
from streamlit.dataframe_util import convert_arrow_bytes_to_pandas_df

from lessons.number_formats import encode_all
from lessons.scaler_sim import ScalerSettings, simulate_gradients
from server.history import HistoryStore
from server.records import JobSpec, JobView
from tests.app_testing import APP, app, app_on_server, charts, open_page, state_dir, texts  # noqa: F401 (fixtures)
from tests.ui_fixtures import make_result
from trainer.config import RunConfig
from trainer.isolated import RunOutcome
from ui.reference import load_references


@pytest.fixture(autouse=True)
def jobs_on_the_cpu(monkeypatch):
    """Pinned, so that the CPU captions and probe_max_batch=False hold on a GPU machine too (auto would be cuda)."""
    monkeypatch.setenv("AMP_LAB_DEVICE", "cpu")

def save_finished_job(state_dir: Path, kind: str, label: str, results, learner: str = "another-learner") -> str:
    """A finished job in the server's history, as the job manager would have written it."""
    outcomes = [RunOutcome(config=r.config, status="ok", result=r) for r in results]
    now = time.time()
    job = JobView(
        id=f"{kind}-{label}".replace(" ", "-"), learner_id=learner, kind=kind, label=label, status="done",
        queue_position=None, estimated_wait_s=None, current_run=len(results) - 1, progress=None, live_losses=[],
        outcomes=outcomes, error=None, spec=JobSpec(kind, [o.config for o in outcomes], label), created_at=now,
        started_at=now, finished_at=now + 1, extras={"device_type": "cpu"},
    )
    HistoryStore(state_dir / "history.sqlite3").save_job(job)
    return job.id


@pytest.mark.slow
def test_number_formats_page_shows_bits_and_ranges(app):
    open_page(app, "number_formats")
    assert app.title[0].value == "Number formats: from fp32 to fp8"
    markdown = "".join(texts(app.markdown))
    shown = re.sub(r"<[^>]+>", "", markdown)  # the coloured spans around each bit field
    for layout in encode_all(0.1):
        assert layout.bit_string in shown
    assert "stores `0.0999755859375`" in markdown
    assert len(charts(app)) == 1
    assert "of the nonzero gradient values would become exactly zero" not in " ".join(markdown.split())
    next(b for b in app.button if b.label == "Lock in my guess").click().run()
    markdown = " ".join(" ".join(texts(app.markdown)).split())
    assert "of the nonzero gradient values would become exactly zero" in markdown
    assert "Your guess: **1%** · measured: **" in markdown  # a log-spaced choice, 0.001% to 50%
    assert "**Why:** fp16 rounds a magnitude below half its smallest subnormal, 2^-25 = 3e-08, to zero" in markdown
    from ui import server_bundle

    (kept,) = server_bundle.guesses().of(app.session_state["amp_lab_learner"].id)
    assert kept.guess_shown == "1%" and f"measured: **{kept.answer_shown}**" in markdown  # for the lab report

    app.text_input[0].input("70000").run()
    assert not app.exception
    assert "**overflow**" in "".join(texts(app.markdown))
    app.text_input[0].input("1e-40").run()
    markdown = "".join(texts(app.markdown))
    assert "**underflow**" in markdown and "*subnormal*" in markdown
    app.text_input[0].input("500").run()
    assert "**saturated**" in "".join(texts(app.markdown))  # fp8 e4m3 clamps to 448
    app.text_input[0].input("one third").run()
    assert texts(app.error) == ["'one third' is not a number: type something like 0.1, 1e-5, 1/3 or 2^-24"]
    # An invalid number hides only its own rows: the ladder, the ranges chart and the next link stay.
    assert len(charts(app)) == 1 and any("Next: underflow" in link.label for link in app.get("page_link"))
    wide, fp8 = (app.table[0].value.set_index(""), app.table[1].value.set_index(""))  # a column per format
    assert list(wide.columns) + list(fp8.columns) == ["fp32", "tf32", "bf16", "fp16", "fp8-e4m3", "fp8-e5m2"]
    assert list(fp8.loc["largest"]) == ["448", "57344"]  # exactly, as learners meet them in overflow messages


@pytest.mark.slow
def test_underflow_page_scales_the_lab_models_gradients(app):
    open_page(app, "underflow")
    assert app.title[0].value == "Underflow in fp16"
    labels = [m.label for m in app.metric]
    assert labels == ["become zero in fp16", "only subnormal (fewer bits)", "overflow to inf"]
    unscaled = app.metric[1].value
    app.select_slider[0].set_value(16).run()
    assert not app.exception
    assert app.metric[1].value != unscaled  # scaling lifted values out of the subnormal range
    assert len(charts(app)) == 2  # the histogram and the scale sweep
    assert any("overflow first" in c for c in texts(app.caption))
    assert any("Next: the scaler at work" in link.label for link in app.get("page_link"))


@pytest.mark.slow
def test_scaler_page_offers_a_tiny_run_and_simulates_the_scaler(app):
    open_page(app, "loss_scaling")
    assert app.title[0].value == "The scaler at work"
    assert any("No finished amp-fp16 run" in i for i in texts(app.info))
    assert "Run a tiny amp-fp16 run" in [b.label for b in app.button]
    # The lab model's largest gradient times the default scale, from the page's own capture.
    assert any(m.startswith("In a capture of a few fp32 steps on synthetic data, this model's largest gradient is")
               and "below 65520: at the default 2^16 none of them overflows" in m for m in texts(app.markdown))
    # The simulator, a deep dive: gradients of 2, scale 2^16, growth every 100 good steps, a spike at step 250.
    (simulator,) = [e for e in app.expander if e.label == "Deeper: simulate the scaler with your own settings"]
    trace = simulate_gradients([2.0] * 400, ScalerSettings(growth_interval=100), extra_inf_steps=[250])
    assert trace.skipped_steps[:3] == [1, 2, 103]  # 2^16 and 2^15 overflow; each regrowth to 2^15 overflows again
    expected = f"**{len(trace.skipped_steps)}** of 400 steps skipped; {len(trace.skipped_steps) - 1} of them"
    assert any(m.value.startswith(expected) for m in simulator.markdown)
    spikes = next(t for t in app.text_input if t.label == "Extra steps with inf/NaN gradients")
    spikes.input("abc").run()
    assert any("is not a step number" in e for e in texts(app.error))
    assert any("Next: where the memory goes" in link.label for link in app.get("page_link"))  # the page goes on


@pytest.mark.slow
def test_loss_scaling_page_plots_a_real_runs_scale_from_history(state_dir, app):
    history = [{"step": s, "scale": 65536.0 if s < 3 else 32768.0} for s in range(1, 9)]
    run = make_result("amp-fp16", loss_scale_history=history, skipped_step_numbers=[3], skipped_steps=1,
                      total_steps=8)
    save_finished_job(state_dir, "compare", "an fp16 comparison", [make_result("fp32"), run])
    open_page(app, "loss_scaling")
    assert app.selectbox[0].label == "Run"
    assert any("skipped **1** of 8 steps: 3." in m for m in texts(app.markdown))
    assert len(charts(app)) == 2  # the real trace, the simulated trace


@pytest.mark.slow
def test_loss_scaling_page_shows_a_real_ablation_beside_the_default_line(state_dir, app):
    flat = [{"step": s, "scale": 65536.0} for s in range(1, 9)]
    ablation_scales = [2.0**23, 2.0**22, 2.0**21, 2.0**21, 2.0**21, 2.0**21, 2.0**21, 2.0**22]
    ablation = make_result("amp-fp16", loss_scale_history=[{"step": s, "scale": v} for s, v in enumerate(
        ablation_scales, 1)], skipped_step_numbers=[1, 2, 3], skipped_steps=3, total_steps=8,
        config={"loss_scale_init": 2.0**24, "loss_scale_growth_interval": 5})
    save_finished_job(state_dir, "run", "a default fp16 run", [make_result("amp-fp16", loss_scale_history=flat,
                                                                           total_steps=8)])
    save_finished_job(state_dir, "run", "scaler ablation", [ablation])
    open_page(app, "loss_scaling")
    assert len(charts(app)) == 3  # the chosen real trace, the ablation beside the default, the simulated trace
    markdown = " ".join(texts(app.markdown))
    assert "**3** of 8 steps skipped (steps 1, 2, 3); the scale was halved 3 times and doubled once" in markdown
    assert "Of the skips, 3 in a row at the start, the search down from 16,777,216" in markdown
    assert "the default's line stays flat at 65,536" in markdown
    next(b for b in app.button if b.label == "Lock in my guess").click().run()
    # Three skips in a row from 2^24: the search the page asks learners to reason out from the largest gradient.
    assert any("Your guess: **2** · measured: **3**" in m for m in texts(app.markdown))
    assert any(m.startswith("**Why:**") and "halvings get it under" in m for m in texts(app.markdown))


@pytest.mark.slow
def test_loss_scaling_page_queues_the_ablation(app):
    open_page(app, "loss_scaling")
    next(b for b in app.button if b.label == "Run the scaler ablation").click().run()
    assert not app.exception
    from ui import server_bundle

    manager = server_bundle._job_manager_for(server_bundle._settings_environment())
    job = manager.get(app.session_state["loss_scaling_ablation_job"])
    config = job.spec.runs[0]
    assert (config.precision, config.loss_scale_init, config.loss_scale_growth_interval) == ("amp-fp16", 2.0**24, 5)
    assert manager.cancel(job.id, app.session_state["amp_lab_learner"].id)


@pytest.mark.slow
def test_loss_scaling_page_queues_the_tiny_run(app):
    open_page(app, "loss_scaling")
    next(b for b in app.button if b.label == "Run a tiny amp-fp16 run").click().run()
    assert not app.exception
    job_id = app.session_state["loss_scaling_tiny_job"]
    from ui import server_bundle

    manager = server_bundle._job_manager_for(server_bundle._settings_environment())
    job = manager.get(job_id)
    assert job.spec.runs[0].precision == "amp-fp16" and job.spec.runs[0].subset == 1024
    assert manager.cancel(job_id, app.session_state["amp_lab_learner"].id)


def test_autocast_page_tables_every_mode(app):
    open_page(app, "autocast_layers")
    assert app.title[0].value == "Autocast, layer by layer"
    assert len(app.dataframe) == 0 and len(app.table) == 1  # the per-mode tables wait for a guess; the op lists not
    next(b for b in app.button if b.label == "Just show me").click().run()
    assert any("No guess this time. Measured: **9**" in m for m in texts(app.markdown))
    assert len(app.dataframe) == 5  # five modes; the measured op lists are an HTML table
    (modes,) = [e for e in app.expander if e.label == "Deeper: every mode, layer by layer"]
    (op_lists,) = [e for e in app.expander if e.label == "Deeper: autocast's op lists, measured"]
    assert len(modes.dataframe) == 5 and len(op_lists.table) == 1
    ops = op_lists.table[0].value.set_index("op")
    assert ops.loc["conv2d", "on cpu"] == "low precision" and ops.loc["cross_entropy", "on cpu"] == "fp32"
    assert ops.loc["softmax", "on cpu"] == "follows its input" and ops.loc["softmax", "CUDA rule"] == "fp32"
    assert ops.loc["addcmul", "CUDA rule"] == "widest"  # the docs' promote list, not the fp32 one
    assert ops.loc["relu", "CUDA rule"] == "none" and ops.loc["conv2d", "CUDA rule"] == "16-bit"
    assert any("Next: number formats" in link.label for link in app.get("page_link"))
    captions = texts(app.caption)
    assert "logits: bfloat16 · loss: float32" in captions
    assert "logits: float16 · loss: float16" in captions
    assert any("stores its weight as float32 but computes in float16" in i for i in texts(app.info))
    assert len(charts(app)) == 1


@pytest.mark.slow
def test_baseline_page_tells_tf32_per_setting(app):
    open_page(app, "fp32_baseline")
    (tf32,) = [e for e in app.expander if e.label.startswith("Deeper: TF32")]
    table = tf32.table[0].value.set_index("setting")
    assert table.loc["the lab's script as written (PyTorch's defaults)", "GPU convolutions"] == "tf32"
    assert table.loc["this app's fp32 and AMP modes (TF32 off)", "GPU convolutions"] == "ieee"
    assert table.loc["this app's fp32-default mode (PyTorch's defaults, put back after the two above)",
                     "GPU convolutions"] == "tf32"
    assert any("Next: adding AMP" in link.label for link in app.get("page_link"))


def test_baseline_page_predicts_the_fp32_throughput_then_shows_the_reference(app):
    open_page(app, "fp32_baseline")
    assert not any("Measured in a reference run" in c for c in texts(app.caption))
    next(b for b in app.button if b.label == "Lock in my guess").click().run()
    (demo,) = load_references(device_type="cpu", purpose="quick-demo")
    measured = demo.baseline.steady_images_per_s
    assert any(f"measured: **{measured:.0f} images/s**" in m for m in texts(app.markdown))
    assert any(c.startswith(f"Measured in a reference run, not yours: {demo.label}") for c in texts(app.caption))


@pytest.mark.slow
def test_adding_amp_page_lists_cpu_autocast_ops_from_torch(app):
    open_page(app, "adding_amp")
    (lists,) = [e for e in app.expander if e.label.startswith("Deeper: the three lists")]
    markdown = " ".join(" ".join(texts(lists.markdown)).split())
    assert "CPU autocast sends only `prod`, `cross_entropy`, `nll_loss`, `mse_loss`, `cdist`" in markdown
    assert "`softmax`, `log_softmax`" in markdown and "accumulator" in markdown
    assert any("Next: autocast, layer by layer" in link.label for link in app.get("page_link"))


def test_when_amp_pays_page_without_history(app):
    open_page(app, "when_amp_pays")
    assert app.title[0].value == "When AMP pays off"
    infos = texts(app.info)
    assert any("No time breakdown" in i for i in infos) and any("No sweep on this server yet" in i for i in infos)
    assert any("applies to GPUs" in c for c in texts(app.caption))
    budget = " ".join(" ".join(texts(app.markdown)).split())  # the lab's step, counted by torch, against an H200's published peaks
    assert "is **11.38 GFLOP**" in budget and "takes **64.7 µs** (strict fp32: 169.9 µs; TF32 everywhere: 23.0 µs" in budget
    assert "The lab measured **76.5 ms** a step in fp32" in budget and "at most **1.001x**" in budget
    assert [b.label for b in app.button] == ["Measure where the time goes", "Queue the sweep", "Lock in my guess",
                                             "Just show me"]
    app.multiselect(key="sweep_batches").set_value([32, 64, 128, 256, 512, 1024, 2048]).run()
    assert any("is 14 runs" in e for e in texts(app.error))


def test_when_amp_pays_page_reopens_a_sweep_and_a_breakdown(state_dir, app):
    sweep = [make_result(p, config={"batch_size": b, "width": 1}, steady_images_per_s=ips)
             for p, b, ips in (("fp32", 64, 100.0), ("amp-bf16", 64, 104.0),
                               ("fp32", 256, 100.0), ("amp-bf16", 256, 150.0))]
    save_finished_job(state_dir, "sweep", "sweep: fp32 vs amp-bf16", sweep)
    breakdown = [make_result("fp32", config={"loader": loader}, data_wait_s=wait, compute_s=2.0)
                 for loader, wait in (("dataloader", 3.0), ("resident", 0.1))]
    save_finished_job(state_dir, "breakdown", "where the time goes: DataLoader vs resident (fp32, batch 256)", breakdown)
    open_page(app, "when_amp_pays")
    assert not any("**Verdict:**" in m for m in texts(app.markdown))  # the sweep waits for a guess
    # roofline; breakdown; the reference sweep's throughput, memory, speedup (the recorded ladder is another class's)
    assert len(charts(app)) == 5
    next(b for b in app.button if b.label == "Lock in my guess").click().run()
    assert not app.exception
    markdown = "".join(texts(app.markdown))
    assert "how fast will amp-bf16 train at batch 256" in markdown
    assert "Your guess: **1.50x** · measured: **1.50x** (spot on)" in markdown
    assert "**Verdict:** On this machine, amp-bf16 pays off only at the largest batch tried, 256 (1.50x" in markdown
    assert "With the lab's DataLoader, 60% of the training time went to waiting for data" in markdown
    assert len(charts(app)) == 8  # roofline, breakdown, throughput, memory, speedup; the reference's three
    assert len(app.dataframe) == 2 and len(app.table) >= 1  # the sweeps' grids; the roofline's table


def test_a_running_sweep_has_no_verdict_until_every_point_is_in(state_dir, app):
    open_page(app, "when_amp_pays")  # the server is up, so the job below stays "running" in its history
    done = [make_result(p, config={"batch_size": b, "width": 1}, steady_images_per_s=ips)
            for p, b, ips in (("fp32", 64, 100.0), ("amp-bf16", 64, 150.0), ("fp32", 256, 100.0))]
    job_id = save_finished_job(state_dir, "sweep", "sweep: running", done)
    store = HistoryStore(state_dir / "history.sqlite3")
    job = store.get_job(job_id)
    job.status, job.finished_at = "running", None
    job.spec.runs.append(RunConfig(precision="amp-bf16", batch_size=256))
    store.save_job(job)
    app.run()
    next(b for b in app.button if b.label == "Lock in my guess").click().run()
    assert not app.exception
    markdown = "".join(texts(app.markdown))
    assert "The answer appears once batch 256 has run in both modes." in markdown
    assert "**Verdict:** No verdict: only 3 of 4 runs are in" in markdown and "pays off" not in markdown


def test_when_amp_pays_checks_a_guess_against_the_reference_sweep_before_any_run(app):
    open_page(app, "when_amp_pays")
    expander = next(e for e in app.expander if e.label.startswith("Reference sweep"))
    assert expander.label == ("Reference sweep recorded on a CPU without bf16 instructions (bf16 emulated), like this "
                              "server (not your runs)")
    assert len(charts(app)) == 1  # the roofline only: the reference's numbers wait for a guess
    next(b for b in app.button if b.label == "Lock in my guess").click().run()
    assert not app.exception
    sweep = load_references(device_type="cpu", purpose="sweep")
    largest = max(sweep, key=lambda r: r.baseline.config.batch_size)
    measured = largest.candidate.steady_images_per_s / largest.baseline.steady_images_per_s
    markdown = "".join(texts(app.markdown))
    assert (f"Reference recorded on {largest.label.split(' · ')[0]}, not your run: how fast will amp-bf16 train "
            f"at batch {largest.baseline.config.batch_size}") in markdown
    assert f"Your guess: **1.50x** · measured: **{measured:.2f}x**" in markdown
    assert "**Reference sweep** (not your runs)" in markdown and "**Verdict:**" not in markdown
    assert len(charts(app)) == 4 and len(app.dataframe) == 1  # the roofline (its table apart); the sweep
    assert sum(c.startswith("Reference: AMD EPYC") for c in texts(app.caption)) == len(sweep) >= 2


def test_when_amp_pays_without_a_reference_asks_about_the_sweep_set_up(app, monkeypatch):
    monkeypatch.setattr("ui.reference.load_references", lambda **_: [])
    open_page(app, "when_amp_pays")
    assert not any(e.label.startswith("Reference sweep") for e in app.expander)
    app.multiselect(key="sweep_batches").set_value([32, 64]).run()
    next(b for b in app.button if b.label == "Lock in my guess").click().run()
    assert not app.exception
    markdown = "".join(texts(app.markdown))
    assert "In the sweep set up above: how fast will amp-bf16 train at batch 64" in markdown
    assert "Your guess: **1.50x**. Queue the sweep above to check" in markdown


def test_when_amp_pays_page_queues_a_sweep(app):
    open_page(app, "when_amp_pays")
    app.multiselect(key="sweep_batches").set_value([32]).run()
    next(b for b in app.button if b.label == "Queue the sweep").click().run()
    assert not app.exception
    job_id = app.session_state["when_amp_pays_sweep_job"]
    from ui import server_bundle

    manager = server_bundle._job_manager_for(server_bundle._settings_environment())
    job = manager.get(job_id)
    assert job.kind == "sweep" and [r.precision for r in job.spec.runs] == ["fp32", "amp-bf16"]
    assert job.spec.probe_max_batch is False
    assert manager.cancel(job_id, app.session_state["amp_lab_learner"].id)


@pytest.mark.slow
def test_memory_page_predicts_then_shows_the_measured_breakdown(app):
    app.query_params["batch"] = "8"
    open_page(app, "memory")
    assert app.title[0].value == "Where the memory goes"
    assert app.select_slider[0].value == 8
    assert not charts(app)  # the answer waits for a guess
    next(b for b in app.button if b.label == "Lock in my guess").click().run()
    assert not app.exception
    assert any("Your guess: **40%** · measured: **" in m for m in texts(app.markdown))
    table = app.dataframe[0].value.set_index("component")
    assert table.loc["saved activations: int64 (max-pool indices)", "fp32"] == table.loc[
        "saved activations: int64 (max-pool indices)", "amp-bf16"]
    assert any("in both modes" in m for m in texts(app.markdown))
    assert any(c.startswith("Check: at the end of the forward pass") for c in texts(app.caption))
    assert any(i.startswith("**The lab's 1.8 GB -> 1.1 GB cannot come from this model's tensors.** At batch 8")
               for i in texts(app.info))
    assert len(charts(app)) == 1
    assert any("Next: run the experiment" in link.label for link in app.get("page_link"))


@pytest.mark.slow
def test_memory_page_measures_the_batch_sweep_on_request(request, monkeypatch):
    monkeypatch.setenv("AMP_LAB_MAX_BATCH_SIZE", "32")  # the sweep's tiny batches only: 8 and 32
    at = request.getfixturevalue("app")
    at.query_params["batch"] = "8"
    open_page(at, "memory")
    next(b for b in at.button if b.label == "Lock in my guess").click().run()
    assert len(charts(at)) == 1  # the step's breakdown; the sweep waits for its button
    next(b for b in at.button if b.label == "Measure at batch sizes 8, 32").click().run()
    assert not at.exception and not at.error, texts(at.error)
    assert len(charts(at)) == 2
    (dataset,) = charts(at)[1].proto.datasets
    points = convert_arrow_bytes_to_pandas_df(dataset.data.data).to_dict("records")
    assert sorted((p["precision"], p["batch_size"]) for p in points) == [
        ("amp-bf16", 8), ("amp-bf16", 32), ("fp32", 8), ("fp32", 32)]
    assert all(p["bytes"] > 0 for p in points)
    saved = {p["batch_size"]: p["saving"] for p in points if p["precision"] == "amp-bf16"}
    assert f"batch 8: {saved[8]:.0%} less · batch 32: {saved[32]:.0%} less" in texts(at.markdown)


def test_recipe_page_shows_every_tested_snippet(app):
    open_page(app, "recipe")
    assert app.title[0].value == "The recipe: AMP in your own training code"
    from lessons.recipes import RECIPES

    assert [h.value for h in app.subheader][: len(RECIPES)] == [title for title, _ in RECIPES]
    code = "\n".join(c.value for c in app.code)
    assert "scaler.unscale_(optimizer)" in code and "binary_cross_entropy_with_logits" in code
    assert "scaler.state_dict()" in code and "torch.inference_mode()" in code
    assert any("Next: run a comparison of your own" in link.label for link in app.get("page_link"))


def test_recipe_page_predicts_what_unscale_changes_then_checks_it_by_running_the_recipe(request):
    at = open_page(request.getfixturevalue("app"), "recipe")
    assert any("`scaler.unscale_(optimizer)`?" in m for m in texts(at.markdown))
    assert not any(c.startswith("Measured by running the clipping recipe") for c in texts(at.caption))
    at.select_slider(key="predict-recipe-unscale-slider").set_value(1024).run()  # powers of two
    next(b for b in at.button if b.label == "Lock in my guess").click().run()
    assert not at.exception
    from lessons.recipes import norms_around_unscale

    scaled, unscaled, scale = norms_around_unscale()
    assert scale == 65536.0 and round(scaled / unscaled) == 65536  # unscale_ divides by the scale, exactly
    markdown = " ".join(texts(at.markdown))
    assert "Your guess: **1024x** · measured: **65536x** (off: the measured value is 64.0 times higher)" in markdown
    (caption,) = [c for c in texts(at.caption) if c.startswith("Measured by running the clipping recipe")]
    assert f"sees {scaled:,.1f} before `unscale_` and {unscaled:.3f} after it" in caption


def test_when_amp_pays_names_both_sources_of_the_gain_and_links_the_recipe(app):
    open_page(app, "when_amp_pays")
    markdown = " ".join(" ".join(texts(app.markdown)).split())
    assert "It does not halve the arithmetic" in markdown and "move roughly half the bytes" in markdown
    assert any("Next: the recipe" in link.label for link in app.get("page_link"))


@pytest.fixture
def app_with_limits(app_on_server):
    """The app on a server whose instructor allows batches of at most 16 and 100 training images."""
    return app_on_server(MAX_BATCH_SIZE="16", MAX_SUBSET="100")


def test_when_amp_pays_follows_a_strict_servers_limits(app_with_limits):
    open_page(app_with_limits, "when_amp_pays")
    assert app_with_limits.select_slider(key="breakdown_batch").options == ["16"]
    assert app_with_limits.multiselect(key="sweep_batches").options == ["16"]
    # 16 images x 10 steps is over the 100-image limit: said on the page, before anything is queued
    assert any("100" in e and "subset" in e for e in texts(app_with_limits.error)), texts(app_with_limits.error)


@pytest.mark.slow
def test_the_tiny_fp16_run_stays_within_a_strict_servers_limits(app_with_limits):
    from ui import server_bundle

    open_page(app_with_limits, "loss_scaling")
    button = next((b for b in app_with_limits.button if b.label == "Run a tiny amp-fp16 run"), None)
    if button is None:
        pytest.skip("the page offers no tiny run here (a finished amp-fp16 run is already shown)")
    button.click().run()
    assert not app_with_limits.error, texts(app_with_limits.error)
    manager = server_bundle._job_manager_for(server_bundle._settings_environment())
    (job,) = manager.active_jobs_for(app_with_limits.session_state["amp_lab_learner"].id)
    assert (job.spec.runs[0].batch_size, job.spec.runs[0].subset) == (16, 100)
    manager.cancel(job.id, job.learner_id)


@pytest.mark.parametrize("page", ["overview", "fp32_baseline", "adding_amp", "autocast_layers", "number_formats",
                                  "underflow", "loss_scaling", "memory", "safeguards", "when_amp_pays", "recipe"])
def test_every_learn_page_shows_the_one_picture_of_an_amp_step_with_its_own_parts(app, page):
    from lessons.amp_step import highlight_sentence
    from tests.app_testing import step_pictures

    open_page(app, page)
    assert len(step_pictures(app)) == 1
    assert texts(app.caption)[0] == highlight_sentence(page)  # right under the picture, naming the page's parts


def test_when_amp_pays_draws_the_roofline_on_an_h200_or_on_a_device_this_server_measured(state_dir, app,
                                                                                          monkeypatch):
    import json

    import torch

    from trainer.peaks import DevicePeaks, device_key

    # This test's own peaks file, holding this machine too, so that no worker measures it meanwhile.
    cache = state_dir / "device-peaks.json"
    monkeypatch.setenv("AMP_LAB_PEAKS_CACHE", str(cache))
    this_cpu = {device_key(torch.device("cpu")): DevicePeaks("CPU: this machine", "2.14.1").to_dict()}
    cache.write_text(json.dumps(this_cpu))
    open_page(app, "when_amp_pays")
    assert any(c.proto.spec.count("The lab's layers on this device's roofline") for c in charts(app))
    assert app.selectbox(key="roofline-device").value.startswith("NVIDIA H200 SXM, published")
    layers = next(f.value for f in app.table if "layer" in f.value.columns)
    assert layers["layer"].tolist()[:3] == ["conv1", "relu1", "pool1"]
    assert any(m.startswith("Layer by layer at these peaks, a step could take") for m in texts(app.markdown))

    measured = DevicePeaks("CPU: this server", "2.14.1", matmul_tflops={"fp32": 0.2, "bf16": 0.4, "fp16": 0.01},
                           copy_gb_per_s=20.0, launch_us=3.0)
    cache.write_text(json.dumps({**this_cpu, "cpu": measured.to_dict()}))
    open_page(app, "when_amp_pays")
    here = "CPU: this server, measured here (torch 2.14.1)"
    assert here in app.selectbox(key="roofline-device").options
    app.selectbox(key="roofline-device").set_value(here).run()
    sentence = next(m for m in texts(app.markdown) if m.startswith("Layer by layer at these peaks"))
    # Milliseconds at 0.2 TFLOP/s and 20 GB/s, and only the modes a CPU has: no TF32.
    assert "a step could take **80.6 ms** in strict fp32, **45.8 ms** under AMP" in sentence
    rows = next(f.value for f in app.table if "layer" in f.value.columns).set_index("layer")
    assert list(rows.columns) == ["GFLOP", "MB, fp32 / AMP", "strict fp32", "AMP"]
    megabytes = float(rows.loc["relu1", "MB, fp32 / AMP"].split(" / ")[0].replace(",", ""))
    milliseconds = float(rows.loc["relu1", "strict fp32"].removesuffix(" ms").replace(",", ""))
    assert milliseconds == pytest.approx(megabytes * 1e6 / 20e9 * 1e3, rel=0.01)  # bytes at 20 GB/s


def test_a_reference_answers_only_for_its_class_of_machine_and_the_question_names_it(app, monkeypatch):
    import ui.reference

    open_page(app, "overview")  # the references' own class: their quick demo answers the guess
    question = next(m for m in texts(app.markdown) if "In the quick demo on" in m)
    assert "on a CPU without bf16 instructions (bf16 emulated) (like this server)" in question
    monkeypatch.setattr(ui.reference, "this_machine",
                        lambda: {"device_type": "cpu", "device_name": "Xeon", "cpu_flags": ["amx_tile", "amx_bf16"]})
    open_page(app, "overview")
    question = next(m for m in texts(app.markdown) if "In the quick demo on" in m)
    assert "on a CPU with AMX bf16 units (like this server)" in question
    next(b for b in app.button if b.label == "Lock in my guess").click().run()
    assert any("No quick demo has been recorded on a CPU with AMX bf16 units yet" in m for m in texts(app.markdown))


def test_when_amp_pays_shows_the_recorded_ladder_with_each_rung_and_why_one_did_not_run(app, monkeypatch):
    import ui.reference

    open_page(app, "when_amp_pays")  # the references' class: no ladder was recorded on it
    assert not any("The ladder to the fastest lab run" in chart.proto.spec for chart in charts(app))
    assert any(i.startswith("No ladder has been recorded on a CPU without bf16 instructions") for i in texts(app.info))
    ladder_machine = {"device_type": "cpu", "device_name": "AMD EPYC", "cpu_flags": ["avx512f", "avx512_bf16"]}
    monkeypatch.setattr(ui.reference, "this_machine", lambda: ladder_machine)
    open_page(app, "when_amp_pays")
    assert any("The ladder to the fastest lab run" in chart.proto.spec for chart in charts(app))
    rungs = next(f.value for f in app.table if "rung" in f.value.columns).set_index("rung")
    assert rungs.loc["the lab's loop", "x the lab's loop"] == "1.00x"
    assert rungs.loc["the lab's loop", "images/s"] == "1,186" and rungs.loc["CUDA graphs", "images/s"] == ""
    assert rungs.loc["CUDA graphs", "not run because"].startswith("CUDA graphs record GPU kernel launches")
    assert any(c.startswith("Recorded on ") and "a quick ladder" in c for c in texts(app.caption))


def test_a_learners_own_quick_demo_answers_the_overviews_and_the_baselines_guesses(app, state_dir):
    """Issue 33: the learner's own measurement answers their guesses where one exists, and says so, also in the
    record the report reads; a reference answers only before it."""
    from dataclasses import replace

    from server.history import HistoryStore
    from tests.server.test_history import make_job
    from ui import server_bundle

    open_page(app, "overview")
    learner = app.session_state["amp_lab_learner"].id
    demo = make_job("d" * 32, precisions=("fp32", "amp-bf16"), learner_id=learner, label="quick demo: mine")
    demo = replace(demo, spec=replace(demo.spec, purpose="quick-demo"))
    HistoryStore(state_dir / "history.sqlite3").save_job(demo)
    fp32, bf16 = demo.results
    speedup = fp32.total_time_s / bf16.total_time_s

    open_page(app, "overview")
    next(b for b in app.button if b.label == "Lock in my guess").click().run()
    assert any(f"measured: **{speedup:.2f}x**" in m for m in texts(app.markdown))
    assert any(c.startswith("Measured in your own quick demo: ") for c in texts(app.caption))
    open_page(app, "fp32_baseline")
    question = next(m for m in texts(app.markdown) if "How many images per second" in m)
    assert "in the quick demo (batch 128, 5,000 synthetic images in memory)" in question
    next(b for b in app.button if b.label == "Lock in my guess").click().run()
    assert any(f"measured: **{fp32.steady_images_per_s:.0f} images/s**" in m for m in texts(app.markdown))
    guesses = {g.question_key: g for g in server_bundle.guesses().of(learner)}
    assert guesses["quick-demo-speedup"].answered_by == "your own quick demo on this server"
    assert guesses["baseline-throughput"].answered_by == "your own quick demo on this server"


def test_no_sweep_question_is_asked_where_the_class_may_not_queue_a_sweep(app_on_server, monkeypatch):
    import ui.reference

    monkeypatch.setattr(ui.reference, "reference_sweep", lambda *args, **kwargs: [])  # no reference to ask about
    at = app_on_server(CLASS_MODE="on")  # class mode: sweeps off until the instructor turns them on
    open_page(at, "when_amp_pays")
    assert not any("In the sweep set up above" in m for m in texts(at.markdown))
    at = app_on_server(CLASS_MODE="off")
    open_page(at, "when_amp_pays")
    assert any("In the sweep set up above" in m for m in texts(at.markdown))
