"""The sidebar of every page: the learner's cookie written on every run, and the cancel link."""

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from ui import server_bundle


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("AMP_LAB_STATE_DIR", str(tmp_path))
    return tmp_path


def panel_then_page_script():
    import streamlit as st

    from ui import sidebar

    sidebar.learner_panel()
    st.multiselect("Batch sizes", [32, 64], key="batches")


def element_kinds(block) -> list[str]:
    return [getattr(node, "type", type(node).__name__) for node in block.children.values()]


def test_every_run_draws_the_same_elements_so_no_widget_is_drawn_anew(state_dir):
    """The cookie that keeps the learner is written on every run, in the sidebar: written on the first run only, it
    shifted every element after it on the next, and Streamlit drew the page's widgets anew under the learner's
    first click (a browser test caught a list that closed, and two copies of a widget)."""
    at = AppTest.from_function(panel_then_page_script, default_timeout=60).run()
    token = at.session_state["amp_lab_learner_token"]
    first = (element_kinds(at.main), element_kinds(at.sidebar))
    assert first == (element_kinds(at.run().main), element_kinds(at.sidebar))
    for _ in range(2):
        cookies = [node.proto.body for node in at.sidebar.children.values() if getattr(node, "type", "") == "html"]
        assert len(cookies) == 1 and f"amp_lab_learner={token};" in cookies[0]
        at.run()


# ---- the cancel link: ?cancel=<job id> on any page -----------------------------------------------------------

PASSWORD = "a long classroom secret"


def cancel_link_script():
    import streamlit as st

    from ui import jobs, sidebar

    sidebar.learner_panel()
    if "follow" in st.query_params:
        jobs.follow(st.query_params["follow"])


@pytest.fixture
def waiting_job(state_dir, monkeypatch):
    """A learner, Grace, with a job waiting in a paused queue: (her private token, the job's id, the manager)."""
    from server.identity import LearnerStore
    from server.records import JobSpec
    from trainer.config import RunConfig

    monkeypatch.setenv("AMP_LAB_INSTRUCTOR_PASSWORD", PASSWORD)
    monkeypatch.setenv("AMP_LAB_DEVICE", "cpu")
    manager = server_bundle._job_manager_for(server_bundle._settings_environment())
    manager.pause()
    grace, token = LearnerStore(manager.store).create("Grace")
    run = RunConfig(precision="fp32", epochs=1, batch_size=32, data="synthetic", subset=64, test_subset=32)
    job_id = manager.submit(grace.id, JobSpec("run", [run], label="Grace's waiting run"))
    yield token, job_id, manager
    st.cache_resource.clear()


def open_with(**params) -> AppTest:
    at = AppTest.from_function(cancel_link_script, default_timeout=60)
    at.query_params.update(params)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_the_owner_cancels_their_job_with_a_link_once(waiting_job):
    token, job_id, manager = waiting_job
    at = open_with(learner=token, cancel=job_id)
    assert [s.value for s in at.success] == [f"Job `{job_id}` (Grace's waiting run) is cancelled: it had not started."]
    assert manager.get(job_id).error == "cancelled by its owner before it started"
    assert "cancel" not in at.query_params  # removed, so that a reload does not repeat it
    assert not at.run().success and not at.error and not at.info

    again = open_with(learner=token, cancel=job_id)
    assert [i.value for i in again.info] == [f"Job `{job_id}` has already ended; there is nothing to cancel."]


def test_another_learner_is_refused_without_learning_anything_about_the_job(waiting_job):
    _, job_id, manager = waiting_job
    at = open_with(cancel=job_id)
    assert [e.value for e in at.error] == [
        f"Job `{job_id}` is not yours: only its owner or the instructor can cancel it."
    ]
    assert not at.success
    assert manager.get(job_id).status == "queued" and not manager.get(job_id).cancel_requested
    assert "cancel" not in at.query_params


def test_the_instructor_cancels_any_job_with_a_link(waiting_job):
    _, job_id, manager = waiting_job
    at = open_with()
    next(t for t in at.text_input if t.label == "Instructor password").input(PASSWORD)
    next(b for b in at.button if b.label == "Open the instructor console").click().run()
    at.query_params["cancel"] = job_id
    at.run()
    assert not at.error
    assert [s.value for s in at.success] == [f"Job `{job_id}` (Grace's waiting run) is cancelled: it had not started."]
    assert manager.get(job_id).error == "cancelled by the instructor before it started"


NO_JOB_ID = "That cancel link holds no job id (`?cancel=` then the job's id); nothing was cancelled."


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("f" * 32, f"There is no job `{'f' * 32}` on this server; nothing was cancelled."),
        ("<b>x</b>](javascript:alert(1))", NO_JOB_ID),  # never echoed: the page would render it
        ("", NO_JOB_ID),
        ("a" * 65, NO_JOB_ID),
    ],
    ids=["unknown", "markup", "empty", "too-long"],
)
def test_an_unknown_or_malformed_id_gets_its_own_line(waiting_job, given, message):
    _, job_id, manager = waiting_job
    at = open_with(cancel=given)
    assert [e.value for e in at.error] == [message]
    assert "cancel" not in at.query_params
    assert manager.get(job_id).status == "queued"


def test_the_owners_cancel_button_still_cancels(waiting_job):
    token, job_id, manager = waiting_job
    assert not [b for b in open_with(follow=job_id).button if b.label == "Cancel"]  # not for another learner
    at = open_with(learner=token, follow=job_id)
    next(b for b in at.button if b.label == "Cancel").click().run()
    assert not at.exception
    assert manager.get(job_id).error == "cancelled by its owner before it started"
