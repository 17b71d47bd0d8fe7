"""Run the experiment: pick the settings and the repeats, see the estimate, queue an fp32-vs-AMP comparison, watch
it live."""

import streamlit as st

from server.offer import ComparisonRequest, pairs_name, subset_name
from ui import form_state, identity, jobs, server_bundle
from ui.experiment import DATA_NAMES, LOADER_NAMES, tf32_note
from ui.predict import locked_at, predict_then_check
from ui.reference import local_references, reference_panel, this_machine_class
from ui.widgets import about

MEMORY_PAGE = "pages/memory.py"

settings = server_bundle.settings()
manager = server_bundle.job_manager()
report = server_bundle.hardware()
offer = server_bundle.offer()
learner_id = identity.learner_id()
choices = offer.choices()
_, missing_modes = offer.compared_precisions()

st.title("Run the experiment")
st.markdown(
    """
Train the lab's model twice with the same settings and the same starting weights: once in fp32, once in the
mixed-precision mode you pick (with repeats, that pair again, alternately). Each run gets a fresh Python process,
and each of this server's devices (each GPU, or its CPU) trains one job at a time, so other learners' runs do not
compete with yours for it (you may have to wait your turn). Other work can still: on a CPU server the pages' own
computations share the cores, and each result says when its timing was disturbed. You can leave this page while it runs and come back.
"""
)

with st.expander("This server's limits (set by the instructor)"):
    st.table(
        [
            {"Limit": meaning, "Value": "none" if value is None else str(value)}
            for name, _, value, meaning in settings.describe()
            if name.startswith("max_")
        ],
        hide_index=True,
    )

latest = jobs.latest_comparison(jobs.my_jobs())
if latest is not None:  # a reload mid-run starts where the learner was, not at the lab's 75-minute settings
    form_state.start_from(list(choices.values()), ComparisonRequest.from_spec(latest.spec).to_dict())
form_state.apply_query_params(list(choices.values()))
for choice in choices.values():
    form_state.checked_state(choice)


def pick(param: str, widget, **kwargs):
    """Draw the widget for one choice; its value lives in session state under the choice's key."""
    choice = choices[param]
    return widget(choice.label, choice.allowed, key=choice.key, persist_state="session", **kwargs)


left, right = st.columns(2)
with left:
    pick("epochs", st.select_slider, help=f"The lab trains 5 epochs. This server allows at most {settings.max_epochs}.")
    pick(
        "batch_size",
        st.select_slider,
        help=f"Images per step; the lab uses 256. This server allows at most {settings.max_batch_size}.",
    )
    # A short label: a page link stays on one line, and the column cut the longer question off mid-word.
    st.page_link(MEMORY_PAGE, label="Memory at this batch size", icon="🧠",
                 help="Where the memory goes measures what one training step holds at a batch size, fp32 beside AMP.")
    pick(
        "subset",
        st.select_slider,
        format_func=subset_name,
        help="Train on the first N images for a quick run (the accuracy check then uses at most 1,000 test images).",
    )
    pick(
        "width",
        st.select_slider,
        format_func=lambda w: f"x{w}",
        help="Multiplies the channels and hidden units: x1 is the lab's model. Wider models do more arithmetic "
        "per step, which is where low precision pays.",
    )
with right:
    pick("precision", st.radio, help="The mode that is compared with the fp32 baseline.", horizontal=True)
    for mode, reason in missing_modes.items():
        if mode != "fp32-default":  # the TF32 note below says why
            st.caption(f"{mode} is not offered here: {reason}.")
    st.caption(tf32_note(report))
    pick("repeats", st.radio, format_func=pairs_name, horizontal=True)
    st.caption(
        "More pairs (fp32 and your mode, alternately) give the speedup a range, so you can see whether it holds; "
        "each pair adds its two runs' time to your wait and to the class's queue."
    )
    pick("data", st.radio, format_func=DATA_NAMES.get, horizontal=True)
    if not offer.cifar10_ok:
        st.caption(
            "CIFAR-10 is not offered: it is not in this server's data folder, and a learner's job never downloads "
            "it. The synthetic images have the same shape and size, and a pattern per class that the model can learn."
        )
    pick("loader", st.radio, format_func=LOADER_NAMES.get)
    channels_last = choices["channels_last"]
    st.checkbox(
        "channels_last memory format",
        key=channels_last.key,
        persist_state="session",
        help="Stores images and weights as NHWC, the layout Tensor Core convolutions prefer.",
    )
    breakdown = choices["breakdown"]
    st.checkbox(
        "Measure data waiting vs compute",
        key=breakdown.key,
        persist_state="session",
        help="Shows whether the loader or the arithmetic bounds the run; adds one GPU synchronisation per step.",
    )
    profile = choices["profile"]
    st.checkbox(
        "Profile a short window",
        key=profile.key,
        persist_state="session",
        help="After each run's timed training, 20 more steps under torch.profiler: Results shows the step's time "
             "by kind of work (matrix products, pooling, the optimizer, ...). Adds seconds; the timing is unchanged.",
    )

request = ComparisonRequest.of({param: st.session_state[choice.key] for param, choice in choices.items()})
if request.precision == "amp-fp16" and report.device_type == "cpu":
    st.warning(f"amp-fp16 on this server's CPU: {report.cpu_fp16_note}")
spec = offer.comparison(request)
blocked = [*offer.blocking_reasons(request), *filter(None, [jobs.refusal(spec)])]
for reason in blocked:
    st.error(reason[:1].upper() + reason[1:] + ".")

estimate = jobs.estimate(spec)
ahead, _ = manager.wait_for_new_job(learner_id)  # other learners' jobs, waiting or running, on every worker
queue_note = "" if ahead == 0 else (f" {ahead} job{'s' if ahead > 1 else ''} of other learners "
                                    f"{'are' if ahead > 1 else 'is'} ahead of yours in the queue.")
runs_named = "both runs" if len(spec.runs) == 2 else f"all {len(spec.runs)} runs ({pairs_name(request.repeats)})"
st.info(f"**Estimated time for {runs_named}:** " + ("none yet: nothing like it has run on this server" if estimate is None
        else f"{about(estimate)}, start-up and accuracy check included") + f".{queue_note}")

# Guess first, then run: the answer is the speedup of the first comparison queued after the guess was locked.
answered_by = jobs.comparison_since(jobs.my_jobs(), locked_at("run-speedup"))
predict_then_check(
    "run-speedup", f"How many times as fast as fp32 will {request.precision} train here, with these settings?",
    low=0.1, high=4.0, default=1.5, step=0.05, fmt="%.2fx", log=True,
    answer=jobs.speedup_since(jobs.my_jobs(), locked_at("run-speedup")), why=jobs.why_this_speedup(answered_by),
    pending="Now press Run: the speedup your next comparison measures appears here when it has finished.",
)
if st.button("Run", type="primary", disabled=bool(blocked)):
    jobs.submit(spec)
references = local_references("quick-demo")
with st.expander(f"Reference results recorded on {this_machine_class()}, like this server (not your runs)"):
    if not references:
        st.caption(f"No reference has been recorded on {this_machine_class()} yet.")
    for reference in references:
        reference_panel(reference)

st.subheader("Or the lab's own comparison")
lab_spec, lab_notes = offer.lab_comparison()
st.markdown(
    "Exactly what the lab's two scripts compare: **fp32 as PyTorch defaults it** (TF32 convolutions on an Ampere or "
    "newer GPU) against **amp-fp16 with its GradScaler**, 5 epochs through the lab's DataLoader at batch 256, the "
    "whole training split; Results then sets it beside the lab's own figures."
    + (" Here it runs " + "; ".join(lab_notes) + "." if lab_notes else "")
)
jobs.queue_button("Run the lab's comparison", lab_spec)

st.subheader("Your job")
mine = jobs.my_jobs()
if not mine:
    st.caption("Nothing yet: choose the settings above and press Run.")
# What waits or runs, then what ended in the last minutes (a cancel's reason stays in view), else the latest.
for job in [job for job in mine if not job.finished] + jobs.recently_ended(mine) or mine[-1:]:
    with st.container(border=True):
        jobs.follow(job.id, jobs.job_panel)
