"""The server's parts, built once per process and shared by every page: the instructor's settings, the one job
manager with its history, the learners, the console's settings, the instructor's password gate, the hardware
report, and the offer (what a learner may run here). The composition root: nothing here draws on a page but a misconfigured
server's one-line error.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import streamlit as st

from lessons.step_budget import peaks_beaten
from server.console import ConsoleStore
from server.guesses import GuessStore
from server.history import HistoryStore
from server.identity import LearnerStore
from server.instructor import InstructorPass, PasswordGate
from server.jobs import JobManager
from server.kinds import KindPolicy
from server.offer import Offer
from server.presets import parse_presets
from server.settings import Settings
from trainer.capabilities import mode_support, unseen_gpu_note
from trainer.child_process import ChildProcessError, run_python_json
from trainer.environment import HardwareReport, hardware_report
from trainer.errors import TrainerError

_HARDWARE_CHILD = (
    "import json; from trainer.environment import hardware_report; "
    "print(json.dumps(hardware_report('cuda').to_dict()))"
)
Environment = tuple[tuple[str, str], ...]


def _settings_environment() -> Environment:
    """The AMP_LAB_* variables as a hashable key: a changed variable means new settings (and, in tests, a new
    job manager for a new state folder)."""
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AMP_LAB_")))


@st.cache_resource(show_spinner=False)
def _settings_for(environment: Environment) -> Settings:
    return Settings.from_env(dict(environment))


@st.cache_resource(show_spinner=False, on_release=lambda manager: manager.shutdown())
def _job_manager_for(environment: Environment) -> JobManager:
    settings = _settings_for(environment)
    return JobManager(settings, HistoryStore(settings.history_path), offer=lambda: _offer_for(environment),
                      peaks_beaten=peaks_beaten).start()


@dataclass(frozen=True)
class _Stores:
    """What the server keeps in its history file beside the jobs, each opened (its table made) once."""

    learners: LearnerStore
    console: ConsoleStore
    guesses: GuessStore
    instructor_pass: InstructorPass


@st.cache_resource(show_spinner=False)
def _stores_for(environment: Environment) -> _Stores:
    manager = _job_manager_for(environment)
    history = manager.store
    return _Stores(LearnerStore(history), ConsoleStore(history, manager.started_at), GuessStore(history),
                   InstructorPass(history))


@st.cache_resource(show_spinner=False)
def _gate_for(environment: Environment) -> PasswordGate:
    return PasswordGate(_settings_for(environment).instructor_password)


@st.cache_resource(show_spinner=False)
def _hardware_for(device_type: str, child_env: Environment = ()) -> HardwareReport:
    if device_type != "cuda":
        return hardware_report("cpu")
    # Asking CUDA about the GPU opens a CUDA context (hundreds of MB of GPU memory) that would stay in this
    # long-lived process and inflate every run's nvidia-smi figure: a short-lived child asks instead, on a GPU the
    # jobs run on.
    try:
        return HardwareReport.from_dict(run_python_json(["-c", _HARDWARE_CHILD], env=dict(child_env)))
    except ChildProcessError as err:
        raise TrainerError(f"could not query the GPU ({err}); check the NVIDIA driver") from None


def _hardware_of(manager: JobManager) -> HardwareReport:
    child_env = tuple(sorted(_child_env_of(manager).items())) if manager.device_type == "cuda" else ()
    return _hardware_for(manager.device_type, child_env)


def _presets_of(environment: Environment) -> dict[str, str]:
    from_console = _stores_for(environment).console.presets()
    return from_console if from_console is not None else parse_presets(_settings_for(environment).presets)


def _kinds_of(environment: Environment) -> KindPolicy:
    """The console's policy if the instructor set one, else the settings' mode; the caps count from the class's
    start either way."""
    console = _stores_for(environment).console
    return console.kinds() or KindPolicy.for_mode(_settings_for(environment).class_mode, console.class_start())


def _offer_for(environment: Environment) -> Offer:
    """The offer as it stands now (the presets or the kinds may have changed since the last page run); cheap."""
    report = _hardware_of(_job_manager_for(environment))
    return Offer(_settings_for(environment), mode_support(report.facts), device_type=report.device_type,
                 recommended=report.recommended_amp, presets=_presets_of(environment),
                 kinds=_kinds_of(environment))


def _child_env_of(manager: JobManager) -> dict[str, str]:
    slots = manager.slots
    return dict(slots[0].env) if slots else {}


def _or_stop(make: Callable):
    """Build a server part; a misconfigured server is one clear error on the page, not a traceback."""
    try:
        return make()
    except TrainerError as err:
        st.error(f"The server is not set up correctly: {err}")
        st.stop()


def settings() -> Settings:
    """The instructor's settings (AMP_LAB_* variables, AMP_LAB_CONFIG file), read once per process."""
    return _or_stop(lambda: _settings_for(_settings_environment()))


def job_manager() -> JobManager:
    """The one job manager of this server process: the queue and one worker per GPU (one on a CPU)."""
    return _or_stop(lambda: _job_manager_for(_settings_environment()))


def history() -> HistoryStore:
    """The shared job history (the job manager's own store)."""
    return job_manager().store


def learners() -> LearnerStore:
    """Every learner of this server: ids, display names, and the hashes of their browsers' tokens."""
    return _or_stop(lambda: _stores_for(_settings_environment()).learners)


def presets() -> dict[str, str]:
    """Where every Run page starts: the console's presets if the instructor set some, else the settings'."""
    return _or_stop(lambda: _presets_of(_settings_environment()))


def console() -> ConsoleStore:
    """What the instructor set in the console for the class: the message above every page, the presets, the kinds
    of job learners may queue."""
    return _or_stop(lambda: _stores_for(_settings_environment()).console)


def instructor_pass() -> InstructorPass:
    """Signs and checks the instructor's pass, which a reload of the console keeps."""
    return _or_stop(lambda: _stores_for(_settings_environment()).instructor_pass)


def guesses() -> GuessStore:
    """Every learner's locked predictions."""
    return _or_stop(lambda: _stores_for(_settings_environment()).guesses)


def password_gate() -> PasswordGate:
    return _or_stop(lambda: _gate_for(_settings_environment()))


def hardware() -> HardwareReport:
    """What the device the jobs run on offers for mixed precision (read once per process)."""
    return _or_stop(lambda: _hardware_of(job_manager()))


def offer() -> Offer:
    """What a learner may run on this server now, and the job builders every page uses."""
    return _or_stop(lambda: _offer_for(_settings_environment()))


@st.cache_resource(show_spinner=False)
def unseen_gpu() -> str | None:
    """One line when the driver sees a GPU this PyTorch cannot use (read once per process, no CUDA context)."""
    return unseen_gpu_note()


def gpu_child_env() -> dict[str, str]:
    """Where a page's short-lived GPU child (autocast trace, memory breakdown, hardware report) runs: pinned to
    the first of the GPUs this server's jobs use, as a job's child is, rather than to CUDA's device 0, which may
    be a GPU the instructor's `gpus` setting keeps free."""
    return _child_env_of(job_manager())


def gpu_is_idle() -> bool:
    """True when no job is training on the GPU a page's child would use (gpu_child_env's, the first worker's), so
    a GPU child outside the queue may start there; on a server whose workers are not pinned to GPUs, when no job
    is training at all. Jobs on the server's other GPUs do not hold the pages back."""
    manager = job_manager()
    running = [view for view in manager.queue_views() if view.status == "running"]
    first = manager.slots[0].gpu if manager.slots else None
    if first is None:
        return not running
    return not any((view.extras.get("gpu") or {}).get("uuid") == first.get("uuid") for view in running)
