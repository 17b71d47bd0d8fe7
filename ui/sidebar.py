"""What every page shows in its sidebar: who the learner is (their name, their private bookmark link), the
instructor's sign-in, and, above the page, the one-line answer to a cancel link."""

from __future__ import annotations

import re

import streamlit as st

from server.identity import MAX_NAME_CHARS
from ui import server_bundle
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

CANCEL_PARAM = "cancel"  # ?cancel=<job id> on any page
OPEN_CONSOLE_KEY = "amp_lab_open_console"  # set by a sign-in: app.py opens the console on the next run
_JOB_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")  # the job manager's ids are 32 hex digits; never echo anything else


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


def ask_for_a_name(me) -> None:
    """The instructor asked for names: a new learner gives theirs before the roster lists them by a generated one."""
    with st.form("ask-name"):
        name = st.text_input("Your instructor asks for your name (shown to the class beside your results)",
                             max_chars=MAX_NAME_CHARS, placeholder=me.display_name)
        if st.form_submit_button("Save my name") and rename(server_bundle.learners(), me, name):
            st.rerun()


def class_message() -> None:
    """The instructor's message to the class, above the page, while it is set."""
    message = server_bundle.class_messages().get()
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
