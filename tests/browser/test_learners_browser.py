"""Learners in a real browser: the same learner after a reload and in a second tab, another learner apart."""

from playwright.sync_api import expect

from .test_app_browser import (
    DONE,
    TINY_RUN_LABEL,
    assert_no_exception,
    choose_tiny_comparison,
    open_experiment,
    progress_values,
    slider_value,
    wait_for_done,
    wait_until_idle,
)


def who(page) -> str:
    """The sidebar's "You are <name>" line."""
    return page.locator('[data-testid="stSidebar"]').get_by_text("You are").first.inner_text()


def open_run_page_directly(page, url: str) -> None:
    page.goto(f"{url}/run")
    wait_until_idle(page)
    assert_no_exception(page)


def test_a_reload_and_a_second_tab_are_the_same_learner_with_the_same_job(new_page, fresh_server):
    with fresh_server(env_extra={"AMP_LAB_MAX_QUEUED_PER_LEARNER": "1"}) as url:
        page = new_page("-first-tab")
        open_experiment(page, url)
        me = who(page)
        choose_tiny_comparison(page)
        page.get_by_role("button", name="Lock in my guess").click()  # the default guess, 1.50x
        expect(page.get_by_text("Your guess: 1.50x")).to_be_visible()
        page.get_by_role("button", name="Run", exact=True).click()
        page.locator('[data-testid="stProgress"]').first.wait_for()

        page.reload()  # mid-run, or just after: either way the job is still this learner's
        wait_until_idle(page)
        assert who(page) == me
        expect(page.get_by_text(TINY_RUN_LABEL, exact=False).first).to_be_visible()
        page.locator('[data-testid="stProgress"]').first.wait_for()  # the job's panel, drawn by its fragment
        assert progress_values(page), "no progress shown for the job after the reload"
        # The Run page starts from the job's settings, not the lab's 75-minute ones, and the guess stays locked.
        assert (slider_value(page, "Epochs"), slider_value(page, "Training images")) == ("1", "256")
        assert slider_value(page, "Batch size") == "64"
        expect(page.get_by_text("Your guess: 1.50x")).to_be_visible()
        assert not page.get_by_text("ahead of yours").count()  # the learner's own job is never counted

        second_tab = page.context.new_page()
        open_run_page_directly(second_tab, url)
        assert who(second_tab) == me
        expect(second_tab.get_by_text(TINY_RUN_LABEL, exact=False).first).to_be_visible()
        if not second_tab.get_by_text(DONE).count():  # still running: the learner's limit of 1 holds across tabs
            second_tab.get_by_role("button", name="Run", exact=True).click()
            expect(second_tab.get_by_text("you already have 1 job waiting or running")).to_be_visible()

        other = new_page("-another-learner")
        open_run_page_directly(other, url)
        assert who(other) != me
        expect(other.get_by_text("Nothing yet")).to_be_visible()
        assert not other.get_by_role("button", name="Cancel").count()
        expect(other.get_by_text("Your guess:")).to_have_count(0)  # a guess is the learner's own

        wait_for_done(page)
        page.goto(f"{url}/results")
        wait_until_idle(page)
        assert_no_exception(page)
        expect(page.get_by_role("heading", name="The lab's table")).to_be_visible()
        assert not page.get_by_text("You have no finished comparison yet").count()
        other.goto(f"{url}/results")
        wait_until_idle(other)
        expect(other.get_by_text("You have no finished comparison yet")).to_be_visible()
