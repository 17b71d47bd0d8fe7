"""Session glue: one job manager per settings, the same learner across reruns, reloads and links, and
refusing bad values with a message."""

import pytest
import streamlit as st
import torch
from streamlit.testing.v1 import AppTest

from trainer.child_process import run_python_json
from ui import session


def checked_script():
    import streamlit as st

    from ui import session
    from ui.choices import Choice, parse_int

    epochs = Choice("run_epochs", "Epochs", tuple(range(1, 21)), 5, "epochs", parse_int)
    session.apply_query_params([epochs])
    session.checked_state(epochs)
    st.select_slider("Epochs", epochs.allowed, key=epochs.key)
    st.write(f"learner {session.learner_id()}")


def test_a_bad_value_in_session_state_is_refused_with_a_message():
    at = AppTest.from_function(checked_script, default_timeout=60)
    at.session_state["run_epochs"] = 99
    at.run()
    assert not at.exception
    refused = "Epochs 99 set in the session state is not allowed here: choose 1 to 20. Using 5 instead."
    assert at.error[0].value == refused
    assert at.select_slider(key="run_epochs").value == 5


def test_query_params_preset_a_value_once_and_refuse_bad_ones():
    at = AppTest.from_function(checked_script, default_timeout=60)
    at.query_params["epochs"] = "7"
    at.run()
    assert not at.error and at.select_slider(key="run_epochs").value == 7
    at.select_slider(key="run_epochs").set_value(9).run()
    assert at.select_slider(key="run_epochs").value == 9  # the same address does not undo the learner's change

    bad = AppTest.from_function(checked_script, default_timeout=60)
    bad.query_params["epochs"] = "lots"
    bad.run()
    assert not bad.exception
    assert bad.error[0].value.startswith("Epochs 'lots' in the address is not allowed here: choose 1 to 20.")
    assert bad.select_slider(key="run_epochs").value == 5


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("AMP_LAB_STATE_DIR", str(tmp_path))
    return tmp_path


def test_the_learner_stays_the_same_across_reruns_and_a_new_browser_is_another(state_dir):
    at = AppTest.from_function(checked_script, default_timeout=60).run()
    first = at.markdown[0].value
    assert first == at.run().markdown[0].value
    assert first != AppTest.from_function(checked_script, default_timeout=60).run().markdown[0].value


@pytest.mark.slow
def test_a_private_link_opens_the_same_learner_and_a_forged_one_does_not(state_dir):
    at = AppTest.from_function(checked_script, default_timeout=60).run()
    me, token = at.session_state["amp_lab_learner"], at.session_state["amp_lab_learner_token"]
    linked = AppTest.from_function(checked_script, default_timeout=60)
    linked.query_params["learner"] = token
    assert linked.run().markdown[0].value == f"learner {me.id}"
    forged = AppTest.from_function(checked_script, default_timeout=60)
    forged.query_params["learner"] = token[:-2] + "xx"
    assert forged.run().markdown[0].value != f"learner {me.id}"


def panel_then_page_script():
    import streamlit as st

    from ui import session

    session.learner_panel()
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


def manager_script():
    import streamlit as st

    from ui import session

    manager = session.get_job_manager()
    st.write(f"{id(manager)} {manager.store.path}")
    st.write(f"same: {manager is session.get_job_manager()}")


@pytest.mark.slow
def test_one_job_manager_per_state_folder(tmp_path, monkeypatch):
    try:
        monkeypatch.setenv("AMP_LAB_STATE_DIR", str(tmp_path / "a"))
        first = AppTest.from_function(manager_script, default_timeout=60).run()
        again = AppTest.from_function(manager_script, default_timeout=60).run()
        assert first.markdown[0].value == again.markdown[0].value  # shared by every session
        assert first.markdown[1].value == "same: True"
        assert str(tmp_path / "a" / "history.sqlite3") in first.markdown[0].value
        monkeypatch.setenv("AMP_LAB_STATE_DIR", str(tmp_path / "b"))
        other = AppTest.from_function(manager_script, default_timeout=60).run()
        assert str(tmp_path / "b" / "history.sqlite3") in other.markdown[0].value
    finally:
        st.cache_resource.clear()


def test_a_misconfigured_server_shows_one_line_instead_of_a_traceback(monkeypatch):
    monkeypatch.setenv("AMP_LAB_MAX_EPOCHS", "many")
    at = AppTest.from_function(manager_script, default_timeout=60).run()
    assert not at.exception
    message = "The server is not set up correctly: AMP_LAB_MAX_EPOCHS must be a whole number, got 'many'"
    assert at.error[0].value == message


# Run in a fresh interpreter: earlier CUDA tests in this pytest process may already have opened a context.
CONTEXT_CHECK = """
import json
import torch
from trainer.errors import TrainerError
from ui import session
try:
    described = session._hardware_for("cuda").device_type
except TrainerError as err:
    described = str(err)
print(json.dumps([described, torch.cuda.is_initialized()]))
"""


@pytest.mark.slow
def test_the_gpu_is_described_by_a_child_process_so_this_one_opens_no_cuda_context():
    described, cuda_initialized = run_python_json(["-c", CONTEXT_CHECK], timeout_s=120)
    assert cuda_initialized is False
    if torch.cuda.is_available():
        assert described == "cuda"
    else:
        assert described.startswith("could not query the GPU")


def test_a_pages_gpu_child_runs_on_a_gpu_of_the_jobs_not_cuda_device_0(monkeypatch):
    from types import SimpleNamespace

    from server.devices import Slot

    # The instructor kept GPUs 0 and 1 free (gpus = [2, 3]): the page's child goes where the first worker is.
    slots = [Slot("GPU 2", {"CUDA_VISIBLE_DEVICES": "GPU-2aaa"}), Slot("GPU 3", {"CUDA_VISIBLE_DEVICES": "GPU-3aaa"})]
    monkeypatch.setattr(session, "get_job_manager", lambda: SimpleNamespace(slots=slots))
    assert session.gpu_child_env() == {"CUDA_VISIBLE_DEVICES": "GPU-2aaa"}
    monkeypatch.setattr(session, "get_job_manager", lambda: SimpleNamespace(slots=[Slot("cpu")]))
    assert session.gpu_child_env() == {}


def test_a_pages_gpu_child_waits_only_for_a_job_on_its_own_gpu(monkeypatch):
    from types import SimpleNamespace

    from server.devices import Slot

    def job_on(uuid):
        return SimpleNamespace(status="running", extras={"gpu": {"index": 0, "uuid": uuid, "name": "H200"}})

    def server(slots, views):
        monkeypatch.setattr(session, "get_job_manager", lambda: SimpleNamespace(slots=slots, queue_views=lambda: views))

    gpus = [Slot("GPU 2", {"CUDA_VISIBLE_DEVICES": "GPU-2aaa"}, {"index": 2, "uuid": "GPU-2aaa", "name": "H200"}),
            Slot("GPU 3", {"CUDA_VISIBLE_DEVICES": "GPU-3aaa"}, {"index": 3, "uuid": "GPU-3aaa", "name": "H200"})]
    server(gpus, [job_on("GPU-3aaa"), SimpleNamespace(status="queued", extras={})])
    assert session.gpu_is_idle()  # a job on another GPU does not hold the page back
    server(gpus, [job_on("GPU-2aaa")])
    assert not session.gpu_is_idle()
    server([Slot("cuda")], [SimpleNamespace(status="running", extras={})])  # workers not pinned: any job counts
    assert not session.gpu_is_idle()
    server([Slot("cuda")], [])
    assert session.gpu_is_idle()


# ---- the cancel link: ?cancel=<job id> on any page -----------------------------------------------------------

PASSWORD = "a long classroom secret"


def cancel_link_script():
    import streamlit as st

    from ui import jobs, session

    session.learner_panel()
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
    manager = session._job_manager_for(session._settings_environment())
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
