"""The job plumbing pages share: submit a job for this learner, follow it while it waits and runs (one view, one
Cancel button), and list this learner's jobs before the rest of the server's history."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable

import streamlit as st

from lessons.interpret import interpret
from lessons.verdicts import headline
from server.choices import shown
from server.estimate import estimate_job_seconds
from server.history import HistoryError
from server.records import JOB_KINDS, JOB_STATUSES, JobSpec, JobView
from trainer.comparison_table import format_seconds
from trainer.config import TRAINING_PRECISIONS
from trainer.errors import TrainerError
from ui import server_bundle
from ui.charts import loss_chart, run_modes, run_names
from ui.identity import is_instructor, learner_id
from ui.report import lab_report
from ui.widgets import RESULTS_PAGE, about, live_losses, run_progress_text, waiting_line

# A running job's progress changes every second; a waiting job's place in the queue far more slowly.
RUNNING_REFRESH_S = 1.0
QUEUED_REFRESH_S = 5.0


# The History page's filters: every kind, status and precision a job can have.
HISTORY_FILTERS = {"Kind": JOB_KINDS, "Status": JOB_STATUSES, "Precision": TRAINING_PRECISIONS}


def my_jobs() -> list[JobView]:
    """This learner's jobs, oldest first, live or from the history."""
    return server_bundle.job_manager().jobs_for_learner(learner_id())


def active_jobs() -> list[JobView]:
    """This learner's waiting and running jobs, from the job manager's memory (cheap enough for every tick)."""
    return server_bundle.job_manager().active_jobs_for(learner_id())


def estimate(spec: JobSpec) -> float | None:
    """Seconds `spec`'s runs should take on this server, from its own past runs where it has some; None if unknown."""
    manager = server_bundle.job_manager()
    return estimate_job_seconds(spec, manager.store, manager.device_type)


def latest_comparison(mine: list[JobView]) -> JobView | None:
    """This learner's comparison that waits or runs, else their latest one (the Run page starts from its settings
    after a reload); None before any."""
    comparisons = [job for job in mine if job.spec.purpose == "comparison" and len(job.spec.runs) >= 2]
    active = [job for job in comparisons if not job.finished]
    return (active or comparisons or [None])[-1]


def recently_ended(mine: list[JobView], within_s: float = 900.0) -> list[JobView]:
    """This learner's jobs that ended in the last `within_s` seconds, newest first: a cancelled job stays on the Run
    page with its reason rather than vanishing."""
    now = time.time()
    ended = [job for job in mine if job.finished and job.finished_at and now - job.finished_at <= within_s]
    return sorted(ended, key=lambda job: job.finished_at, reverse=True)


def comparison_since(mine: list[JobView], since: float | None) -> JobView | None:
    """This learner's first comparison submitted after `since` (when a guess was locked) that has finished with a
    pair: the run the guess was made for. None before then."""
    if since is None:
        return None
    for job in mine:  # oldest first
        if job.spec.purpose == "comparison" and job.created_at >= since and job.status == "done":
            if headline(job.results) is not None:
                return job
    return None


def speedup_since(mine: list[JobView], since: float | None) -> float | None:
    """The speedup (over repeated pairs their median, as on Results) of comparison_since's job; None before it."""
    job = comparison_since(mine, since)
    return None if job is None else headline(job.results).speedup


def why_this_speedup(job: JobView | None) -> str | None:
    """The sentence Results explains a comparison with (lessons/interpret.py), for a guess's reveal."""
    if job is None:
        return None
    found = headline(job.results)
    return interpret(found.baseline, found.candidate, found.interval, runs=list(found.runs))


def refusal(spec: JobSpec) -> str | None:
    """Why this learner may not queue `spec` now: a kind of job the instructor turned off, or its per-learner cap
    used up (server/kinds.py); None when they may."""
    offer = server_bundle.offer()
    used = server_bundle.history().count_jobs(learner_id(), spec.purpose, offer.kinds.since)
    return offer.kind_refusal(spec.purpose, used)


def queue_button(label: str, spec: JobSpec, remember_as: str | None = None, *, primary: bool = False) -> str | None:
    """A button that queues `spec` for this learner, with how long it should take on this server once it starts,
    or, disabled, the one line that says why this learner may not queue it now. The new job's id when pressed."""
    refused = refusal(spec)
    if refused:
        st.caption(refused[:1].upper() + refused[1:] + ".")
    else:
        seconds = estimate(spec)
        st.caption("How long it takes here is not known yet: nothing like it has run on this server." if seconds is None
                   else f"On this server it should take {about(seconds)} once it starts.")
    if st.button(label, type="primary" if primary else "secondary", disabled=bool(refused)):
        return submit(spec, remember_as)
    return None


def submit(spec: JobSpec, remember_as: str | None = None) -> str | None:
    """Queue `spec` for this learner; a refusal is one error line and None. `remember_as` keeps the job's id in
    the session state under that key, for the page that follows it."""
    try:
        job_id = server_bundle.job_manager().submit(learner_id(), spec)
    except TrainerError as err:
        st.error(str(err))
        return None
    if remember_as is not None:
        st.session_state[remember_as] = job_id
    return job_id


def queue_or_follow(key: str, label: str, spec: JobSpec | None, *, failed: str | None = None,
                    before: Callable[[], None] | None = None, draw: Callable[[JobView], None] | None = None,
                    keep_button: bool = False, primary: bool = False) -> None:
    """The job this page queued (its id kept under `key`), followed with `draw` while it waits or runs; else, once
    it has ended, why it did not finish (`failed`, then its error), and the button `label` that queues `spec` (none
    while there is no spec), `before` drawn above it. With `keep_button` the button stays while the job waits or
    runs, above it (another may be queued, within the class's caps)."""
    job_id = st.session_state.get(key)
    job = server_bundle.job_manager().get(job_id) if job_id else None
    following = job is not None and not job.finished
    if job is not None and not following:
        if failed and job.status != "done":
            st.error(f"{failed}: {job.error}")
        del st.session_state[key]
    if spec is not None and (keep_button or not following):
        if before is not None:
            before()
        if queue_button(label, spec, key, primary=primary):
            st.rerun()  # the page again, following the new job (and the sidebar, drawn before it, listing it)
    if following:
        follow(job.id, draw)


def is_mine(job: JobView) -> bool:
    return job.learner_id == learner_id()


def whole_class(key: str) -> bool:
    """A "Mine / Whole class" choice, "Mine" first; True when the learner asks for the whole class."""
    return st.radio("Whose", ("Mine", "Whole class"), horizontal=True, key=key) == "Whole class"


def owner_names() -> dict[str, str]:
    """Display names by learner id, for the owner of a job."""
    return server_bundle.learners().names()


def mine_then_class(
    kind: str | None = None, status: str | None = None, precision: str | None = None, limit: int = 50
) -> list[JobView]:
    """This learner's jobs (newest first), then the rest of the server's history (newest first), each job once."""

    def wanted(job: JobView) -> bool:
        return ((kind is None or job.kind == kind) and (status is None or job.status == status)
                and (precision is None or precision in job.spec.precisions))

    mine = [job for job in reversed(my_jobs()) if wanted(job)]
    shared = server_bundle.history().list_jobs(kind=kind, status=status, precision=precision, limit=limit)
    by_id: dict[str, JobView] = {}
    for job in mine + shared:
        by_id.setdefault(job.id, job)
    return list(by_id.values())


def latest_done_with(precision: str) -> JobView | None:
    """The newest finished job with a run in `precision` (a deliberate failure's lesson): this learner's, else the
    class's; None before any."""
    found = mine_then_class(kind="compare", status="done", precision=precision, limit=10)
    return found[0] if found else None


def report_builder(learner: str, name: str) -> Callable[[], str]:
    """What builds the lab report (ui/report.py) of the learner with id `learner` and display name `name`, from every
    job of theirs and every prediction they locked as this server holds them when it is called. The stores are
    found now, in the page's run: Streamlit calls a download button's builder outside it."""
    manager, guesses = server_bundle.job_manager(), server_bundle.guesses()
    server = f"{socket.gethostname()} ({manager.device_type.upper()})"
    return lambda: lab_report(name, manager.jobs_for_learner(learner), guesses.of(learner), server=server)


def report_file_name(name: str) -> str:
    """`amp-lab-report-curious-otter-42-20261202.html`: the learner's name, safe in any file system, and the day."""
    safe = re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower() or "learner"
    return f"amp-lab-report-{safe}-{time.strftime('%Y%m%d')}.html"


def report_button(learner: str, name: str, label: str, key: str) -> None:
    """A download button for that learner's report, built when it is clicked (not on every run of the page)."""
    st.download_button(label, data=report_builder(learner, name), file_name=report_file_name(name),
                       mime="text/html", key=key, on_click="ignore")


def finished_comparison(job_id: str) -> tuple[JobView | None, str | None]:
    """The finished comparison `job_id` (any learner's: a shared link), or None and why it cannot be shown."""
    try:
        found = server_bundle.history().get_job(job_id)
    except HistoryError:  # a damaged row (the store logs it): one line, as the other pages skip such rows
        return None, f"The comparison {shown(job_id)} is damaged in this server's history"
    if found is None or found.kind != "compare" or found.status != "done":
        return None, f"There is no finished comparison with the id {shown(job_id)} on this server"
    return found, None


def progress_line(job: JobView) -> tuple[float, str]:
    """A running job's progress bar: the share of its runs done, and which run it is on, named as the job panel
    names it ("run 3 of 6 (FP32, pair 2 of 3, batch 256): epoch 1/1 ...")."""
    total = len(job.spec.runs)
    fraction, text = run_progress_text(job, job.current_run)
    if total == 1:
        return min(1.0, fraction), text
    name, config = run_names(job.spec)[job.current_run], job.spec.runs[job.current_run]
    where = f"run {job.current_run + 1} of {total} ({name}, batch {config.batch_size})"
    return min(1.0, (len(job.outcomes) + fraction) / total), f"{where}: {text}"


def follow(job_id: str, draw: Callable[[JobView], None] | None = None) -> None:
    """The one way to follow a job: drawn by `draw` (by default its place in the queue or its progress, with the
    Cancel button), again every second while it runs and every few while it waits; the whole page is drawn again
    once the job starts or ends, so that it can show the result. A job that has ended is drawn once."""
    draw = draw or progress
    job = server_bundle.job_manager().get(job_id)
    if job is not None and job.finished:
        draw(job)
        return
    refresh_s = RUNNING_REFRESH_S if job is not None and job.status == "running" else QUEUED_REFRESH_S
    st.fragment(_follow, run_every=refresh_s)(job_id, job and job.status, draw)


def _follow(job_id: str, status: str | None, draw: Callable[[JobView], None]) -> None:
    job = server_bundle.job_manager().get(job_id)
    if job is None:
        st.warning("That job is no longer known to the server.")
    elif job.status != status:
        st.rerun()
    else:
        draw(job)


def progress(job: JobView) -> None:
    """A job's place in the queue, or its progress bar (and the largest-batch search after a sweep's runs); the
    Cancel button."""
    if job.status == "queued":
        st.info(waiting(job))
    else:
        st.progress(*progress_line(job))
        if len(job.outcomes) == len(job.spec.runs) and job.spec.probe_max_batch:
            st.caption("Searching the largest batch that fits in GPU memory...")
    cancel_button(job)


def job_panel(job: JobView) -> None:
    """A job of this learner as the Run page shows it: its place in the queue, or a progress bar and the live loss
    of each run, or its end; the Cancel button while it waits or runs."""
    st.markdown(f"**{job.label or job.kind}**")
    if job.extras.get("notice") and not job.finished:
        st.info(job.extras["notice"])
    if job.status == "queued":
        st.info(waiting(job) + " Each device (each GPU, or the CPU) trains one job at a time, so that other "
                "learners' runs do not compete with yours for it; each result still says if anything else disturbed "
                "its timing.")
    for index, name in enumerate(run_names(job.spec)):
        fraction, text = run_progress_text(job, index)
        st.progress(min(1.0, max(0.0, fraction)), text=f"{name}: {text}")
    live = live_losses(job)
    if live and not job.finished:
        last_step = job.progress.total_steps if job.progress else None
        st.altair_chart(loss_chart(live, last_step=last_step, precisions=run_modes(job.spec)), width="stretch")
    if job.status == "done":
        st.success(f"Done in {format_seconds((job.finished_at or 0) - (job.started_at or 0))}.")
        st.page_link(RESULTS_PAGE, label="See the results", icon="📊")
    elif job.status == "failed":
        st.error(f"This job failed: {job.error}")
    elif job.status == "cancelled":
        st.warning(f"This job was cancelled: {job.error}")
    cancel_button(job)


def waiting(job: JobView) -> str:
    manager = server_bundle.job_manager()
    return waiting_line(job.queue_position, job.estimated_wait_s, len(manager.slots), manager.paused)


def cancel_button(job: JobView) -> None:
    """The one Cancel button, for the owner of a job that waits or runs; "Cancelling..." once they pressed it."""
    if job.finished or not is_mine(job):
        return
    if job.cancel_requested:
        st.caption("Cancelling...")
    elif st.button("Cancel", key=f"cancel-{job.id}"):
        if cancel(job):
            st.toast("Cancelling the job.")
        else:
            st.warning("This job had already finished.")


def cancel(job: JobView) -> bool:
    """Cancel `job`: this learner's own, or any as the instructor; False if it had already ended, or is not theirs
    to cancel."""
    manager = server_bundle.job_manager()
    if is_mine(job):
        return manager.cancel(job.id, learner_id())
    return is_instructor() and manager.cancel_any(job.id)
