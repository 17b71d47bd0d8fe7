"""End-to-end tests in a real browser: a learner's clicks and key presses against the real app server."""

import re
import time
from urllib.parse import urlparse

import pytest
from playwright.sync_api import expect

# (title in the navigation, url path, words the page's h1 heading contains); the default page is served at "/".
PAGES = [
    ("Overview", "overview", "AMP Lab"),
    ("The fp32 baseline", "baseline", "fp32 baseline"),
    ("Adding AMP", "adding-amp", "Adding AMP"),
    ("Number formats", "number-formats", "Number formats"),
    ("Underflow in fp16", "underflow", "Underflow"),
    ("The scaler at work", "loss-scaling", "scaler at work"),
    ("Where the memory goes", "memory", "memory goes"),
    ("Autocast layer by layer", "autocast", "Autocast"),
    ("Run the experiment", "run", "Run the experiment"),
    ("AMP without its safeguards", "safeguards", "without its safeguards"),
    ("When AMP pays off", "when-amp-pays", "AMP pays off"),
    ("Results", "results", "Results"),
    ("History", "history", "History"),
    ("The AMP recipe", "recipe", "recipe"),
]
DEFAULT_PAGE = "overview"
SYNTHETIC_RUN_TIMEOUT_MS = 240_000  # a tiny comparison: two fresh processes on 2 cores, plus queueing
TINY_RUN_LABEL = "1 epoch, batch 64, 256 synthetic images, resident loader"  # in the job's label
DONE = re.compile(r"^Done in ")  # the run page's message for a finished job
FAILED = re.compile(r"^This job failed")


def wait_until_idle(page) -> None:
    """Wait until the current script run has finished (Streamlit marks its state on the app root)."""
    page.locator('[data-testid="stApp"][data-test-script-state="notRunning"]').wait_for()


def assert_no_exception(page) -> None:
    errors = page.locator('[data-testid="stException"]')
    assert errors.count() == 0, f"Streamlit exception on {page.url}: {errors.first.inner_text()[:500]}"


def click_nav(page, title: str, url_path: str) -> None:
    view_more = page.locator('[data-testid="stSidebarNavViewButton"]', has_text="more")
    if view_more.count():
        view_more.click()
    page.locator('[data-testid="stSidebarNav"]').get_by_role("link", name=title, exact=True).click()
    expected = "" if url_path == DEFAULT_PAGE else f"/{url_path}"
    page.wait_for_url(lambda url: urlparse(url).path.rstrip("/") in (expected, f"/{url_path}"))


def heading(page, words: str):
    """The page's title: st.title renders an h1."""
    return page.get_by_role("heading", level=1, name=re.compile(re.escape(words), re.IGNORECASE)).first


def open_page(page, app_url: str, title: str, url_path: str, words: str) -> None:
    """Open the app at its start page, then go to a page by clicking its link in the sidebar navigation."""
    page.goto(app_url)
    wait_until_idle(page)
    assert_no_exception(page)
    if url_path == DEFAULT_PAGE:
        click_nav(page, "History", "history")  # leave the start page, so that clicking Overview navigates
    click_nav(page, title, url_path)
    # Either the heading or an exception block: a broken page fails at once instead of after a timeout.
    heading(page, words).or_(page.locator('[data-testid="stException"]')).first.wait_for()
    wait_until_idle(page)


def slider(page, label: str):
    return page.locator('[data-testid="stSlider"]').filter(has=page.get_by_label(label, exact=True)).first


def slider_value(page, label: str) -> str:
    return slider(page, label).locator('[data-testid="stSliderThumbValue"]').inner_text().strip()


def press_on_slider(page, label: str, key: str) -> None:
    """Focus the slider's thumb and press a key on it, as a keyboard user does; wait for the rerun."""
    thumb = slider(page, label).locator('input[type="range"]')
    thumb.focus()
    thumb.press(key)
    wait_until_idle(page)


def open_experiment(page, app_url: str) -> None:
    open_page(page, app_url, "Run the experiment", "run", "Run the experiment")
    assert_no_exception(page)


def choose_tiny_comparison(page) -> None:
    """1 epoch, batch 64, the smallest training subset, the resident loader (no DataLoader worker processes to
    start); the data source is synthetic, the only one offered with an empty data root."""
    page.get_by_role("radiogroup", name="Loader").get_by_text("resident", exact=False).click()
    wait_until_idle(page)
    press_on_slider(page, "Epochs", "Home")
    press_on_slider(page, "Training images", "Home")
    press_on_slider(page, "Batch size", "Home")
    press_on_slider(page, "Batch size", "ArrowRight")
    assert slider_value(page, "Epochs") == "1"
    assert slider_value(page, "Training images") == "256"
    assert slider_value(page, "Batch size") == "64"


def progress_values(page) -> list[int]:
    bars = page.locator('[data-testid="stProgress"] [role="progressbar"]')
    return [int(bars.nth(i).get_attribute("aria-valuenow") or 0) for i in range(bars.count())]


def wait_for_done(page) -> None:
    done = page.get_by_text(DONE)
    failed = page.get_by_text(FAILED)
    done.or_(failed).first.wait_for(timeout=SYNTHETIC_RUN_TIMEOUT_MS)
    assert not failed.count(), failed.first.inner_text()
    assert_no_exception(page)


def expect_table_to_show(page, *texts: str) -> None:
    """A table on the page (st.table, or st.dataframe, whose cell text sits in a hidden accessible table
    filled a moment after its canvas appears) holds every one of these texts."""
    tables = page.locator('[data-testid="stTable"], [data-testid="stDataFrame"]')
    matching = tables
    for text in texts:
        matching = matching.filter(has_text=text)
    expect(matching.first).to_be_attached()


def assert_charts_rendered(page, at_least: int) -> None:
    """Altair charts drawn by Vega: each chart element holds a canvas or an svg."""
    charts = page.locator('[data-testid="stVegaLiteChart"]')
    charts.nth(at_least - 1).wait_for()
    drawn = page.locator('[data-testid="stVegaLiteChart"]').filter(has=page.locator("canvas, svg"))
    drawn.nth(at_least - 1).wait_for()
    assert drawn.count() >= at_least


@pytest.mark.parametrize(("title", "url_path", "words"), PAGES, ids=[p[1] for p in PAGES])
def test_every_page_opens_from_the_navigation(page, app_url, title, url_path, words):
    open_page(page, app_url, title, url_path, words)
    assert heading(page, words).is_visible()
    assert_no_exception(page)


def test_every_page_url_opened_first_on_a_fresh_server_is_inside_the_apps_navigation(new_page, fresh_server):
    """A bookmark or a shared link opened before anyone has loaded /: each page in its own new browser session."""
    addresses = [("" if path == DEFAULT_PAGE else path, words) for _, path, words in PAGES]
    addresses.insert(0, ("results?job=0123456789abcdef", "Results"))  # a shared link is what a learner sends first
    with fresh_server() as url:
        for path, words in addresses:
            page = new_page(f"_{path.split('?')[0] or DEFAULT_PAGE}")
            page.goto(f"{url}/{path}")
            heading(page, words).or_(page.locator('[data-testid="stException"]')).first.wait_for()
            wait_until_idle(page)
            assert_no_exception(page)
            nav = page.locator('[data-testid="stSidebarNav"]')
            expect(nav.get_by_role("link", name="Run the experiment", exact=True)).to_be_attached()
            assert not nav.get_by_text("run experiment", exact=True).count(), f"/{path}: a sidebar of file names"
            assert not page.get_by_text("Page not found").count(), f"/{path}: a 'Page not found' dialog"
            assert urlparse(page.url).path == f"/{path.split('?')[0]}"


def test_an_unexpected_error_shows_learners_one_line_and_the_server_log_the_traceback(page, fresh_server, tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text('raise RuntimeError("details only for the instructor: /srv/amp-lab/state")\n')
    with fresh_server(script=broken) as url:
        page.goto(url)
        shown = page.locator('[data-testid="stException"]')
        shown.wait_for()
        text = shown.inner_text()
        assert "This app has encountered an error" in text
        assert "instructor" not in text and "RuntimeError" not in text and "broken.py" not in text
    log = (tmp_path / "streamlit.log").read_text()
    assert "Uncaught app execution\nTraceback (most recent call last):" in log
    assert "RuntimeError: details only for the instructor: /srv/amp-lab/state" in log


def test_experiment_sliders_move_with_the_keyboard(page, app_url):
    open_experiment(page, app_url)
    for label in ("Epochs", "Batch size"):
        before = slider_value(page, label)
        press_on_slider(page, label, "ArrowRight")
        after = slider_value(page, label)
        assert after != before, f"{label}: ArrowRight left the value at {before}"
    assert (slider_value(page, "Epochs"), slider_value(page, "Batch size")) == ("6", "512")
    assert_no_exception(page)


def test_a_tiny_comparison_runs_and_shows_its_results_its_report_and_history(page, app_url, screenshot, browser,
                                                                           tmp_path):
    open_experiment(page, app_url)
    choose_tiny_comparison(page)
    page.get_by_role("button", name="Lock in my guess").click()  # the speedup guess, before the run it is for
    page.get_by_text("Now press Run").wait_for()
    page.get_by_role("button", name="Run", exact=True).click()

    # Sample the two progress bars (fp32, then AMP) until the job is done: the first must fill up.
    seen: list[list[int]] = []
    ended = page.get_by_text(DONE).or_(page.get_by_text(FAILED))
    deadline = time.monotonic() + SYNTHETIC_RUN_TIMEOUT_MS / 1000
    while not ended.count() and time.monotonic() < deadline:
        values = progress_values(page)
        if values and (not seen or values != seen[-1]):
            seen.append(values)
        page.wait_for_timeout(250)
    wait_for_done(page)
    # The bars as drawn with "Done": a tiny run can end between two samples, and the loop stops on "Done".
    if (final := progress_values(page)) and (not seen or final != seen[-1]):
        seen.append(final)
    first_bar = [values[0] for values in seen]
    assert first_bar and min(first_bar) < 100 and first_bar[-1] == 100, f"progress seen: {seen}"
    assert first_bar == sorted(first_bar), f"the fp32 progress bar went backwards: {seen}"
    page.get_by_text(re.compile(r"Your guess: 1\.50x · measured: \d+\.\d\dx")).wait_for()  # revealed, and kept

    click_nav(page, "Results", "results")
    heading(page, "Results").wait_for()
    wait_until_idle(page)
    assert_no_exception(page)
    assert_charts_rendered(page, at_least=5)
    expect_table_to_show(page, "Training time")
    screenshot(page, "_results")

    # The lab report: one file that opens offline and holds the runs, the charts as SVG and the prediction.
    with page.expect_download() as download:
        page.get_by_role("button", name="Your lab report (HTML)").click()
    saved = tmp_path / download.value.suggested_filename
    download.value.save_as(saved)
    assert saved.name.startswith("amp-lab-report-") and saved.suffix == ".html"
    offline = browser.new_context()
    offline.set_offline(True)
    requested = []
    offline.on("request", lambda request: requested.append(request.url))
    report = offline.new_page()
    report.goto(saved.as_uri())
    text = report.locator("body").inner_text()
    assert "AMP Lab report" in text and TINY_RUN_LABEL in text and "The lab's table, from these runs" in text
    assert re.search(r"How many times as fast as fp32 will amp-\w+ train here, with these settings\?\s+1\.50x\s+"
                     r"\d+\.\d\dx", text), text[:2000]
    assert report.locator("svg.marks").count() >= 4  # time, memory, throughput, loss: drawn, not scripted
    assert report.locator("script").count() == 0
    assert requested == [saved.as_uri()]  # nothing but the file itself
    offline.close()

    click_nav(page, "History", "history")
    heading(page, "History").wait_for()
    wait_until_idle(page)
    assert_no_exception(page)
    expect_table_to_show(page, TINY_RUN_LABEL, "done")


def test_two_learners_submitting_at_once_both_get_results(new_page, app_url):
    learners = [new_page("_learner1"), new_page("_learner2")]  # two browser contexts: two Streamlit sessions
    for page in learners:
        open_experiment(page, app_url)
        choose_tiny_comparison(page)
    for page in learners:
        page.get_by_role("button", name="Run", exact=True).click()
    for page in learners:
        wait_for_done(page)
    for page in learners:
        click_nav(page, "Results", "results")
        heading(page, "Results").wait_for()
        wait_until_idle(page)
        assert_no_exception(page)
        # Each learner's own comparison is the one shown first.
        expect(page.get_by_role("combobox", name="Comparison")).to_have_value(re.compile(r" · yours$"))
        assert_charts_rendered(page, at_least=5)
