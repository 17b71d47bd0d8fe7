"""AMP without its safeguards: amp-fp16 beside the same run with its GradScaler, or its fp32 master weights, taken
away. Deliberate failures a learner starts and watches, each step's gradients and updates counted."""

import streamlit as st

from lessons.safeguards import (
    FAILURE_COUNTS,
    final_losses,
    fp16_spacing,
    fp16_sum,
    largest_layer_weight,
    pair_reading,
)
from server.offer import SAFEGUARD_DEFAULT_SHRINK, SAFEGUARD_SHRINKS
from ui import jobs, server_bundle
from ui.charts import loss_chart, named_results, run_modes
from ui.learn_charts import update_share_chart
from ui.widgets import amp_step_picture, when

KEYS = {"no-scaler": "safeguards_no_scaler_job", "no-master-weights": "safeguards_no_master_job"}
FAILED = "The runs did not finish"


def shrink_name(exponent: int) -> str:
    return "none: the lab's own loss" if exponent == 0 else f"2^-{exponent}: gradients {2**exponent:,} times smaller"


def share(value: float | None, digits: int) -> str:
    return "not counted" if value is None else f"{value:.{digits}%}"


def show_runs(job, field: str, axis_title: str) -> None:
    """Both runs of a finished job: the counted share per step, and the loss."""
    runs, modes = named_results(job), run_modes(job.spec)
    owner = "yours" if jobs.is_mine(job) else "another learner's"
    st.caption(f"{job.label} · {when(job.finished_at)} · {owner}")
    series = {label: result.update_history for label, result in runs.items()}
    left, right = st.columns(2)
    left.altair_chart(update_share_chart(series, modes, field, axis_title, axis_title), width="stretch")
    right.altair_chart(loss_chart({label: r.loss_history for label, r in runs.items()}, precisions=modes),
                       width="stretch")


def show_pair(found, guarded: tuple[str, int], unguarded: tuple[str, int], loss_line: bool = False) -> None:
    """A finished pair (None: nothing yet): each run's share as a metric (label, digits), what it shows, the losses
    where asked, and both runs' charts."""
    if found is None:
        return
    safe, failure = found.results[:2]
    reading = pair_reading(safe, failure)
    left, right = st.columns(2)
    left.metric(guarded[0], share(reading.guarded, guarded[1]))
    right.metric(unguarded[0], share(reading.unguarded, unguarded[1]))
    st.markdown(reading.sentence)
    losses = final_losses(safe, failure) if loss_line else None
    if losses:
        st.markdown(f"The loss ended at {losses[1]:.3f} without the scaler and at {losses[0]:.3f} with it.")
    field, name = FAILURE_COUNTS[failure.precision]
    show_runs(found, field, name)


st.title("AMP without its safeguards")
amp_step_picture("safeguards")
st.markdown(
    """
fp16 AMP has two safeguards. The **GradScaler** multiplies the loss before the backward pass so that small
gradients do not underflow to zero in fp16, and AMP keeps **fp32 master weights**: the optimizer adds each update
to an fp32 weight, and autocast casts a 16-bit copy for the forward pass. The first pair takes the GradScaler away
alone; the second trains pure fp16, which takes every safeguard away at once (no scaler, no fp32 master weights, no
fp32 list either: every op runs in fp16). Watch what each run loses. Both runs of each pair count, at every step, the gradients that are exactly zero and the weights a
nonzero gradient failed to move. These are **deliberate failures**, named so wherever their results appear.
"""
)
offer = server_bundle.offer()
if server_bundle.job_manager().device_type == "cpu":
    st.caption("fp16 on this CPU is tens of times slower than fp32: each pair trains 48 steps of 32 images per run, "
               "about a minute in all.")

st.subheader("Without the GradScaler")
st.markdown(
    """
At the start of training this model's gradients are large enough that fp16 keeps almost all of them (the
*Underflow in fp16* page counts them). Deeper models have far smaller ones. To give this model such
gradients, both runs multiply the loss by 2^-n and the learning rate by 2^n: in fp32 that is the same training
step for step, since a power of two scales exactly, but every gradient is 2^n times smaller. Some gradients are
zero in any format: a ReLU unit that is off for every image of a batch passes nothing back to its weights. The run
with the scaler shows how many; what the run without it loses beyond that is underflow.
"""
)
shrink = st.select_slider("Loss times", options=list(SAFEGUARD_SHRINKS), value=SAFEGUARD_DEFAULT_SHRINK,
                          format_func=shrink_name)
jobs.queue_or_follow(KEYS["no-scaler"], "Run amp-fp16 with and without its scaler",
                     offer.safeguard_demo("no-scaler", shrink), failed=FAILED)
show_pair(jobs.latest_done_with("amp-fp16-unscaled"), ("Zero gradients with the scaler", 1),
          ("Zero gradients without it", 1), loss_line=True)

st.subheader("Without fp32 master weights")
layer, weight = largest_layer_weight()
spacing = fp16_spacing(weight)
st.markdown(
    f"""
Train the model itself in fp16 (`model.half()`) and every update is added to an fp16 weight. In fp16,
1 + 0.0001 = **{fp16_sum(1.0, 1e-4):g}**: the sum rounds back to 1. The median weight of `{layer}`, the model's largest
layer, starts at {weight:.4f}; fp16 numbers near it are {spacing:.2g} apart, so an update smaller than half that
rounds away, and with the lab's learning rate of 0.01 a gradient below about {spacing / 2 / 0.01:.1g} moves
nothing on the first step. Momentum (0.9) then lifts that threshold: each step adds the gradient to a velocity that
grows to about ten times a steady gradient, so from then on only gradients about ten times smaller round away. AMP
adds the same update to the fp32 master weight, where it counts. No loss is shrunk here.
"""
)
jobs.queue_or_follow(KEYS["no-master-weights"], "Run amp-fp16 beside pure fp16",
                     offer.safeguard_demo("no-master-weights"), failed=FAILED)
show_pair(jobs.latest_done_with("fp16-true"), ("Updates rounded away with fp32 master weights", 3),
          ("Updates rounded away in pure fp16", 1))
