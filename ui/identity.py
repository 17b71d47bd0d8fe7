"""This learner, the same across reloads, tabs and reconnects: from the instructor's sign-in (OpenID Connect via
`st.login`) when `.streamlit/secrets.toml` configures one, else from a private token the browser keeps in a
cookie (or a bookmarked link carries in `?learner=`)."""

from __future__ import annotations

import json
from pathlib import Path

import streamlit as st
from streamlit.auth_util import is_authlib_installed, validate_auth_credentials
from streamlit.errors import StreamlitAuthError, StreamlitSecretNotFoundError

from server.identity import Learner, LearnerStore
from server.instructor import PASS_HOURS
from trainer.errors import ConfigError
from ui import server_bundle

COOKIE = "amp_lab_learner"
LINK_PARAM = "learner"
COOKIE_MAX_AGE_S = 180 * 24 * 3600  # a course's length: a learner comes back next week as themselves
LEARNER_KEY = "amp_lab_learner"
SUBJECT_KEY = "amp_lab_subject"  # whose sign-in the cached learner is
AUTH_REQUIREMENTS = "requirements-auth.txt"
INSTRUCTOR_KEY = "amp_lab_instructor"  # set in this browser session by a right instructor password
INSTRUCTOR_COOKIE = "amp_lab_instructor"  # the instructor's signed pass (server/instructor.InstructorPass)
PASS_KEY = "amp_lab_instructor_pass"  # the pass to write into the cookie; "" to clear it


def sign_in_configured() -> bool:
    """True when the instructor set up an identity provider ([auth] in .streamlit/secrets.toml)."""
    # Reading st.secrets with no secrets file makes Streamlit poll the disk for one several times a second, for
    # good: look for the files first.
    if not any(Path(name).expanduser().exists() for name in st.get_option("secrets.files")):
        return False
    try:
        return "auth" in st.secrets
    except (FileNotFoundError, StreamlitSecretNotFoundError):
        return False


def sign_in_problem() -> str | None:
    """Why `st.login` cannot work on this server, in one line (a package missing, the [auth] block incomplete);
    None when it can."""
    try:
        # What Streamlit's /auth/login route imports: Authlib and its HTTP client (which Authlib does not pull in).
        import authlib.integrations.starlette_client  # noqa: F401
    except ImportError as err:
        return f"the sign-in packages are not installed ({err}): install {AUTH_REQUIREMENTS} into .venv and restart"
    if not is_authlib_installed():
        return f"Authlib is older than Streamlit needs: install {AUTH_REQUIREMENTS} into .venv and restart"
    try:
        validate_auth_credentials("default")
    except StreamlitAuthError as err:
        return " ".join(str(err).split())
    return None


def learner() -> Learner:
    """Who uses this page: the same learner after a reload, in a second tab, or back the next day."""
    return current_learner(server_bundle.learners())


def learner_id() -> str:
    """The public id of this learner: their jobs belong to it, and only they may cancel them."""
    return learner().id


def is_instructor() -> bool:
    """Signed in with the instructor's password in this browser (this session, or a pass in its cookie that has not
    expired: a reload keeps the console), or signed in with an allowed email."""
    if st.session_state.get(INSTRUCTOR_KEY):
        return True
    if server_bundle.password_gate().enabled and server_bundle.instructor_pass().holds(
            st.context.cookies.get(INSTRUCTOR_COOKIE)) and st.session_state.get(PASS_KEY) != "":
        st.session_state[INSTRUCTOR_KEY] = True
        return True
    email = signed_in_email()
    return email is not None and email.lower() in server_bundle.settings().instructor_email_set


def sign_in_as_instructor() -> None:
    """The password was right: this session is the instructor's, and the browser keeps a signed pass for a reload."""
    st.session_state[INSTRUCTOR_KEY] = True
    st.session_state[PASS_KEY] = server_bundle.instructor_pass().issue()


def sign_out_as_instructor() -> None:
    st.session_state[INSTRUCTOR_KEY] = False
    st.session_state[PASS_KEY] = ""  # the cookie is cleared on the next run


def current_learner(store: LearnerStore) -> Learner:
    """Who is using this page; the first visit of a browser creates a learner with a generated name."""
    if sign_in_configured():
        return _signed_in(store)
    learner = st.session_state.get(LEARNER_KEY)
    if learner is not None:
        return learner
    token = st.query_params.get(LINK_PARAM) or st.context.cookies.get(COOKIE)
    learner = store.by_token(token)
    if learner is None:
        learner, token = store.create()
    st.session_state[LEARNER_KEY] = learner
    st.session_state[f"{LEARNER_KEY}_token"] = token
    return learner


def signed_in_email() -> str | None:
    """The signed-in user's email when sign-in is configured and they are signed in, else None."""
    if not sign_in_configured() or not st.user.is_logged_in:
        return None
    # A provider that says the address is unverified may let anyone claim it: never match it to the instructor's.
    if str(st.user.get("email_verified", True)).lower() == "false":
        return None
    return st.user.get("email")


def signed_in_with_provider() -> bool:
    """True when this learner came through the identity provider (their name and identity are the provider's)."""
    return bool(st.session_state.get(SUBJECT_KEY))


def private_link_token() -> str | None:
    """This browser's own token, for the learner's bookmark link (shown to them only)."""
    return st.session_state.get(f"{LEARNER_KEY}_token")


def rename(store: LearnerStore, learner: Learner, name: str) -> Learner | None:
    """Change this learner's display name; a bad name is one error line and None."""
    if signed_in_with_provider():
        st.error("Your name comes from your sign-in; change it with your identity provider.")
        return None
    try:
        renamed = store.rename(learner.id, name)
    except ConfigError as err:
        st.error(str(err))
        return None
    st.session_state[LEARNER_KEY] = renamed
    return renamed


def _signed_in(store: LearnerStore) -> Learner:
    if not st.user.is_logged_in:
        st.title("AMP Lab")
        problem = sign_in_problem()
        if problem:
            st.error(f"Sign-in is set up on this server but cannot start: {problem.rstrip('.')}.")
        else:
            st.info("This class's server asks you to sign in, so that your jobs and results stay yours.")
            st.button("Sign in", on_click=st.login, type="primary")
        st.stop()
    subject = f"{st.user.get('iss', '')}|{st.user.get('sub') or st.user.get('email')}"
    learner = st.session_state.get(LEARNER_KEY)
    if learner is not None and st.session_state.get(SUBJECT_KEY) == subject:
        return learner  # every rerun and fragment tick asks: one write to the history file per session is enough
    learner = store.signed_in(subject, st.user.get("name") or st.user.get("email") or "", st.user.get("email"))
    st.session_state[LEARNER_KEY], st.session_state[SUBJECT_KEY] = learner, subject
    return learner


def keep_in_browser() -> None:
    """Store this learner's token in the browser's cookie (also when it came from a link, so that later visits need
    no link), and the instructor's pass after a sign-in (or clear it after a sign-out). Called on every full run of
    the app, in the same place, drawing one element each time: an element drawn on some runs only would shift every
    element after it, and Streamlit then draws the page's widgets anew (an open list closes under the learner's
    click)."""
    # Streamlit has no API to set a cookie; a line of JavaScript does it, for this site's path only.
    cookies = []
    token = private_link_token()
    if token is not None:  # None: a signed-in learner, whose sign-in Streamlit's own cookie carries
        cookies.append(f"{COOKIE}={token}; path=/; max-age={COOKIE_MAX_AGE_S}; SameSite=Strict")
    instructor_pass = st.session_state.get(PASS_KEY)
    if instructor_pass is not None:
        age = int(PASS_HOURS * 3600) if instructor_pass else 0  # 0: the browser forgets it now
        cookies.append(f"{INSTRUCTOR_COOKIE}={instructor_pass}; path=/; max-age={age}; SameSite=Strict")
    script = "".join(f"document.cookie = {json.dumps(cookie)};" for cookie in cookies)
    st.html(f"<script>{script}</script>", unsafe_allow_javascript=True)
