"""Results: one finished fp32-vs-AMP comparison as the lab's table, charts, an explanation and downloads."""

import streamlit as st

from server.history import HistoryError
from server.records import JobView
from ui import exports, session
from ui.charts import run_labels
from ui.choices import shown
from ui.widgets import RUN_PAGE, comparison_charts, comparison_summary, when

st.title("Results")

store = session.get_history()
mine = [job for job in reversed(session.my_jobs()) if job.kind == "compare"]
mine_done = [job for job in mine if job.status == "done"]
if mine and mine[0].status in ("failed", "cancelled"):
    st.warning(f"Your latest comparison ({mine[0].label}) {mine[0].status}: {mine[0].error}")

# This session's comparisons first (newest first), then everyone's from the shared history.
options: dict[str, JobView] = {job.id: job for job in mine_done}
for job in store.list_jobs(kind="compare", status="done", limit=100):
    options.setdefault(job.id, job)

requested = st.query_params.get("job")
if requested is not None and requested not in options:
    try:
        found = store.get_job(requested)
        unavailable = f"There is no finished comparison with the id {shown(requested)} on this server"
    except HistoryError:  # a damaged row (the store logs it): one line, as the other pages skip such rows
        found, unavailable = None, f"The comparison {shown(requested)} is damaged in this server's history"
    if found is not None and found.kind == "compare" and found.status == "done":
        options[found.id] = found
    else:
        st.error(f"{unavailable}: showing the latest one instead. Pick any finished comparison below.")
        requested = None

if not options:
    st.info("No comparison has finished on this server yet. Run one first: it takes a minute with a small subset.")
    st.page_link(RUN_PAGE, label="Run the experiment", icon="🧪")
    st.stop()

ids = list(options)
mine_ids = {job.id for job in mine_done}
job_id = st.selectbox(
    "Comparison",
    ids,
    index=ids.index(requested) if requested else 0,
    format_func=lambda i: f"{when(options[i].created_at)} · {options[i].label}{' (yours)' if i in mine_ids else ''}",
)
job = options[job_id]
results = job.results
if len(results) < 2:
    st.error("This comparison has fewer than two finished runs, so there is nothing to compare.")
    st.stop()

runs = run_labels(results)
device = results[0].environment.get("device_name")
st.caption(f"Job {job.id[:8]} · finished {when(job.finished_at)} · device: {device}")

st.subheader("The lab's table")
comparison_summary(runs, key="results", with_lab_reference=True)

st.subheader("Charts")
st.caption("Hover over a bar, line or point for its exact value.")
comparison_charts(runs, key="results")

st.subheader("How each run was made")
for label, result in runs.items():
    with st.expander(f"{label}: settings and environment"):
        st.markdown("**Settings**")
        st.json(result.config, expanded=False)
        st.markdown("**Environment**")
        st.json(result.environment, expanded=False)

st.subheader("Download")
name = f"amp-lab-{job.id[:8]}"
first, second, third = st.columns(3)
first.download_button(
    "Both runs (JSON)", exports.runs_json(runs, job.id), file_name=f"{name}.json", mime="application/json"
)
second.download_button(
    "Main figures (CSV)", exports.to_csv(exports.runs_frame(runs)), file_name=f"{name}-runs.csv", mime="text/csv"
)
third.download_button(
    "Loss history (CSV)", exports.to_csv(exports.loss_frame(runs)), file_name=f"{name}-loss.csv", mime="text/csv"
)
