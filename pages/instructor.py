"""The instructor's console: the live queue, the class's results, the lab's presets and the room's capacity."""

import time

import streamlit as st

from server.instructor import capacity_at, comparisons_per_hour, latest_comparisons
from server.presets import presets_text
from trainer.errors import ConfigError
from ui import exports, identity, jobs, server_bundle
from ui.charts import class_speedup_chart
from ui.widgets import about, capacity_sentences, queue_caption, settings_rows

QUEUE_REFRESH_S = 5.0  # the console watches the room, not one job: a few seconds' delay is fine

if not identity.is_instructor():
    st.error("This page is for the instructor: sign in from the sidebar.")
    st.stop()

manager = server_bundle.job_manager()
store = server_bundle.history()
settings = server_bundle.settings()

st.title("Instructor console")

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


@st.fragment(run_every=QUEUE_REFRESH_S)
def live_queue() -> None:
    names = jobs.owner_names()
    views = manager.queue_views()
    _, wait = manager.wait_for_new_job()
    st.caption(queue_caption(views, manager.slots, wait))
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
            if view.cancel_requested:
                button.caption("Cancelling...")
            elif button.button("Cancel", key=f"instructor-cancel-{view.id}"):
                manager.cancel_any(view.id)
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
frame = exports.class_frame(exports.class_rows(latest_comparisons(store), jobs.owner_names()))
if frame.empty:
    st.info("No learner has a finished comparison yet.")
else:
    st.caption("Each learner's latest finished comparison.")
    st.dataframe(frame, hide_index=True)
    st.altair_chart(class_speedup_chart(frame), width="stretch")
    st.download_button("The class's results (CSV)", exports.to_csv(frame),
                       file_name=f"amp-lab-class-{time.strftime('%Y%m%d-%H%M')}.csv", mime="text/csv")

st.subheader("Presets")
current = offer.presets
from_console = server_bundle.preset_store().get() is not None
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
            server_bundle.preset_store().set(text)
        except ConfigError as err:
            st.error(str(err))
        else:
            st.rerun()
    if clear.form_submit_button("Back to the settings' presets"):
        server_bundle.preset_store().clear()
        st.rerun()

st.subheader("This server's limits")
st.caption("Read when the app starts, from AMP_LAB_* variables or the TOML file named in AMP_LAB_CONFIG (README, "
           "\"The instructor's limits\"): change them there and restart the app. Presets above this table cannot "
           "go past them.")
st.table(settings_rows(settings), border="horizontal", hide_index=True)  # a static table: the meanings wrap
