"""The Overview starts the quick demo in one click and the learner reads on: the sidebar of every page follows
their job while it waits or runs, and links to its results once it ends."""

import pytest
from streamlit.testing.v1 import AppTest

from server.records import JobSpec
from tests.app_testing import app, navigation_as_served, open_page, state_dir, texts  # noqa: F401 (fixtures)
from tests.server.test_history import make_job


def manager():
    from ui import server_bundle

    return server_bundle._job_manager_for(server_bundle._settings_environment())


def sidebar_job(at: AppTest) -> tuple[list[str], list[str]]:
    """The sidebar's lines about this learner's jobs (progress texts and captions after the learner's name) and the
    labels of its links."""
    lines = [bar.proto.text for bar in at.sidebar.get("progress")]
    lines += [c for c in texts(at.sidebar.caption) if c.startswith("**Your job**")]
    return lines, [link.label for link in at.sidebar.get("page_link")]


@pytest.mark.slow
def test_the_quick_demo_starts_from_the_overview_and_the_sidebar_follows_it_on_every_page(app):
    manager().pause()  # the demo waits in the queue, as behind other learners' jobs
    open_page(app, "overview")
    assert sidebar_job(app) == ([], [])  # no job, no line
    next(b for b in app.button if b.label == "Run the quick demo").click().run()
    assert not app.exception
    assert app.title[0].value.startswith("AMP Lab")  # the learner stays to read on
    assert any(s.startswith("Your quick demo is queued. Read on") for s in texts(app.success))
    for page in ("overview", "memory"):
        open_page(app, page)
        lines, links = sidebar_job(app)
        (line,) = lines
        assert line.startswith("**Your job**, quick demo: fp32 vs amp-") and line.endswith(
            ": Waiting in the queue at position 1: the instructor has paused the queue; it starts once they resume "
            "it.")
        assert links == ["Follow it on the Run page"]

    open_page(app, "run_experiment")
    assert any(m.startswith("**quick demo: fp32 vs") for m in texts(app.markdown))
    next(b for b in app.button if b.label == "Cancel").click().run()
    app.run()  # a queued job is cancelled at once: the page's next run shows it with its reason
    assert any(w.startswith("This job was cancelled") for w in texts(app.warning))
    open_page(app, "number_formats")  # the sidebar says it ended, and where to read why
    (line,), links = sidebar_job(app)
    assert line.startswith("**Your job**, quick demo: fp32 vs amp-") and line.endswith(", was cancelled.")
    assert links == ["See why on the Run page"]

    open_page(app, "history")
    jobs = app.dataframe[0].value
    assert jobs["Status"].tolist() == ["cancelled"]
    assert jobs["Reason"].tolist()[0].startswith("cancelled by its owner")


@pytest.mark.slow
def test_a_finished_job_in_the_sidebar_links_to_its_results(app):
    from ui import sidebar

    job = make_job("0123456789abcdef0123456789abcdef", label="quick demo: fp32 vs amp-bf16",
                   learner_id=app.session_state["amp_lab_learner"].id)
    job.spec = JobSpec("compare", job.spec.runs, job.label, purpose="quick-demo")
    manager().store.save_job(job)
    app.session_state[sidebar.FOLLOWED_KEY] = [job.id]  # as if the sidebar had shown it waiting
    open_page(app, "overview")
    assert sidebar_job(app) == (["**Your job**, quick demo: fp32 vs amp-bf16, finished."], ["See the results"])
    (link,) = app.sidebar.get("page_link")
    assert link.proto.page == "results" and link.proto.query_string == f"job={job.id}"


def test_a_running_job_says_which_run_it_is_on_and_fills_its_bar_by_runs():
    from ui.sidebar import job_line

    job = make_job("0123456789abcdef0123456789abcdef", status="running", label="quick demo: fp32 vs amp-bf16, 1 epoch")
    fraction, line = job_line(job, workers=1, paused=False)
    assert fraction == 0.5  # the first of two runs is over; the second has not logged a step
    assert line.startswith("**Your job**, quick demo: fp32 vs amp-bf16: running ") and "(run 2 of 2)" in line
