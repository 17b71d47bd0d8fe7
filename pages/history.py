"""History: every job this server has run (kept across restarts), filterable, and any two runs side by side."""

import pandas as pd
import streamlit as st

from server.offer import subset_name
from trainer.comparison_table import format_seconds, precision_name
from ui import identity, jobs, server_bundle
from ui.charts import run_labels
from ui.widgets import comparison_charts, comparison_summary, when

ANY = "any"
JOBS_SHOWN = 500
RUNS_OFFERED = 300

st.title("History")
st.markdown(
    "Your jobs, or the whole class's, newest first: kept in the server's history file, so they survive restarts. "
    "Jobs that failed or were cancelled show why."
)

store = server_bundle.history()
class_wide = jobs.whole_class("history_whose")
kind_col, status_col, precision_col, text_col = st.columns(4)
filters = jobs.HISTORY_FILTERS
kind = kind_col.selectbox("Kind", (ANY, *filters["Kind"]))
status = status_col.selectbox("Status", (ANY, *filters["Status"]))
precision = precision_col.selectbox("Precision", (ANY, *filters["Precision"]))
text = text_col.text_input("Label contains", max_chars=60)

listed = store.list_jobs(
    kind=None if kind == ANY else kind,
    status=None if status == ANY else status,
    precision=None if precision == ANY else precision,
    text=text.strip() or None,
    learner_id=None if class_wide else identity.learner_id(),
    limit=JOBS_SHOWN,
)


def training_times(job) -> str:
    return ", ".join(
        f"{precision_name(o.config.precision)} {format_seconds(o.result.total_time_s)}"
        for o in job.outcomes
        if o.status == "ok" and o.result is not None
    )


names = jobs.owner_names()
table = pd.DataFrame(
    [
        {
            "When": when(job.created_at),
            "Kind": job.kind,
            "Status": job.status,
            "Reason": job.error or "",
            "Training time": training_times(job),
            "Label": job.label,
            "Owner": "you" if jobs.is_mine(job) else names.get(job.learner_id, "a learner"),
            "Job": job.id[:8],
        }
        for job in listed
    ],
    columns=["When", "Kind", "Status", "Reason", "Training time", "Label", "Owner", "Job"],
)
st.caption(f"{len(listed)} job{'s' if len(listed) != 1 else ''} match.")
# Widths that fit the grid into a narrow main area (800 px with the sidebar open): a long label or reason is cut
# short in its cell, with the whole text on hover, instead of pushing the last columns out of sight.
st.dataframe(table, hide_index=True, key="history-jobs", width="stretch", column_config={
    "When": st.column_config.TextColumn(width=70), "Kind": st.column_config.TextColumn(width=44),
    "Status": st.column_config.TextColumn(width=48), "Reason": st.column_config.TextColumn(width=48),
    "Training time": st.column_config.TextColumn("Time", width=56), "Label": st.column_config.TextColumn(width=82),
    "Owner": st.column_config.TextColumn(width=52), "Job": st.column_config.TextColumn(width=52),
})

st.subheader("Compare any two runs")
runs = store.list_runs(limit=RUNS_OFFERED)
if len(runs) < 2:
    st.info("Two successful runs are needed to compare; the history has fewer so far.")
    st.stop()

offered = {f"{job_id}:{index}": result for job_id, index, result in runs}


def describe_run(run_key: str) -> str:
    result = offered[run_key]
    config = result.config
    started = when(result.started_at)
    return (
        f"{precision_name(result.precision)} · {config.epochs} ep · batch {config.batch_size} · "
        f"{subset_name(config.subset)} {config.data} · {config.loader} · "
        f"width {config.width} · {started} · job {run_key[:8]}, run {int(run_key.rsplit(':', 1)[1]) + 1}"
    )


keys = list(offered)
# By default: the newest fp32 run against the newest other run of the same job (its comparison partner).
first = next((k for k in keys if offered[k].precision == "fp32"), keys[0])
partners = [k for k in keys if k != first and k.split(":")[0] == first.split(":")[0]]
second = partners[0] if partners else next(k for k in keys if k != first)
left, right = st.columns(2)
a = left.selectbox("Baseline run", keys, index=keys.index(first), format_func=describe_run, key="history-a")
b = right.selectbox("Compared run", keys, index=keys.index(second), format_func=describe_run, key="history-b")
if a == b:
    st.warning("Pick two different runs.")
    st.stop()
pair = run_labels([offered[a], offered[b]])
comparison_summary(pair, key="history")
comparison_charts(pair, key="history")
