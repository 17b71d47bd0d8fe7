"""A class day in the pages: the kinds of job the class may queue, a learner who reloads mid-run, the instructor's
message and a cancel with its reason, the planner and the roster on the console."""

from streamlit.testing.v1 import AppTest

from server.identity import LearnerStore
from server.records import JobSpec
from tests.app_testing import (  # noqa: F401 (fixtures)
    APP,
    app,
    app_on_server,
    navigation_as_served,
    open_page,
    state_dir,
    texts,
)
from trainer.config import RunConfig

PASSWORD = "a long classroom secret"
WAITING_RUN = RunConfig(precision="fp32", epochs=1, batch_size=32, data="synthetic", subset=64, test_subset=32)


def manager():
    from ui import server_bundle

    return server_bundle._job_manager_for(server_bundle._settings_environment())


def as_learner(token: str, page: str) -> AppTest:
    """Another browser session of the learner whose private token is `token` (a reload, or a second tab)."""
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["learner"] = token
    at.run()
    return open_page(at, page)


def test_in_class_mode_sweeps_are_off_and_a_second_quick_demo_is_refused_before_it_is_queued(app_on_server):
    at = app_on_server(CLASS_MODE="on", DEVICE="cpu")
    open_page(at, "when_amp_pays")
    sweep = next(b for b in at.button if b.label == "Queue the sweep")
    assert sweep.disabled
    assert "The instructor has turned batch-size sweeps off for this class." in texts(at.caption)
    open_page(at, "overview")
    demo = next(b for b in at.button if b.label == "Run the quick demo")
    assert not demo.disabled and any(c.startswith("On this server it should take about") for c in texts(at.caption))
    manager().pause()
    demo.click().run()
    open_page(at, "overview")
    assert next(b for b in at.button if b.label == "Run the quick demo").disabled
    assert ("This class allows one of its quick demos per learner, and you have had 1." in texts(at.caption))


def test_a_reload_mid_run_keeps_the_run_pages_settings_the_locked_guess_and_a_fair_queue_line(app_on_server):
    at = app_on_server(DEVICE="cpu")
    manager().pause()  # the job waits, as behind other learners' jobs
    token = at.session_state["amp_lab_learner_token"]
    for key, value in {"run_epochs": 2, "run_batch_size": 64, "run_subset": 512, "run_data": "synthetic",
                       "run_loader": "resident"}.items():
        at.session_state[key] = value
    open_page(at, "run_experiment")
    next(b for b in at.button if b.label == "Run").click().run()
    next(t for t in at.slider if t.label == "Your guess").set_value(2.5).run()
    next(b for b in at.button if b.label == "Lock in my guess").click().run()

    again = as_learner(token, "run_experiment")  # the reload: a new session, the same learner
    assert again.select_slider(key="run_epochs").value == 2
    assert (again.select_slider(key="run_batch_size").value, again.select_slider(key="run_subset").value) == (64, 512)
    assert any(m.startswith("Your guess: **2.50x**") for m in texts(again.markdown))
    info = " ".join(texts(again.info))
    assert "ahead of yours" not in info  # the learner's own waiting job is not "a job ahead of yours"
    another = started_other_learner()
    assert "1 job of other learners is ahead of yours in the queue." in " ".join(texts(another.info))


def started_other_learner() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    return open_page(at, "run_experiment")


def sign_in(at: AppTest) -> AppTest:
    next(t for t in at.text_input if t.label == "Instructor password").input(PASSWORD)
    next(b for b in at.button if b.label == "Open the instructor console").click().run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_the_console_talks_to_the_class_cancels_with_a_reason_plans_and_lists_the_roster(app_on_server, state_dir):
    at = app_on_server(INSTRUCTOR_PASSWORD=PASSWORD, DEVICE="cpu")
    from ui import server_bundle

    grace, token = LearnerStore(server_bundle.history()).create("Grace")
    manager().pause()
    job = manager().submit(grace.id, JobSpec("run", [WAITING_RUN], label="Grace's long run"))

    sign_in(at)
    assert "Instructor console" in texts(at.title)  # a sign-in lands on the console
    next(t for t in at.text_input if t.label.startswith("Shown above every learner's page")).input(
        "Back in 5 minutes: the queue is paused")
    next(b for b in at.button if b.label == "Show to the class").click().run()
    next(t for t in at.text_input if t.label.startswith("Reason for a cancel")).input("too long for today")
    next(b for b in at.button if b.label == "Cancel").click().run()
    assert manager().get(job).error == "cancelled by the instructor (too long for today) before it started"

    learner = as_learner(token, "run_experiment")
    assert "**From the instructor:** Back in 5 minutes: the queue is paused" in texts(learner.info)
    assert ("This job was cancelled: cancelled by the instructor (too long for today) before it started"
            in texts(learner.warning))

    open_page(at, "instructor")
    next(b for b in at.button if b.label == "Plan").click().run()
    assert any(m.startswith("Start every Run page at fp32 vs") for m in texts(at.markdown))
    roster = at.dataframe[-1].value
    assert "Grace" in roster["learner"].tolist() and "comparisons" in roster.columns
    assert "The roster (CSV)" in [d.label for d in at.get("download_button")]
    next(b for b in at.button if b.label == "Clear the message").click().run()
    assert not [i for i in texts(as_learner(token, "overview").info) if i.startswith("**From the instructor:**")]


def test_the_consoles_kinds_of_job_are_saved_for_every_learner(app_on_server):
    at = app_on_server(INSTRUCTOR_PASSWORD=PASSWORD, DEVICE="cpu", CLASS_MODE="on")
    sign_in(at)
    assert any(m.startswith("What learners may queue") and "**class mode**" in m for m in texts(at.markdown))
    next(c for c in at.checkbox if c.label == "Batch-size sweeps").check()
    next(b for b in at.button if b.label == "Save for the class").click().run()
    open_page(at, "when_amp_pays")
    assert not next(b for b in at.button if b.label == "Queue the sweep").disabled


def test_the_labs_own_comparison_is_one_click_and_results_names_both_modes_exactly(app_on_server, state_dir):
    from server.history import HistoryStore
    from tests.server.test_history import make_job

    at = app_on_server(DEVICE="cpu")
    manager().pause()
    open_page(at, "run_experiment")
    assert any("Here it runs on the synthetic stand-in" in m for m in texts(at.markdown))
    next(b for b in at.button if b.label == "Run the lab's comparison").click().run()
    (job,) = manager().queue_views()
    assert [run.precision for run in job.spec.runs] == ["fp32-default", "amp-fp16"]
    first = job.spec.runs[0]
    assert (first.epochs, first.batch_size, first.loader, first.subset) == (5, 256, "lab", 5000)  # fp16, a CPU
    manager().cancel_any(job.id)

    me = at.session_state["amp_lab_learner"].id
    HistoryStore(state_dir / "history.sqlite3").save_job(
        make_job("l" * 32, precisions=("fp32-default", "amp-fp16"), learner_id=me, label="the lab's comparison"))
    open_page(at, "results")
    assert list(at.table[0].value.columns) == ["Metric", "FP32 (PyTorch defaults)", "AMP fp16 + GradScaler",
                                               "Improvement"]
    assert any(c.startswith("**Yours beside the lab's:** epochs 1 (the lab's: 5)") for c in texts(at.caption))
