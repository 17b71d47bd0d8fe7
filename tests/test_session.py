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


def test_a_private_link_opens_the_same_learner_and_a_forged_one_does_not(state_dir):
    at = AppTest.from_function(checked_script, default_timeout=60).run()
    me, token = at.session_state["amp_lab_learner"], at.session_state["amp_lab_learner_token"]
    linked = AppTest.from_function(checked_script, default_timeout=60)
    linked.query_params["learner"] = token
    assert linked.run().markdown[0].value == f"learner {me.id}"
    forged = AppTest.from_function(checked_script, default_timeout=60)
    forged.query_params["learner"] = token[:-2] + "xx"
    assert forged.run().markdown[0].value != f"learner {me.id}"


def manager_script():
    import streamlit as st

    from ui import session

    manager = session.get_job_manager()
    st.write(f"{id(manager)} {manager.store.path}")
    st.write(f"same: {manager is session.get_job_manager()}")


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


def test_the_gpu_is_described_by_a_child_process_so_this_one_opens_no_cuda_context():
    described, cuda_initialized = run_python_json(["-c", CONTEXT_CHECK], timeout_s=120)
    assert cuda_initialized is False
    if torch.cuda.is_available():
        assert described == "cuda"
    else:
        assert described.startswith("could not query the GPU")
