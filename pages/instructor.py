"""The instructor's console: the live queue, the class's results, the lab's presets and the room's capacity."""

import time

import streamlit as st

from server.console import KINDS, MESSAGE, PRESETS
from server.instructor import capacity_at, comparisons_per_hour, latest_comparisons
from server.kinds import PAGE_KINDS, KindRule
from server.planner import plan_session
from server.presets import presets_text
from trainer.errors import ConfigError
from ui import exports, identity, jobs, server_bundle
from ui.charts import class_speedup_chart
from ui.widgets import about, capacity_sentences, queue_caption, settings_rows, when

QUEUE_REFRESH_S = 5.0  # the console watches the room, not one job: a few seconds' delay is fine

if not identity.is_instructor():
    st.error("This page is for the instructor: sign in from the sidebar.")
    st.stop()

manager = server_bundle.job_manager()
store = server_bundle.history()
settings = server_bundle.settings()

st.title("Instructor console")

st.subheader("A message to the class")
current_message = server_bundle.console().message()
with st.form("class-message"):
    text = st.text_input("Shown above every learner's page until you clear it", max_chars=300,
                         value=current_message.text if current_message else "",
                         placeholder="The queue is paused for 5 minutes while we discuss the first results.")
    show, clear = st.columns(2)
    if show.form_submit_button("Show to the class", type="primary"):
        try:
            server_bundle.console().set_message(text)
        except ConfigError as err:
            st.error(str(err))
        else:
            st.rerun()
    if clear.form_submit_button("Clear the message"):
        server_bundle.console().clear(MESSAGE)
        st.rerun()

st.subheader("The queue")
left, right = st.columns([3, 1])
if manager.paused:
    left.warning("The queue is paused: the running job finishes, no new job starts; learners can still queue.")
    if right.button("Resume the queue", type="primary"):
        manager.resume()
        st.rerun()
elif right.button("Pause the queue"):
    manager.pause()
    st.rerun()


reason = st.text_input("Reason for a cancel (its learner reads it where the job was)", max_chars=200,
                       key="cancel_reason", placeholder="too long for today's class: try 1 epoch")


@st.fragment(run_every=QUEUE_REFRESH_S)
def live_queue() -> None:
    names = jobs.owner_names()
    views = manager.queue_views()
    _, wait = manager.wait_for_new_job()
    st.caption(queue_caption(views, manager.slots, wait, manager.paused))
    now = time.time()
    for view in views:
        config = view.spec.runs[0]
        since = view.started_at if view.status == "running" else view.created_at
        place = "running" if view.status == "running" else f"waiting, position {view.queue_position}"
        with st.container(border=True):
            text, button = st.columns([5, 1])
            text.markdown(
                f"**{names.get(view.learner_id, 'a learner')}** · {view.label or view.kind} · {place} · "
                f"{about(now - since)} {'running' if view.status == 'running' else 'waiting'}  \n"
                f"{len(view.spec.runs)} run(s), {config.epochs} epoch(s), batch {config.batch_size}, "
                f"{config.subset or 50_000:,} {config.data} images, {config.loader} loader, width {config.width}"
            )
            if view.status == "running":
                fraction, progress = jobs.progress_line(view)
                ends = "" if view.remaining_s is None else f" · ends in {about(view.remaining_s)}"
                text.progress(fraction, text=f"{progress}{ends}")
            if view.cancel_requested:
                button.caption("Cancelling...")
            elif button.button("Cancel", key=f"instructor-cancel-{view.id}"):
                manager.cancel_any(view.id, st.session_state.get("cancel_reason", ""))
                st.rerun()


live_queue()

st.subheader("Capacity")
offer = server_bundle.offer()
start = offer.comparison(offer.start())
workers = len(manager.slots)
for sentence in capacity_sentences(capacity_at(start, store, manager.device_type, workers), start.label,
                                   comparisons_per_hour(store, workers), workers):
    st.markdown(sentence)

st.subheader("The class's results")
latest = latest_comparisons(store)
frame = exports.class_frame(exports.class_rows(latest, jobs.owner_names()))
if frame.empty:
    st.info("No learner has a finished comparison yet.")
else:
    st.caption("Each learner's latest finished comparison.")
    st.dataframe(frame, hide_index=True)
    st.altair_chart(class_speedup_chart(frame), width="stretch")
    st.download_button("The class's results (CSV)", exports.to_csv(frame),
                       file_name=f"amp-lab-class-{time.strftime('%Y%m%d-%H%M')}.csv", mime="text/csv")

st.subheader("Roster")
roster = exports.roster_frame(server_bundle.learners().roster(), store.job_counts(), latest,
                              server_bundle.guesses().everyone())
if roster.empty:
    st.info("No learner has opened the app yet.")
else:
    st.caption("Every learner: their jobs by kind, their latest comparison with its timing verdict, and each "
               "prediction they locked (the Run page's speedup guess sits beside the speedup they measured).")
    st.dataframe(roster, hide_index=True)
    st.download_button("The roster (CSV)", exports.to_csv(roster),
                       file_name=f"amp-lab-roster-{time.strftime('%Y%m%d-%H%M')}.csv", mime="text/csv")

st.subheader("Lab reports")
everyone = server_bundle.learners().roster()
predictions = server_bundle.guesses().everyone()
if not everyone:
    st.info("No learner has opened the app yet.")
else:
    st.caption("Each learner's report, the file they download from Results: their comparisons with tables, charts "
               "and timing, their runs without AMP's safeguards, every job, their predictions beside what was "
               "measured. Each is made when you click it.")
    counts = store.job_counts()
    for entry in everyone:
        name_col, jobs_col, button_col = st.columns([3, 2, 2], vertical_alignment="center")
        name_col.markdown(f"**{entry.display_name}**" + (f" · {entry.sign_in}" if entry.sign_in else ""))
        done = sum(counts.get(entry.id, {}).values())
        jobs_col.caption(f"{done} jobs queued or done · {len(predictions.get(entry.id, []))} predictions")
        with button_col:
            jobs.report_button(entry.id, entry.display_name, "Report (HTML)", key=f"report-{entry.id}")
    st.markdown("**Predictions against results**")
    guessed = exports.predictions_frame(everyone, predictions)
    if guessed.empty:
        st.caption("No learner has locked a prediction yet.")
    else:
        st.dataframe(guessed, hide_index=True)
        st.download_button("Predictions against results (CSV)", exports.to_csv(guessed),
                           file_name=f"amp-lab-predictions-{time.strftime('%Y%m%d-%H%M')}.csv", mime="text/csv")

st.subheader("Plan the session")
with st.form("planner"):
    learners_col, minutes_col, workers_col = st.columns(3)
    learners = learners_col.number_input("Learners", min_value=1, max_value=500, value=30)
    minutes = minutes_col.number_input("Minutes", min_value=10, max_value=600, value=120, step=10)
    workers = workers_col.number_input("Workers", min_value=1, max_value=64, value=max(1, len(manager.slots)),
                                       help="Jobs this server runs at once: one per GPU (one on a CPU server).")
    if st.form_submit_button("Plan", type="primary"):
        try:
            st.session_state["session_plan"] = plan_session(offer, store, int(learners), float(minutes), int(workers))
        except ConfigError as err:
            st.error(str(err))
plan = st.session_state.get("session_plan")
if plan is not None:
    for sentence in plan.describe():
        st.markdown(sentence)
    st.code(plan.presets, language=None)
    label = "Apply as presets and caps for every learner" if plan.caps else "Apply as presets for every learner"
    if st.button(label, disabled=not plan.fits):
        server_bundle.console().set_presets(plan.presets)
        if plan.caps:
            server_bundle.console().set_kinds(plan.kind_rules(offer.kinds))
        st.rerun()

st.subheader("Presets")
current = offer.presets
from_console = server_bundle.console().presets() is not None
st.markdown(
    "Where every learner's Run page starts, written like a link's query (`epochs=1&batch_size=128&subset=2048`; "
    "also `data`, `loader`, `precision`, `width`, `channels_last`). A link with its own values still wins. "
    + ("These come from this console." if from_console else "These come from the settings (`AMP_LAB_PRESETS`).")
)
for problem in offer.preset_problems():
    st.warning(problem[:1].upper() + problem[1:] + ".")
with st.form("presets"):
    text = st.text_input("Presets", value=presets_text(current), max_chars=500)
    save, clear = st.columns(2)
    if save.form_submit_button("Save for every learner", type="primary"):
        try:
            server_bundle.console().set_presets(text)
        except ConfigError as err:
            st.error(str(err))
        else:
            st.rerun()
    if clear.form_submit_button("Back to the settings' presets"):
        server_bundle.console().clear(PRESETS)
        st.rerun()

st.subheader("Kinds of job")
kinds = offer.kinds
starting = offer.starting_jobs()
st.markdown(
    f"What learners may queue, and how many of each one learner may (0: as many as the queue limits allow). Now: "
    f"**{kinds.name}**" + (f"; caps count the jobs submitted since {when(kinds.since)}." if kinds.since else ".")
    + " Each kind's time is for its starting settings on this server."
)
with st.form("kinds"):
    rules = {}
    for purpose, name in PAGE_KINDS.items():
        rule = kinds.rule(purpose)
        on, cap, cost = st.columns([2, 1, 2])
        enabled = on.checkbox(name[:1].upper() + name[1:], value=rule.enabled, key=f"kind-{purpose}")
        per_learner = cap.number_input(f"{name}: per learner", min_value=0, max_value=100,
                                       value=rule.per_learner or 0, key=f"kind-cap-{purpose}",
                                       label_visibility="collapsed")
        seconds = jobs.estimate(starting[purpose]) if purpose in starting else None
        cost.caption("over a limit here" if purpose not in starting else "no estimate yet" if seconds is None
                     else f"{about(seconds)} each")
        rules[purpose] = KindRule(enabled, per_learner or None)
    save, fresh, back = st.columns(3)
    if save.form_submit_button("Save for the class", type="primary"):
        server_bundle.console().set_kinds(rules)
        st.rerun()
    if fresh.form_submit_button("Save, and count caps from now (a new class)"):
        server_bundle.console().set_kinds(rules, restart_counts=True)
        st.rerun()
    if back.form_submit_button("Back to the settings' mode"):
        server_bundle.console().clear(KINDS)
        st.rerun()

st.subheader("This server's limits")
st.caption("Read when the app starts, from AMP_LAB_* variables or the TOML file named in AMP_LAB_CONFIG "
           "(docs/deploy.md, \"The instructor's limits\"): change them there and restart the app. Presets above this table cannot "
           "go past them.")
st.table(settings_rows(settings), border="horizontal", hide_index=True)  # a static table: the meanings wrap
