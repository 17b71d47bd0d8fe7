"""Real sign-in in a real browser: the app server with an [auth] block in its secrets, Streamlit's `st.login`
(Authlib) against a fake OpenID Connect provider on loopback (tests/fake_oidc.py), and two users in two browsers."""

import re
import secrets

import pytest
from playwright.sync_api import expect

from server.history import HistoryStore
from tests.fake_oidc import FakeOIDC, FakeUser

from .test_app_browser import (
    TINY_RUN_LABEL,
    assert_no_exception,
    choose_tiny_comparison,
    click_nav,
    expect_table_to_show,
    heading,
    open_experiment,
    wait_until_idle,
)
from .test_instructor_browser import REFUSAL, jobs_of, navigation, run_tiny, sidebar

ADA = FakeUser(sub="ada-1815", email="Ada@Example.edu", name="Ada Lovelace")
BOB = FakeUser(sub="bob-1999", email="bob@example.edu", name="Bob Builder")
INSTRUCTOR_EMAILS = "ada@example.edu"  # matched without regard to case


@pytest.fixture
def provider():
    with FakeOIDC() as fake:
        yield fake


def auth_secrets(provider: FakeOIDC, path) -> None:
    """The server's .streamlit/secrets.toml as docs/deploy.md shows it, pointing at the fake provider. Streamlit puts
    the port it serves on in place of {port}."""
    path.write_text(
        "[auth]\n"
        'redirect_uri = "http://127.0.0.1:{port}/oauth2callback"\n'
        f'cookie_secret = "{secrets.token_urlsafe(32)}"\n'
        f'client_id = "{provider.client_id}"\n'
        f'client_secret = "{provider.client_secret}"\n'
        f'server_metadata_url = "{provider.metadata_url}"\n'
    )


def you_are(page):
    """The sidebar's "You are <name>" line."""
    return sidebar(page).get_by_text("You are")


def sign_in(page, provider: FakeOIDC, user: FakeUser) -> None:
    """Press the app's Sign in button; the provider signs `user` in at once and sends the browser back."""
    provider.user = user
    page.get_by_role("button", name="Sign in").click()
    expect(you_are(page)).to_contain_text(user.name)
    wait_until_idle(page)
    assert_no_exception(page)


def history(page, url: str, whose: str) -> None:
    page.goto(f"{url}/history")
    wait_until_idle(page)
    if whose != "Mine":
        page.get_by_role("radiogroup", name="Whose").get_by_text(whose, exact=True).click()
        wait_until_idle(page)
    assert_no_exception(page)


def test_signed_in_users_own_their_jobs_and_the_allowed_email_gets_the_console(
    new_page, fresh_server, provider, tmp_path, screenshot
):
    secrets_file = tmp_path / "secrets.toml"
    auth_secrets(provider, secrets_file)
    env = {"STREAMLIT_SECRETS_FILES": str(secrets_file), "AMP_LAB_INSTRUCTOR_EMAILS": INSTRUCTOR_EMAILS}
    with fresh_server(env_extra=env) as url:
        store = HistoryStore(tmp_path / "state" / "history.sqlite3")
        ada, bob = new_page("-ada"), new_page("-bob")
        for page in (ada, bob):  # wide enough for History's last columns (the grid draws only the visible ones)
            page.set_viewport_size({"width": 2200, "height": 1000})

        # Before signing in, even a link to the Run page shows only the Sign in button: no pages, nothing to run.
        ada.goto(f"{url}/run")
        wait_until_idle(ada)
        assert_no_exception(ada)
        expect(ada.get_by_role("button", name="Sign in")).to_be_visible()
        assert not ada.get_by_role("button", name="Run", exact=True).count()
        assert not ada.locator('[data-testid="stSidebarNav"]').count()
        screenshot(ada, "-before-sign-in")

        # Signing in goes through the provider and back; a reload is still the same user (Streamlit's cookie).
        sign_in(ada, provider, ADA)
        expect(you_are(ada)).to_have_text("You are Ada Lovelace · instructor")
        ada.reload()
        wait_until_idle(ada)
        expect(you_are(ada)).to_have_text("You are Ada Lovelace · instructor")
        assert "Instructor console" in navigation(ada)
        click_nav(ada, "Instructor console", "instructor")
        heading(ada, "Instructor console").wait_for()
        assert_no_exception(ada)

        # Her job is hers: she starts it, cancels it with her own link, and History lists it under "Mine".
        open_experiment(ada, url)
        choose_tiny_comparison(ada)
        run_tiny(ada, store, ADA.name)
        (job,) = jobs_of(store, ADA.name)
        ada.goto(f"{url}/run?cancel={job.id}")
        wait_until_idle(ada)
        # Her own link is obeyed, not refused; a tiny job on a pre-started process may have ended already (the
        # cancel itself is tested without that race in tests/ui/test_sidebar.py).
        obeyed = re.compile(rf"^Job {job.id} (.* is (being )?cancelled|has already ended)")
        expect(ada.get_by_text(obeyed)).to_be_visible()
        history(ada, url, "Mine")
        expect(ada.get_by_text("1 job match.")).to_be_visible()
        expect_table_to_show(ada, TINY_RUN_LABEL, "you")

        # Another user in another browser: not the instructor, the job is not theirs and they cannot cancel it.
        bob.goto(url)
        wait_until_idle(bob)
        sign_in(bob, provider, BOB)
        expect(you_are(bob)).to_have_text("You are Bob Builder")
        assert "Instructor console" not in navigation(bob)
        history(bob, url, "Mine")
        expect(bob.get_by_text("0 jobs match.")).to_be_visible()
        history(bob, url, "Whole class")
        expect(bob.get_by_text("1 job match.")).to_be_visible()
        expect_table_to_show(bob, TINY_RUN_LABEL, ADA.name)
        screenshot(bob, "-whole-class")
        bob.goto(f"{url}/run?cancel={job.id}")
        wait_until_idle(bob)
        expect(bob.get_by_text(REFUSAL)).to_have_text(f"Job {job.id} {REFUSAL}")

        # Signing out ends Bob's session in this browser: the Sign in button again, no pages.
        sidebar_sign_out = bob.locator('[data-testid="stSidebar"]').get_by_role("button", name="Sign out")
        sidebar_sign_out.click()
        wait_until_idle(bob)
        expect(bob.get_by_role("button", name="Sign in")).to_be_visible()
        assert not bob.locator('[data-testid="stSidebarNav"]').count()

    # Both sign-ins were real code exchanges: the client's secret and a PKCE verifier each time.
    assert provider.token_requests == [{"auth": "client_secret_basic", "pkce": True}] * 2
