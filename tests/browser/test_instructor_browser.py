"""The instructor and two learners in three browsers: a learner's cancel link cannot touch another's job; the
instructor signs in, sees the whole queue by display name, cancels a job and downloads the class's CSV."""

import csv
import time

from playwright.sync_api import expect

from server.history import HistoryStore
from server.identity import LearnerStore
from server.records import JobView

from .test_app_browser import (
    DONE,
    SYNTHETIC_RUN_TIMEOUT_MS,
    assert_no_exception,
    choose_tiny_comparison,
    click_nav,
    heading,
    open_experiment,
    wait_until_idle,
)
from .test_learners_browser import who

PASSWORD = "a long classroom secret"
REFUSAL = "is not yours: only its owner or the instructor can cancel it."


def sidebar(page):
    return page.locator('[data-testid="stSidebar"]')


def display_name(page) -> str:
    return who(page).removeprefix("You are").strip()


def sign_in(page, password: str, succeeds: bool = True) -> None:
    """The sidebar's visible "Instructor" entry. A right password is waited for until the sidebar says so: the rerun
    it starts may not have begun when the click returns, and reading the navigation before it found no console now
    and then on a busy machine."""
    password_box = page.get_by_label("Instructor password")
    if not password_box.is_visible():
        sidebar(page).get_by_text("Instructor", exact=True).click()
    password_box.fill(password)
    page.get_by_role("button", name="Open the instructor console").click()
    if succeeds:
        expect(sidebar(page).get_by_text("· instructor")).to_be_visible()
    wait_until_idle(page)


def navigation(page) -> list[str]:
    """Every page title in the sidebar's navigation (after closing the popover and showing the whole list)."""
    page.keyboard.press("Escape")
    view_more = page.locator('[data-testid="stSidebarNavViewButton"]', has_text="more")
    if view_more.count():
        view_more.click()
    links = page.locator('[data-testid="stSidebarNav"]').get_by_role("link")
    links.first.wait_for()
    return [text.strip() for text in links.all_inner_texts()]


def queue_entries(page, name: str):
    """The console's queue rows (text and a Cancel button, side by side) of a learner's jobs."""
    rows = page.locator('[data-testid="stHorizontalBlock"]').filter(has=page.get_by_role("button", name="Cancel"))
    return rows.filter(has_text=f"{name} · ")


def jobs_of(store: HistoryStore, name: str) -> list[JobView]:
    """A learner's jobs, oldest first, as the server recorded them."""
    ids = [i for i, n in LearnerStore(store).names().items() if n == name]
    return [job for job in reversed(store.list_jobs()) if job.learner_id in ids]


def wait_until(check, what: str, timeout_s: float = SYNTHETIC_RUN_TIMEOUT_MS / 1000) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"still waiting after {timeout_s:.0f} s for {what}"
        time.sleep(1)


def run_tiny(page, store: HistoryStore, name: str) -> None:
    """Press Run and wait until the server has queued the job (a second press during the rerun could be lost)."""
    before = len(jobs_of(store, name))
    page.get_by_role("button", name="Run", exact=True).click()
    wait_until(lambda: len(jobs_of(store, name)) > before, f"{name}'s job to be queued", 60)
    wait_until_idle(page)


def test_a_learner_cannot_cancel_anothers_job_and_the_instructor_runs_the_room(
    new_page, fresh_server, tmp_path, screenshot
):
    with fresh_server(env_extra={"AMP_LAB_INSTRUCTOR_PASSWORD": PASSWORD}) as url:
        store = HistoryStore(tmp_path / "state" / "history.sqlite3")
        ada, bob, teacher = new_page("-ada"), new_page("-bob"), new_page("-instructor")

        # The instructor first: a wrong password is one line and no console in the navigation.
        teacher.goto(url)
        wait_until_idle(teacher)
        sign_in(teacher, "not the password", succeeds=False)
        expect(teacher.get_by_text("Wrong password.", exact=True)).to_be_visible()
        assert teacher.get_by_text("Wrong password.", exact=True).count() == 1
        assert "Instructor console" not in navigation(teacher)
        sign_in(teacher, PASSWORD)
        heading(teacher, "Instructor console").wait_for()  # a sign-in lands on the console
        assert "Instructor console" in navigation(teacher)
        wait_until_idle(teacher)
        assert_no_exception(teacher)
        teacher.reload()  # the projector's tab reloaded: the console stays (a signed pass in the cookie)
        wait_until_idle(teacher)
        expect(sidebar(teacher).get_by_text("· instructor")).to_be_visible()
        assert "Instructor console" in navigation(teacher)
        click_nav(teacher, "Instructor console", "instructor")
        heading(teacher, "Instructor console").wait_for()
        teacher.get_by_label("Shown above every learner's page until you clear it").fill("Back in 5 minutes")
        teacher.get_by_role("button", name="Show to the class").click()
        wait_until_idle(teacher)

        for learner in (ada, bob):
            open_experiment(learner, url)
            expect(learner.get_by_text("From the instructor: Back in 5 minutes")).to_be_visible()
            choose_tiny_comparison(learner)
        ada.get_by_role("button", name="Lock in my guess").click()  # a prediction for the roster
        expect(ada.get_by_text("Your guess: 1.50x")).to_be_visible()
        a_name, b_name = display_name(ada), display_name(bob)
        assert a_name != b_name
        run_tiny(ada, store, a_name)
        ada.locator('[data-testid="stProgress"]').first.wait_for()
        run_tiny(bob, store, b_name)
        run_tiny(bob, store, b_name)  # a second comparison waits behind the first: the one the instructor will cancel
        (a_job,) = jobs_of(store, a_name)
        b_first, b_second = jobs_of(store, b_name)

        # The instructor's console shows both learners' jobs by name (while the first one's still runs).
        expect(queue_entries(teacher, a_name)).to_have_count(1)
        expect(queue_entries(teacher, b_name)).to_have_count(2)
        screenshot(teacher, "-queue")

        # The second learner posts the first's job id: refused in one line that tells nothing about the job.
        bob.goto(f"{url}/run?cancel={a_job.id}")
        wait_until_idle(bob)
        assert_no_exception(bob)
        refusal = bob.get_by_text(REFUSAL)
        expect(refusal).to_have_text(f"Job {a_job.id} {REFUSAL}")
        assert a_name not in refusal.inner_text()
        bob.wait_for_url(lambda address: "cancel=" not in address)  # so a reload does not post it again
        assert store.get_job(a_job.id).status in ("queued", "running", "done")
        expect(ada.get_by_text("This job was cancelled")).to_have_count(0)
        screenshot(bob, "-refused")

        # The instructor cancels the second learner's spare job, with a reason the learner reads where it was.
        teacher.get_by_label("Reason for a cancel (its learner reads it where the job was)").fill("one is enough today")
        teacher.keyboard.press("Enter")
        wait_until_idle(teacher)
        queue_entries(teacher, b_name).last.get_by_role("button", name="Cancel").click()
        wait_until(lambda: store.get_job(b_second.id).status == "cancelled", "the instructor's cancel", 60)
        assert store.get_job(b_second.id).error == "cancelled by the instructor (one is enough today) before it started"
        expect(bob.get_by_text("cancelled by the instructor (one is enough today)", exact=False).first).to_be_visible(
            timeout=30_000)

        # Both learners' comparisons finish; the class's CSV holds a row for each.
        ada.get_by_text(DONE).wait_for(timeout=SYNTHETIC_RUN_TIMEOUT_MS)
        wait_until(lambda: store.get_job(b_first.id).status == "done", "the second learner's comparison")
        assert store.get_job(a_job.id).status == "done"
        click_nav(teacher, "History", "history")
        click_nav(teacher, "Instructor console", "instructor")
        wait_until_idle(teacher)
        assert_no_exception(teacher)
        screenshot(teacher, "-class")
        with teacher.expect_download() as download:
            teacher.get_by_role("button", name="The class's results (CSV)").click()
        with open(download.value.path(), newline="") as handle:
            rows = list(csv.DictReader(handle))
        assert sorted(row["learner"] for row in rows) == sorted([a_name, b_name])
        assert {row["job"] for row in rows} == {a_job.id, b_first.id}
        with teacher.expect_download() as download:
            teacher.get_by_role("button", name="The roster (CSV)").click()
        with open(download.value.path(), newline="") as handle:
            roster = {row["learner"]: row for row in csv.DictReader(handle)}
        assert {a_name, b_name} <= set(roster)
        assert roster[a_name]["latest comparison"].startswith("fp32 vs") and roster[a_name]["timing"]
        assert float(roster[a_name]["guess: run-speedup"]) == 1.5 and float(roster[a_name]["speedup (x)"]) > 0
        assert roster[b_name]["comparisons"] == "1"  # the cancelled one does not count
