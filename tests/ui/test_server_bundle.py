"""The server's parts, built once per settings and shared by every page, and where a page's GPU child runs."""

import pytest
import streamlit as st
import torch
from streamlit.testing.v1 import AppTest

from trainer.child_process import run_python_json
from ui import server_bundle


def manager_script():
    import streamlit as st

    from ui import server_bundle

    manager = server_bundle.job_manager()
    st.write(f"{id(manager)} {manager.store.path}")
    st.write(f"same: {manager is server_bundle.job_manager()}")


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
from ui import server_bundle
try:
    described = server_bundle._hardware_for("cuda").device_type
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
    monkeypatch.setattr(server_bundle, "job_manager", lambda: SimpleNamespace(slots=slots))
    assert server_bundle.gpu_child_env() == {"CUDA_VISIBLE_DEVICES": "GPU-2aaa"}
    monkeypatch.setattr(server_bundle, "job_manager", lambda: SimpleNamespace(slots=[Slot("cpu")]))
    assert server_bundle.gpu_child_env() == {}


def test_a_pages_gpu_child_waits_only_for_a_job_on_its_own_gpu(monkeypatch):
    from types import SimpleNamespace

    from server.devices import Slot

    def job_on(uuid):
        return SimpleNamespace(status="running", extras={"gpu": {"index": 0, "uuid": uuid, "name": "H200"}})

    def server(slots, views):
        monkeypatch.setattr(server_bundle, "job_manager", lambda: SimpleNamespace(slots=slots, queue_views=lambda: views))

    gpus = [Slot("GPU 2", {"CUDA_VISIBLE_DEVICES": "GPU-2aaa"}, {"index": 2, "uuid": "GPU-2aaa", "name": "H200"}),
            Slot("GPU 3", {"CUDA_VISIBLE_DEVICES": "GPU-3aaa"}, {"index": 3, "uuid": "GPU-3aaa", "name": "H200"})]
    server(gpus, [job_on("GPU-3aaa"), SimpleNamespace(status="queued", extras={})])
    assert server_bundle.gpu_is_idle()  # a job on another GPU does not hold the page back
    server(gpus, [job_on("GPU-2aaa")])
    assert not server_bundle.gpu_is_idle()
    server([Slot("cuda")], [SimpleNamespace(status="running", extras={})])  # workers not pinned: any job counts
    assert not server_bundle.gpu_is_idle()
    server([Slot("cuda")], [])
    assert server_bundle.gpu_is_idle()
