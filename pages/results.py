"""Results: one finished fp32-vs-AMP comparison (one pair of runs or repeated pairs) as a headline speedup, the
lab's table, charts, an explanation and downloads."""

import streamlit as st

from lessons.verdicts import headline
from ui import exports, jobs
from ui.charts import named_results
from ui.identity import learner
from ui.reference import local_references, reference_panel, this_machine_class
from ui.widgets import RUN_PAGE, comparison_charts, comparison_summary, profile_panel, step_budget_panel, when

st.title("Results")


def report_download() -> None:
    """The learner's lab report: one file to hand in."""
    st.subheader("Your lab report")
    st.caption("One HTML file to hand in: each of your comparisons with the lab's table, its charts and how steady "
               "its timing was, your runs without AMP's safeguards, every job you queued, and each prediction you "
               "locked beside what was measured. It opens offline, in any browser.")
    you = learner()
    jobs.report_button(you.id, you.display_name, "Your lab report (HTML)", key="results-report")


# The safeguards lesson's pairs are deliberate failures, read on their own page, not timed as comparisons here.
mine = [job for job in reversed(jobs.my_jobs()) if job.kind == "compare" and job.spec.purpose != "safeguards"]
mine_done = [job for job in mine if job.status == "done"]
if mine and mine[0].status in ("failed", "cancelled"):
    st.warning(f"Your latest comparison ({mine[0].label}) {mine[0].status}: {mine[0].error}")

# Your comparisons (newest first); the whole class's on request; a shared link's in any case.
class_wide = jobs.whole_class("results_whose")
listed = ([job for job in jobs.mine_then_class(kind="compare", status="done", limit=100)
           if job.spec.purpose != "safeguards"] if class_wide else mine_done)
options = {job.id: job for job in listed}

requested = st.query_params.get("job")
if requested is not None and requested not in options:
    found, unavailable = jobs.finished_comparison(requested)
    if found is not None:
        options[found.id] = found
    else:
        st.error(f"{unavailable}: showing the latest one instead. Pick any finished comparison below.")
        requested = None

if not options:
    if class_wide:
        st.info("No comparison has finished on this server yet. Run one first: it takes a minute with a small subset.")
    else:
        st.info("You have no finished comparison yet: run one (a minute with a small subset), or look at the "
                "whole class's above.")
    st.page_link(RUN_PAGE, label="Run the experiment", icon="🧪")
    references = local_references("quick-demo")
    if references:
        st.subheader("Meanwhile: a reference comparison, not yours")
        st.caption(f"The quick demo as recorded with this project's command line on {this_machine_class()}, like "
                   "this server: real figures to read before your own. Your comparisons replace it here.")
    for reference in references:
        reference_panel(reference)
    report_download()
    st.stop()

ids = list(options)
names = jobs.owner_names()


def describe(job) -> str:
    owner = "yours" if jobs.is_mine(job) else names.get(job.learner_id, "a learner")
    return f"{when(job.created_at)} · {job.label} · {owner}"


labels = {job_id: describe(job) for job_id, job in options.items()}  # computed once, in this run
job_id = st.selectbox("Comparison", ids, index=ids.index(requested) if requested else 0, format_func=labels.get)
job = options[job_id]
if job.spec.purpose == "safeguards":
    st.warning("This pair is a deliberate failure: AMP with one of its safeguards taken away. Its speed is not the "
               "point; what it lost is read on its own page.")
    st.page_link("pages/safeguards.py", label="AMP without its safeguards", icon="🧯")
    st.stop()
results = job.results
if len(results) < 2:
    st.error("This comparison has fewer than two finished runs, so there is nothing to compare.")
    st.stop()

runs = named_results(job)
device = results[0].environment.get("device_name")
st.caption(f"Job {job.id[:8]} · finished {when(job.finished_at)} · device: {device}")

# The headline: the speedup, its range over repeated pairs, and whether the timing lets it be taken as a fact.
found = headline(results)
interval = found.interval
speed, spread, timing = st.columns(3)
speed.metric(
    f"Speedup ({interval.middle_words} pairs)" if interval.known else "Speedup (one pair of runs)",
    f"{interval.median:.2f}x",
    help="The baseline's training time over the compared mode's: above 1 the compared mode was faster.",
)
spread.metric(
    "Range over the pairs",
    f"{interval.low:.2f}x to {interval.high:.2f}x" if interval.known else "unknown",
    help="The lowest and highest speedup of the pairs." if interval.known
    else "One pair cannot show how much the speedup varies: choose Repeats on the Run page to measure it.",
)
timing.metric(
    "Timing",
    found.timing,
    f"{found.noisy_runs} of {len(results)} runs noisy" if found.noisy_runs else None,
    delta_color="off",
    delta_arrow="off",
    help="Whether other load on the machine, or pairs that disagree, leave the speedup in doubt.",
)
if found.doubt:
    st.caption(f"**Uncertain:** {found.doubt.reason}.")

st.subheader("The lab's table")
comparison_summary(runs, key="results", with_lab_reference=True)

st.subheader("Charts")
st.caption("Hover over a bar, line or point for its exact value.")
comparison_charts(runs, key="results")

st.subheader("The step's budget")
step_budget_panel(runs)

st.subheader("Profile of a short window")
profile_panel(runs)

st.subheader("How each run was made")
for label, result in runs.items():
    with st.expander(f"{label}: settings and environment"):
        st.markdown("**Settings**")
        st.json(result.config.to_dict(), expanded=False)
        st.markdown("**Environment**")
        st.json(result.environment, expanded=False)

st.subheader("Download")
name = f"amp-lab-{job.id[:8]}"
first, second, third = st.columns(3)
first.download_button(
    "Both runs (JSON)" if len(runs) == 2 else f"All {len(runs)} runs (JSON)", exports.runs_json(runs, job.id), file_name=f"{name}.json", mime="application/json"
)
second.download_button(
    "Main figures (CSV)", exports.to_csv(exports.runs_frame(runs)), file_name=f"{name}-runs.csv", mime="text/csv"
)
third.download_button(
    "Loss history (CSV)", exports.to_csv(exports.loss_frame(runs)), file_name=f"{name}-loss.csv", mime="text/csv"
)

report_download()
