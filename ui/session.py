"""What every page shares: the server's settings, its one job manager, this learner, the hardware,
and careful reading of values that arrive through session state or the address bar."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence

import streamlit as st

from server.history import HistoryStore
from server.identity import MAX_NAME_CHARS, Learner, LearnerStore
from server.instructor import PasswordGate
from server.jobs import JobManager
from server.presets import PresetStore, parse_presets
from server.records import JobView
from server.settings import Settings
from trainer.capabilities import unseen_gpu_note
from trainer.child_process import ChildProcessError, run_python_json
from trainer.environment import HardwareReport, hardware_report
from trainer.errors import TrainerError
from ui.choices import Choice, accepts, refusal
from ui.identity import (
    LINK_PARAM,
    current_learner,
    keep_in_browser,
    private_link_token,
    rename,
    signed_in_email,
    signed_in_with_provider,
)

APPLIED_PARAMS_KEY = "amp_lab_applied_query_params"
INSTRUCTOR_KEY = "amp_lab_instructor"
CANCEL_PARAM = "cancel"  # ?cancel=<job id> on any page
_JOB_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")  # the job manager's ids are 32 hex digits; never echo anything else
_HARDWARE_CHILD = (
    "import json; from trainer.environment import hardware_report; "
    "print(json.dumps(hardware_report('cuda').to_dict()))"
)


def _settings_environment() -> tuple[tuple[str, str], ...]:
    """The AMP_LAB_* variables as a hashable key: a changed variable means new settings (and, in tests, a new
    job manager for a new state folder)."""
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AMP_LAB_")))


@st.cache_resource(show_spinner=False)
def _settings_for(environment: tuple[tuple[str, str], ...]) -> Settings:
    return Settings.from_env(dict(environment))


@st.cache_resource(show_spinner=False, on_release=lambda manager: manager.shutdown())
def _job_manager_for(environment: tuple[tuple[str, str], ...]) -> JobManager:
    settings = _settings_for(environment)
    return JobManager(settings, HistoryStore(settings.history_path))


@st.cache_resource(show_spinner=False)
def _hardware_for(device_type: str, child_env: tuple[tuple[str, str], ...] = ()) -> HardwareReport:
    if device_type != "cuda":
        return hardware_report("cpu")
    # Asking CUDA about the GPU opens a CUDA context (hundreds of MB of GPU memory) that would stay in this
    # long-lived process and inflate every run's nvidia-smi figure: a short-lived child asks instead, on a GPU the
    # jobs run on.
    try:
        return HardwareReport.from_dict(run_python_json(["-c", _HARDWARE_CHILD], env=dict(child_env)))
    except ChildProcessError as err:
        raise TrainerError(f"could not query the GPU ({err}); check the NVIDIA driver") from None


def _or_stop(make: Callable):
    """Build a server resource; a misconfigured server is one clear error on the page, not a traceback."""
    try:
        return make()
    except TrainerError as err:
        st.error(f"The server is not set up correctly: {err}")
        st.stop()


def get_settings() -> Settings:
    """The instructor's settings (AMP_LAB_* variables, AMP_LAB_CONFIG file), read once per process."""
    return _or_stop(lambda: _settings_for(_settings_environment()))


def get_job_manager() -> JobManager:
    """The one job manager of this server process: a FIFO queue and one worker per GPU (one on a CPU)."""
    return _or_stop(lambda: _job_manager_for(_settings_environment()))


def get_history() -> HistoryStore:
    """The shared job history (the job manager's own store)."""
    return get_job_manager().store


@st.cache_resource(show_spinner=False)
def _learners_for(environment: tuple[tuple[str, str], ...]) -> LearnerStore:
    return LearnerStore(_job_manager_for(environment).store)


def get_learners() -> LearnerStore:
    """Every learner of this server: ids, display names, and the hashes of their browsers' tokens."""
    return _or_stop(lambda: _learners_for(_settings_environment()))


def learner() -> Learner:
    """Who uses this page: the same learner after a reload, in a second tab, or back the next day."""
    return current_learner(get_learners())


def learner_id() -> str:
    """The public id of this learner: their jobs belong to it, and only they may cancel them."""
    return learner().id


def my_jobs() -> list[JobView]:
    """This learner's jobs, oldest first, live or from the history."""
    return get_job_manager().jobs_for_learner(learner_id())


@st.cache_resource(show_spinner=False)
def unseen_gpu() -> str | None:
    """One line when the driver sees a GPU this PyTorch cannot use (read once per process, no CUDA context)."""
    return unseen_gpu_note()


def gpu_child_env() -> dict[str, str]:
    """Where a page's short-lived GPU child (autocast trace, memory breakdown, hardware report) runs: pinned to
    the first of the GPUs this server's jobs use, as a job's child is, rather than to CUDA's device 0, which may
    be a GPU the instructor's `gpus` setting keeps free."""
    slots = get_job_manager().slots
    return dict(slots[0].env) if slots else {}


def gpu_is_idle() -> bool:
    """True when no job is training on the GPU a page's child would use (gpu_child_env's, the first worker's), so
    a GPU child outside the queue may start there; on a server whose workers are not pinned to GPUs, when no job
    is training at all. Jobs on the server's other GPUs do not hold the pages back."""
    manager = get_job_manager()
    running = [view for view in manager.queue_views() if view.status == "running"]
    first = manager.slots[0].gpu if manager.slots else None
    if first is None:
        return not running
    return not any((view.extras.get("gpu") or {}).get("uuid") == first.get("uuid") for view in running)


def active_jobs() -> list[JobView]:
    """This learner's waiting and running jobs, from the job manager's memory (cheap enough for every tick)."""
    return get_job_manager().active_jobs_for(learner_id())


def learner_panel() -> None:
    """In the sidebar: who this learner is, a way to change the name, their private bookmark link, and the
    instructor's sign-in; above the page, the answer to a cancel link."""
    me = learner()
    with st.sidebar:
        st.caption(f"You are **{me.display_name}**" + (" · instructor" if is_instructor() else ""))
        if signed_in_with_provider():
            # Name and identity are the provider's: nothing to change here, and no bookmark token to show.
            st.button("Sign out", on_click=st.logout, key="sign_out")
            if _password_gate().enabled and not is_instructor():
                with st.popover("Instructor"):
                    _instructor_sign_in()
        else:
            with st.popover("Change name or bookmark"):
                name = st.text_input("Display name", value=me.display_name, max_chars=MAX_NAME_CHARS)
                if name != me.display_name and rename(get_learners(), me, name):
                    st.rerun()
                token = private_link_token()
                if token:
                    st.caption("Your private link: it opens AMP Lab as you on any browser. Keep it to yourself.")
                    st.code(f"?{LINK_PARAM}={token}", language=None)
                if _password_gate().enabled and not is_instructor():
                    _instructor_sign_in()
            keep_in_browser()
    with st.container():  # always drawn, so that a cancel link's one line shifts none of the page's elements
        cancel_from_link()


def cancel_from_link() -> None:
    """`?cancel=<job id>` on any page: cancel the job if it is this learner's (or for the instructor) and say so in
    one line; another learner's job gets a one-line refusal that tells nothing about it. The parameter is then
    removed, so that a reload does not repeat it."""
    if CANCEL_PARAM not in st.query_params:
        return
    job_id = st.query_params.get(CANCEL_PARAM, "")
    del st.query_params[CANCEL_PARAM]
    if not _JOB_ID.fullmatch(job_id):
        st.error("That cancel link holds no job id (`?cancel=` then the job's id); nothing was cancelled.")
        return
    manager = get_job_manager()
    job = manager.get(job_id)
    if job is None:
        st.error(f"There is no job `{job_id}` on this server; nothing was cancelled.")
        return
    mine = job.learner_id == learner_id()
    if not mine and not is_instructor():
        st.error(f"Job `{job_id}` is not yours: only its owner or the instructor can cancel it.")
        return
    if not (manager.cancel(job_id, learner_id()) if mine else manager.cancel_any(job_id)):
        st.info(f"Job `{job_id}` has already ended; there is nothing to cancel.")
    elif manager.get(job_id).status == "cancelled":
        st.success(f"Job `{job_id}` ({job.label or job.kind}) is cancelled: it had not started.")
    else:
        st.success(f"Job `{job_id}` ({job.label or job.kind}) is being cancelled: it stops within seconds.")


# ---- the instructor ------------------------------------------------------------------------------------------


@st.cache_resource(show_spinner=False)
def _gate_for(environment: tuple[tuple[str, str], ...]) -> PasswordGate:
    return PasswordGate(_settings_for(environment).instructor_password)


@st.cache_resource(show_spinner=False)
def _presets_for(environment: tuple[tuple[str, str], ...]) -> PresetStore:
    return PresetStore(_job_manager_for(environment).store)


def _password_gate() -> PasswordGate:
    return _or_stop(lambda: _gate_for(_settings_environment()))


def get_preset_store() -> PresetStore:
    return _or_stop(lambda: _presets_for(_settings_environment()))


def presets() -> dict[str, str]:
    """Where every Run page starts: the console's presets if the instructor set some, else the settings'."""
    from_console = get_preset_store().get()
    return from_console if from_console is not None else parse_presets(get_settings().presets)


def is_instructor() -> bool:
    """Signed in with the instructor's password in this session, or signed in with an allowed email."""
    if st.session_state.get(INSTRUCTOR_KEY):
        return True
    email = signed_in_email()
    return email is not None and email.lower() in get_settings().instructor_email_set


def _instructor_sign_in() -> None:
    password = st.text_input("Instructor password", type="password", key="instructor_password")
    if st.button("Open the instructor console"):
        ok, message = _password_gate().check(password)
        if ok:
            st.session_state[INSTRUCTOR_KEY] = True
            st.rerun()
        st.error(message[:1].upper() + message[1:] + ".")


def hardware() -> HardwareReport:
    """What the device the jobs run on offers for mixed precision (read once per process)."""
    device_type = get_job_manager().device_type
    child_env = tuple(sorted(gpu_child_env().items())) if device_type == "cuda" else ()
    return _or_stop(lambda: _hardware_for(device_type, child_env))


# ---- values a learner (or a crafted link) can set --------------------------------------------------------


def checked_state(choice: Choice) -> object:
    """Keep a bad value set through session state away from the widget: say so, and put the default back.

    Call before the widget is drawn; fills in the default when nothing is set yet.
    """
    if choice.key not in st.session_state:
        st.session_state[choice.key] = choice.default
    value = st.session_state[choice.key]
    if not accepts(choice, value):
        st.error(refusal(choice, value, "set in the session state"))
        st.session_state[choice.key] = value = choice.default
    return value


def apply_query_params(choices: Sequence[Choice]) -> None:
    """Preset widgets from the address bar (e.g. ?epochs=3&batch_size=128), refusing values out of range.

    A given address is applied once, so later widget changes are not overwritten by the same link.
    """
    given = {c.param: st.query_params.get(c.param) for c in choices if c.param in st.query_params}
    if not given or st.session_state.get(APPLIED_PARAMS_KEY) == given:
        return
    st.session_state[APPLIED_PARAMS_KEY] = given
    for choice in choices:
        if choice.param not in given:
            continue
        text = given[choice.param]
        try:
            value = choice.parse(text)
        except (TypeError, ValueError):
            value = text
        if accepts(choice, value):
            st.session_state[choice.key] = value
        else:
            st.error(refusal(choice, text, "in the address"))
            st.session_state[choice.key] = choice.default
