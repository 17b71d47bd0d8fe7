"""Who the learner is when sign-in is configured: an [auth] block in a real secrets file, the signed-in user as
AppTest's `st.user`, and the one line the sign-in page shows when st.login cannot work on this server."""

import sys

import pytest
from streamlit import config
from streamlit.runtime.secrets import secrets_singleton
from streamlit.testing.v1 import AppTest

from server.history import HistoryStore
from server.identity import LearnerStore
from ui import identity

AUTH = {
    "redirect_uri": "http://127.0.0.1:8501/oauth2callback",
    "cookie_secret": "a-long-random-string-for-tests",
    "client_id": "amp-lab",
    "client_secret": "not-a-secret",
    "server_metadata_url": "http://127.0.0.1:9/.well-known/openid-configuration",
}
ADA = {"is_logged_in": True, "iss": "http://idp", "sub": "ada-1815", "name": "Ada Lovelace", "email": "ada@x.org"}


def write_secrets(path, auth: dict) -> None:
    path.write_text("[auth]\n" + "".join(f'{key} = "{value}"\n' for key, value in auth.items()))


@pytest.fixture
def secrets_file(tmp_path):
    """The server's secrets file, here with a complete [auth] block (a test may rewrite it before first use)."""
    path = tmp_path / "secrets.toml"
    write_secrets(path, AUTH)
    before = config.get_option("secrets.files")
    config.set_option("secrets.files", [str(path)])
    secrets_singleton._reset()
    yield path
    config.set_option("secrets.files", before)
    secrets_singleton._reset()


class CountingStore(LearnerStore):
    """The real learner store, counting the sign-ins it records (each one a write to the history file)."""

    def __init__(self, history):
        super().__init__(history)
        self.sign_ins = 0

    def signed_in(self, subject, display_name, sign_in=None):
        self.sign_ins += 1
        return super().signed_in(subject, display_name, sign_in)


def who_script(store, new_name=None):
    import streamlit as st

    from ui import identity

    me = identity.current_learner(store)
    if new_name:
        me = identity.rename(store, me, new_name) or me
    st.write(f"{me.id} {me.display_name}")
    st.write(f"email {identity.signed_in_email()}")


def run_as(store, user: dict, **kwargs) -> AppTest:
    at = AppTest.from_function(who_script, args=(store,), kwargs=kwargs, default_timeout=30)
    at.user = user
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


@pytest.fixture
def store(tmp_path):
    return CountingStore(HistoryStore(tmp_path / "history.sqlite3"))


def test_the_signed_in_user_is_the_learner_recorded_once_per_session(secrets_file, store):
    at = run_as(store, ADA)
    me = at.markdown[0].value
    assert me.endswith(" Ada Lovelace") and at.markdown[1].value == "email ada@x.org"
    at.run()  # a rerun (or a fragment's tick) asks again: the session's learner, no second write
    assert at.markdown[0].value == me and store.sign_ins == 1
    again = run_as(store, ADA)  # a new session of the same user: the same learner
    assert again.markdown[0].value == me
    other = run_as(store, {**ADA, "sub": "bob-1999", "name": "Bob"})
    assert other.markdown[0].value.split()[0] != me.split()[0]


def test_before_sign_in_there_is_only_the_sign_in_button(secrets_file, store):
    at = run_as(store, {"is_logged_in": False})
    assert [button.label for button in at.button] == ["Sign in"]
    assert not at.markdown and not at.error and store.sign_ins == 0


def test_an_unverified_email_is_never_the_instructors(secrets_file, store):
    assert run_as(store, {**ADA, "email_verified": True}).markdown[1].value == "email ada@x.org"
    for unverified in (False, "false"):  # some providers send the claim as a string
        assert run_as(store, {**ADA, "email_verified": unverified}).markdown[1].value == "email None"


def test_a_signed_in_learners_name_comes_from_the_provider(secrets_file, store):
    at = run_as(store, ADA, new_name="Countess")
    assert at.error[0].value == "Your name comes from your sign-in; change it with your identity provider."
    assert at.markdown[0].value.endswith(" Ada Lovelace")
    assert list(store.names().values()) == ["Ada Lovelace"]


@pytest.mark.parametrize(("gone", "named"), [(("authlib",), "authlib"), (("httpx2", "httpx"), "httpx")])
def test_a_missing_sign_in_package_is_one_line_that_names_it(secrets_file, store, monkeypatch, gone, named):
    for name in [m for m in sys.modules if m.startswith(("authlib.integrations", "httpx"))]:
        monkeypatch.delitem(sys.modules, name)  # so that the import runs again, and finds the package gone
    for name in gone:  # without httpx2, Authlib falls back to the old httpx: the error names that one
        monkeypatch.setitem(sys.modules, name, None)
    problem = identity.sign_in_problem()
    assert problem.startswith("the sign-in packages are not installed (") and named in problem.split(")")[0]
    assert problem.endswith("): install requirements-auth.txt into .venv and restart") and "\n" not in problem
    at = run_as(store, {"is_logged_in": False})
    assert at.error[0].value == f"Sign-in is set up on this server but cannot start: {problem}."
    assert not at.button


def test_an_incomplete_auth_block_is_one_line(secrets_file, store):
    write_secrets(secrets_file, {key: value for key, value in AUTH.items() if key != "client_secret"})
    problem = identity.sign_in_problem()
    assert "client_secret" in problem and "\n" not in problem
    at = run_as(store, {"is_logged_in": False})
    assert at.error[0].value.startswith("Sign-in is set up on this server but cannot start: ")
    assert at.error[0].value.endswith("configuration.") and not at.button


def test_nothing_stands_in_the_way_of_a_complete_block_with_the_stack_installed(secrets_file):
    assert identity.sign_in_problem() is None


def panel_script():
    from ui import sidebar

    sidebar.learner_panel()


@pytest.mark.parametrize("signed_in", [True, False])
def test_the_sidebar_offers_sign_out_to_a_provider_user_and_a_name_box_to_the_others(
    signed_in, secrets_file, tmp_path, monkeypatch
):
    import streamlit as st

    monkeypatch.setenv("AMP_LAB_STATE_DIR", str(tmp_path / "state"))
    if not signed_in:
        secrets_file.write_text("")  # no [auth] block: the name-and-token learner
        secrets_singleton._reset()
    at = AppTest.from_function(panel_script, default_timeout=60)
    at.user = ADA
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    labels = [button.label for button in at.sidebar.button]
    names = [box.label for box in at.sidebar.text_input]
    if signed_in:
        assert labels == ["Sign out"] and names == []
        assert "Ada Lovelace" in at.sidebar.caption[0].value
    else:
        assert "Sign out" not in labels and names == ["Display name"]
    st.cache_resource.clear()
