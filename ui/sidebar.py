"""What every page shows in its sidebar: who the learner is (their name, their private bookmark link), the
instructor's sign-in, the learner's job while it waits or runs, and, above the page, the one-line answer to a cancel
link."""

from __future__ import annotations

import re

import streamlit as st

from server.identity import MAX_NAME_CHARS
from server.records import JobView
from ui import jobs, server_bundle
from ui.charts import run_names
from ui.identity import (
    LINK_PARAM,
    is_instructor,
    keep_in_browser,
    learner,
    learner_id,
    private_link_token,
    rename,
    sign_in_as_instructor,
    sign_out_as_instructor,
    signed_in_with_provider,
)
from ui.widgets import RESULTS_PAGE, RUN_PAGE, run_progress_text, waiting_line

CANCEL_PARAM = "cancel"  # ?cancel=<job id> on any page
OPEN_CONSOLE_KEY = "amp_lab_open_console"  # set by a sign-in: app.py opens the console on the next run
_JOB_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")  # the job manager's ids are 32 hex digits; never echo anything else
FOLLOWED_KEY = "amp_lab_sidebar_jobs"  # ids of this session's jobs the sidebar has shown waiting or running
JOBS_REFRESH_S = 5.0  # the sidebar's line changes slowly: a queue position, a run's share done
# Where a finished job is read, by what it was for (server/records.JOB_PURPOSES); the Run page shows any job.
READ_ON = {
    "quick-demo": RESULTS_PAGE, "comparison": RESULTS_PAGE, "sweep": "pages/when_amp_pays.py",
    "breakdown": "pages/when_amp_pays.py", "tiny-fp16": "pages/loss_scaling.py", "ablation": "pages/loss_scaling.py",
    "safeguards": "pages/safeguards.py",
}


def learner_panel() -> None:
    """In the sidebar: who this learner is, a way to change the name, their private bookmark link, and the
    instructor's sign-in; above the page, the answer to a cancel link."""
    me = learner()
    instructor = is_instructor()
    with st.sidebar:
        st.caption(f"You are **{me.display_name}**" + (" · instructor" if instructor else ""))
        if signed_in_with_provider():
            # Name and identity are the provider's: nothing to change here, and no bookmark token to show.
            st.button("Sign out", on_click=st.logout, key="sign_out")
        else:
            with st.popover("Change name or bookmark"):
                name = st.text_input("Display name", value=me.display_name, max_chars=MAX_NAME_CHARS)
                if name != me.display_name and rename(server_bundle.learners(), me, name):
                    st.rerun()
                token = private_link_token()
                if token:
                    st.caption("Your private link: it opens AMP Lab as you on any browser. Keep it to yourself.")
                    st.code(f"?{LINK_PARAM}={token}", language=None)
        if server_bundle.password_gate().enabled:
            if instructor:
                st.button("Leave the instructor console", on_click=sign_out_as_instructor, key="instructor_sign_out")
            else:
                with st.popover("Instructor"):
                    _instructor_sign_in()
        keep_in_browser()
    with st.container():  # always drawn, so that a cancel link's one line shifts none of the page's elements
        class_message()
        cancel_from_link()
        if not me.named and server_bundle.settings().ask_names:
            ask_for_a_name(me)


def your_jobs() -> None:
    """In the sidebar of every page: each of this learner's jobs that waits or runs, in one line with a link to the
    Run page, and each job the sidebar followed that ended in the last 15 minutes, with a link to where it is read.
    Redrawn while a job waits or runs, so a learner can read any page while it trains. Called after st.navigation,
    which its links need."""
    active = jobs.active_jobs()
    statuses = {job.id: job.status for job in active}

    @st.fragment(run_every=JOBS_REFRESH_S if active else None)
    def lines() -> None:
        now = jobs.active_jobs()
        if {job.id: job.status for job in now} != statuses:
            st.rerun()  # a job started or ended: redraw the page once, which starts or stops the refresh
        followed = st.session_state.setdefault(FOLLOWED_KEY, [])
        followed.extend(job.id for job in now if job.id not in followed)
        manager = server_bundle.job_manager()
        ended = jobs.recently_ended([job for job_id in followed if job_id not in statuses
                                     and (job := manager.get(job_id)) is not None])
        followed[:] = [job.id for job in now] + [job.id for job in ended]  # forget what ended long ago
        for job in now:
            with st.container(border=True):
                fraction, text = job_line(job, len(manager.slots), manager.paused)
                st.progress(fraction, text=text)
                st.page_link(RUN_PAGE, label="Follow it on the Run page", icon="🧪")
        for job in ended:
            with st.container(border=True):
                st.caption(ended_line(job))
                if job.status == "done":
                    page = READ_ON.get(job.spec.purpose, RUN_PAGE)
                    st.page_link(page, label="See the results", icon="📊",
                                 query_params={"job": job.id} if page == RESULTS_PAGE else None)
                else:
                    st.page_link(RUN_PAGE, label="See why on the Run page", icon="🧪")

    with st.sidebar:
        lines()


def job_line(job: JobView, workers: int, paused: bool) -> tuple[float, str]:
    """A waiting or running job in one line: how far it is (0 to 1) and its name with where it stands."""
    name = f"**Your job**, {short_name(job)}: "
    if job.status == "queued":
        return 0.0, name + waiting_line(job.queue_position, job.estimated_wait_s, workers, paused)
    runs = run_names(job.spec)
    index = min(job.current_run, len(runs) - 1)
    fraction, text = run_progress_text(job, index)
    done = (index + fraction) / len(runs)
    return min(1.0, max(0.0, done)), name + f"running {runs[index]} (run {index + 1} of {len(runs)}): {text}."


def ended_line(job: JobView) -> str:
    """A job of this session that ended, in one line."""
    ends = {"done": "finished", "failed": "failed", "cancelled": "was cancelled"}
    return f"**Your job**, {short_name(job)}, {ends.get(job.status, job.status)}."


def short_name(job: JobView) -> str:
    """A job's label up to its first comma ("quick demo: fp32 vs amp-bf16"): its settings are on the Run page."""
    return (job.label or job.kind).split(",")[0]


def ask_for_a_name(me) -> None:
    """The instructor asked for names: a new learner gives theirs before the roster lists them by a generated one."""
    with st.form("ask-name"):
        name = st.text_input("Your instructor asks for your name (shown to the class beside your results)",
                             max_chars=MAX_NAME_CHARS, placeholder=me.display_name)
        if st.form_submit_button("Save my name") and rename(server_bundle.learners(), me, name):
            st.rerun()


def class_message() -> None:
    """The instructor's message to the class, above the page, while it is set."""
    message = server_bundle.console().message()
    if message is not None:
        st.info(f"**From the instructor:** {message.text}", icon="📣")


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
    manager = server_bundle.job_manager()
    job = manager.get(job_id)
    if job is None:
        st.error(f"There is no job `{job_id}` on this server; nothing was cancelled.")
        return
    if not jobs.is_mine(job) and not is_instructor():
        st.error(f"Job `{job_id}` is not yours: only its owner or the instructor can cancel it.")
        return
    if not jobs.cancel(job):
        st.info(f"Job `{job_id}` has already ended; there is nothing to cancel.")
    elif manager.get(job_id).status == "cancelled":
        st.success(f"Job `{job_id}` ({job.label or job.kind}) is cancelled: it had not started.")
    else:
        st.success(f"Job `{job_id}` ({job.label or job.kind}) is being cancelled: it stops within seconds.")


def _instructor_sign_in() -> None:
    password = st.text_input("Instructor password", type="password", key="instructor_password")
    if st.button("Open the instructor console"):
        # Wrong tries slow down this address (or, without one, this browser's learner), never the whole server.
        ok, message = server_bundle.password_gate().check(password, st.context.ip_address or learner_id())
        if ok:
            sign_in_as_instructor()
            st.session_state[OPEN_CONSOLE_KEY] = True
            st.rerun()
        st.error(message[:1].upper() + message[1:] + ".")
