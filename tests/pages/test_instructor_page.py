"""The instructor's console through the real app: sign-in, the queue, cancelling, presets and the class's CSV."""

import pytest
from streamlit.testing.v1 import AppTest

from server.history import HistoryStore
from server.identity import LearnerStore
from server.records import JobSpec
from tests.app_testing import (  # noqa: F401 (fixtures)
    app_on_server,
    navigation_as_served,
    open_page,
    started_app,
    state_dir,
    texts,
)
from tests.server.test_history import make_job
from trainer.config import RunConfig

PASSWORD = "a long classroom secret"


@pytest.fixture
def app(app_on_server):
    return app_on_server(INSTRUCTOR_PASSWORD=PASSWORD, DEVICE="cpu")


def sign_in(at: AppTest, password: str) -> AppTest:
    next(t for t in at.text_input if t.label == "Instructor password").input(password)
    next(b for b in at.button if b.label == "Open the instructor console").click().run()
    return at


def test_a_wrong_password_gets_a_message_and_no_console(app):
    sign_in(app, "not the password")
    assert "Wrong password." in texts(app.error)
    assert "amp_lab_instructor" not in app.session_state
    with pytest.raises(ValueError, match="Could not find a navigation page"):  # not in this learner's navigation
        app.switch_page("pages/instructor.py")


def test_the_instructor_sees_every_job_cancels_one_and_downloads_the_class(app, state_dir):
    from ui import server_bundle

    store = HistoryStore(state_dir / "history.sqlite3")
    grace, _ = LearnerStore(store).create("Grace")
    store.save_job(make_job("g" * 32, learner_id=grace.id, label="Grace's comparison"))
    manager = server_bundle._job_manager_for(server_bundle._settings_environment())
    manager.pause()  # so the learner's job waits in the queue for the console to see
    run = RunConfig(precision="fp32", epochs=1, batch_size=32, data="synthetic", subset=64, test_subset=32)
    queued = manager.submit(grace.id, JobSpec("run", [run], label="Grace's waiting run"))

    sign_in(app, PASSWORD)
    assert not app.error
    open_page(app, "instructor")
    text = " ".join(texts(app.markdown))
    assert "**Grace** · Grace's waiting run · waiting, position 1" in text
    assert any(c.startswith("This server has 1 worker (cpu): 0 jobs running now, 1 waiting; the queue is paused, so a "
                            "job submitted now starts only once you resume it")
               for c in texts(app.caption))
    assert app.dataframe[0].value["learner"].tolist() == ["Grace"]
    assert [d.label for d in app.get("download_button")][:3] == ["The class's results (CSV)", "The roster (CSV)",
                                                                 "Report (HTML)"]
    limits = app.table[0].value.set_index("setting")["value"]  # today's limits, below the presets
    assert (limits["max_batch_size"], limits["device"], limits["instructor_password"]) == ("4096", "cpu", "set (hidden)")
    assert PASSWORD not in app.table[0].value.to_string()

    next(b for b in app.button if b.label == "Cancel").click().run()
    assert manager.get(queued).error == "cancelled by the instructor before it started"
    manager.resume()


def test_presets_from_the_console_start_every_run_page(app):
    sign_in(app, PASSWORD)
    open_page(app, "instructor")
    next(t for t in app.text_input if t.label == "Presets").input("epochs=1&batch_size=128&colour=red")
    next(b for b in app.button if b.label == "Save for every learner").click().run()
    assert texts(app.error) == ["unknown preset 'colour': choose from epochs, batch_size, subset, data, loader, precision, "
                                "width, channels_last"]
    next(t for t in app.text_input if t.label == "Presets").input("epochs=1&batch_size=128")
    next(b for b in app.button if b.label == "Save for every learner").click().run()

    # The console's capacity now speaks of the settings the room starts from.
    open_page(app, "instructor")
    assert any(m.startswith("At the Run page's starting settings (fp32 vs amp-bf16, 1 epoch, batch 128, all 50,000 "
                            "synthetic images") for m in texts(app.markdown))

    learner = started_app()  # another browser: a learner
    learner.switch_page("pages/run_experiment.py").run()
    assert learner.select_slider(key="run_epochs").value == 1
    assert learner.select_slider(key="run_batch_size").value == 128


def test_a_learner_whose_job_waits_in_a_paused_queue_is_told_so(app):
    from ui import server_bundle

    manager = server_bundle._job_manager_for(server_bundle._settings_environment())
    manager.pause()
    me = app.session_state["amp_lab_learner"]
    run = RunConfig(precision="fp32", epochs=1, batch_size=32, data="synthetic", subset=64, test_subset=32)
    manager.submit(me.id, JobSpec("run", [run], label="my waiting run"))
    open_page(app, "run_experiment")
    assert any(line.startswith("Waiting in the queue at position 1: the instructor has paused the queue; it starts "
                               "once they resume it.") for line in texts(app.info))
    manager.resume()


def test_the_console_lists_each_learners_report_and_the_class_predictions(app, state_dir):
    from server.guesses import GuessStore

    store = HistoryStore(state_dir / "history.sqlite3")
    grace, _ = LearnerStore(store).create("Grace")
    store.save_job(make_job("g" * 32, learner_id=grace.id, label="Grace's comparison"))
    guesses = GuessStore(store)
    guesses.lock(grace.id, "run-speedup", "How many times as fast will AMP train?", 1.5, fmt="%.2fx")
    guesses.reveal(grace.id, "run-speedup", 1.2345)

    sign_in(app, PASSWORD)
    open_page(app, "instructor")
    markdown, captions = texts(app.markdown), texts(app.caption)
    assert "**Grace**" in markdown and "1 jobs queued or done · 1 predictions" in captions
    assert "Report (HTML)" in [d.label for d in app.get("download_button")]
    predictions = next(frame.value for frame in app.dataframe if "question" in frame.value.columns)
    row = predictions.set_index("learner").loc["Grace"]
    assert (row["guess"], row["measured"], row["measured value"]) == ("1.50x", "1.23x", 1.2345)
    assert "Predictions against results (CSV)" in [d.label for d in app.get("download_button")]
